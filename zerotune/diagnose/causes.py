"""The ordered cause table: the causes a Scan shows, each with the lines that show it, and the
primary one.

Each row names a cause, the signals (zerotune.diagnose.signals) that can imply it, and the function
that checks them and writes the diagnosis (title, explanation, the first line that shows it).

Several causes often appear together, and the order they first appear in is the order they
happened: a config rejected at start, then nothing; a loss scale at its minimum, then the launcher
killing the ranks. The primary cause is the earliest *root* cause by line; rows marked
`consequence` are what other failures leave behind (a rank that runs out of GPU memory leaves its
peers waiting in a collective until the NCCL watchdog fires; one that dies makes the launcher
SIGKILL the rest; a hung job is stopped by hand) and are primary only when no root cause is in the
log. Two causes on the same line are ordered by the table (most specific first). The rest are
listed in `also_seen`, in the order they first appear.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zerotune.diagnose.records import FieldError, LogLine, Rejection, Scan
from zerotune.diagnose.report import Cause as CauseName
from zerotune.diagnose.report import (
    CollectiveInfo,
    Diagnosis,
    Evidence,
    OomInfo,
    RejectedField,
    RejectedInfo,
)
from zerotune.diagnose.signals import config, frames, memory, nccl
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


def _hf_auto(rej: Rejection) -> FieldError | None:
    """The field holding transformers' fractional "auto" prefetch bucket (signals.config.hf_auto_fraction)."""
    return next(
        (
            f
            for f in rej.fields
            if f.field in ("stage3_prefetch_bucket_size", "prefetch_bucket_size", "")
            and config.hf_auto_fraction(f.value)
        ),
        None,
    )


def _rejected_info(rej: Rejection) -> RejectedInfo:
    return RejectedInfo(
        model=rej.model,
        kind=rej.kind,  # type: ignore[arg-type]
        fields=[RejectedField(field=f.field, message=f.message, value=f.value) for f in rej.fields],
    )


def _version_mismatch(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    version_rej = sorted(
        ((r, keys) for r in scan.rejections if (keys := config.known_zero_keys(r))),
        key=lambda rk: -len(rk[1]),
    )
    auto = [r for r in scan.rejections if _hf_auto(r) is not None]
    if not (scan.version_errors or version_rej or auto):
        return None
    lines = list(scan.version_errors)
    text = ""
    rejected = None
    if auto:
        rej = max(auto, key=lambda r: len(r.fields))
        value = _hf_auto(rej).value  # type: ignore[union-attr]
        lines = [rej.line, *lines]
        rejected = _rejected_info(rej)
        text = (
            f'DeepSpeed rejected stage3_prefetch_bucket_size = {value}: that is transformers\' "auto" value '
            "(0.9 × hidden_size²), a fraction in transformers releases before 4.46, and DeepSpeed 0.15 or newer "
            "accepts only integers. The installed transformers and DeepSpeed do not go together: upgrade "
            'transformers, pin DeepSpeed below 0.15, or write an integer instead of "auto".'
        )
    if version_rej and not auto:
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
            "The libraries installed together do not match: a version check failed (e.g. the CUDA toolkit "
            "differs from the one torch was built with), or one library uses an API (an attribute, a keyword, "
            "a module) that the installed release of another does not have. Align the versions the message "
            "names (the releases the training framework pins)."
        )
    versions = ", ".join(
        f"{name.replace('_version', '')} {scan.facts[name].value}"
        for name in ("deepspeed_version", "torch_version", "cuda_version", "transformers_version")
        if name in scan.facts
    )
    if versions:
        text += f" The log states {versions}."
    return Diagnosis(
        cause="version_mismatch",
        title="Version mismatch",
        explanation=text,
        evidence=_evs(lines),
        line=min(line.number for line in lines),
        rejected=rejected,
    )


def _config_rejected(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    other_rej = [r for r in scan.rejections if not config.known_zero_keys(r) and _hf_auto(r) is None]
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
        line=min(r.line.number for r in other_rej),
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
    if oom.disguised:
        text = (
            'cuBLAS could not create its handle (CUBLAS_STATUS_NOT_INITIALIZED / "Fail to create cublas '
            "handle\") at the first matrix multiply: the GPU had no memory left for cuBLAS's workspace. "
            "This is a GPU out-of-memory that does not say so."
        )
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
        line=min(o.line.number for o in scan.ooms),
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
        line=scan.aio_errors[0].number,
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
        line=line.number,
    )


