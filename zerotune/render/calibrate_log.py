"""`zerotune calibrate --from-log`'s report and its --json document: what each run measured against
the profile before and after, which numbers moved and from which lines, and the findings."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from zerotune.units import GiB


def _s(value: float | None) -> str:
    return f"{value:.4g} s" if value else "-"


def _gib(value: float | None) -> str:
    return f"{value / GiB:.2f} GiB" if value else "-"


def _err(pred: float | None, meas: float | None) -> str:
    return f"{(pred / meas - 1) * 100:+.1f}%" if pred and meas else ""


def payload(fit: Any, runs: list[Any], notices: list[str]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "profile": fit.profile.model_dump(mode="json"),
        "runs": [{**vars(r), "job": o.job} for r, o in zip(fit.rows, runs, strict=True)],
        "moved": [v.model_dump(mode="json") for v in fit.values],
        "findings": fit.findings,
        "notes": [*notices, *fit.notes],
    }


def report(out: Any, fit: Any, runs: list[Any], notices: list[str]) -> None:
    out.print(f"# zerotune calibrate --from-log: {len(runs)} run(s) of this machine", markup=False)
    table = Table(title="runs: measured, and the profile's prediction before -> after", title_justify="left")
    for col in ("run", "step measured", "before", "after", "peak measured", "before", "after"):
        table.add_column(col)
    for r in fit.rows:
        table.add_row(
            r.label,
            _s(r.measured_step_s),
            f"{_s(r.before_step_s)} {_err(r.before_step_s, r.measured_step_s)}",
            f"{_s(r.after_step_s)} {_err(r.after_step_s, r.measured_step_s)}",
            f"{_gib(r.measured_peak)} {r.peak_kind if r.measured_peak else ''}",
            f"{_gib(r.before_peak)} {_err(r.before_peak, r.measured_peak)}",
            f"{_gib(r.after_peak)} {_err(r.after_peak, r.measured_peak)}",
        )
    out.print(table)
    moved = Table(title="numbers from your run(s)", title_justify="left")
    for col in ("number", "was", "now", "change", "from"):
        moved.add_column(col)
    for v in fit.values:
        change = f"{(v.calibrated / v.probed - 1) * 100:+.1f}%" if v.probed else "new"
        moved.add_row(v.path, f"{v.probed:.4g}" if v.probed is not None else "-", f"{v.calibrated:.4g}", change,
                      (v.source or "") + (f" ({v.note})" if v.note else ""))  # fmt: skip
    out.print(moved)
    for o in runs:
        out.print(f"job of {o.label}: " + "; ".join(o.job), markup=False)
    for finding in fit.findings:
        out.print(f"finding: {finding}", markup=False)
    for note in [*notices, *fit.notes]:
        out.print(f"note: {note}", markup=False)
