"""Numbers for a diagnosis: the job rebuilt from the log and the flags, zerotune's memory model on
it, the validate rules on its config, and for a GPU OOM the smallest config change that fits.

The job is reconstructed from, in order of trust: --config (the user's file), the config DeepSpeed
printed at start (`json = {...}`), then single facts in the log (ZeRO stage, bucket sizes,
precision, micro-batch). Each value remembers its source.

The fix search (`find_fix`) edits at most MAX_KNOBS keys, in an order that depends on the OOM's
phase (the knobs that shrink the overflowing term first, the ones that cost throughput last), and
accepts the first edit the memory model predicts to fit. The model is checked against the log
first: when the run needed more than the model predicts (the OOM text gives allocated + tried),
that gap is added to every candidate, so a fix must absorb what the model does not see too.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Change, Diagnosis, FixOut, LintFinding, MemoryCheck, StepCheck
from zerotune.dsconfig.settings import ALIASES, ZeroSettings, resolve
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload
from zerotune.units import fmt_bytes, fmt_count

DS_MAX_LIVE = ZeroSettings().max_live_parameters
DS_PREFETCH = ZeroSettings().prefetch_bucket_size
"""DeepSpeed 0.19.8's stage3_max_live_parameters (1e9) and stage3_prefetch_bucket_size (5e7) defaults."""

MAX_KNOBS = 3
"""A fix changes at most this many keys (issue 13: "the fewest knobs that make it fit")."""

PHASE_TERM = {
    "activations_forward": "activations",
    "activations_backward": "activations",
    "param_gather": "comm_buffers",
    "gradient_buckets": "comm_buffers",
    "optimizer_states": "optimizer_states",
    "init": "model_states",
    "checkpoint_save": "params",
}
"""MemoryBreakdown term that the allocations of each phase land in (zerotune.model.memory:
gathered stage-3 parameters and reduction buckets are `comm_buffers`)."""

TERM_TEXT = {
    "params": "parameters",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "comm_buffers": "communication buffers (buckets, gathered parameters)",
    "activations": "activations",
    "overhead": "CUDA context and allocator slack",
    "model_states": "model states (parameters + gradients + optimizer states)",
}


@dataclass
class Job:
    """The training job as far as the log and the flags tell it."""

    config: dict[str, Any] | None = None
    config_source: str = ""
    spec: ModelSpec | None = None
    spec_source: str = ""
    world: int = 1
    world_source: str = "assumed"
    seq_len: int = 2048
    seq_source: str = "assumed"
    checkpointing: bool = True
    checkpointing_source: str = "assumed"
    capacity: int | None = None
    capacity_source: str = ""
    hardware: HardwareProfile | None = None
    notes: list[str] = field(default_factory=list)


def reconstruct_config(scan: Scan) -> dict[str, Any] | None:
    """A minimal DeepSpeed config from single facts, when the log has no config dump."""
    facts = scan.facts
    if "zero_stage" not in facts:
        return None
    zero: dict[str, Any] = {"stage": facts["zero_stage"].value}
    for name, key in (
        ("reduce_bucket_size", "reduce_bucket_size"),
        ("allgather_bucket_size", "allgather_bucket_size"),
        ("prefetch_bucket_size", "stage3_prefetch_bucket_size"),
    ):
        if name in facts and not (key.startswith("stage3") and zero["stage"] != 3):
            if not (name == "allgather_bucket_size" and zero["stage"] == 3):
                zero[key] = facts[name].value
    if scan.offload_hints and any("DeepSpeedCPUAdam" in h.text for h in scan.offload_hints):
        zero["offload_optimizer"] = {"device": "cpu"}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": facts["micro_batch"].value if "micro_batch" in facts else 1
    }
    if "grad_accum" in facts:
        config["gradient_accumulation_steps"] = facts["grad_accum"].value
    precision = str(facts["precision"].value).lower() if "precision" in facts else ""
    if precision in ("bfloat16", "bf16"):
        config["bf16"] = {"enabled": True}
    elif precision in ("float16", "fp16", "half"):
        config["fp16"] = {"enabled": True}
    config["zero_optimization"] = zero
    return config