def _host_killed(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    sigkill = [k for k in scan.kills if k.signal == 9]
    launcher = [k for k in scan.kills if k.signal is None]
    memory_signs = bool(scan.offload_hints or scan.host_memory or offload_configured)
    silent = not (scan.exceptions or scan.tracebacks)
    if not (sigkill or (launcher and (memory_signs or silent))):
        # a rank that dies without a Python traceback was killed from outside: the OOM killer
        return None
    first_kill = min(k.line.number for k in sigkill + launcher)
    if not scan.host_memory and _failed_before(scan, first_kill):
        # a rank failed on its own first (an exception, exit code 1): the SIGKILLs are the launcher's
        # sigkill_handler ending the other ranks, not the kernel's OOM killer
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
        cause="host_oom",
        title="Host RAM exhausted (OOM killer)",
        explanation=text,
        evidence=_evs(lines),
        line=first_kill,
    )


def _failed_before(scan: Scan, line: int) -> bool:
    """Whether a Python exception, or an exit that is not SIGKILL, comes before `line`."""
    if any(e.number < line for e in scan.exceptions):
        return True
    return any(e.line.number < line and e.kind == "exit" and e.value not in (-9, 9, 137) for e in scan.exits)


# ---- collectives ----------------------------------------------------------------------------------------------


def _nccl_desync(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    ds = nccl.desync(scan)
    desync_lines = [c.line for c in scan.collectives if c.kind == "desync"]
    split = nccl.split_collective(scan)
    if split is not None:
        seq, calls = split
        ranks = sorted({c.rank for c in calls if c.rank is not None})
        shown = "; ".join(
            f"rank {c.rank if c.rank is not None else '?'}: {c.op or '?'} of {c.numel:,} elements"
            if c.numel is not None
            else f"rank {c.rank if c.rank is not None else '?'}: {c.op or '?'}"
            for c in sorted(calls, key=lambda c: (c.rank is None, c.rank or 0))[:8]
        )
        return Diagnosis(
            cause="nccl_desync",
            title="Ranks in different collectives",
            explanation=(
                f"At collective #{seq} the ranks were not in the same call ({shown}): each waits for a "
                "partner that is in another collective, until the watchdog fires. The ranks took different "
                "code paths; under ZeRO-3 the usual one is a mixture-of-experts layer whose experts are "
                "gathered only on the ranks whose tokens were routed to them."
            ),
            evidence=_evs([c.line for c in calls]),
            collective=CollectiveInfo(kind="desync", seq=seq, ranks=ranks),
            line=min(c.line.number for c in calls),
        )
    if not (ds or desync_lines):
        return None
    ranks = (
        ds[0]
        if ds
        else sorted({c.rank for c in scan.collectives if c.kind == "desync" and c.rank is not None})
    )
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
        line=min(line.number for line in (ds[1] if ds else []) + desync_lines),
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
        line=min(t.line.number for t in timeouts),
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
        line=min(e.line.number for e in errors),
    )


