"""The fit report of `zerotune calibrate` as rich tables (each number probed vs calibrated; each
design run predicted vs measured)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from zerotune.calibrate.fit import Fit


def _num(value: float | None, path: str) -> str:
    if value is None:
        return "-"
    if path.endswith("_Bps"):
        return f"{value / 1e6:.1f} MB/s"
    if "flops" in path:
        return f"{value / 1e9:.2f} GFLOP/s"
    if path.endswith("params_per_s"):
        return f"{value / 1e6:.1f} M/s"
    if path.endswith("_s"):
        return f"{value * 1e3:.3g} ms" if value >= 1e-4 else f"{value * 1e6:.3g} us"
    return f"{value:.4g}"


def values_table(fit: Fit) -> Table:
    table = Table(title="calibrated numbers (probe -> calibrated)", title_justify="left")
    for col, justify in (
        ("number", "left"),
        ("probed", "right"),
        ("calibrated", "right"),
        ("ratio", "right"),
        ("fit residual", "right"),
        ("how", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for v in fit.values:
        ratio = f"{v.calibrated / v.probed:.2f}x" if v.probed and v.calibrated else "-"
        residual = f"{v.residual:.1%}" if v.residual is not None else "-"
        table.add_row(v.path, _num(v.probed, v.path), _num(v.calibrated, v.path), ratio, residual, v.note or "")
    return table


def runs_table(fit: Fit, lines: list[str] | None = None) -> Table:
    table = Table(title="design runs: step time predicted vs measured", title_justify="left")
    for col, justify in (
        ("run", "left"),
        ("measured", "right"),
        ("+-", "right"),
        ("probe-only", "right"),
        ("err", "right"),
        ("calibrated", "right"),
        ("err", "right"),
        ("held out", "right"),
        ("other load", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for row in fit.runs:
        table.add_row(
            row.name,
            f"{row.measured_s:.4f} s",
            f"{row.precision_pct:.1f}%" if row.precision_pct is not None else "-",
            f"{row.probe_s:.4f} s" if row.probe_s is not None else "-",
            f"{row.probe_error_pct:+.1f}%" if row.probe_error_pct is not None else "-",
            f"{row.calibrated_s:.4f} s" if row.calibrated_s is not None else "-",
            f"{row.error_pct:+.1f}%" if row.error_pct is not None else "-",
            f"{row.held_out_pct:+.1f}%" if row.held_out_pct is not None else "-",
            f"{row.foreign_cores:.2f} cores" if row.foreign_cores is not None else "-",
        )
    return table


def summary(fit: Fit) -> dict[str, Any]:
    def mape(errors: list[float | None]) -> float | None:
        ok = [abs(e) for e in errors if e is not None]
        return sum(ok) / len(ok) if ok else None

    check = fit.check
    return {
        "probe_only_mape_pct": mape([r.probe_error_pct for r in fit.runs]),
        "calibrated_mape_pct": mape([r.error_pct for r in fit.runs]),
        "held_out_mape_pct": check.mape_pct if check else None,
        "expected_error_pct": check.expected_error_pct if check else None,
        "fit_spread_pct": check.refit_spread_pct if check else None,
        "foreign_load_share": check.foreign_share if check else None,
    }
