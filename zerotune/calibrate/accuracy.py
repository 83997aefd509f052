"""How well predicted step times match measured ones: the metrics of the held-out accuracy suite
(scripts/evidence/accuracy.py), kept here so tests check them without importing a script.

Measured configs whose medians are within 2 combined standard errors (`zerotune.bench.noise.distinguishable`)
cannot be told apart, so they form one tie group with averaged ranks: noise is never "ranked".

- MAPE of the step time;
- Spearman rank correlation between the noise-tied measured ranks and the predicted ranks, plus the share
  of distinguishable pairs the prediction orders right;
- regret per job (a job's configs are alternatives for the same work): (measured time of the predicted
  best - measured best) / measured best, 0 when the two are within noise; the mean over jobs;
- ranking resolution: the largest predicted gap (slower / faster - 1) between two configs of one job that
  the prediction orders wrong although their measurements are distinguishable. recommend's TIE_BAND
  (zerotune/search/objective.py) comes from it.
"""

from __future__ import annotations

import math
from typing import Any

from zerotune.bench.noise import distinguishable


def _avg_ranks(groups: list[list[int]], n: int) -> list[float]:
    ranks = [0.0] * n
    position = 0
    for group in groups:
        for i in group:
            ranks[i] = position + (len(group) + 1) / 2
        position += len(group)
    return ranks


def noise_groups(measured: list[float], rel_se: list[float]) -> list[list[int]]:
    """Sorted measured configs, adjacent ones within noise of each other merged into tie groups."""
    order = sorted(range(len(measured)), key=lambda i: measured[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and not distinguishable(
            measured[groups[-1][-1]], rel_se[groups[-1][-1]], measured[i], rel_se[i]
        ):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def pearson(a: list[float], b: list[float]) -> float:
    """Pearson correlation; on rank vectors it is Spearman's. NaN when either side is constant."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    var = math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
    return cov / var if var else float("nan")


def metrics(runs: list[dict[str, Any]], predicted: list[float]) -> dict[str, float]:
    """The suite's metrics for `runs` (each with job, step_time_s and step_time_precision_pct, the
    relative standard error in percent) against `predicted` step times in the same order."""
    measured = [r["step_time_s"] for r in runs]
    rel = [(r.get("step_time_precision_pct") or 0.0) / 100 for r in runs]
    n = len(runs)
    mape = sum(abs(p - m) / m for p, m in zip(predicted, measured, strict=True)) / n * 100
    m_ranks = _avg_ranks(noise_groups(measured, rel), n)
    p_order = sorted(range(n), key=lambda i: predicted[i])
    p_ranks = _avg_ranks([[i] for i in p_order], n)
    pairs = right = 0
    for i in range(n):
        for j in range(i + 1, n):
            if distinguishable(measured[i], rel[i], measured[j], rel[j]):
                pairs += 1
                right += (measured[i] < measured[j]) == (predicted[i] < predicted[j])
    regrets = []
    resolution = 0.0
    for job in sorted({r["job"] for r in runs}):
        idx = [i for i, r in enumerate(runs) if r["job"] == job]
        if len(idx) < 2:
            continue
        for a in idx:
            for b in idx:
                wrong = measured[a] < measured[b] and predicted[a] > predicted[b]
                if wrong and distinguishable(measured[a], rel[a], measured[b], rel[b]):
                    resolution = max(resolution, predicted[a] / predicted[b] - 1)
        pick = min(idx, key=lambda i: predicted[i])
        best = min(idx, key=lambda i: measured[i])
        tie = not distinguishable(measured[pick], rel[pick], measured[best], rel[best])
        regrets.append(0.0 if tie else (measured[pick] - measured[best]) / measured[best] * 100)
    return {
        "mape_pct": mape,
        "spearman_noise_ties": pearson(m_ranks, p_ranks) if n > 2 else float("nan"),
        "pairs_ordered_right": right / pairs if pairs else float("nan"),
        "distinguishable_pairs": pairs,
        "regret_pct": sum(regrets) / len(regrets) if regrets else float("nan"),
        "resolution_pct": resolution * 100,
    }