def _nccl_warned(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """A failed run nothing else explains, with NCCL WARN lines: what NCCL reported is the lead."""
    warns = [c for c in scan.collectives if c.kind == "warn"]
    if not warns or not (scan.exceptions or scan.tracebacks or scan.exits or scan.kills):
        return None
    return Diagnosis(
        cause="nccl_error",
        title="NCCL warned before the run failed",
        explanation=(
            "The run failed without a message zerotune recognises, and NCCL printed warnings (NCCL WARN) "
            "first: what NCCL reports there (a CUDA call, a transport, shared memory) is the likely cause."
        ),
        evidence=_evs([w.line for w in warns] + scan.exceptions[:1]),
        collective=CollectiveInfo(kind="error", ranks=sorted({w.rank for w in warns if w.rank is not None})),
        line=warns[0].line.number,
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
        line=scan.breakdown_line.number if scan.breakdown_line else None,
    )


def _unclassified(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """A failed run nothing above explains: an exception, a non-zero exit, a kill. Never "no failure"."""
    failed = [k.line for k in scan.kills] + [e.line for e in scan.exits]
    if not (scan.tracebacks or scan.exceptions or failed):
        return None
    decisive: list[LogLine] = []
    if scan.exceptions:
        decisive.append(scan.exceptions[0])
        if scan.last_exception is not None:
            decisive.append(scan.last_exception)
    decisive += sorted(failed, key=lambda line: line.number)[:2]
    first = min(line.number for line in decisive) if decisive else None
    if scan.exceptions:
        what = f"the exception is {scan.exceptions[0].text.strip()[:200]!r}"
    elif failed:
        what = "a process exited with an error without a Python traceback in the log"
    else:
        what = "the log has a Python traceback but not its exception line"
    return Diagnosis(
        cause="unclassified",
        title="Failure not recognised",
        explanation=(
            f"The run failed but zerotune does not recognise why: {what}. The lines that look decisive are "
            "shown (the first exception is usually the cause, later ones its consequences)."
        ),
        evidence=_evs(sorted(decisive, key=lambda line: line.number)),
        line=first,
    )


_LOCATED_TEXT: dict[str, str] = {
    "op_build": "while torch compiled or loaded a DeepSpeed op (torch.utils.cpp_extension / op_builder)",
    "nvme_aio": "in DeepSpeed's NVMe swapping (swap_tensor / async_io)",
    "checkpoint": "while a checkpoint was saved, loaded or converted",
    "zero3_param": "in ZeRO-3's parameter partitioning or gathering",
    "config_rejected": "while DeepSpeed read its config",
    "version_mismatch": "in a library's version or import check (an installed package of another release)",
    "nccl_error": "in a collective (torch.distributed / deepspeed.comm)",
}
"""What the failure's place says, per family of signals.frames."""


def _located(cause: CauseName) -> Callable[[Scan, bool], Diagnosis | None]:
    """A failed run no message explains, diagnosed by where it failed (signals.frames.located): the
    module of its deepest traceback frame of a known family, else its exception type."""

    def diagnose(scan: Scan, offload_configured: bool) -> Diagnosis | None:
        where = frames.located(scan)
        if where is None or where.kind != cause:
            return None
        lines = [where.line] + scan.exceptions[:1]
        by = "exception type" if where.value == "exception" else "traceback frame"
        return Diagnosis(
            cause=cause,
            title=f"Failure located {_LOCATED_TEXT[cause].split(' (')[0]}",
            explanation=(
                f"No message in the log names the failure, but its {by} places it {_LOCATED_TEXT[cause]}. "
                "The evidence shows the frame and the first exception; the fix is that cause's usual one."
            ),
            evidence=_evs(sorted(lines, key=lambda line: line.number)),
            line=where.line.number,
        )

    return diagnose


# ---- causes from the environment and the script ------------------------------------------------------------

_OP_TEXT = "a DeepSpeed C++/CUDA op"


def _op_build(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.build_errors:
        return None
    ops = sorted({str(e.value) for e in scan.build_errors if e.value})
    named = ", ".join(ops) if ops else _OP_TEXT
    versions = ", ".join(
        f"{n.replace('_version', '')} {scan.facts[n].value}"
        for n in ("deepspeed_version", "torch_version", "cuda_version")
        if n in scan.facts
    )
    return Diagnosis(
        cause="op_build",
        title=f"DeepSpeed op failed to build or load ({named})",
        explanation=(
            f"DeepSpeed compiles its ops at first use (JIT, ninja) unless they were prebuilt: {named} could not "
            "be compiled or loaded. The usual reasons are a CUDA toolkit (nvcc, CUDA_HOME) missing or different "
            "from the one torch was built with, a missing compiler or ninja, or a stale build in "
            "~/.cache/torch_extensions." + (f" The log states {versions}." if versions else "")
        ),
        evidence=_evs([e.line for e in scan.build_errors]),
        line=scan.build_errors[0].line.number,
    )


MIN_LOSS_SCALE = 1.0
"""DeepSpeed's default fp16 `min_loss_scale` (deepspeed/runtime/precision_config.py at 0.19.8): a
dynamic scale reduced to it cannot go lower, so the next overflow ends the run."""


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


def _fp16_overflow_seen(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """Overflow (skipped-step) messages only, the scale still above its floor: normal while the scaler
    calibrates at the start of an fp16 run, a cause when nothing else in the log explains the problem."""
    overflows = [e for e in scan.fp16 if e.kind == "overflow"]
    if not overflows or _fp16_overflow(scan, offload_configured) is not None:
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
        evidence=_evs([e.line for e in overflows]),
        line=overflows[0].line.number,
    )


def _socket_transport(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.nccl_transport:
        return None
    return Diagnosis(
        cause="slow",
        title="NCCL runs over TCP sockets",
        explanation=(
            "NCCL found no InfiniBand/RoCE device and uses TCP sockets for the traffic between nodes: "
            "a multi-node run is then limited by the Ethernet link and scales poorly."
        ),
        evidence=_evs(scan.nccl_transport),
        line=scan.nccl_transport[0].number,
    )


def _fp16_overflow(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    at_min = [e for e in scan.fp16 if e.kind == "at_minimum"]
    nan = [e for e in scan.fp16 if e.kind == "nan_loss"]
    floor = [
        e
        for e in scan.fp16
        if e.kind == "overflow" and e.value is not None and float(e.value) <= MIN_LOSS_SCALE
    ]
    if _bf16_configured(scan):
        nan = []  # a NaN loss under bf16 is not a loss-scale failure
    if not (at_min or nan or floor):
        return None
    events = at_min + floor + nan
    parts = []
    if at_min:
        parts.append("the loss scale reached its minimum and DeepSpeed stopped the run")
    if floor:
        parts.append(f"the dynamic loss scale was driven down to {float(floor[0].value):g}")  # type: ignore[arg-type]
    if nan:
        parts.append(f"the loss became {nan[0].value}")
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
        evidence=_evs([e.line for e in sorted(events, key=lambda e: e.line.number)]),
        line=min(e.line.number for e in events),
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
    "convert": (
        "Converting the ZeRO checkpoint (zero_to_fp32) failed: the per-rank files of one save are "
        "incomplete, mixed with another save, or from another layout."
    ),
    "files_missing": "A ZeRO checkpoint file (per-rank model or optimizer states) is missing.",
    "unreadable": (
        "A saved model file cannot be read back: it is not a complete weight file (under ZeRO-3 a model "
        "saved without gathering its parameters, or a save cut short)."
    ),
    "exception": "An exception was raised while saving or loading a checkpoint.",
}


def _checkpoint(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.checkpoint_errors:
        return None
    kinds = {e.kind: e for e in scan.checkpoint_errors}
    main = next(kinds[k] for k in _CHECKPOINT_TEXT if k in kinds)
    return Diagnosis(
        cause="checkpoint",
        title="Checkpoint save/load failed",
        explanation=_CHECKPOINT_TEXT[main.kind].format(value=main.value),
        evidence=_evs([e.line for e in scan.checkpoint_errors]),
        line=scan.checkpoint_errors[0].line.number,
    )


def _zero3_param(scan: Scan, offload_configured: bool) -> Diagnosis | None:
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
        evidence=_evs([e.line for e in scan.zero3_errors]),
        line=scan.zero3_errors[0].line.number,
    )


def _client_optimizer(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.client_optimizer:
        return None
    return Diagnosis(
        cause="client_optimizer_offload",
        title="ZeRO-Offload refused a client optimizer",
        explanation=(
            "ZeRO-Offload runs the optimizer step on the CPU, and DeepSpeed refuses an optimizer built by the "
            "script (a torch or transformers AdamW): only its DeepSpeedCPUAdam is fast there. Name the "
            "optimizer in the DeepSpeed config, or allow the client optimizer explicitly."
        ),
        evidence=_evs(scan.client_optimizer),
        line=scan.client_optimizer[0].number,
    )


_HANG_TEXT = {
    "barrier_timeout": (
        "The ranks never all arrived at the start-up rendezvous/store barrier: one rank is stuck before it "
        "(loading, an op build waiting on a lock) or cannot reach the master address/port."
    ),
    "interrupted": "The job was stopped by hand (Ctrl-C / SIGINT) after it stopped making progress.",
    "py_spy": "A py-spy (or faulthandler) dump of a stuck process: the frames show where it waits.",
    "trace_cache": (
        "ZeRO-3 invalidated its parameter-prefetch trace: the modules ran in another order than in the "
        "previous step (data-dependent control flow, a loop whose length depends on the sample). Ranks that "
        "take different paths issue different parameter gathers and wait on each other forever."
    ),
    "stopped_in_startup": (
        "The log ends during start-up (the last lines load ops or initialise the process group) with no "
        "step and no error after them: the job hung at init."
    ),
}


def _hang(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    hangs = scan.hangs
    if any(c.kind == "timeout" for c in scan.collectives):
        # a hang is a stop *without* a collective timeout: once the watchdog fired, the timeout is the
        # failure, and a trace-cache warning or a py-spy dump before it only says where ranks waited
        hangs = [e for e in hangs if e.kind == "barrier_timeout"]
    if not hangs:
        return None
    kind = next(k for k in _HANG_TEXT if any(e.kind == k for e in hangs))
    return Diagnosis(
        cause="hang",
        title="Job hung (no progress, no collective timeout)",
        explanation=_HANG_TEXT[kind],
        evidence=_evs([e.line for e in hangs]),
        line=hangs[0].line.number,
    )


def _stopped_in_startup(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """A log with no failure at all whose last DeepSpeed lines are start-up lines: it hung at init."""
    init = scan.init_line
    if init is None or (scan.progress_line is not None and scan.progress_line.number > init.number):
        return None
    return Diagnosis(
        cause="hang",
        title="Job hung at start-up",
        explanation=_HANG_TEXT["stopped_in_startup"]
        + " If the run is still going (a long op build or model load), this is not a failure yet.",
        evidence=_evs([init]),
        line=init.number,
    )


# ---- the table --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CauseRule:
    cause: CauseName
    signals: tuple[str, ...]
    """the signals (Scan fields) that can imply it: with none of them in the log, it is not checked"""
    diagnose: Callable[[Scan, bool], Diagnosis | None]
    """(scan, offload configured) -> the diagnosis with its explanation and fix text, or None"""
    consequence: bool = False
    """what other failures leave behind: primary only when no root cause is in the log"""
    fallback: bool = False
    """checked only when no other row found a cause (the fallback rows come last)"""


CAUSES: tuple[CauseRule, ...] = (
    CauseRule("version_mismatch", ("version_errors", "rejections"), _version_mismatch),
    CauseRule("op_build", ("build_errors",), _op_build),
    CauseRule("config_rejected", ("rejections",), _config_rejected),
    CauseRule("client_optimizer_offload", ("client_optimizer",), _client_optimizer),
    CauseRule("gpu_oom", ("ooms",), _gpu_oom),
    CauseRule("nvme_aio", ("aio_errors",), _nvme_aio),
    CauseRule("zero3_param", ("zero3_errors",), _zero3_param),
    CauseRule("checkpoint", ("checkpoint_errors",), _checkpoint),
    CauseRule("fp16_overflow", ("fp16",), _fp16_overflow),
    CauseRule("nccl_desync", ("fingerprints", "collectives"), _nccl_desync),
    CauseRule("host_oom", ("cpu_alloc_failures",), _host_alloc),
    CauseRule("host_oom", ("kills",), _host_killed, consequence=True),
    CauseRule("nccl_timeout", ("collectives",), _nccl_timeout, consequence=True),
    CauseRule("nccl_error", ("collectives",), _nccl_error, consequence=True),
    CauseRule("hang", ("hangs",), _hang, consequence=True),
    CauseRule("slow", ("breakdown",), _slow, consequence=True),
    CauseRule("slow", ("nccl_transport",), _socket_transport, consequence=True),
    CauseRule("fp16_overflow", ("fp16",), _fp16_overflow_seen, consequence=True),
    *(CauseRule(cause, ("frame_causes",), _located(cause), fallback=True) for cause in _LOCATED_TEXT),
    CauseRule("nccl_error", ("collectives",), _nccl_warned, fallback=True),
    CauseRule(
        "unclassified", ("tracebacks", "last_exception", "exits", "kills"), _unclassified, fallback=True
    ),
    CauseRule("hang", ("init_line",), _stopped_in_startup, fallback=True),
)
"""Most specific first: the tie-break between causes shown by the same line."""


def classify(scan: Scan, *, offload_configured: bool = False) -> Diagnosis:
    found: list[tuple[bool, int, int, Diagnosis]] = []
    for index, rule in enumerate(CAUSES):
        if (rule.fallback and found) or not any(getattr(scan, name) for name in rule.signals):
            continue
        diagnosis = rule.diagnose(scan, offload_configured)
        if diagnosis is not None:
            if diagnosis.line is None and diagnosis.evidence:
                diagnosis.line = min(e.line for e in diagnosis.evidence)
            line = diagnosis.line if diagnosis.line is not None else scan.lines + 1
            found.append((rule.consequence, line, index, diagnosis))
    if not found:
        return Diagnosis(
            cause="none",
            title="No failure found",
            explanation="The log shows no failure zerotune recognises.",
        )
    found.sort(key=lambda f: (f[0], f[1], f[2]))
    primary = found[0][3]
    by_line = sorted(found[1:], key=lambda f: (f[1], f[2]))
    seen: list[CauseName] = []
    for _, _, _, d in by_line:
        if d.cause != primary.cause and d.cause not in seen:
            seen.append(d.cause)
    primary.also_seen = seen
    return primary