def workload_for(config: dict[str, Any], job: Job) -> Workload:
    from zerotune.cli.predict import batch_triple  # DeepSpeed's batch inference, stated once there

    r = resolve(config)
    micro, accum = batch_triple(r.train_batch_size, r.micro_batch, r.grad_accum, job.world)
    optimizer = (r.optimizer_type or "adamw").lower()
    per_node = (
        min(job.world, job.hardware.gpus_per_node)
        if job.hardware and job.hardware.gpus_per_node
        else job.world
    )
    return Workload(
        seq_len=job.seq_len,
        micro_batch=micro,
        grad_accum=accum,
        precision=r.precision,
        optimizer=optimizer if optimizer in ("adamw", "adam", "sgd", "lion", "adagrad") else "adamw",
        activation_checkpointing=job.checkpointing,
        gpus_per_node=per_node,
        nodes=max(1, math.ceil(job.world / per_node)),
    )


def _terms(breakdown: Any) -> dict[str, int]:
    terms = asdict(breakdown)
    return terms


def observed_need(d: Diagnosis) -> int | None:
    """Bytes the failing allocation needed in total, from the OOM text: in use + tried. In use is
    capacity − free where both are given (it counts non-PyTorch memory too), else allocated."""
    o = d.oom
    if o is None or o.tried_bytes is None:
        return None
    if o.capacity_bytes is not None and o.free_bytes is not None:
        return o.capacity_bytes - o.free_bytes + o.tried_bytes
    if o.allocated_bytes is not None:
        return o.allocated_bytes + o.tried_bytes
    return None


def memory_check(job: Job, d: Diagnosis) -> tuple[MemoryCheck, int] | None:
    """The memory model on the job and the gap between what the run needed and the prediction."""
    from zerotune.model.memory import estimate_memory

    if job.config is None or job.spec is None or job.hardware is None:
        return None
    workload = workload_for(job.config, job)
    est = estimate_memory(job.spec, workload, resolve(job.config).zero, hardware=job.hardware)
    terms = _terms(est.per_gpu)
    total = est.per_gpu.total
    phase = d.oom.phase if d.oom else None
    term = PHASE_TERM.get(phase or "")
    if term is None:
        term = max((k for k in terms if k != "overhead"), key=lambda k: terms[k])
    term_bytes = (
        terms["params"] + terms["gradients"] + terms["optimizer_states"]
        if term == "model_states"
        else terms[term]
    )
    need = observed_need(d)
    gap = max(0, need - total) if need is not None else 0
    capacity = job.capacity
    parts = ", ".join(f"{k.replace('_', ' ')} {fmt_bytes(v)}" for k, v in terms.items())
    text = f"zerotune's memory model puts this job at {fmt_bytes(total)} per GPU ({parts})"
    if capacity:
        if total > capacity:
            text += f", {fmt_bytes(total - capacity)} more than the {fmt_bytes(capacity)} GPU"
        else:
            text += f", within the {fmt_bytes(capacity)} GPU"
    text += "."
    if phase and phase in PHASE_TERM:
        text += f" The {phase.replace('_', ' ')} phase allocates {TERM_TEXT[term]}: {fmt_bytes(term_bytes)} predicted."
    else:
        text += f" The largest term is {TERM_TEXT[term]}: {fmt_bytes(term_bytes)}."
    if need is not None:
        if gap > 0:
            text += (
                f" The run needed at least {fmt_bytes(need)} (in use + the failed request): {fmt_bytes(gap)} more "
                "than the model predicts (memory it does not see: another model copy, longer sequences than "
                f"--seq-len {job.seq_len}, fragmentation); a fix is checked with that gap added."
            )
        else:
            text += f" The run needed at least {fmt_bytes(need)} when it failed."
    check = MemoryCheck(
        capacity_bytes=capacity,
        predicted_bytes=total,
        terms=terms,
        overflowing_term=term,
        phase_term_bytes=term_bytes,
        observed_need_bytes=need,
        model_gap_bytes=gap,
        text=text,
    )
    return check, gap


