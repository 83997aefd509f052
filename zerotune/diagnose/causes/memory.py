"""Memory causes: GPU out of memory (with the allocator's numbers and the phase), host RAM (torch's
CPU allocator, the OOM killer's SIGKILL), NVMe offload's async I/O."""

from __future__ import annotations

import re

from zerotune.diagnose.causes.evidence import evidence
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import (
    Diagnosis,
    OomInfo,
)
from zerotune.diagnose.signals import memory
from zerotune.units import fmt_bytes

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


def gpu_oom(scan: Scan, offload_configured: bool) -> Diagnosis | None:
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
        evidence=evidence([oom.line] + ([oom.phase_line] if oom.phase_line else [])),
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


def nvme_aio(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.aio_errors and scan.swap_refusals and scan.nvme_swap:
        refused = scan.swap_refusals[0]
        return Diagnosis(
            cause="nvme_aio",
            title="NVMe offload folder not writable",
            explanation=(
                "The file system refused a write while DeepSpeed's NVMe offload is set up: the swappers create "
                "their swap folders under nvme_path at start-up, so nvme_path must be a folder on a local "
                "NVMe drive that the training user can write (create it and chown it, or point nvme_path "
                "elsewhere)."
            ),
            evidence=evidence([refused, scan.nvme_swap[0]]),
            line=refused.number,
        )
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
        evidence=evidence(scan.aio_errors),
        line=scan.aio_errors[0].number,
    )


def host_alloc(scan: Scan, offload_configured: bool) -> Diagnosis | None:
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
        evidence=evidence([line] + [k.line for k in scan.kills]),
        line=line.number,
    )


def host_shm(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """A rank dead of SIGBUS: shared memory (/dev/shm) ran out, not the OOM killer."""
    sigbus = [k for k in scan.kills if k.signal == 7]
    if not sigbus:
        return None
    return Diagnosis(
        cause="host_oom",
        title="Shared memory (/dev/shm) exhausted (SIGBUS)",
        explanation=(
            "A process died of SIGBUS (exit -7, signal 7): it wrote to a memory-mapped page the system could "
            "not back, which in a training job is /dev/shm running full. Containers get 64 MB by default "
            "(Docker), and NCCL's intra-node buffers, DataLoader workers and checkpoint staging all use it; "
            "the host's RAM may be far from full."
        ),
        evidence=evidence([k.line for k in sigbus]),
        line=sigbus[0].line.number,
    )


def host_killed(scan: Scan, offload_configured: bool) -> Diagnosis | None:
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
        how = (
            "A rank was killed with SIGKILL (exit -9)."
            if sigkill
            else "The launcher ended the ranks with no Python error in the log: a rank was killed from outside."
        )
        text = (
            f"{how} The log shows no memory figures, but a kill from outside is almost always the kernel's "
            "OOM killer (host RAM: model loading on every rank, dataloader workers, offload); `dmesg` or the "
            "job scheduler's memory limit confirms it. A scheduler preemption or a manual kill look the same."
        )
    load = memory.loading_checkpoint_at(scan, first_kill)
    if load is not None:
        lines.insert(0, load)
        text += (
            f" It came while DeepSpeed loaded a checkpoint (line {load.number}): every rank reads its own "
            "optimizer-state file (fp32 master weights and moments) into host RAM at once."
        )
    if used is not None:
        text += f" DeepSpeed last reported host memory {used.value}% used (line {used.line.number})."
    return Diagnosis(
        cause="host_oom",
        title="Host RAM exhausted (OOM killer)",
        explanation=text,
        evidence=evidence(lines),
        line=first_kill,
    )


LAUNCHER_REPORT = "ChildFailedError"
"""torch elastic's exception in the launcher process (torch/distributed/elastic/multiprocessing/errors,
raised by launcher/api.py `launch_agent`): it reports that a worker failed, and the worker's own exit code
or signal follows in its summary, so it is not a rank failing on its own (SimpleTuner#333: exitcode -9)."""


WORKER_EXIT = re.compile(r"failed \(exitcode: -?\d+\) local_rank|exitcode\s+:\s+-?\d+|exits with return code = -?\d+")
"""The launcher's report of the worker whose failure ended the job: torch elastic's "failed (exitcode: 1)
local_rank: 1" and its summary's "exitcode : 1", DeepSpeed's "Process N exits with return code = 1". Both
launchers end the other workers first (elastic's "closing signal SIGTERM", DeepSpeed's sigkill_handler "Killing
subprocess") and report that worker's code after, so an exit of its own there (1: an uncaught Python exception)
shows a rank that failed by itself even after those kills (DeepSpeed PR 8148: a CheckpointError whose exception
line the post lacks, then elastic's SIGTERM and "exitcode: 1")."""


def _failed_before(scan: Scan, line: int) -> bool:
    """Whether a Python exception of a rank, or an exit that is not SIGKILL, comes before `line`, or the
    launcher reports the failed worker's own non-kill exit code (WORKER_EXIT) at any point."""
    if any(e.number < line and LAUNCHER_REPORT not in e.text for e in scan.exceptions):
        return True
    own = [e for e in scan.exits if e.kind == "exit" and e.value not in (-9, 9, 137)]
    return any(e.line.number < line or WORKER_EXIT.search(e.line.text) for e in own)


CACHE_FLUSH_TITLE = "GPU memory pressure: allocator cache flushes"


def cache_flushes(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """ZeRO-3's allocator cache-flush warnings: the job runs at the edge of GPU memory and pays a device-wide
    free-and-retry each time (a slow step, not a failure: ranked as a consequence)."""
    if not scan.cache_flushes:
        return None
    count = f"{scan.cache_flush_count} " if scan.cache_flush_count else ""
    return Diagnosis(
        cause="slow",
        title=CACHE_FLUSH_TITLE,
        explanation=(
            f"DeepSpeed reported {count}PyTorch allocator cache flushes on {len(scan.cache_flushes)} step(s): an "
            "allocation failed, the allocator released its cached blocks and retried, which synchronises the GPU "
            "and slows the step (DeepSpeed: detrimental to performance). The job runs at the edge of GPU memory."
        ),
        evidence=evidence(scan.cache_flushes),
        line=scan.cache_flushes[0].number,
    )
