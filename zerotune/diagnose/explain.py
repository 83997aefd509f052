"""Numbers for a diagnosis: the job rebuilt from the log and the flags, and zerotune's memory and
step-time models on it (the fix search is fix_search.py, the rejected config rejected.py).

The job is reconstructed from, in order of trust: --config (the user's file), the config DeepSpeed
printed at start (`json = {...}`), then single facts in the log (ZeRO stage, bucket sizes,
precision, micro-batch). Each value remembers its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Diagnosis, MemoryCheck, StepCheck, TimerCheck
from zerotune.dsconfig.settings import ResolvedConfig, ZeroSettings, resolve
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.job import SAFETY_MARGIN, modelled_optimizer
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import DEFAULT_SEQ_LEN, Workload
from zerotune.units import fmt_bytes

if TYPE_CHECKING:
    from zerotune.model.step import StepEstimate

OOM_PHASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "activations_forward": ("activations", ("forward",)),
    "activations_backward": ("activations", ("backward",)),
    "param_gather": ("comm_buffers", ("forward", "backward")),
    "gradient_buckets": ("comm_buffers", ("backward",)),
    "optimizer_states": ("optimizer_states", ("step",)),
    "init": ("model_states", ("init",)),
    "checkpoint_save": ("params", ()),
}
"""Per OOM phase: the MemoryBreakdown term its allocations land in (zerotune.model.memory: gathered stage-3
parameters and reduction buckets are `comm_buffers`), and the intervals of the memory model's timeline
(zerotune.model.live_bytes Phase.group) in which it allocates (none for a checkpoint save: not a step)."""

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
    seq_len: int = DEFAULT_SEQ_LEN
    seq_source: str = "assumed"
    checkpointing: bool = True
    checkpointing_source: str = "assumed"
    optimizer: str | None = None
    """--optimizer: the optimizer when the config names none"""
    margin: float = SAFETY_MARGIN
    """--margin: the safety margin a fix must fit with (predict's verdict, zerotune/model/fit.py)"""
    hf_values: dict[str, Any] = field(default_factory=dict)
    """What HF Trainer puts into the config's "auto" keys for this job (`fill_hf`); empty without them"""
    workload_options: dict[str, Any] = field(default_factory=dict)
    """The workload options said (kernels, packing, offloading, MoE experts): Workload fields."""
    micro_batch: int | None = None
    grad_accum: int | None = None
    """--micro-batch, --grad-accum: over the config's, as predict takes them"""
    ranks_per_node: int | None = None
    """as the launcher printed it (num_local_procs, --nproc_per_node); else the profile's GPUs per node"""
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


HF_PRECISIONS = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "bf16": "bf16",
    "fp16": "fp16",
}
"""torch dtype names in DeepSpeed's "Creating <dtype> ZeRO stage" line, and a launch line's --bf16 / --fp16
(signals.facts._launched) -> the config's precision."""


def fill_hf(job: Job, scan: Scan, said: dict[str, Any], notes: list[str]) -> None:
    """The values HF Trainer fills into the config's "auto" keys (dsconfig/hf_auto.py trainer_values,
    the reading predict makes of the same config), from the flags (`said`: precision, micro_batch,
    grad_accum), else what the log prints (HF's "Instantaneous batch size per device", "Gradient
    Accumulation steps", DeepSpeed's "Creating <dtype> ZeRO stage"), else assumed and said so."""
    from zerotune.dsconfig import hf_auto

    if job.config is None or job.spec is None or next(hf_auto.auto_pointers(job.config), None) is None:
        return
    facts, how = scan.facts, []

    def pick(name: str, fact: str, default: Any, read=lambda v: v) -> Any:
        if said.get(name) is not None:
            how.append(f"{name} {said[name]} (--{name.replace('_', '-')})")
            return said[name]
        if fact in facts and read(facts[fact].value) is not None:
            value = read(facts[fact].value)
            how.append(f"{name} {value} (log:{facts[fact].line.number})")
            return value
        how.append(f"{name} {default} (assumed: pass --{name.replace('_', '-')})")
        return default

    default_precision = job.hardware.default_precision if job.hardware is not None else "bf16"
    precision = pick("precision", "precision", default_precision, lambda v: HF_PRECISIONS.get(str(v).lower()))
    micro = pick("micro_batch", "micro_batch", 1, int)
    accum = pick("grad_accum", "grad_accum", 1, int)
    job.hf_values = hf_auto.trainer_values(job.spec, precision=precision, micro_batch=micro, grad_accum=accum, world_size=job.world)
    notes.append(f'the config has "auto" values: modelled as HF Trainer fills them ({", ".join(how)})')


