"""The calibration's self-check (pure): the fitted step-time terms re-fitted without part of the
design predict it (zerotune/calibrate/check.py says how the result is used).

Leave-one-config-out, with two rules that make it estimate the error of the fit users get rather than
of a different, weaker fit:

- each fold re-fits the *same* terms the full fit freed (re-running the term selection on six configs
  instead of seven is testing another procedure);
- a config that is the main witness of a fitted term is not held out: its leverage on the fitted terms
  (the diagonal of the hat matrix, summed over its runs) above LEVERAGE_MAX means the fold without it
  cannot pin that term, so its error measures extrapolation of an unidentified term, amplified by
  1 / (1 - leverage), not the calibration's accuracy. Such configs are named in the notes.

That check measures the fit's bias at configs like the design's. It cannot see how far the fitted
terms themselves would move on another set of runs: when the design cannot tell two mechanisms apart
(a stage-2 gradient hook vs a reduce-scatter latency, both paid once per bucket per micro-step), which
one the term selection frees flips with the noise, and a job with other knobs (more micro-steps,
smaller buckets) than the design then lands 10-15% off on one calibration and not the next (issue 24,
the 2026-11-27 series: A3's prediction moved 0.69-0.89 s between rounds while its measurement stayed
within 0.76-0.79 s). The jackknife of the whole procedure (Quenouille 1956, Biometrika 43:353; Efron
& Stein 1981, Ann. Statist. 9:586) measures that: every config left out in turn, the terms re-selected
and re-fitted, and the spread of the folds' predictions (n - 1)/n * sum (p_i - mean)^2 taken at each
design config (`refit_spread`).
"""

from __future__ import annotations

import math
import statistics

from zerotune.calibrate.check import SelfCheck
from zerotune.calibrate.lsq import solve
from zerotune.calibrate.overheads import OverheadFit, fit_overheads, with_overheads
from zerotune.calibrate.stepmodel import Predictor, Run, measured_s
from zerotune.schema.hardware import HardwareProfile

LEVERAGE_MAX = 0.9
"""Largest leverage of a held-out config on the fitted terms (hat-matrix diagonal, Hoaglin & Welsch
1978, Am. Stat. 32:17): above it the other configs carry less than a tenth of the information on some
fitted direction, and the fold's error is the config's own residual amplified more than tenfold."""

MIN_FOLDS = 3
"""Configs held out however high their leverage: a check of fewer is no check (the 3 least needed)."""


def leverages(columns: dict[str, list[float]], terms: list[str]) -> list[float]:
    """Each run's leverage h_ii = x_i' (X'X)^-1 x_i on `terms` (X: the runs' relative sensitivities)."""
    # unit-norm columns (leverage does not depend on a column's scale; the terms differ by 10 orders)
    norms = {t: math.sqrt(sum(c * c for c in columns[t])) or 1.0 for t in terms}
    rows = [[columns[t][i] / norms[t] for t in terms] for i in range(len(next(iter(columns.values()), [])))]
    k = len(terms)
    if k == 0 or not rows:
        return [0.0] * len(rows)
    gram = [[sum(r[a] * r[b] for r in rows) for b in range(k)] for a in range(k)]
    inverse = [solve(gram, [1.0 if j == c else 0.0 for j in range(k)]) for c in range(k)]
    if any(col is None for col in inverse):
        return [1.0] * len(rows)  # singular: every run is needed to pin the terms
    return [
        sum(r[a] * inverse[b][a] * r[b] for a in range(k) for b in range(k))  # type: ignore[index]
        for r in rows
    ]


def leave_one_out(
    runs: list[Run],
    labels: list[str],
    rates: HardwareProfile,
    predictor: Predictor,
    start: dict[str, float],
    bounds: dict[str, tuple[float, float, str]],
    probe_pred: list[float | None],
    full: OverheadFit,
) -> SelfCheck:
    """The self-check of zerotune/calibrate/check.py: per design config that is not the main witness
    of a fitted term, the full fit's terms re-fitted without its runs predict them (module doc)."""
    from zerotune.calibrate.check import SelfCheck, foreign_share, launch_spread_pct, noise_pct

    groups: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    fitted = full.fitted
    interior = [t for t in fitted if full.status[t] == "fitted" and t in full.columns]
    lev = leverages(full.columns, interior)
    held: dict[str, float] = {}
    probe: dict[str, float] = {}
    notes: list[str] = []
    leverage = {label: sum(lev[i] for i in idx) for label, idx in groups.items()}
    ranked = sorted(groups, key=lambda label: leverage[label])
    # at least MIN_FOLDS configs are held out, the least needed first, even when above LEVERAGE_MAX
    kept = {label for n, label in enumerate(ranked) if leverage[label] <= LEVERAGE_MAX or n < MIN_FOLDS}
    for label, idx in groups.items():
        train = [r for i, r in enumerate(runs) if i not in idx]
        if not train:
            continue
        if label not in kept:
            h = leverage[label]
            notes.append(f"{label}: not held out (leverage {h:.2f} on the fitted terms: the fit needs it)")
            continue
        try:
            terms = fit_overheads(train, rates, predictor, [], start=start, bounds=bounds, free=fitted)
            fold = with_overheads(rates, terms.values)
            errors = [(predictor(runs[i], fold) - measured_s(runs[i])) / measured_s(runs[i]) for i in idx]
        except ValueError as exc:
            notes.append(f"{label}: not held out ({exc})")
            continue
        held[label] = statistics.mean(errors) * 100
        ps = [
            (p - measured_s(runs[i])) / measured_s(runs[i]) for i in idx if (p := probe_pred[i]) is not None
        ]
        if ps:
            probe[label] = statistics.mean(ps) * 100
    cores = int(runs[0].get("load", {}).get("cores") or 0) if runs[0].get("load") else 0
    return SelfCheck(
        held_out_pct=held,
        probe_pct=probe if len(probe) == len(held) else {},
        noise_pct=noise_pct(runs),
        foreign_share=foreign_share(runs, cores) if cores else None,
        notes=notes,
        refit_spread_pct=refit_spread(runs, groups, rates, predictor, start, bounds),
        launch_pct=launch_spread_pct(runs),
    )


def refit_spread(
    runs: list[Run],
    groups: dict[str, list[int]],
    rates: HardwareProfile,
    predictor: Predictor,
    start: dict[str, float],
    bounds: dict[str, tuple[float, float, str]],
) -> float:
    """Jackknife spread of the whole overhead fit (module doc), percent: every design config left out
    in turn (none spared for its leverage: losing a witness is what moves a term), the terms
    re-selected and re-fitted on the rest; at each design config the jackknife standard deviation of
    the folds' predicted step times relative to their mean; the RMS over the configs. 0 with fewer
    than 2 folds."""
    folds: list[HardwareProfile] = []
    for idx in groups.values():
        train = [r for i, r in enumerate(runs) if i not in idx]
        if not train:
            continue
        try:
            terms = fit_overheads(train, rates, predictor, [], start=start, bounds=bounds)
        except ValueError:
            continue
        folds.append(with_overheads(rates, terms.used(start)))
    n = len(folds)
    if n < 2:
        return 0.0
    spreads = []
    for idx in groups.values():
        predicted = [predictor(runs[idx[0]], fold) for fold in folds]
        mean = statistics.mean(predicted)
        spreads.append(math.sqrt((n - 1) / n * sum((p - mean) ** 2 for p in predicted)) / mean)
    return math.sqrt(statistics.mean(s * s for s in spreads)) * 100
