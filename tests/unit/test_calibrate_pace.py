"""calibrate's measuring loop with the pace rule (zerotune/calibrate/check.py PACE_SPIKE), ranks and fit
stubbed: which design runs are measured again, and which attempt is kept."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.conftest import cpu_probe_profile
from zerotune.calibrate import run as calibrate_run
from zerotune.calibrate.fit import Fit
from zerotune.calibrate.load import Load

QUIET_PACE = 3.7e-3


@dataclass
class _Result:
    record: dict[str, Any]

    def model_dump_json(self) -> str:
        return json.dumps(self.record)


class _Pool:
    cpu_s = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def launcher(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        raise AssertionError("run_bench is stubbed: no rank is launched")


class _QuietMeter:
    def stop(self, ranks_cpu_s: float = 0.0) -> Load:
        return Load(1.0, 0.0, 0.0, 0.0)


def _calibrate(
    monkeypatch, paces: list[float], budget_s: float = 1e9
) -> tuple[list[dict[str, Any]], list[str], list[float]]:
    """Run calibrate() with attempt k reading paces[k] (then QUIET_PACE); return the kept runs, the notes
    and the pace of every attempt in measuring order."""
    import zerotune.bench.run as bench_run

    attempts: list[float] = []

    def run_bench(model: Any, config: dict[str, Any], **kw: Any) -> _Result:
        pace = paces[len(attempts)] if len(attempts) < len(paces) else QUIET_PACE
        attempts.append(pace)
        return _Result({"step_time_s": 0.3 * pace / QUIET_PACE, "step_times_s": [0.3] * 5,
                        "step_time_precision_pct": 1.0, "pace_s": [pace, pace], "attempt": len(attempts)})  # fmt: skip

    kept: list[dict[str, Any]] = []

    def fit(runs: list[dict[str, Any]], base: Any, names: list[str]) -> Fit:
        kept.extend(runs)
        return Fit(profile=base, values=[], runs=[], notes=[])

    monkeypatch.setattr(bench_run, "run_bench", run_bench)
    monkeypatch.setattr(bench_run, "check_dependencies", lambda: None)
    monkeypatch.setattr(bench_run, "detect_device", lambda device: ("cpu", 0))
    monkeypatch.setattr(calibrate_run, "RankPool", _Pool)
    # a quiet machine whatever else runs beside the test (another xdist worker is foreign load)
    monkeypatch.setattr(calibrate_run, "LoadMeter", _QuietMeter)
    monkeypatch.setattr(calibrate_run, "fit", fit)
    monkeypatch.setattr(calibrate_run, "base_profile", lambda *a: (cpu_probe_profile(), "a stub profile"))
    outcome = calibrate_run.calibrate(calibrate_run.CalibrateOptions(device="cpu", budget_s=budget_s))
    return kept, outcome.fit.notes, attempts


def test_a_run_the_machine_ran_slow_for_is_measured_again_and_the_faster_attempt_kept(monkeypatch) -> None:
    slow = QUIET_PACE * 1.2
    kept, notes, attempts = _calibrate(monkeypatch, [QUIET_PACE, QUIET_PACE, QUIET_PACE, slow])
    assert len(attempts) == len(kept) + 1  # one repeat: the fourth run's
    assert kept[3]["attempt"] == 5 and kept[3]["discarded"]["pace_s"] == [slow, slow]
    assert any("slower than during the other runs" in n and "measured twice" in n for n in notes)


def test_the_first_run_is_judged_again_once_every_pace_is_known(monkeypatch) -> None:
    # run 1 has nothing to be compared with when it ends; the end pass catches it
    slow = QUIET_PACE * 1.25
    kept, notes, attempts = _calibrate(monkeypatch, [slow])
    assert len(attempts) == len(kept) + 1
    assert kept[0]["pace_s"] == [QUIET_PACE, QUIET_PACE] and kept[0]["discarded"]["pace_s"] == [slow, slow]


def test_reading_noise_below_the_band_measures_nothing_again(monkeypatch) -> None:
    kept, notes, attempts = _calibrate(
        monkeypatch, [QUIET_PACE * f for f in (1.0, 1.06, 0.97, 1.08, 1.0, 0.95, 1.05)]
    )
    assert len(attempts) == len(kept) == 7 and not any("measured twice" in n for n in notes)


def test_no_time_left_says_so_once(monkeypatch) -> None:
    kept, notes, attempts = _calibrate(monkeypatch, [QUIET_PACE, QUIET_PACE, QUIET_PACE * 1.3], budget_s=0.0)
    assert len(attempts) == len(kept)  # nothing measured again
    assert sum("not measured again" in n for n in notes) == 1