def step_check(job: Job, scan: Scan) -> StepCheck | None:
    """The measured mean step (fwd + bwd + step of DeepSpeed's wall_clock_breakdown, which sums the
    micro-steps of one optimizer step) against predict_step on the same job."""
    from zerotune.model.step import predict_step

    mean = {name: acc[0] / acc[1] for name, acc in scan.breakdown.items() if acc[1]}
    if (
        job.config is None
        or job.spec is None
        or job.hardware is None
        or "fwd" not in mean
        or "bwd" not in mean
    ):
        return None
    measured = mean["fwd"] + mean["bwd"] + mean.get("step", 0.0)
    exposed = mean.get("bwd_allreduce")
    est = predict_step(job.spec, workload_for(job.config, job), resolve(job.config).zero, job.hardware)
    predicted = est.step_time_s * 1000
    text = (
        f"Measured step {measured:.0f} ms (mean of wall_clock_breakdown), predicted {predicted:.0f} ms on "
        f"{job.hardware.name} ({est.bottleneck}-bound; exposed communication {est.exposed_comm_s * 1000:.0f} ms, "
        f"optimizer {est.optimizer_s * 1000:.0f} ms)"
    )
    if exposed is not None:
        text += f"; measured exposed all-reduce {exposed:.0f} ms"
    ratio = measured / predicted if predicted > 0 else math.inf
    if ratio > 1.5:
        text += (
            f". The run is {ratio:.1f}x slower than the model expects: the hardware differs from the profile "
            "(pass --profile from `zerotune probe`), or something outside ZeRO (data loading, host contention) "
            "takes the time."
        )
    else:
        text += "."
    return StepCheck(
        measured_ms=measured,
        measured_exposed_comm_ms=exposed,
        predicted_ms=predicted,
        predicted_exposed_comm_ms=est.exposed_comm_s * 1000,
        predicted_optimizer_ms=est.optimizer_s * 1000,
        bottleneck=est.bottleneck,
        text=text,
    )


def host_memory_text(job: Job) -> str:
    """Host RAM the memory model gives the job's offload, against the profile's host RAM."""
    from zerotune.model.memory import estimate_memory

    workload = workload_for(job.config or {}, job)
    est = estimate_memory(job.spec, workload, resolve(job.config or {}).zero, hardware=job.hardware)  # type: ignore[arg-type]
    text = f"zerotune's memory model: this job's offload needs {fmt_bytes(est.cpu_bytes_per_node)} of host RAM per node"
    ram = job.hardware.host.ram_bytes if job.hardware is not None else None
    if ram:
        text += f"; the profile's node has {fmt_bytes(ram)}"
    return text + " (pinned buffers included; model loading and dataloader workers come on top)."


