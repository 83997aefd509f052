"""The overhead terms of the step model fitted to measured step times (pure): bounded least squares
in relative error, each term freed from its measured or sourced value only when the runs identify it
(zerotune/calibrate/fit.py, step 4 of its module doc)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from zerotune.calibrate.lsq import bounded_lsq
from zerotune.calibrate.stepmodel import Predictor, Run, measured_s
from zerotune.schema.hardware import HardwareProfile

OVERHEAD_TERMS: tuple[tuple[str, float], ...] = (
    ("per_step_s", 1e-3),
    ("per_micro_step_s", 1e-3),
    ("per_module_hook_s", 1e-4),
    ("per_param_grad_hook_s", 1e-5),
    (OPTIMIZER_TERM := "optimizer_s_per_param", 1e-9),
)
"""Terms fitted in step 4, with the step used for their finite difference (the model is linear in
them, so any small positive value gives the same column). The optimizer enters as seconds per
local parameter, 1 / `optimizer_params_per_s`, which is linear in the step time."""

CHI2_95 = 3.84
"""95% point of chi-square with 1 degree of freedom. A term leaves its measured or sourced value only
when freeing it lowers the noise-weighted squared residual by more than this (the likelihood-ratio
test, Wilks 1938, Ann. Math. Statist. 9:60): otherwise the design cannot tell it from noise."""
_SIGMA_FLOOR = 1e-4
"""Relative noise below which step times are treated as exact (synthetic runs): 0.01%."""


def with_overheads(profile: HardwareProfile, values: dict[str, float]) -> HardwareProfile:
    values = dict(values)
    if OPTIMIZER_TERM in values:
        per_param = values.pop(OPTIMIZER_TERM)
        # a zero cost per parameter is not a rate: unknown, never "infinitely fast"
        values["optimizer_params_per_s"] = 1.0 / per_param if per_param > 0 else None
    return profile.model_copy(update={"overheads": profile.overheads.model_copy(update=values)})


@dataclass
class OverheadFit:
    values: dict[str, float]
    """Every term the model responds to on these runs: fitted, or kept at its prior."""
    rms: float
    """Relative RMS residual of the measured step times."""
    status: dict[str, str]
    """Term -> "fitted", "fitted, on its ... bound (...)" or "not identified: ..." (kept at its prior)."""
    columns: dict[str, list[float]] = field(default_factory=dict)
    """Term -> each run's relative step-time sensitivity to it (d step / d term / measured step)."""

    @property
    def fitted(self) -> list[str]:
        return [name for name, how in self.status.items() if how.startswith("fitted")]

    def used(self, start: dict[str, float]) -> dict[str, float]:
        """The values a profile takes: the fitted terms, and the others at their measured or sourced
        prior (`start`); a term with neither stays unset."""
        return {k: v for k, v in self.values.items() if self.status.get(k, "").startswith("fitted") or k in start}


def _run_noise(runs: list[Run]) -> float:
    """Mean squared relative standard error of the runs' medians (0 when they report none)."""
    values = [(r.get("step_time_precision_pct") or 0.0) / 100 for r in runs]
    return sum(v * v for v in values) / len(values) if values else 0.0


def fit_overheads(
    runs: list[Run],
    profile: HardwareProfile,
    predictor: Predictor,
    notes: list[str],
    start: dict[str, float] | None = None,
    bounds: dict[str, tuple[float, float, str]] | None = None,
    free: list[str] | None = None,
) -> OverheadFit:
    """The overhead terms (module doc), each within its bounds (zerotune/calibrate/bounds.py).

    `start`: each term's prior, its measured or sourced value (the optimizer's from its segment
    records, a catalog profile's published overheads), 0 for a term with none. `bounds`: term ->
    (low, high, why) beyond the generic ones (>= 0, and the term's share of every run <= the run).
    Terms are freed from their priors one at a time, the most useful first, while freeing one lowers
    the noise-weighted squared residual by more than CHI2_95; the others are "not identified" and
    keep their priors. `free` names the terms to fit instead (the self-check's folds re-fit the full
    fit's terms). Two Gauss-Newton passes (the second corrects any non-linearity: overlap)."""
    from zerotune.calibrate.bounds import term_ceiling

    measured = [measured_s(r) for r in runs]
    prior = {name: 0.0 for name, _ in OVERHEAD_TERMS}
    prior.update(start or {})
    extra = bounds or {}
    solution = dict(prior)
    chosen = free
    free = None
    status: dict[str, str] = {}
    box: dict[str, tuple[float, float, str]] = {}
    problem = _Linear({}, [], {}, prior)
    for _ in range(2):
        at = dict(solution)  # the point the predictions and columns are taken at
        here = with_overheads(profile, at)
        base = [predictor(r, here) for r in runs]
        columns: dict[str, list[float]] = {}
        for name, delta in OVERHEAD_TERMS:
            bumped = with_overheads(profile, {**solution, name: solution[name] + delta})
            col = [
                (predictor(r, bumped) - b) / delta / m for r, b, m in zip(runs, base, measured, strict=True)
            ]
            if max(abs(c) for c in col) * delta >= 1e-9:
                columns[name] = col
        if free is None:  # bounds and priors from the first pass's sensitivities
            for name, col in columns.items():
                low, high, reason = extra.get(name, (0.0, math.inf, ""))
                ceiling = term_ceiling(col)
                low = max(low, 0.0)
                high = max(min(high, ceiling), low)
                box[name] = (
                    low,
                    high,
                    reason if high < ceiling else "its share of a run <= the run's measured step",
                )
                prior[name] = min(max(prior[name], low), high)
            solution = {**solution, **{n: prior[n] for n in columns}}
        # the residual at new values is y + col . current - col . new
        target = [
            (m - b) / m + sum(col[i] * at[n] for n, col in columns.items())
            for i, (m, b) in enumerate(zip(measured, base, strict=True))
        ]
        problem = _Linear(columns, target, box, prior)
        if free is None:
            if chosen is None:
                free = _select(problem, len(runs), _run_noise(runs), status)
            else:
                free = [n for n in chosen if n in columns]
        values, _ = problem.solve(free)
        solution = {**solution, **{n: prior[n] for n in columns}, **values}
    for name in free or []:
        low, high, reason = box[name]
        side = _side(solution[name], low, high)
        reason = reason if side == "upper" else _low_why(extra, name)
        status[name] = "fitted" + (f", on its {side} bound ({reason})" if side else "")
    missing = [name for name, _ in OVERHEAD_TERMS if name not in problem.columns]
    if missing:
        notes.append(
            "not fitted (the step model does not respond to them on these runs): " + ", ".join(missing)
        )
    final = with_overheads(profile, solution)
    errors = [(predictor(r, final) - m) / m for r, m in zip(runs, measured, strict=True)]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0
    return OverheadFit({k: v for k, v in solution.items() if k in problem.columns}, rms, status, problem.columns)


