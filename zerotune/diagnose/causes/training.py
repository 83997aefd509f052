"""Causes in the training itself: fp16 loss scaling, checkpoints, ZeRO-3 parameters used outside the
engine, a slow step (wall_clock_breakdown)."""

from __future__ import annotations

from zerotune.diagnose.causes.evidence import evidence
from zerotune.diagnose.records import LogLine, Scan
from zerotune.diagnose.report import Diagnosis, StepCheck

MIN_LOSS_SCALE = 1.0
"""DeepSpeed's default fp16 `min_loss_scale` (deepspeed/runtime/precision_config.py at 0.19.8): a
dynamic scale reduced to it cannot go lower, so the next overflow ends the run."""

MAX_INITIAL_SCALE_POWER = 32
"""The largest fp16 `initial_scale_power` in use (DeepSpeed's default is 16; 2**32 is the older Megatron /
DeepSpeed start, safe-rlhf#21): calibrating down from 2**p skips at most p steps plus the hysteresis."""


def persistent_skips(scan: Scan) -> tuple[int, int, LogLine] | None:
    """DeepSpeed's step line when the loss scaler skipped more steps than it took after calibration.
    DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py at 0.19.8) halves the scale on an
    overflow (after `hysteresis` of them) and doubles it after `loss_scale_window` clean steps, restoring
    the hysteresis: once calibrated a healthy run skips at most `hysteresis` steps per window (defaults 2
    per 1000). Skipped steps outnumbering taken ones beyond the calibration's MAX_INITIAL_SCALE_POWER is
    therefore no scale the scaler can hold: fp16 overflows on most steps (T5-11B: step=2000, skipped=1999)."""
    if scan.skipped_steps is None:
        return None
    steps, skipped, line = scan.skipped_steps
    return scan.skipped_steps if 2 * skipped > steps + MAX_INITIAL_SCALE_POWER else None


def _bf16_configured(scan: Scan) -> bool:
    precision = str(scan.facts["precision"].value).lower() if "precision" in scan.facts else ""
    printed = scan.ds_print.get("bfloat16_enabled", ("", None))[0]
    dumped = isinstance(scan.config, dict) and isinstance(scan.config.get("bf16"), dict)
    return (
        precision in ("bfloat16", "bf16")
        or printed == "True"
        or (
            dumped and scan.config["bf16"].get("enabled") in (True, "true")  # type: ignore[index]
        )
    )