# ---- the fix search ------------------------------------------------------------------------------------------

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
    r = resolve(config)
    from zerotune.cli.predict import batch_triple

    micro, accum = batch_triple(r.train_batch_size, r.micro_batch, r.grad_accum, job.world)
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
    r = resolve(config)
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
    r = resolve(config)
    if r.zero.stage == 0:
        return
    for div in (2, 5, 10):
        new = max(1, r.zero.reduce_bucket_size // div)
        reason = f"smaller gradient reduction buckets: {fmt_count(r.zero.reduce_bucket_size)} → {fmt_count(new)} elements"
        yield _zero_edit(config, ckpt, {"reduce_bucket_size": (new, reason)})


def knob_stage_up(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    """One stage up. Stage-1/2 keys such as allgather_bucket_size are kept at stage 3: DeepSpeed
    ignores them there (validate warns, ZT201), and removing them would be another knob."""
    r = resolve(config)
    if r.zero.stage >= 3 or job.world < 2:
        return
    stage = r.zero.stage + 1
    sharded = ["", "optimizer states", "gradients too", "parameters too"][stage]
    reason = f"partitions {sharded} over the {job.world} ranks"
    yield _zero_edit(config, ckpt, {"stage": (stage, reason)}, old_if_absent=0)  # DeepSpeed's default stage


def knob_offload_optimizer(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    r = resolve(config)
    if r.zero.stage == 0 or r.zero.offload_optimizer.device != "none":
        return
    reason = "moves fp32 master weights, moments and the fp32 gradient copy to host RAM (the step runs on the CPU: slower)"
    yield _zero_edit(config, ckpt, {"offload_optimizer": ({"device": "cpu", "pin_memory": True}, reason)})


def knob_offload_param(config: dict[str, Any], ckpt: bool, job: Job) -> Iterator[Edit]:
    r = resolve(config)
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


def _evaluate(job: Job, config: dict[str, Any], ckpt: bool, gap: int) -> tuple[int, bool]:
    from zerotune.model.memory import estimate_memory

    saved = job.checkpointing
    job.checkpointing = ckpt
    try:
        workload = workload_for(config, job)
    finally:
        job.checkpointing = saved
    est = estimate_memory(job.spec, workload, resolve(config).zero, hardware=job.hardware)  # type: ignore[arg-type]
    fits = est.headroom_bytes is not None and est.headroom_bytes - gap >= 0
    return est.per_gpu.total + gap, fits


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
                total, fits = _evaluate(job, cfg, new_ckpt, gap)
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
        + (f" (including the {fmt_bytes(gap)} the model does not see)" if gap else "")
        + "."
    )
    return FixOut(
        changes=changes, predicted_bytes=total, capacity_bytes=job.capacity or 0, fits=True, text=text
    ), cfg


# ---- validate rules ------------------------------------------------------------------------------------------

SECTION_OF_MODEL = {
    "DeepSpeedZeroConfig": ("zero_optimization",),
    "DeepSpeedZeroOffloadOptimizerConfig": ("zero_optimization", "offload_optimizer"),
    "DeepSpeedZeroOffloadParamConfig": ("zero_optimization", "offload_param"),
    "DeepSpeedFP16Config": ("fp16",),
    "DeepSpeedBF16Config": ("bf16",),
    "DeepSpeedConfig": (),
}
"""DeepSpeed's pydantic config classes and the section of the JSON each validates."""


def _value(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        low = text.strip().lower()
        return {"true": True, "false": False, "none": None}.get(low, text.strip().strip("'\""))


def rejected_world(d: Diagnosis) -> int | None:
    """The world size a batch assertion printed, if any."""
    for f in d.rejected.fields if d.rejected else []:
        if f.field == "world_size" and f.value is not None and f.value.lstrip("-").isdigit():
            return int(f.value)
    return None


def rejected_config(base: dict[str, Any] | None, d: Diagnosis) -> dict[str, Any] | None:
    """`base` (or {}) with the values DeepSpeed rejected put back where they were."""
    if d.rejected is None or d.rejected.model not in SECTION_OF_MODEL:
        return None
    cfg = copy.deepcopy(base) if base else {"train_micro_batch_size_per_gpu": 1}
    node = cfg
    for part in SECTION_OF_MODEL[d.rejected.model]:
        node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else node
    for f in d.rejected.fields:
        if not f.field or "." in f.field or f.field == "world_size":
            continue
        if f.value is not None:
            node[f.field] = _value(f.value)
        elif "extra" in f.message.lower() or "not permitted" in f.message:
            node[f.field] = {}  # an unknown or misplaced key: its value is not in the message
    if d.rejected.model == "DeepSpeedZeroConfig" and "stage" not in node:
        node["stage"] = (
            3 if any(f.field.startswith("stage3_") for f in d.rejected.fields) else node.get("stage", 0)
        )
    return cfg


def lint_config(config: dict[str, Any], *, world: int | None, seq_len: int) -> list[LintFinding]:
    from zerotune.dsconfig.load import load_text
    from zerotune.lint.context import LintOptions
    from zerotune.lint.runner import lint

    loaded = load_text(json.dumps(config, indent=2), "<config>")
    found = lint(loaded, LintOptions(world_size=world, seq_len=seq_len))
    return [
        LintFinding(code=x.code, severity=x.severity.value, message=x.message, pointer=x.pointer)
        for x in found
    ]