@dataclass
class _Linear:
    """One Gauss-Newton pass of fit_overheads: relative columns per term, the target they fit, each
    term's (low, high, why) box and its prior (where a term not chosen stays)."""

    columns: dict[str, list[float]]
    target: list[float]
    box: dict[str, tuple[float, float, str]]
    prior: dict[str, float]

    def solve(self, chosen: list[str]) -> tuple[dict[str, float], float]:
        """The chosen terms' bounded least-squares values with the others at their priors, and the SSE."""
        fixed = [n for n in self.columns if n not in chosen]
        rest = [t - sum(self.columns[n][i] * self.prior[n] for n in fixed) for i, t in enumerate(self.target)]
        x, sse = bounded_lsq(
            [self.columns[n] for n in chosen],
            rest,
            [self.box[n][0] for n in chosen],
            [self.box[n][1] for n in chosen],
        )
        return dict(zip(chosen, x, strict=True)), sse


def _side(value: float, low: float, high: float, rel: float = 1e-6) -> str | None:
    """ "lower" / "upper" when `value` sits on that bound, else None."""
    if math.isfinite(high) and value >= high * (1 - rel):
        return "upper"
    if value <= low * (1 + rel) + 1e-30:
        return "lower"
    return None


def _low_why(extra: dict[str, tuple[float, float, str]], name: str) -> str:
    return extra[name][2] if name in extra and extra[name][0] > 0 else "a cost is >= 0"


def _select(problem: _Linear, m: int, run_noise: float, status: dict[str, str]) -> list[str]:
    """Forward selection (see fit_overheads): the terms freed from their priors. The noise is the
    larger of the runs' own (their medians' standard errors) and the residual of the fit with every
    term free per degree of freedom left."""
    names = list(problem.columns)
    _, sse_all = problem.solve(names)
    dof = m - len(names)
    sigma2 = max(run_noise, sse_all / dof if dof > 0 else 0.0, _SIGMA_FLOOR**2)
    chosen: list[str] = []
    _, sse = problem.solve(chosen)
    gains: dict[str, float] = {}
    while len(chosen) < len(names):
        trials = {n: problem.solve([*chosen, n])[1] for n in names if n not in chosen}
        best = min(trials, key=lambda n: trials[n])
        gains = {n: (sse - t) / sigma2 for n, t in trials.items()}
        if gains[best] <= CHI2_95:
            break
        chosen.append(best)
        sse = trials[best]
    for n in names:
        if n not in chosen:
            status[n] = (
                f"not identified: freeing it lowers the residual by chi2 {max(gains.get(n, 0.0), 0.0):.2g} "
                f"<= {CHI2_95} (noise +-{math.sqrt(sigma2):.1%}); kept at its prior"
            )
    return chosen


def priors(
    base: HardwareProfile, rates: HardwareProfile, dtype: str, segment_rate: float | None, notes: list[str]
) -> tuple[dict[str, float], dict[str, tuple[float, float, str]]]:
    """(each term's measured or sourced value, the optimizer's physical bounds) for fit_overheads."""
    from zerotune.calibrate.bounds import optimizer_floor

    start = {name: v for name, _ in OVERHEAD_TERMS if (v := getattr(base.overheads, name, None)) is not None}
    rate = segment_rate or base.overheads.optimizer_params_per_s
    floor = optimizer_floor(rates, dtype)
    bounds: dict[str, tuple[float, float, str]] = {}
    if rate:
        start[OPTIMIZER_TERM] = 1.0 / rate
    if floor is not None:
        bounds[OPTIMIZER_TERM] = (floor[0], math.inf, floor[1])
    elif rate:  # no bandwidth to bound it by: the measured value stays
        bounds[OPTIMIZER_TERM] = (1.0 / rate, 1.0 / rate, "no memory bandwidth known: measured value kept")
        notes.append("optimizer rate not fitted: the profile has no memory bandwidth to bound it")
    return start, bounds