def resolved(config: dict[str, Any], job: Job) -> ResolvedConfig:
    """`config` as the run had it: its "auto" keys filled as HF Trainer fills them for this job."""
    if job.hf_values:
        from zerotune.dsconfig import hf_auto

        config = hf_auto.fill(config, job.hf_values)
    return resolve(config)


def batch_of(r: ResolvedConfig, world: int) -> tuple[int, int]:
    """(micro-batch, gradient accumulation) the way DeepSpeed infers them from the config."""
    from zerotune.job import batch_triple  # DeepSpeed's batch inference, stated once there

    return batch_triple(r.train_batch_size, r.micro_batch, r.grad_accum, world)


def workload_for(config: dict[str, Any], job: Job) -> Workload:
    r = resolved(config, job)
    micro, accum = batch_of(r, job.world)
    optimizer, said = modelled_optimizer(r.optimizer_type, job.optimizer)
    if said and said not in job.notes:
        job.notes.append(said)
    if job.ranks_per_node:
        per_node = min(job.world, job.ranks_per_node)
    elif job.hardware and job.hardware.gpus_per_node:
        per_node = min(job.world, job.hardware.gpus_per_node)
    else:
        per_node = job.world
    # as zerotune.job.resolve_job builds predict's workload: the flags over the config
    options = dict(job.workload_options)
    if options.get("activation_offloading") and job.checkpointing:
        options["checkpoint_in_cpu"] = True
    options.setdefault("autocast", r.autocast)
    return Workload(
        seq_len=job.seq_len,
        micro_batch=job.micro_batch or micro,
        grad_accum=job.grad_accum or accum,
        precision=r.precision,
        optimizer=optimizer,
        activation_checkpointing=job.checkpointing,
        gpus_per_node=per_node,
        nodes=max(1, math.ceil(job.world / per_node)),
        **options,
    )


def _terms(breakdown: Any) -> dict[str, int]:
    terms = breakdown._asdict()
    return terms


def _most_live(est: Any, term: str) -> int:
    """The most bytes of `term` live at any point of the step (the memory model's timeline): what the
    OOM's phase allocates, which the peak's breakdown may not hold (activations are freed before an
    optimizer-step peak)."""
    kinds = ("params", "gradients", "optimizer_states") if term == "model_states" else (term,)
    if not est.timeline:
        return sum(getattr(est.per_gpu, k) for k in kinds)
    return max(sum(p.by_kind(k) for k in kinds) for p in est.timeline)


def live_in(est: Any, oom_phase: str | None) -> int:
    """The most bytes the model has live in the OOM's phase: what the run's in-use bytes compare with
    there (the step's peak may be in another phase); the peak when the phase is unknown."""
    groups = OOM_PHASES.get(oom_phase or "", ("", ()))[1]
    live = [p.total for p in est.timeline if p.group in groups]
    return max(live) if live else est.per_gpu.total


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
    est = estimate_memory(job.spec, workload, resolved(job.config, job).zero, hardware=job.hardware)
    terms = _terms(est.per_gpu)
    total = est.per_gpu.total
    phase = d.oom.phase if d.oom else None
    term = OOM_PHASES[phase][0] if phase in OOM_PHASES else None
    if term is None:
        term = max((k for k in terms if k != "overhead"), key=lambda k: terms[k])
    term_bytes = _most_live(est, term)
    need = observed_need(d)
    live = live_in(est, phase)
    gap = max(0, need - live) if need is not None else 0
    capacity = job.capacity
    parts = ", ".join(f"{k.replace('_', ' ')} {fmt_bytes(v)}" for k, v in terms.items())
    at = f" at its peak ({est.peak_phase.name.replace('_', ' ')}: {parts})" if est.peak_phase else f" ({parts})"
    text = f"zerotune's memory model puts this job at {fmt_bytes(total)} per GPU{at}"
    if capacity:
        if total > capacity:
            text += f", {fmt_bytes(total - capacity)} more than the {fmt_bytes(capacity)} GPU"
        else:
            text += f", within the {fmt_bytes(capacity)} GPU"
    text += "."
    if phase in OOM_PHASES:
        text += f" The {phase.replace('_', ' ')} phase allocates {TERM_TEXT[term]}: {fmt_bytes(term_bytes)} predicted."
    else:
        text += f" The largest term is {TERM_TEXT[term]}: {fmt_bytes(term_bytes)}."
    if need is not None:
        if gap > 0:
            text += (
                f" The run needed at least {fmt_bytes(need)} (in use + the failed request): {fmt_bytes(gap)} more "
                f"than the model has live then ({fmt_bytes(live)}; memory it does not see: another model copy, longer sequences than "
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
        phase_live_bytes=live,
        model_gap_bytes=gap,
        text=text,
    )
    return check, gap


