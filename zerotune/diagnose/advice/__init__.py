"""The change that follows from each cause, when the memory model cannot check one (no --model or
--config for a GPU OOM) or the cause is not about memory at all. Each answer names the keys to
change and why, and says what to pass for a checked (exact) fix.

Config keys are written as dotted paths (`zero_optimization.stage`); changes outside the DeepSpeed
JSON are in parentheses: `(script) ...`, `(environment) ...`, `(launcher) ...`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from zerotune.diagnose.advice import memory, runtime, setup, training
from zerotune.diagnose.explain import Job
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Change, Diagnosis, FixOut

ADVICE: dict[str, Callable[[Diagnosis, Scan, Job], FixOut]] = {
    "gpu_oom": memory.gpu_oom,
    "host_oom": memory.host_oom,
    "nvme_aio": setup.nvme_aio,
    "nccl_timeout": runtime.nccl_timeout,
    "nccl_desync": runtime.nccl_desync,
    "nccl_error": runtime.nccl_error,
    "config_rejected": setup.config_rejected,
    "version_mismatch": setup.version_mismatch,
    "op_build": setup.op_build,
    "fp16_overflow": training.fp16_overflow,
    "checkpoint": training.checkpoint,
    "zero3_param": training.zero3_param,
    "client_optimizer_offload": setup.client_optimizer,
    "port_in_use": setup.port_in_use,
    "hang": runtime.hang,
    "slow": runtime.slow,
    "unclassified": runtime.unclassified,
}
"""One entry per cause but `none`."""


VENDOR_NEAR = 10
"""Lines after the diagnosis's first evidence line within which a runtime's own `Solution:` belongs to it
(CANN prints its code, reason and solution right under the failing call: 2-4 lines in LlamaFactory#3839, #5322)."""


def advise(d: Diagnosis, scan: Scan, job: Job) -> FixOut | None:
    entry = ADVICE.get(d.cause)
    fix = None if entry is None else entry(d, scan, job)
    first = min((e.line for e in d.evidence), default=None)
    near = [
        (code, line)
        for code, line in scan.vendor_solutions
        if first is not None and first <= line.number <= first + VENDOR_NEAR
    ]
    if fix is not None and near:
        code, line = near[0]
        fix.text += f" The Ascend runtime's own advice (CANN {code}, log:{line.number}): {line.text.strip()}"
    return fix


def apply_changes(config: dict[str, Any], changes: list[Change]) -> dict[str, Any] | None:
    """`config` with the changes to DeepSpeed keys made, or None when none of them is a config key
    or a value is a placeholder ("half")."""
    out = copy.deepcopy(config)
    applied = False
    for c in changes:
        if c.key.startswith("(") or (isinstance(c.new, str) and c.new not in ("auto", "cpu", "nvme", "none")):
            continue
        node = out
        *parents, leaf = c.key.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[leaf] = c.new
        applied = True
    return out if applied else None
