"""The calibration's self-check (pure): the fitted step-time terms re-fitted without part of the
design predict it (zerotune/calibrate/check.py says how the result is used)."""

from __future__ import annotations

import statistics

from zerotune.calibrate.check import SelfCheck
from zerotune.calibrate.overheads import fit_overheads, with_overheads
from zerotune.calibrate.stepmodel import Predictor, Run, measured_s
from zerotune.schema.hardware import HardwareProfile


def leave_one_out(
    runs: list[Run],
    labels: list[str],
    rates: HardwareProfile,
    predictor: Predictor,
    start: dict[str, float],
    bounds: dict[str, tuple[float, float, str]],
    probe_pred: list[float | None],
) -> SelfCheck:
    """The self-check of zerotune/calibrate/check.py: per design config, the step-time terms re-fitted
    without its runs predict them."""
    from zerotune.calibrate.check import SelfCheck, foreign_share, noise_pct

    groups: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    held: dict[str, float] = {}
    probe: dict[str, float] = {}
    notes: list[str] = []
    for label, idx in groups.items():
        train = [r for i, r in enumerate(runs) if i not in idx]
        if not train:
            continue
        try:
            terms = fit_overheads(train, rates, predictor, [], start=start, bounds=bounds)
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
    )