def expected_step_error(spec: ModelSpec, hardware: HardwareProfile, workload: Workload, zero: ZeroSettings) -> float:
    """The step-time error predict quotes for this job (zerotune.catalog.trust.quoted_error: the published
    band of its category, or its profile's calibration or probe error): a measured step further above the
    prediction than that is not the model's usual error. A tokens/s error e = predicted/measured - 1 is a
    step-time ratio measured/predicted = 1 + e."""
    from zerotune.catalog.trust import CATALOG_ERROR_PCT, job_kind, quoted_error
    from zerotune.model.band import job_band

    opt, par = zero.offload_optimizer.device, zero.offload_param.device
    band = job_band(spec, workload, opt != "none" or par != "none")
    kind = job_kind(spec.name, zero.stage, opt, par, workload.activation_checkpointing)
    pct = quoted_error(hardware, band, kind).throughput_pct
    return (pct if pct is not None else CATALOG_ERROR_PCT) / 100


def step_check(job: Job, scan: Scan, profile_said: bool = False) -> StepCheck | None:
    """The measured mean step (fwd + bwd + step of DeepSpeed's wall_clock_breakdown, which sums the
    micro-steps of one optimizer step) against predict_step on the same job, and each timer outside
    the compute against the model's time for it (`timer_checks`)."""
    from zerotune.model.step import predict_step

    mean = scan.breakdown_means()
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
    workload, zero = workload_for(job.config, job), resolved(job.config, job).zero
    est = predict_step(job.spec, workload, zero, job.hardware, detail=True)
    predicted = est.step_time_s * 1000
    expected = expected_step_error(job.spec, job.hardware, workload, zero)
    timers = timer_checks(mean, est, expected)
    text = (
        f"Measured step {measured:.0f} ms (mean of wall_clock_breakdown), predicted {predicted:.0f} ms on "
        f"{job.hardware.name}{'' if profile_said else ' (assumed: no --profile)'} ({est.bottleneck}-bound; "
        f"exposed communication {est.exposed_comm_s * 1000:.0f} ms, optimizer {est.optimizer_s * 1000:.0f} ms)"
    )
    if exposed is not None:
        text += f"; measured exposed all-reduce {exposed:.0f} ms"
    ratio = measured / predicted if predicted > 0 else math.inf
    if ratio > 1 + expected:
        text += (
            f". The run is {ratio:.1f}x slower than the model expects (beyond its ±{expected:.0%} expected error): "
            "the hardware differs from the profile "
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
        expected_error=expected,
        profile_said=profile_said,
        timers=timers,
    )


def timer_checks(mean: dict[str, float], est: StepEstimate, expected: float) -> list[TimerCheck]:
    """The exposed-communication and optimizer timers against the step model's times for them.

    DeepSpeed's `step` timer spans the optimizer step with its blocking offload copies and, under
    ZeRO-1/2, the post-step parameter all-gather (0.19.8: runtime/engine.py:3586 starts the step
    timers around _take_model_step; zero/stage_1_and_2.py:3155 all-gathers inside its step), so its
    prediction is optimizer + offload transfer + the step-phase collectives; `bwd_allreduce` is the
    reduction the backward pass waits for, at most the model's whole exposed communication. Both are
    the model's upper readings of the timer, so a timer over them is not the split being drawn
    differently. A timer is slow when it exceeds its prediction by more than the job's expected
    step-time error (`expected_step_error`) of the predicted step: the band predict states is an
    error on the whole step, so a timer's excess within it is the model's usual error."""
    step_comm = sum(c.total_s for c in est.collectives if c.phase == "step")
    predicted = {
        "bwd_allreduce": est.exposed_comm_s * 1000,
        "step": (est.optimizer_s + est.offload_s + step_comm) * 1000,
    }
    allowed = expected * est.step_time_s * 1000
    return [
        TimerCheck(
            timer=name,
            measured_ms=mean[name],
            predicted_ms=predicted[name],
            slow=mean[name] - predicted[name] > allowed,
        )
        for name in ("bwd_allreduce", "step")
        if name in mean
    ]


def host_memory_text(job: Job) -> str:
    """Host RAM the memory model gives the job's offload, against the profile's host RAM."""
    from zerotune.model.memory import estimate_memory

    workload = workload_for(job.config or {}, job)
    est = estimate_memory(job.spec, workload, resolved(job.config or {}, job).zero, hardware=job.hardware)  # type: ignore[arg-type]
    text = f"zerotune's memory model: this job's offload needs {fmt_bytes(est.cpu_bytes_per_node)} of host RAM per node"
    ram = job.hardware.host.ram_bytes if job.hardware is not None else None
    if ram:
        text += f"; the profile's node has {fmt_bytes(ram)}"
    return text + " (pinned buffers included; model loading and dataloader workers come on top)."
