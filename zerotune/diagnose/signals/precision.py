"""Precision signals: fp16 dynamic loss scaling giving up (DeepSpeed's "Current loss scale already at
minimum", the scale driven down to its floor by repeated "OVERFLOW! ... Skipping step" lines, apex's
and older DeepSpeed's "Gradient overflow. Skipping step") and a loss that became NaN or inf, including a
trainer's own guard skipping the step for it (SwissArmyTransformer's train_step, sat/training/deepspeed_training.py:
"Skipping backward and optimizer step for nan or inf in forwarding metrics/loss!", its later trainers "... in
forwarding loss at rank N!": the forward loss was not finite, so no step was taken).

The formats are those of deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale) and
HF Trainer's `{'loss': nan, ...}` log dicts; a few overflows at the start of an fp16 run are the
scaler calibrating (it starts at 2**16 and halves per overflow) and are counted, not a failure.

HF's Trainer hides a NaN loss by default (`logging_nan_inf_filter`, transformers trainer.py: a step
whose loss is NaN/inf adds the window's running mean instead, and the sum restarts at 0 after each
logged line), so a logging window in which every step's loss was NaN/inf is logged as `'loss': 0.0`;
with `'grad_norm': nan` beside it (the gradients NaN too) that line is a NaN loss, not a perfect one
(LlamaFactory#4202: GLM-4 in fp16, `{'loss': 0.0, 'grad_norm': nan, ...}` on every line after the blow-up).
"""

from __future__ import annotations

import re

from zerotune.diagnose.records import Event, Scan
from zerotune.diagnose.signals.signal import Block, BlockSignal, Hit, Signal

_REDUCED = re.compile(r"(?:reducing (?:loss scale )?to|loss scale to) (\d+(?:\.\d+)?(?:e-?\d+)?)")
"""The scale a skipped step leaves: DeepSpeed's "Attempted loss scale: 2, reducing to 1" (fp16/loss_scaler.py
update_scale, fused_optimizer.py and unfused_optimizer.py at 0.19.8) names the attempted scale first, so the new one
is read from "reducing to" before any bare "loss scale: N"."""
_SCALE = re.compile(r"[Ll]oss scale:? (\d+(?:\.\d+)?(?:e-?\d+)?)")
"""A line naming only the scale it ran at (apex's and Megatron's "loss scale: N", a hysteresis step's attempt)."""
_SKIPPED_NON_FINITE = "Skipping backward and optimizer step for nan or inf in forwarding"
_NAN_LOSS = re.compile(r"""['"]?\b[Ll]oss['"]?\s*[:=]\s*['"]?(nan|inf|-inf|NaN|Inf)\b""")
_FILTERED_NAN = re.compile(r"""['"]loss['"]: 0\.0\b.*['"]grad_norm['"]: (nan|NaN|inf|Infinity)\b""")
"""HF's log line of a window whose every loss was NaN/inf (`logging_nan_inf_filter`): loss 0.0, grad norm NaN."""


def _fp16(hit: Hit) -> None:
    text, s = hit.line.text, hit.scan
    if "loss scale already at minimum" in text or "Minimum loss scale reached" in text:
        if "Exception" in text or "Error" in text or not any(e.kind == "at_minimum" for e in s.fp16):
            s.add(s.fp16, Event(hit.line, "at_minimum"))
    elif hit.says("OVERFLOW!", "Gradient overflow", "Grad overflow"):
        s.fp16_overflows += 1
        m = _REDUCED.search(text) or _SCALE.search(text)
        scale = float(m.group(1)) if m else None
        lowest = min((e.value for e in s.fp16 if e.kind == "overflow" and e.value is not None), default=None)
        if scale is not None and (lowest is None or scale < lowest):  # type: ignore[operator]
            s.fp16[:] = [e for e in s.fp16 if e.kind != "overflow"]
            s.add(s.fp16, Event(hit.line, "overflow", scale))
        elif not any(e.kind == "overflow" for e in s.fp16):
            s.add(s.fp16, Event(hit.line, "overflow", scale))
    else:
        m = _NAN_LOSS.search(text)
        value = m.group(1).lower() if m else None
        if m is None and _FILTERED_NAN.search(text):
            value = "NaN (logged as 0.0 with a NaN grad norm: HF's Trainer filters NaN losses out of its mean)"
        elif m is None and _SKIPPED_NON_FINITE in text:
            value = "NaN or inf (the trainer skipped the backward and optimizer step for it)"
        if value is not None and not any(e.kind == "nan_loss" for e in s.fp16):
            s.add(s.fp16, Event(hit.line, "nan_loss", value))


SIGNALS = (
    Signal(
        "fp16",
        (
            rb"Current loss scale already",
            rb"Minimum loss scale reached",
            rb"OVERFLOW!",
            rb"Gradient overflow",
            rb"Grad overflow",
            rb"'loss': (?:nan|inf|-inf)",
            rb'"loss": (?:NaN|nan|Infinity)',
            rb"Loss[:=] ?(?:nan|inf|NaN)",
            rb"'grad_norm': (?:nan|inf)",
            rb'"grad_norm": (?:NaN|nan|Infinity)',
            rb"Skipping backward and optimizer step for nan",
        ),
        (_fp16,),
    ),
)


_STEP_SKIPPED = re.compile(rb"\bstep=(\d+), skipped=(\d+)")
"""DeepSpeedEngine's progress line `[Rank 0] step=2000, skipped=1995, lr=[...]` (engine.py, log_dist at
every steps_per_print optimizer steps): `skipped` counts the steps the fp16 loss scaler threw away."""


def _skipped_steps(block: Block, s: Scan) -> None:
    """The latest step/skipped count (they only grow: the last line of the log holds the run's totals)."""
    at = block.data.rfind(b", skipped=")
    if at < 0:
        return
    start = block.data.rfind(b"\n", 0, at) + 1
    m = _STEP_SKIPPED.search(block.data, start, at + 40)
    if m:
        s.skipped_steps = (int(m.group(1)), int(m.group(2)), block.line_at(m.start()))


BLOCK_SIGNALS = (BlockSignal("skipped_steps", _skipped_steps),)
