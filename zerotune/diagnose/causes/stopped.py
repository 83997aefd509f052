"""Runs that stopped without a message naming why: a hang (stopped by hand, a py-spy dump, a barrier
timeout, a log that ends in start-up), a failure placed by where it happened (signals.frames), and
the unrecognised failure, which is never "no failure"."""

from __future__ import annotations

from collections.abc import Callable

from zerotune.diagnose.causes.evidence import evidence
from zerotune.diagnose.records import LogLine, Scan
from zerotune.diagnose.report import Cause as CauseName
from zerotune.diagnose.report import (
    Diagnosis,
)
from zerotune.diagnose.signals import frames
from zerotune.diagnose.signals.process import LOOP_STARTING

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
    "watchdog_stuck": (
        "torch's NCCL heartbeat monitor found the watchdog thread itself stuck (no collective could time out): "
        "a rank is blocked inside a CUDA/NCCL call or another thread holds the GIL. Dump every rank's stack "
        "(py-spy dump) to see where; with CPU offload, check the host is not out of memory or swapping."
    ),
    "stopped_in_startup": (
        "The log ends during start-up (the last lines load ops, initialise the process group, or start the "
        "training loop's progress bar at 0) with no step and no error after them: the job hung before its "
        "first step."
    ),
}


def hang(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    hangs = scan.hangs
    if any(c.kind == "timeout" for c in scan.collectives):
        # a hang is a stop *without* a collective timeout: once the watchdog fired, the timeout is the
        # failure, and a trace-cache warning or a py-spy dump before it only says where ranks waited
        hangs = [e for e in hangs if e.kind == "barrier_timeout"]
    if all(e.kind == "trace_cache" for e in hangs):
        # ZeRO-3 prints the trace-cache warning whenever the module order changes between steps (generation
        # in GRPO/PPO, data-dependent branches) and runs on: alone it is no stop (om-ai-lab/VLM-R1#304,
        # Liuziyu77/Visual-RFT#97, StarsfieldAI/R1-V#131 train through it). It only says where ranks wait
        # once something shows the job stopped (Ctrl-C, a py-spy dump, a barrier timeout).
        return None
    kind = next(k for k in _HANG_TEXT if any(e.kind == k for e in hangs))
    return Diagnosis(
        cause="hang",
        title="Job hung (no progress, no collective timeout)",
        explanation=_HANG_TEXT[kind],
        evidence=evidence([e.line for e in hangs]),
        line=hangs[0].line.number,
    )


def stopped_in_startup(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """A log with no failure at all whose last DeepSpeed lines are start-up lines: it hung at init."""
    init = scan.init_line
    if init is None or (scan.progress_line is not None and scan.progress_line.number > init.number):
        return None
    if scan.progress_line is not None and LOOP_STARTING.search(init.text):
        return None  # a bar at 0 after training steps is an evaluation or a new epoch starting, not start-up
    return Diagnosis(
        cause="hang",
        title="Job hung at start-up",
        explanation=_HANG_TEXT["stopped_in_startup"]
        + " If the run is still going (a long op build or model load), this is not a failure yet.",
        evidence=evidence([init]),
        line=init.number,
    )


LOCATED_TEXT: dict[str, str] = {
    "op_build": "while torch compiled or loaded a DeepSpeed op (torch.utils.cpp_extension / op_builder)",
    "nvme_aio": "in DeepSpeed's NVMe swapping (swap_tensor / async_io)",
    "fp16_overflow": "in fp16 loss scaling (the loss scaler's update after an overflow)",
    "checkpoint": "while a checkpoint was saved, loaded or converted",
    "zero3_param": "in ZeRO-3's parameter partitioning or gathering",
    "config_rejected": "in a check of DeepSpeed's config (an option, or a combination it does not implement)",
    "version_mismatch": "in a library's version or import check (an installed package of another release)",
    "nccl_error": "in a collective (torch.distributed / deepspeed.comm)",
}
"""What the failure's place says, per family of signals.frames."""


def finished_after(scan: Scan) -> LogLine | None:
    """HF Trainer's final metrics (`'train_runtime': ...`, logged once `train()` has returned:
    transformers Trainer `_inner_training_loop`, `speed_metrics("train", ...)`) after every traceback,
    exception, kill and non-zero exit in the log: the run finished, so an earlier traceback was handled
    (a logger that failed to connect, a retried download) and is not the run's failure."""
    done = scan.facts.get("train_runtime_s")
    if done is None:
        return None
    problems = [k.line for k in scan.kills] + [e.line for e in scan.exits] + list(scan.exceptions)
    problems += [line for line in (scan.last_exception, scan.last_frame) if line is not None]
    if any(line.number > done.line.number for line in problems):
        return None
    return done.line


def located(cause: CauseName) -> Callable[[Scan, bool], Diagnosis | None]:
    """A failed run no message explains, diagnosed by where it failed (signals.frames.located): the
    module of its deepest traceback frame of a known family, else its exception type."""

    def diagnose(scan: Scan, offload_configured: bool) -> Diagnosis | None:
        where = frames.located(scan)
        if where is None or where.kind != cause or finished_after(scan) is not None:
            return None
        lines = [where.line] + scan.exceptions[:1]
        by = {"exception": "exception type", "raised": "raise site", "import": "last frame, an import statement,"}.get(
            str(where.value), "traceback frame"
        )
        return Diagnosis(
            cause=cause,
            title=f"Failure located {LOCATED_TEXT[cause].split(' (')[0]}",
            explanation=(
                f"No message in the log names the failure, but its {by} places it {LOCATED_TEXT[cause]}. "
                "The evidence shows that line (and the first exception, when the log has one); the fix is that "
                "cause's usual one."
            ),
            evidence=evidence(sorted(lines, key=lambda line: line.number)),
            line=where.line.number,
        )

    return diagnose


def ended_badly(scan: Scan) -> bool:
    """The run failed (an exception, a traceback or its frames, a non-zero exit, a kill) and did not finish
    after it."""
    signs = scan.tracebacks or scan.exceptions or scan.kills or scan.exits or scan.last_frame
    return bool(signs) and finished_after(scan) is None


OLD_COMPILER_TITLE = "Op build with a compiler older than GCC 5"


def old_compiler(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """A failed run no message explains whose log shows torch warning that the compiler is older than GCC 5
    (signals.ops.MIN_GCC_MAJOR): the JIT build of a DeepSpeed op it warned about is what failed."""
    if scan.old_compiler is None or not ended_badly(scan):
        return None
    compiler, line = scan.old_compiler
    first = scan.exceptions[:1] or [k.line for k in scan.kills][:1] or [e.line for e in scan.exits][:1]
    return Diagnosis(
        cause="op_build",
        title=OLD_COMPILER_TITLE,
        explanation=(
            f"torch warned that the C++ compiler ({compiler}) is older than GCC 5, the oldest it supports for "
            "building extensions, and the run then failed with no other cause named: the JIT build of a DeepSpeed "
            "op (fused_adam, cpu_adam, ...) cannot compile PyTorch's C++14/17 headers with it."
        ),
        evidence=evidence(sorted([line, *first], key=lambda x: x.number)),
        line=line.number,
    )


def unclassified(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """A failed run nothing above explains: an exception, a non-zero exit, a kill. Never "no failure"."""
    failed = [k.line for k in scan.kills] + [e.line for e in scan.exits]
    if not (scan.tracebacks or scan.exceptions or failed or scan.last_frame) or finished_after(scan) is not None:
        return None
    decisive: list[LogLine] = []
    if scan.exceptions:
        decisive.append(scan.exceptions[0])
        if scan.last_exception is not None:
            decisive.append(scan.last_exception)
    decisive += sorted(failed, key=lambda line: line.number)[:2]
    if not decisive and scan.last_frame is not None:
        decisive.append(scan.last_frame)  # a traceback cut before its header and its exception line
    first = min(line.number for line in decisive) if decisive else None
    if scan.exceptions:
        what = f"the exception is {scan.exceptions[0].text.strip()[:200]!r}"
    elif failed:
        what = "a process exited with an error without a Python traceback in the log"
    elif scan.tracebacks:
        what = "the log has a Python traceback but not its exception line"
    else:
        what = "the log has Python traceback frames but neither their header nor their exception line"
    return Diagnosis(
        cause="unclassified",
        title="Failure not recognised",
        explanation=(
            f"The run failed but zerotune does not recognise why: {what}. The lines that look decisive are "
            "shown (the first exception is usually the cause, later ones its consequences)."
        ),
        evidence=evidence(sorted(decisive, key=lambda line: line.number)),
        line=first,
    )
