"""Small least-squares solvers of the calibration fit (pure): a handful of unknowns, so exact
enumeration of the active bounds is affordable and simpler than an iterative solver."""

from __future__ import annotations

import itertools
import math


def solve(rows: list[list[float]], ys: list[float]) -> list[float] | None:
    """Least squares by the normal equations (Gaussian elimination); None when singular."""
    k = len(rows[0]) if rows else 0
    if k == 0:
        return []
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        scale = max(abs(a[i][i]) for i in range(k)) or 1.0
        if abs(a[pivot][col]) <= 1e-12 * scale:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        b[col], b[pivot] = b[pivot], b[col]
        for r in range(k):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
                b[r] -= f * b[col]
    return [b[i] / a[i][i] for i in range(k)]


def bounded_lsq(
    columns: list[list[float]], ys: list[float], low: list[float], high: list[float]
) -> tuple[list[float], float]:
    """min ||ys - sum_j x_j columns_j||^2 with low_j <= x_j <= high_j, for a handful of unknowns: every
    unknown is free or on one of its bounds, and the best feasible combination wins (exact for a
    convex problem this small). Columns are scaled to unit norm (the unknowns differ by 10 orders of
    magnitude). Returns (x, squared residual)."""
    k, m = len(columns), len(ys)
    if k == 0:
        return [], sum(y * y for y in ys)
    norms = [math.sqrt(sum(c * c for c in col)) or 1.0 for col in columns]
    cols = [[c / n for c in col] for col, n in zip(columns, norms, strict=True)]
    lo = [v * n for v, n in zip(low, norms, strict=True)]
    hi = [v * n for v, n in zip(high, norms, strict=True)]
    best: tuple[float, list[float]] | None = None
    for states in itertools.product((0, 1, 2), repeat=k):  # free, at low, at high
        x = [lo[j] if s == 1 else hi[j] if s == 2 else 0.0 for j, s in enumerate(states)]
        if any(not math.isfinite(x[j]) for j, s in enumerate(states) if s):
            continue
        free = [j for j, s in enumerate(states) if s == 0]
        rest = [y - sum(cols[j][i] * x[j] for j in range(k) if states[j]) for i, y in enumerate(ys)]
        sol = solve([[cols[j][i] for j in free] for i in range(m)], rest) if free else []
        if sol is None:
            continue
        tol = 1e-9
        if any(v < lo[j] - tol * max(1.0, abs(lo[j])) or v > hi[j] + tol * max(1.0, abs(hi[j]))
               for j, v in zip(free, sol, strict=True)):  # fmt: skip
            continue
        for j, v in zip(free, sol, strict=True):
            x[j] = min(max(v, lo[j]), hi[j])
        sse = sum((y - sum(cols[j][i] * x[j] for j in range(k))) ** 2 for i, y in enumerate(ys))
        if best is None or sse < best[0] - 1e-18:
            best = (sse, x)
    if best is None:  # unreachable: all-on-bounds combinations are always feasible when finite
        return [min(max(0.0, a), b) for a, b in zip(low, high, strict=True)], sum(y * y for y in ys)
    return [v / n for v, n in zip(best[1], norms, strict=True)], best[0]


def nnls(columns: list[list[float]], ys: list[float]) -> list[float]:
    """Non-negative least squares (bounded_lsq with [0, inf) bounds)."""
    k = len(columns)
    return bounded_lsq(columns, ys, [0.0] * k, [math.inf] * k)[0]
