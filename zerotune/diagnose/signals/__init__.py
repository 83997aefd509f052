"""The log signals `diagnose` reasons on, one module per source. Each module's SIGNALS tuple is its
table; adding a signal is one entry there (and the Scan field it fills, zerotune.diagnose.records).

Line signals run in this order on every line the trigger stops on. The config module comes first:
its config dump claims the lines it reads (their JSON would otherwise read as facts); so does
the facts module's HF model config dump.
"""

from __future__ import annotations

from zerotune.diagnose.signals import (
    config,
    facts,
    frames,
    memory,
    nccl,
    ops,
    params,
    precision,
    process,
    timers,
)
from zerotune.diagnose.signals.signal import BlockSignal, Signal

LINE_SIGNALS: tuple[Signal, ...] = (
    *config.SIGNALS,
    *facts.SIGNALS,
    *process.SIGNALS,
    *memory.SIGNALS,
    *nccl.SIGNALS,
    *precision.SIGNALS,
    *params.SIGNALS,
    *ops.SIGNALS,
    *frames.SIGNALS,
)
BLOCK_SIGNALS: tuple[BlockSignal, ...] = (*timers.SIGNALS, *precision.BLOCK_SIGNALS)
NAMES = frozenset(s.name for s in (*LINE_SIGNALS, *BLOCK_SIGNALS))
"""Every signal name: the Scan fields a cause can read."""

__all__ = ["BLOCK_SIGNALS", "LINE_SIGNALS", "NAMES"]
