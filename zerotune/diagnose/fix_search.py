"""The fix search for a GPU OOM: the smallest config change the memory model predicts to fit.

`find_fix` edits at most MAX_KNOBS keys, in an order that depends on the OOM's phase (the knobs
that shrink the overflowing term first, the ones that cost throughput last), and accepts the first
edit the memory model predicts to fit. The model is checked against the log first
(explain.memory_check): when the run needed more than the model predicts (the OOM text gives
allocated + tried), that gap is added to every candidate, so a fix must absorb what the model does
not see too.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from zerotune.diagnose.explain import Job, batch_of, live_in, resolved, workload_for
from zerotune.diagnose.report import Change, Diagnosis, FixOut
from zerotune.dsconfig.settings import ALIASES, ZeroSettings
from zerotune.units import fmt_bytes, fmt_count

DS_MAX_LIVE = ZeroSettings().max_live_parameters
DS_PREFETCH = ZeroSettings().prefetch_bucket_size
"""DeepSpeed 0.19.8's stage3_max_live_parameters (1e9) and stage3_prefetch_bucket_size (5e7) defaults."""

MAX_KNOBS = 3
"""A fix changes at most this many keys (issue 13: "the fewest knobs that make it fit")."""

Edit = tuple[dict[str, Any], bool, list[Change]]
"""(config, activation checkpointing, changes)"""
Knob = Callable[[dict[str, Any], bool, Job], Iterator[Edit]]


def _zero(config: dict[str, Any]) -> dict[str, Any]:
    z = config.get("zero_optimization")
    if not isinstance(z, dict):
        z = {} if z is None or z is False else {"stage": 1}
        config["zero_optimization"] = z
    return z


def _key(zero: dict[str, Any], field_name: str) -> str:
    """The spelling the config already uses for a ZeRO field, else DeepSpeed's stage3_* alias."""
    for key in ALIASES.get(field_name, (field_name,)):
        if key in zero:
            return key
    return ALIASES.get(field_name, (field_name,))[0]


