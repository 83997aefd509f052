"""Collective benchmark arithmetic, torch-free: the size sweep, per-size rows in nccl-tests' units,
the large-message average and the alpha-beta fit per collective.

Definitions follow NVIDIA/nccl-tests doc/PERFORMANCE.md (through zerotune.collectives): S is the
*total* array in bytes (for all_gather and reduce_scatter the gathered / unreduced size, count * n),
algbw = S / t and busbw = algbw * factor(op, n). A row's time is the median over iterations of the
slowest rank's time for that iteration: a collective is done when its last rank is.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from zerotune.collectives import Collective, algbw, busbw, fit_alpha_beta
from zerotune.schema.hardware import CollectivePerf
from zerotune.units import DTYPE_BYTES, GB

SWEPT: tuple[Collective, ...] = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
"""The collectives ZeRO uses: all_gather (stage 3 fetch, stage 1/2 param update), reduce_scatter
(stage 2/3 gradients), all_reduce (stage 0/1 gradients), all_to_all (MoE)."""

LARGE_SIZES = 3
"""How many of a sweep's largest sizes count as "large messages" for the average busbw."""


def size_sweep(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from min_bytes to max_bytes inclusive (nccl-tests' `-f 2` stepping)."""
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError(f"bad size range {min_bytes}..{max_bytes}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def element_count(size_bytes: int, n: int, dtype: str) -> int:
    """Elements of the total array for a requested size, rounded down so every rank gets an equal
    whole share (all_gather / reduce_scatter / all_to_all split the array n ways). At least n."""
    elements = size_bytes // DTYPE_BYTES[dtype]
    return max(n, elements - elements % n)


def slowest_rank_times(per_rank: Sequence[Sequence[float]]) -> list[float]:
    """Per-iteration completion time: the maximum over ranks of each iteration's time."""
    if not per_rank or any(len(times) != len(per_rank[0]) for times in per_rank):
        raise ValueError("every rank must report the same number of iterations")
    return [max(column) for column in zip(*per_rank, strict=True)]


@dataclass(frozen=True)
class SweepRow:
    """One line of the table, in nccl-tests' units: size (B), count (elements), time (us), GB/s."""

    op: Collective
    size_bytes: int
    count: int
    dtype: str
    redop: str
    time_us: float
    spread_pct: float
    """(max - min) / median of the iteration times, in percent: how noisy this size was."""
    algbw_GBps: float
    busbw_GBps: float
    wrong: int
    """Elements that differ from the expected result (nccl-tests' #wrong); 0 means correct."""


def make_row(
    op: Collective, count: int, dtype: str, n: int, per_rank_times_s: Sequence[Sequence[float]], wrong: int
) -> SweepRow:
    times = slowest_rank_times(per_rank_times_s)
    median = statistics.median(times)
    size = count * DTYPE_BYTES[dtype]
    return SweepRow(
        op=op,
        size_bytes=size,
        count=count,
        dtype=dtype,
        redop="sum" if op in ("all_reduce", "reduce_scatter") else "none",
        time_us=median * 1e6,
        spread_pct=(max(times) - min(times)) / median * 100 if median > 0 else 0.0,
        algbw_GBps=algbw(size, median) / GB if median > 0 else 0.0,
        busbw_GBps=busbw(op, size, median, n) / GB if median > 0 else 0.0,
        wrong=wrong,
    )


def large_message_busbw(rows: Sequence[SweepRow]) -> float:
    """Average busbw (GB/s) of the LARGE_SIZES largest sizes of one collective's sweep."""
    if not rows:
        raise ValueError("no rows")
    largest = sorted(rows, key=lambda r: r.size_bytes)[-LARGE_SIZES:]
    return sum(r.busbw_GBps for r in largest) / len(largest)


def average_large_busbw(rows_by_op: dict[Collective, Sequence[SweepRow]]) -> float:
    """The probe's headline number (what --min-busbw compares with): the mean over collectives of
    each collective's large-message busbw, in GB/s. nccl-tests' "Avg bus bandwidth" averages every
    size, which small latency-bound sizes drag down; only large messages say what the link moves."""
    values = [large_message_busbw(rows) for rows in rows_by_op.values() if rows]
    if not values:
        raise ValueError("no collective was measured")
    return sum(values) / len(values)


def collective_perf(op: Collective, n: int, rows: Sequence[SweepRow], source: str) -> CollectivePerf:
    """Fitted alpha-beta summary plus the measured curve for one collective on one link class.

    busbw_Bps is the fitted asymptotic bandwidth; when times do not grow with size (a sweep too
    small to leave the latency regime) the fit gives inf and the largest measured busbw is used.
    """
    ordered = sorted(rows, key=lambda r: r.size_bytes)
    alpha, beta_bw = fit_alpha_beta(op, n, [(r.size_bytes, r.time_us * 1e-6) for r in ordered])
    measured_max = max(r.busbw_GBps for r in ordered) * GB
    bw = beta_bw if beta_bw != float("inf") else measured_max
    return CollectivePerf(
        alpha_s=alpha,
        busbw_Bps=bw,
        curve=[(float(r.size_bytes), r.busbw_GBps * GB) for r in ordered],
        source=source,
    )
