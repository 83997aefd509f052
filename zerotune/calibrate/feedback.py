"""Measurements made later (`recommend --measure K`, bench runs) fed back into the cached
calibration: the design runs are kept next to the calibrated profile (calibrated.runs.json), so a
new measurement is one more row of the same least-squares fit, re-run over all of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerotune.calibrate.fit import fit


def runs_cache_path() -> Path:
    from zerotune.catalog.hardware import calibrated_cache_path

    return calibrated_cache_path().with_name("calibrated.runs.json")


def refused_runs_path() -> Path:
    """Where the runs of the last calibration the self-check refused are kept (not re-fitted by later
    measurements: they describe no cached profile)."""
    from zerotune.catalog.hardware import calibrated_cache_path

    return calibrated_cache_path().with_name("refused.runs.json")


def save_runs(data: dict[str, Any]) -> None:
    from zerotune.files import write_atomic

    write_atomic(runs_cache_path(), json.dumps(data) + "\n", force=True)


def add_measurements(results: list[Any], labels: list[str]) -> str | None:
    """Re-fit the cached calibration with `results` (BenchResult) added; a one-line report, or None
    when there is no cached calibration or the results come from another kind of run."""
    from zerotune.catalog.hardware import calibrated_cache_path, dump_profile
    from zerotune.files import write_atomic
    from zerotune.schema.hardware import HardwareProfile

    path = runs_cache_path()
    if not path.is_file() or not calibrated_cache_path().is_file() or not results:
        return None
    data = json.loads(path.read_text())
    runs, names = data["runs"], data["names"]
    ref = runs[0]
    new = [json.loads(r.model_dump_json()) for r in results]
    same = [
        (label, run)
        for label, run in zip(labels, new, strict=True)
        if run["device"] == ref["device"]
        and run["nproc"] == ref["nproc"]
        and run["backend"] == ref["backend"]
    ]
    if not same:
        return "measurements not added to the calibration: they ran on another device or rank count"
    runs = runs + [run for _, run in same]
    names = names + [label for label, _ in same]
    base = HardwareProfile.model_validate(data["base"])
    fitted = fit(runs, base, names=names)
    if fitted.check is not None:
        from zerotune.calibrate.check import decide

        decision = decide(fitted.check, repeats=1)
        if not decision.cache:
            return f"measurements not added to the cached calibration: the re-fit's {decision.line}"
    if fitted.profile.calibration is not None:
        fitted.profile.calibration.notes.append(f"re-fitted with {len(same)} measured run(s) added")
    write_atomic(calibrated_cache_path(), dump_profile(fitted.profile), force=True)
    save_runs({**data, "runs": runs, "names": names})
    return (
        f"calibration re-fitted with {len(same)} measured config(s) added ({len(runs)} runs in all); "
        f"cached as {calibrated_cache_path()}"
    )