def knob_micro_batch(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    """Halve the micro-batch (down to 1) and raise gradient accumulation to keep the global batch.
    Not for an HF-managed ("auto") micro-batch: that one is set on the Trainer's command line, and a
    concrete value in the JSON would make HF refuse the config."""
    if config.get("train_micro_batch_size_per_gpu") == "auto":
        return
    micro, accum = batch_of(resolved(config, job), job.world)
    new = micro // 2
    while new >= 1:
        cfg = copy.deepcopy(config)
        factor = micro // new
        changes = [
            Change(
                key="train_micro_batch_size_per_gpu",
                old=config.get("train_micro_batch_size_per_gpu"),
                new=new,
                reason=f"activation memory scales with the micro-batch: {micro} → {new} sequences per GPU",
            )
        ]
        cfg["train_micro_batch_size_per_gpu"] = new
        if micro % new == 0 and ("gradient_accumulation_steps" in config or "train_batch_size" in config):
            cfg["gradient_accumulation_steps"] = accum * factor
            changes.append(
                Change(
                    key="gradient_accumulation_steps",
                    old=config.get("gradient_accumulation_steps"),
                    new=accum * factor,
                    reason=f"× {factor} so the global batch (train_batch_size) stays the same",
                )
            )
        yield cfg, ckpt, changes
        new //= 2


def knob_checkpointing(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    if not ckpt:
        yield (
            config,
            True,
            [
                Change(
                    key="(model) gradient_checkpointing",
                    old=False,
                    new=True,
                    reason=(
                        "recompute each block in the backward pass instead of keeping its activations: "
                        "set it in the training script (HF: gradient_checkpointing=True), not in the DeepSpeed JSON"
                    ),
                )
            ],
        )


def _zero_edit(
    config: dict[str, Any], ckpt: bool, changes: dict[str, tuple[Any, str]], old_if_absent: Any = None
) -> Edit:
    """A copy of `config` with `zero_optimization[key] = value` for each key, and the Changes that
    say so (old value as the config wrote it, else `old_if_absent`; new value; reason)."""
    cfg = copy.deepcopy(config)
    zero = _zero(cfg)
    listed = []
    for key, (value, reason) in changes.items():
        listed.append(
            Change(key=f"zero_optimization.{key}", old=zero.get(key, old_if_absent), new=value, reason=reason)
        )
        zero[key] = value
    return cfg, ckpt, listed


def knob_stage3_gather(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    """Fewer gathered parameters at once: smaller prefetch bucket and max live parameters, mildest
    first: halves and quarters of the current values, DeepSpeed's defaults, a tenth of those."""
    r = resolved(config, job)
    if r.zero.stage != 3:
        return
    cur_live, cur_prefetch = r.zero.max_live_parameters, r.zero.prefetch_bucket_size
    targets = {(cur_live // 2, cur_prefetch // 2), (cur_live // 4, cur_prefetch // 4)}
    targets |= {(DS_MAX_LIVE // div, DS_PREFETCH // div) for div in (1, 10)}
    zero = _zero(copy.deepcopy(config))
    kl, kp = _key(zero, "max_live_parameters"), _key(zero, "prefetch_bucket_size")
    for live, prefetch in sorted(targets, reverse=True):
        live, prefetch = max(1, min(live, cur_live)), max(1, min(prefetch, cur_prefetch))
        if (live, prefetch) == (cur_live, cur_prefetch):
            continue
        yield _zero_edit(config, ckpt, {
            kl: (live, f"caps the gathered parameters ZeRO-3 keeps live: {fmt_count(cur_live)} → {fmt_count(live)}"),
            kp: (prefetch, f"prefetches fewer parameters ahead of use: {fmt_count(cur_prefetch)} → {fmt_count(prefetch)}"),
        })  # fmt: skip


def knob_buckets(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    r = resolved(config, job)
    if r.zero.stage == 0:
        return
    for div in (2, 5, 10):  # 1-2-5 steps down (dsconfig/knobs.py log_points); the memory model prices each
        new = max(1, r.zero.reduce_bucket_size // div)
        reason = f"smaller gradient reduction buckets: {fmt_count(r.zero.reduce_bucket_size)} → {fmt_count(new)} elements"
        yield _zero_edit(config, ckpt, {"reduce_bucket_size": (new, reason)})


def knob_stage_up(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    """One stage up. Stage-1/2 keys such as allgather_bucket_size are kept at stage 3: DeepSpeed
    ignores them there (validate warns, ZT201), and removing them would be another knob."""
    r = resolved(config, job)
    if r.zero.stage >= 3 or job.world < 2:
        return
    stage = r.zero.stage + 1
    sharded = ["", "optimizer states", "gradients too", "parameters too"][stage]
    reason = f"partitions {sharded} over the {job.world} ranks"
    yield _zero_edit(config, ckpt, {"stage": (stage, reason)}, old_if_absent=0)  # DeepSpeed's default stage


def knob_offload_optimizer(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    r = resolved(config, job)
    if r.zero.stage == 0 or r.zero.offload_optimizer.device != "none":
        return
    reason = "moves fp32 master weights, moments and the fp32 gradient copy to host RAM (the step runs on the CPU: slower)"
    yield _zero_edit(config, ckpt, {"offload_optimizer": ({"device": "cpu", "pin_memory": True}, reason)})


def knob_offload_param(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    r = resolved(config, job)
    if r.zero.stage != 3 or r.zero.offload_param.device != "none":
        return
    reason = (
        "keeps the parameter partitions in host RAM and fetches them per layer (slower, least GPU memory)"
    )
    yield _zero_edit(config, ckpt, {"offload_param": ({"device": "cpu", "pin_memory": True}, reason)})


ORDER: dict[str, tuple[Knob, ...]] = {
    "activations_forward": (knob_micro_batch, knob_checkpointing, knob_stage_up, knob_offload_optimizer),
    "activations_backward": (knob_micro_batch, knob_checkpointing, knob_stage_up, knob_offload_optimizer),
    "param_gather": (knob_stage3_gather, knob_micro_batch, knob_checkpointing, knob_offload_param),
    "gradient_buckets": (knob_buckets, knob_stage_up, knob_micro_batch),
    "optimizer_states": (knob_stage_up, knob_offload_optimizer, knob_micro_batch),
    "init": (knob_stage_up, knob_offload_optimizer, knob_offload_param),
    "unknown": (
        knob_micro_batch,
        knob_checkpointing,
        knob_stage_up,
        knob_offload_optimizer,
        knob_offload_param,
    ),
}
"""Knob families per OOM phase: the ones that shrink that phase's term first, throughput-costly
offload last. A saved checkpoint's gather is not a config-size problem: no search there."""


def _evaluate(job: Job, config: dict[str, Any], ckpt: bool, gap: int, phase: str | None = None) -> tuple[int, bool]:
    from zerotune.model.fit import padded, rejects
    from zerotune.model.memory import estimate_memory

    saved = job.checkpointing
    job.checkpointing = ckpt
    try:
        workload = workload_for(config, job)
    finally:
        job.checkpointing = saved
    est = estimate_memory(job.spec, workload, resolved(config, job).zero, hardware=job.hardware)  # type: ignore[arg-type]
    # the verdict of predict (zerotune/model/fit.py) with the bytes the OOM showed the model missing on
    # top of what it has live in the OOM's phase: the same margin on the GPU, and the node's host RAM for
    # what an offload fix moves there
    total = max(est.per_gpu.total, live_in(est, phase) + gap)
    host = rejects(est, job.hardware, workload.gpus_per_node, job.margin) == "host"  # type: ignore[arg-type]
    return total, job.capacity is not None and padded(total, job.margin) <= job.capacity and not host


def find_fix(job: Job, d: Diagnosis, gap: int) -> tuple[dict[str, Any], bool, list[Change], int] | None:
    """The first edit (fewest keys, phase order) predicted to fit; None if none within MAX_KNOBS."""
    if job.config is None or job.spec is None or job.capacity is None or d.oom is None:
        return None
    order = ORDER.get(d.oom.phase)
    if order is None:
        return None
    base, ckpt = job.config, job.checkpointing
    for size in (1, 2):
        for families in itertools.combinations(order, size):
            for edit in _chain(families, base, ckpt, job):
                cfg, new_ckpt, changes = edit
                if len(changes) > MAX_KNOBS:
                    continue
                total, fits = _evaluate(job, cfg, new_ckpt, gap, d.oom.phase)
                if fits:
                    return cfg, new_ckpt, changes, total
    return None


def _chain(families: tuple[Knob, ...], config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    """Every combination of one variant from each family, applied in turn."""
    if not families:
        yield config, ckpt, []
        return
    first, rest = families[0], families[1:]
    for cfg, new_ckpt, changes in first(config, ckpt, job):
        for cfg2, ckpt2, more in _chain(rest, cfg, new_ckpt, job):
            yield cfg2, ckpt2, changes + more


def fix_report(job: Job, d: Diagnosis, gap: int) -> tuple[FixOut, dict[str, Any]] | None:
    found = find_fix(job, d, gap)
    if found is None:
        return None
    cfg, _, changes, total = found
    keys = ", ".join(c.key for c in changes)
    text = (
        f"Changing {len(changes)} key{'s' if len(changes) > 1 else ''} ({keys}) brings the predicted peak to "
        f"{fmt_bytes(total)} of {fmt_bytes(job.capacity or 0)}"
        + (f" with a {job.margin:.0%} margin" if job.margin else "")
        + (f" (including the {fmt_bytes(gap)} the model does not see)" if gap else "")
        + "."
    )
    return FixOut(
        changes=changes, predicted_bytes=total, capacity_bytes=job.capacity or 0, fits=True, text=text
    ), cfg
