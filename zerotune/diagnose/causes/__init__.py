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

from zerotune.diagnose.causes import collectives, memory, setup, stopped, training
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Cause as CauseName
from zerotune.diagnose.report import Diagnosis


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
    CauseRule("version_mismatch", ("version_errors", "rejections"), setup.version_mismatch),
    CauseRule("op_build", ("build_errors",), setup.op_build),
    CauseRule("config_rejected", ("rejections",), setup.config_rejected),
    CauseRule("client_optimizer_offload", ("client_optimizer",), setup.client_optimizer),
    CauseRule("port_in_use", ("port_conflicts",), setup.port_in_use),
    CauseRule("gpu_oom", ("ooms",), memory.gpu_oom),
    CauseRule("nvme_aio", ("aio_errors", "swap_refusals"), memory.nvme_aio),
    CauseRule("zero3_param", ("zero3_errors",), training.zero3_param),
    CauseRule("checkpoint", ("checkpoint_errors",), training.checkpoint),
    CauseRule("fp16_overflow", ("fp16", "skipped_steps"), training.fp16_overflow),
    CauseRule("nccl_desync", ("fingerprints", "collectives"), collectives.nccl_desync),
    CauseRule("host_oom", ("cpu_alloc_failures",), memory.host_alloc),
    CauseRule("host_oom", ("kills",), memory.host_shm),
    CauseRule("host_oom", ("kills",), memory.host_killed, consequence=True),
    CauseRule("nccl_timeout", ("collectives",), collectives.nccl_timeout, consequence=True),
    CauseRule("nccl_error", ("collectives",), collectives.nccl_error, consequence=True),
    CauseRule("hang", ("hangs",), stopped.hang, consequence=True),
    CauseRule("slow", ("nccl_transport",), collectives.socket_transport, consequence=True),
    CauseRule("slow", ("cache_flushes",), memory.cache_flushes, consequence=True),
    CauseRule("fp16_overflow", ("fp16",), training.fp16_overflow_seen, consequence=True),
    *(
        CauseRule(cause, ("frame_causes", "last_frame"), stopped.located(cause), fallback=True)
        for cause in stopped.LOCATED_TEXT
    ),
    CauseRule("op_build", ("old_compiler",), stopped.old_compiler, fallback=True),
    CauseRule("nccl_error", ("collectives",), collectives.nccl_warned, fallback=True),
    CauseRule(
        "unclassified", ("tracebacks", "last_exception", "exits", "kills", "last_frame"), stopped.unclassified, fallback=True
    ),
    CauseRule("hang", ("init_line",), stopped.stopped_in_startup, fallback=True),
)
"""Most specific first: the tie-break between causes shown by the same line."""


def classify(scan: Scan, *, offload_configured: bool = False, judged: tuple[Diagnosis, ...] = ()) -> Diagnosis:
    """The primary cause and the others seen. `judged`: consequences the caller found against a model
    of the job (a slow step, training.slow), ranked as the table's consequence rows are."""
    found: list[tuple[bool, int, int, Diagnosis]] = [
        (True, d.line if d.line is not None else scan.lines + 1, len(CAUSES), d) for d in judged
    ]
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
        explanation = "The log shows no failure zerotune recognises."
        done = stopped.finished_after(scan)
        handled = scan.exceptions[0] if scan.exceptions else scan.last_frame
        if done is not None and handled is not None:
            what = "exception" if scan.exceptions else "traceback frame"
            explanation += (
                f" The {what} at log:{handled.number} did not stop it: the run finished after it "
                f"(log:{done.number}, HF Trainer's final metrics)."
            )
        return Diagnosis(cause="none", title="No failure found", explanation=explanation)
    found.sort(key=lambda f: (f[0], f[1], f[2]))
    primary = found[0][3]
    by_line = sorted(found[1:], key=lambda f: (f[1], f[2]))
    seen: list[CauseName] = []
    for _, _, _, d in by_line:
        if d.cause != primary.cause and d.cause not in seen:
            seen.append(d.cause)
    primary.also_seen = seen
    return primary