def fp16_overflow(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    at_min = [e for e in scan.fp16 if e.kind == "at_minimum"]
    nan = [e for e in scan.fp16 if e.kind == "nan_loss"]
    floor = [
        e
        for e in scan.fp16
        if e.kind == "overflow" and e.value is not None and float(e.value) <= MIN_LOSS_SCALE
    ]
    if _bf16_configured(scan):
        nan = []  # a NaN loss under bf16 is not a loss-scale failure
    skips = persistent_skips(scan)
    if not (at_min or nan or floor or skips):
        return None
    events = at_min + floor + nan
    lines = [e.line for e in events] + ([skips[2]] if skips else [])
    parts = []
    if at_min:
        parts.append("the loss scale reached its minimum and DeepSpeed stopped the run")
    if floor:
        parts.append(f"the dynamic loss scale was driven down to {float(floor[0].value):g}")  # type: ignore[arg-type]
    if nan:
        parts.append(f"the loss became {nan[0].value}")
    if skips:
        parts.append(f"the loss scaler skipped {skips[1]} of {skips[0]} optimizer steps")
    overflow = (
        f" {scan.fp16_overflows} overflow/skipped-step messages in the log." if scan.fp16_overflows else ""
    )
    return Diagnosis(
        cause="fp16_overflow",
        title="fp16 loss scale exhausted (overflow)",
        explanation=(
            f"Under fp16 {' and '.join(parts)}: gradients overflow fp16's range (max 65504) at every loss "
            "scale, so each step is skipped."
            + overflow
            + " bf16 has fp32's exponent range and needs no loss "
            "scaling; models pre-trained in bf16 often overflow in fp16."
        ),
        evidence=evidence(sorted(lines, key=lambda line: line.number)),
        line=min(line.number for line in lines),
    )


def fp16_overflow_seen(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """Overflow (skipped-step) messages only, the scale still above its floor: normal while the scaler
    calibrates at the start of an fp16 run, a cause when nothing else in the log explains the problem."""
    overflows = [e for e in scan.fp16 if e.kind == "overflow"]
    if not overflows or fp16_overflow(scan, offload_configured) is not None:
        return None
    lowest = min((float(e.value) for e in overflows if e.value is not None), default=None)  # type: ignore[arg-type]
    scale = f", the scale down to {lowest:g}" if lowest is not None else ""
    return Diagnosis(
        cause="fp16_overflow",
        title="fp16 overflow: steps skipped",
        explanation=(
            f"{scan.fp16_overflows} fp16 overflow message(s){scale}: the step is skipped and the loss scale halved. "
            "A few at the start of a run are the scaler calibrating; overflows that keep coming mean the "
            "gradients overflow fp16's range, which bf16 does not have."
        ),
        evidence=evidence([e.line for e in overflows]),
        line=overflows[0].line.number,
    )


_CHECKPOINT_TEXT = {
    "resume_world_size": (
        "The checkpoint was saved at another data-parallel world size ({value}): ZeRO's optimizer state is "
        "partitioned per rank and cannot be loaded at a different size as is."
    ),
    "empty_weights_saved": (
        "The saved weights are empty (torch.Size([0])): the model was saved under ZeRO-3 without gathering "
        "its partitioned parameters, so each tensor in the file is a rank's empty placeholder."
    ),
    "not_gathered_on_save": (
        "Under ZeRO-3 the 16-bit model is saved only when stage3_gather_16bit_weights_on_model_save is true: "
        "otherwise nothing (or empty tensors) is written."
    ),
    "universal": "Loading or converting a universal checkpoint failed.",
    "shape_mismatch": (
        "The checkpoint's tensors have other shapes than the model's (both real shapes, not ZeRO-3's empty "
        "placeholders): it was saved from another model definition or size than the one built to load it."
    ),
    "copy_meta": (
        "Loading the state dict failed: the model's parameters are meta tensors (\"Cannot copy out of meta tensor; "
        "no data!\"), built without storage and never materialised, so the checkpoint has nothing to be copied into. "
        "Under ZeRO-3 the loading path built the model outside zero.Init (a transformers main-branch regression "
        "did so: transformers#37300, fixed by its PRs 37281/37306), or the model's own code creates empty (meta) "
        "weights."
    ),
    "copy_failed": (
        "Loading the state dict failed: torch could not copy a checkpoint tensor into the model's parameter of the "
        "same shape (the exception in the row says why)."
    ),
    "convert": (
        "Converting the ZeRO checkpoint (zero_to_fp32) failed: the per-rank files of one save are "
        "incomplete, mixed with another save, or from another layout."
    ),
    "folder_as_file": (
        "A checkpoint folder was opened as one file: a DeepSpeed checkpoint is a folder of per-rank files, "
        "which only DeepSpeed's loader (or zero_to_fp32 after conversion) reads."
    ),
    "files_missing": "A ZeRO checkpoint file (per-rank model or optimizer states) is missing.",
    "unwritable": (
        "A checkpoint file could not be written: torch.save's or safetensors' writer stopped short, which is the "
        "file system refusing the write (a full disk or quota, a read-only or vanished mount)."
    ),
    "unreadable": (
        "A saved model file cannot be read back: it is not a complete weight file (under ZeRO-3 a model "
        "saved without gathering its parameters, or a save cut short)."
    ),
    "exception": "An exception was raised while saving or loading a checkpoint.",
}


def checkpoint(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.checkpoint_errors:
        return None
    kinds = {e.kind: e for e in scan.checkpoint_errors}
    main = next(kinds[k] for k in _CHECKPOINT_TEXT if k in kinds)
    return Diagnosis(
        cause="checkpoint",
        title="Checkpoint save/load failed",
        explanation=_CHECKPOINT_TEXT[main.kind].format(value=main.value),
        evidence=evidence([e.line for e in scan.checkpoint_errors]),
        line=scan.checkpoint_errors[0].line.number,
    )


def zero3_param(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.zero3_errors:
        return None
    return Diagnosis(
        cause="zero3_param",
        title="ZeRO-3 partitioned parameter used outside the engine",
        explanation=(
            "Under ZeRO-3 each parameter is partitioned: outside the engine's forward it is an empty tensor "
            "(shape [0]) whose shard lives in ds_tensor. Code that reads or changes a parameter directly (an "
            "embedding resize after init, a state_dict loaded into the model, a separate reference model, "
            "a metric on the weights) sees the empty tensor."
        ),
        evidence=evidence([e.line for e in scan.zero3_errors]),
        line=scan.zero3_errors[0].line.number,
    )


_SLOW_TIMER_TEXT = {
    "bwd_allreduce": "the gradient all-reduce after the backward pass is exposed (not overlapped)",
    "step": "the optimizer step",
}


def slow(scan: Scan, step: StepCheck, offload_known: bool) -> Diagnosis | None:
    """A slow step, judged against the step model on the job (explain.step_check): the timers over
    their prediction by more than the job's expected error, with both numbers. Without the job there
    is no verdict (`breakdown_note`): the timers' ratio to the compute does not tell a slow run from a
    healthy one in the scored corpus (docs/commands/diagnose.md, "Slow step")."""
    over = [t for t in step.timers if t.slow]
    if not over:
        return None
    worst = max(over, key=lambda t: t.measured_ms - t.predicted_ms)
    parts = [
        f"{_SLOW_TIMER_TEXT[t.timer]}: {t.measured_ms:.0f} ms per step measured, {t.predicted_ms:.0f} ms predicted"
        for t in sorted(over, key=lambda t: t.predicted_ms - t.measured_ms)
    ]
    text = (
        "; ".join(parts)
        + f" (wall_clock_breakdown against zerotune's step model; its expected error for this job is "
        f"±{step.expected_error:.0%} of the {step.predicted_ms:.0f} ms step)."
    )
    if worst.timer == "bwd_allreduce":
        text += " overlap_comm, larger reduce buckets or fewer gradient-accumulation boundaries hide it."
    elif offload_known:
        text += " Under optimizer offload this is the CPU Adam step: more CPU cores per rank or NVMe/partial offload."
    return Diagnosis(
        cause="slow",
        title="Slow step",
        explanation=text,
        evidence=evidence([scan.breakdown_line] if scan.breakdown_line else []),
        line=scan.breakdown_line.number if scan.breakdown_line else None,
    )


def breakdown_note(scan: Scan) -> str | None:
    """The wall_clock_breakdown in words when no job is known to judge it by: a note, not a finding."""
    mean = scan.breakdown_means()
    compute = mean.get("fwd", 0.0) + mean.get("bwd_inner", mean.get("bwd", 0.0))
    if compute <= 0:
        return None
    parts = [
        f"{name} {mean[name]:.0f} ms ({mean[name] / compute:.0%} on top)" for name in ("bwd_allreduce", "step") if name in mean
    ]
    return (
        f"wall_clock_breakdown: forward + backward compute {compute:.0f} ms per step, "
        + "; ".join(parts)
        + ". What these should cost depends on the job (model, batch, ZeRO stage, offload, hardware), and "
        "their ratio to the compute does not tell slow runs from healthy ones: pass --model, --config and "
        "--profile for diagnose to compare each timer with zerotune's prediction."
    )
