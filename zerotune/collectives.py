"""Collective operations: nccl-tests' bandwidth definitions and a latency-bandwidth time model.

Definitions (NVIDIA/nccl-tests doc/PERFORMANCE.md), for n ranks and a message of S bytes, where
S is the *total* array (for all-gather and reduce-scatter, the gathered/unreduced size, count*n):

    algbw = S / t
    busbw = algbw * factor(op, n)
        all_reduce             2(n-1)/n
        all_gather             (n-1)/n
        reduce_scatter         (n-1)/n
        all_to_all             (n-1)/n
        broadcast, reduce      1

busbw is comparable with a link's peak whatever n is, so hardware profiles store busbw and a
time is recovered as t = alpha + S * factor / busbw (the alpha-beta or Hockney model).
Pure Python: used by the probe's metrics, the hardware catalog and the step-time model.
"""

from __future__ import annotations

import bisect
import math
from typing import Literal, get_args

Collective = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"]
COLLECTIVES: tuple[Collective, ...] = get_args(Collective)


def busbw_factor(op: Collective, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for `op` over `n` ranks."""
    if n < 1:
        raise ValueError(f"rank count must be >= 1, got {n}")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s."""
    return size_bytes / seconds


def busbw(op: Collective, size_bytes: float, seconds: float, n: int) -> float:
    """Bus bandwidth in bytes/s."""
    return algbw(size_bytes, seconds) * busbw_factor(op, n)


def alpha_beta_time(op: Collective, size_bytes: float, n: int, alpha_s: float, busbw_Bps: float) -> float:
    """Seconds for one collective of `size_bytes` (total array) under t = alpha + S*factor/busbw.

    One rank (n == 1) moves nothing: the call costs nothing.
    """
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return alpha_s + size_bytes * busbw_factor(op, n) / busbw_Bps


def interpolate_busbw(curve: list[tuple[float, float]], size_bytes: float) -> float:
    """busbw (bytes/s) at `size_bytes` from a measured (size, busbw) curve, log-log interpolated;
    clamped to the end points outside the measured range."""
    if not curve:
        raise ValueError("empty bandwidth curve")
    points = sorted(curve)
    sizes = [p[0] for p in points]
    if size_bytes <= sizes[0]:
        return points[0][1]
    if size_bytes >= sizes[-1]:
        return points[-1][1]
    i = bisect.bisect_right(sizes, size_bytes)
    (s0, b0), (s1, b1) = points[i - 1], points[i]
    w = (math.log(size_bytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
    return math.exp(math.log(b0) + w * (math.log(b1) - math.log(b0)))


def fit_alpha_beta(op: Collective, n: int, samples: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares fit of t = alpha + S*factor/busbw to (size_bytes, seconds) samples.

    Returns (alpha_s, busbw_Bps). alpha is clamped at >= 0; busbw is positive or inf when time
    does not grow with size.
    """
    if len(samples) < 2:
        raise ValueError("need at least two (size, time) samples to fit")
    f = busbw_factor(op, n)
    xs = [s * f for s, _ in samples]
    ys = [t for _, t in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    if slope <= 0:
        return max(min(ys), 0.0), math.inf
    alpha = my - slope * mx
    if alpha < 0:  # refit through the origin: a negative latency is not physical
        alpha = 0.0
        slope = sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return alpha, 1.0 / slope
