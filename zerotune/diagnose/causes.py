"""The ordered cause table: one primary cause from a Scan, with the lines that show it.

Each row names a cause, the signals (zerotune.diagnose.signals) that can imply it, and the function
that checks them and writes the diagnosis (title, explanation, what to change).

Several signals often appear together: a rank that runs out of GPU memory leaves its peers waiting
in a collective until the NCCL watchdog fires; a rank the kernel's OOM killer ends makes the
launcher kill the rest. The cause is the earliest link of that chain, so the order below runs from
"the job could not start" to "the job ran but slowly":

  version mismatch > config rejected > GPU OOM > NVMe/aio > NCCL desync > host OOM (SIGKILL with
  offload or host-memory evidence, or any SIGKILL) > NCCL timeout > NCCL error > slow > unclassified

Signals that lose are listed in `also_seen`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zerotune.diagnose.records import LogLine, Scan
from zerotune.diagnose.report import Cause as CauseName
from zerotune.diagnose.report import (
    CollectiveInfo,
    Diagnosis,
    Evidence,
    OomInfo,
    RejectedField,
    RejectedInfo,
)
from zerotune.diagnose.signals import config, memory, nccl
from zerotune.units import fmt_bytes

SLOW_SHARE = 0.20
"""A timer outside the model's compute (the exposed gradient all-reduce, the optimizer step, the
post-step all-gather) that adds this share on top of the compute (forward + backward compute) is
called out as "slow". A judgement threshold, not a measured constant: below it the step is
dominated by compute and the ZeRO knobs have little to gain."""

PHASE_TEXT = {
    "init": "while the model and optimizer were set up (loading, partitioning, flat buffers)",
    "param_gather": "in the ZeRO-3 parameter all-gather (gathered parameters)",
    "activations_forward": "in the forward pass (activations)",
    "activations_backward": "in the backward pass (activations and their gradients)",
    "gradient_buckets": "in the gradient reduction buckets",
    "optimizer_states": "in the optimizer step (fp32 master weights, moments, fp32 gradients)",
    "checkpoint_save": "while saving a checkpoint or the model",
    "unknown": "at a point the traceback does not show",
}


def _ev(line: LogLine | None) -> list[Evidence]:
    return [] if line is None else [Evidence(line=line.number, rank=line.rank, text=line.text.strip()[:400])]


def _evs(lines: list[LogLine], limit: int = 5) -> list[Evidence]:
    out: list[Evidence] = []
    seen: set[int] = set()
    for line in lines:
        if line.number not in seen and len(out) < limit:
            seen.add(line.number)
            out.extend(_ev(line))
    return out


def slow_share(scan: Scan) -> tuple[str, float, float] | None:
    """(timer, its mean ms, its share of the compute) for the exposed-communication or optimizer
    timer over SLOW_SHARE of the mean compute (fwd + bwd_inner) in wall_clock_breakdown lines."""
    mean = {name: acc[0] / acc[1] for name, acc in scan.breakdown.items() if acc[1]}
    total = mean.get("fwd", 0.0) + mean.get("bwd_inner", mean.get("bwd", 0.0))
    if total <= 0:
        return None
    best = None
    for name in ("bwd_allreduce", "step", "optimizer_allgather", "optimizer_step"):
        if name in mean and mean[name] / total >= SLOW_SHARE:
            share = mean[name] / total
            if best is None or share > best[2]:
                best = (name, mean[name], share)
    return best


# ---- the job could not start ----------------------------------------------------------------------------------


def _version_mismatch(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    version_rej = sorted(
        ((r, keys) for r in scan.rejections if (keys := config.known_zero_keys(r))),
        key=lambda rk: -len(rk[1]),
    )
    if not (scan.version_errors or version_rej):
        return None
    lines = list(scan.version_errors)
    text = ""
    if version_rej:
        rej, keys = version_rej[0]
        lines = [rej.line, *lines]
        have = scan.facts.get("deepspeed_version")
        text = (
            f"DeepSpeed{' ' + str(have.value) if have else ''} rejects {', '.join(keys)} as unknown keys, "
            "but DeepSpeed 0.19.8 defines them: the installed DeepSpeed is older than the config. "
            "Upgrade DeepSpeed, or remove these keys."
        )
    if scan.version_errors:
        text = (text + " " if text else "") + (
            "A library version check failed (e.g. the CUDA toolkit differs from the one torch was built "
            "with, or a dependency is too old): align the versions the message names."
        )
    return Diagnosis(
        cause="version_mismatch", title="Version mismatch", explanation=text, evidence=_evs(lines)
    )


def _config_rejected(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    other_rej = [r for r in scan.rejections if not config.known_zero_keys(r)]
    if not other_rej:
        return None
    rej = max(other_rej, key=lambda r: (len(r.fields), -r.line.number))
    info = RejectedInfo(
        model=rej.model,
        kind=rej.kind,  # type: ignore[arg-type]
        fields=[RejectedField(field=f.field, message=f.message, value=f.value) for f in rej.fields],
    )
    keys = ", ".join(f.field for f in rej.fields if f.field) or "a value"
    if rej.kind == "hf_mismatch":
        text = (
            f"HF Trainer refused the DeepSpeed config: {keys} disagree with TrainingArguments. "
            'Set these keys to "auto" so the Trainer fills them, or make them equal to the command line.'
        )
    else:
        text = f"DeepSpeed's config parser ({rej.model}) rejected {keys}."
    return Diagnosis(
        cause="config_rejected",
        title=f"Config rejected by {rej.model or 'DeepSpeed'}",
        explanation=text,
        evidence=_evs([rej.line]),
        rejected=info,
    )


# ---- memory ---------------------------------------------------------------------------------------------------


def _gpu_oom(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    oom = memory.primary_oom(scan)
    if oom is None:
        return None
    numbers = []
    if oom.tried is not None:
        numbers.append(f"tried to allocate {fmt_bytes(oom.tried)}")
    if oom.allocated is not None:
        numbers.append(f"{fmt_bytes(oom.allocated)} already allocated")
    if oom.capacity is not None:
        numbers.append(f"of {fmt_bytes(oom.capacity)}")
    gpu = f"GPU {oom.gpu}" if oom.gpu is not None else "a GPU"
    text = f"{gpu} ran out of memory{': ' + ', '.join(numbers) if numbers else ''}."
    if oom.phase_line is not None and oom.phase_line is not oom.line:
        text += f" The phase comes from line {oom.phase_line.number}."
    return Diagnosis(
        cause="gpu_oom",
        title=f"GPU out of memory {PHASE_TEXT[oom.phase]}",
        explanation=text,
        evidence=_evs([oom.line] + ([oom.phase_line] if oom.phase_line else [])),
        oom=OomInfo(
            phase=oom.phase,  # type: ignore[arg-type]
            gpu_index=oom.gpu,
            tried_bytes=oom.tried,
            capacity_bytes=oom.capacity,
            allocated_bytes=oom.allocated,
            free_bytes=oom.free,
            reserved_bytes=oom.reserved,
            count=scan.oom_count,
        ),
    )


def _nvme_aio(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.aio_errors:
        return None
    return Diagnosis(
        cause="nvme_aio",
        title="NVMe offload / async I/O failure",
        explanation=(
            "DeepSpeed's async I/O (libaio) failed: the op could not be built or loaded, or a swap "
            "file read back with the wrong size. Check that libaio-dev is installed (ds_report shows "
            "async_io [OKAY]), that nvme_path is a local NVMe filesystem with room for the swap "
            "files, and the aio block_size/queue_depth."
        ),
        evidence=_evs(scan.aio_errors),
    )


def _host_alloc(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.cpu_alloc_failures:
        return None
    line, asked = scan.cpu_alloc_failures[0]
    text = (
        "torch's CPU allocator could not allocate"
        + (f" {fmt_bytes(asked)}" if asked else " memory")
        + ": host RAM is exhausted, or the process runs under an address-space/cgroup limit. "
        "On a GPU run this is the host side (offloaded states, pinned buffers, data loading); on a CPU "
        "(gloo) run it is the training itself: a smaller micro-batch or activation checkpointing."
    )
    return Diagnosis(
        cause="host_oom",
        title="Host memory exhausted (CPU allocator)",
        explanation=text,
        evidence=_evs([line] + [k.line for k in scan.kills]),
    )


def _host_killed(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    sigkill = [k for k in scan.kills if k.signal == 9]
    launcher = [k for k in scan.kills if k.signal is None]
    memory_signs = bool(scan.offload_hints or scan.host_memory or offload_configured)
    if not (sigkill or (launcher and memory_signs)):
        return None
    used = scan.facts.get("host_memory_used_percent")
    lines = [k.line for k in sigkill + launcher] + scan.host_memory[-2:] + scan.offload_hints[:2]
    if scan.offload_hints or offload_configured:
        text = (
            "A rank was killed (SIGKILL / exit -9) while ZeRO offload keeps state in host RAM: the kernel's "
            "OOM killer. Offload keeps fp32 master weights, optimizer moments and pinned buffers in host RAM "
            "for every rank of the node."
        )
    elif memory_signs:
        text = (
            "A rank was killed (SIGKILL / exit -9, or by the launcher) while DeepSpeed reported host memory "
            "use: the kernel's OOM killer."
        )
    else:
        text = (
            "A rank was killed with SIGKILL (exit -9). The log shows no memory figures, but SIGKILL from "
            "outside is almost always the kernel's OOM killer (host RAM: model loading on every rank, "
            "dataloader workers, offload); `dmesg` or the job scheduler's memory limit confirms it. A "
            "scheduler preemption or a manual kill look the same."
        )
    if used is not None:
        text += f" DeepSpeed last reported host memory {used.value}% used (line {used.line.number})."
    return Diagnosis(
        cause="host_oom", title="Host RAM exhausted (OOM killer)", explanation=text, evidence=_evs(lines)
    )


# ---- collectives ----------------------------------------------------------------------------------------------


def _nccl_desync(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    ds = nccl.desync(scan)
    desync_lines = [c.line for c in scan.collectives if c.kind == "desync"]
    if not (ds or desync_lines):
        return None
    ranks = ds[0] if ds else []
    return Diagnosis(
        cause="nccl_desync",
        title="Ranks out of step in their collectives",
        explanation=(
            f"Rank(s) {', '.join(map(str, ranks)) or '?'} issued fewer collectives than the others: the "
            "ranks took different code paths (data-dependent control flow, MoE routing, a rank that "
            "skipped a step or crashed), so the others wait forever."
        ),
        evidence=_evs((ds[1] if ds else []) + desync_lines),
        collective=CollectiveInfo(kind="desync", ranks=ranks),
    )


def _nccl_timeout(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    timeouts = [c for c in scan.collectives if c.kind == "timeout"]
    if not timeouts:
        return None
    c = next((t for t in timeouts if t.op), timeouts[0])
    ranks = sorted({t.rank for t in timeouts if t.rank is not None})
    size = f", {c.numel:,} elements" if c.numel else ""
    return Diagnosis(
        cause="nccl_timeout",
        title=f"NCCL {c.op or 'collective'} timed out",
        explanation=(
            f"The NCCL watchdog stopped collective #{c.seq or '?'} ({c.op or 'unknown op'}{size}) after "
            f"{(c.timeout_ms or 0) / 1000:g} s on rank(s) {', '.join(map(str, ranks)) or '?'}. The "
            "ranks that time out are waiting for one that did not arrive: look for the slowest or "
            "failed rank (an OOM, a hang in data loading or in rank-0-only code such as saving or "
            "evaluation); raise the timeout only if that work is legitimately long."
        ),
        evidence=_evs([t.line for t in timeouts]),
        collective=CollectiveInfo(
            kind="timeout", op=c.op, seq=c.seq, numel=c.numel, timeout_ms=c.timeout_ms, ranks=ranks
        ),
    )


def _nccl_error(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    errors = [c for c in scan.collectives if c.kind == "error"]
    if not errors:
        return None
    return Diagnosis(
        cause="nccl_error",
        title="NCCL error",
        explanation="A collective failed with an NCCL error; run with NCCL_DEBUG=INFO for the transport.",
        evidence=_evs([e.line for e in errors]),
        collective=CollectiveInfo(kind="error", ranks=sorted({e.rank for e in errors if e.rank is not None})),
    )


# ---- slow, unrecognised -----------------------------------------------------------------------------------------

_SLOW_TIMER_TEXT = {
    "bwd_allreduce": "the gradient all-reduce after the backward pass is exposed (not overlapped)",
    "step": "the optimizer step",
    "optimizer_allgather": "the post-step parameter all-gather",
    "optimizer_step": "the optimizer step",
}


def _slow(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    slow = slow_share(scan)
    if slow is None:
        return None
    name, ms, share = slow
    text = (
        f"{_SLOW_TIMER_TEXT[name]}: {ms:.0f} ms per step, {share:.0%} on top of the forward and backward "
        "compute (wall_clock_breakdown)."
    )
    if name == "bwd_allreduce":
        text += " overlap_comm, larger reduce buckets or fewer gradient-accumulation boundaries hide it."
    elif scan.offload_hints or offload_configured:
        text += " Under optimizer offload this is the CPU Adam step: more CPU cores per rank or NVMe/partial offload."
    return Diagnosis(
        cause="slow",
        title="Slow step",
        explanation=text,
        evidence=_evs([scan.breakdown_line] if scan.breakdown_line else []),
    )


def _unclassified(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not (scan.tracebacks or scan.last_exception is not None):
        return None
    return Diagnosis(
        cause="unclassified",
        title="Failure not recognised",
        explanation="The log has an error zerotune does not classify; its last exception line is shown.",
        evidence=_ev(scan.last_exception),
    )


# ---- the table --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CauseRule:
    cause: CauseName
    signals: tuple[str, ...]
    """the signals (Scan fields) that can imply it: with none of them in the log, it is not checked"""
    diagnose: Callable[[Scan, bool], Diagnosis | None]
    """(scan, offload configured) -> the diagnosis with its explanation and fix text, or None"""
    fallback: bool = False
    """checked only when no other row found a cause"""


CAUSES: tuple[CauseRule, ...] = (
    CauseRule("version_mismatch", ("version_errors", "rejections"), _version_mismatch),
    CauseRule("config_rejected", ("rejections",), _config_rejected),
    CauseRule("gpu_oom", ("ooms",), _gpu_oom),
    CauseRule("nvme_aio", ("aio_errors",), _nvme_aio),
    CauseRule("nccl_desync", ("fingerprints", "collectives"), _nccl_desync),
    CauseRule("host_oom", ("cpu_alloc_failures",), _host_alloc),
    CauseRule("host_oom", ("kills",), _host_killed),
    CauseRule("nccl_timeout", ("collectives",), _nccl_timeout),
    CauseRule("nccl_error", ("collectives",), _nccl_error),
    CauseRule("slow", ("breakdown",), _slow),
    CauseRule("unclassified", ("tracebacks", "last_exception"), _unclassified, fallback=True),
)
"""Most upstream first (the module docstring gives the order and why)."""


def classify(scan: Scan, *, offload_configured: bool = False) -> Diagnosis:
    found: list[Diagnosis] = []
    for rule in CAUSES:
        if (rule.fallback and found) or not any(getattr(scan, name) for name in rule.signals):
            continue
        diagnosis = rule.diagnose(scan, offload_configured)
        if diagnosis is not None:
            found.append(diagnosis)
    if not found:
        return Diagnosis(
            cause="none",
            title="No failure found",
            explanation="The log shows no failure zerotune recognises.",
        )
    primary = found[0]
    primary.also_seen = [d.cause for d in found[1:] if d.cause != primary.cause]
    return primary
