"""Which profile commands use without --profile, and what a probe or calibration may replace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cpu_probe_profile
from zerotune.catalog.hardware import (
    DEFAULT_PROFILE,
    cache_probe,
    calibrated_cache_path,
    default_profile,
    dump_profile,
    load_profile,
    probe_cache_path,
)
from zerotune.catalog.trust import inputs_provenance, number_source, provenance
from zerotune.schema.hardware import CalibratedValue, Calibration


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ZEROTUNE_CACHE_DIR", str(tmp_path))
    return tmp_path


def _gpu_probe(created: str):
    return load_profile("8xl40s-pcie").model_copy(update={"origin": "probe", "created": created})


def _calibrated(created: str):
    return cpu_probe_profile("calibrated-box").model_copy(
        update={
            "created": "2026-11-22T10:00:00+00:00",
            "calibration": Calibration(
                created=created,
                values=[CalibratedValue(path="compute.achieved_flops.fp32", probed=2e10, calibrated=1.5e10)],
            ),
        }
    )


def test_nothing_cached_uses_the_builtin_and_says_how_far_to_trust_it(cache: Path) -> None:
    notices: list[str] = []
    assert default_profile(notices)[0].name == load_profile(DEFAULT_PROFILE).name
    assert "built-in" in notices[0] and "not measured here" in notices[0]


def test_a_cpu_probe_alone_is_not_the_default(cache: Path) -> None:
    probe_cache_path().write_text(
        dump_profile(cpu_probe_profile().model_copy(update={"created": "2026-11-22T10:00:00+00:00"}))
    )
    notices: list[str] = []
    assert default_profile(notices)[0].name == load_profile(DEFAULT_PROFILE).name
    assert "found no GPUs" in notices[0]


def test_a_calibration_newer_than_the_probe_wins(cache: Path) -> None:
    probe_cache_path().write_text(dump_profile(_gpu_probe("2026-11-22T10:00:00+00:00")))
    calibrated_cache_path().write_text(dump_profile(_calibrated("2026-11-23T10:00:00+00:00")))
    notices: list[str] = []
    assert default_profile(notices)[0].name == "calibrated-box"
    assert "calibrated 2026-11-23" in notices[0]


def test_a_probe_newer_than_the_calibration_wins(cache: Path) -> None:
    calibrated_cache_path().write_text(dump_profile(_calibrated("2026-11-22T10:00:00+00:00")))
    probe_cache_path().write_text(dump_profile(_gpu_probe("2026-11-23T10:00:00+00:00")))
    notices: list[str] = []
    assert default_profile(notices)[0].name == "8xl40s-pcie"
    assert "not calibrated" in notices[0] and "%" in notices[0]  # the expected error band


def test_quick_probes_are_not_cached_and_say_so(cache: Path) -> None:
    before = _gpu_probe("2026-11-22T10:00:00+00:00")
    probe_cache_path().write_text(dump_profile(before))
    message = cache_probe(_gpu_probe("2026-11-23T10:00:00+00:00"), full=False, why_not="a --quick probe")
    assert "not cached (a --quick probe)" in message and str(probe_cache_path()) in message
    assert load_profile(str(probe_cache_path())) == before


def test_a_full_probe_keeps_the_previous_one(cache: Path) -> None:
    before = _gpu_probe("2026-11-22T10:00:00+00:00")
    probe_cache_path().write_text(dump_profile(before))
    calibrated_cache_path().write_text(dump_profile(_calibrated("2026-11-22T11:00:00+00:00")))
    after = _gpu_probe("2026-11-23T10:00:00+00:00")
    message = cache_probe(after, full=True)
    assert load_profile(str(probe_cache_path())) == after
    assert load_profile(str(cache / "last-probe.previous.yaml")) == before
    assert "previous probe is kept" in message and "calibrate` again" in message


def test_per_number_provenance() -> None:
    cal = _calibrated("2026-11-23T10:00:00+00:00")
    assert number_source(cal, "compute.achieved_flops.fp32") == "calibrated"
    assert number_source(cal, "intra_node.collectives.all_reduce.busbw_Bps") == "measured"
    assert number_source(load_profile("dgx-h100"), "compute.achieved_flops.bf16") == "assumed"
    line = inputs_provenance(cal, "fp32")
    assert "FLOP/s fp32 calibrated" in line and "collectives measured" in line
    assert provenance(cal).startswith("calibrated 2026-11-23")


def test_measurements_feed_back_into_the_cached_calibration(cache: Path) -> None:
    """recommend --measure K: each measured config becomes one more run of the same fit."""
    import json

    from zerotune.bench.result import BenchResult
    from zerotune.calibrate.feedback import add_measurements, runs_cache_path, save_runs

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "result_stage2.json"
    result = BenchResult.model_validate_json(fixture.read_text())
    assert add_measurements([result], ["m"]) is None  # nothing calibrated yet: nothing to feed
    base = cpu_probe_profile()
    calibrated_cache_path().write_text(dump_profile(_calibrated("2026-11-23T10:00:00+00:00")))
    save_runs({"schema_version": 1, "names": ["design s2"], "base": base.model_dump(mode="json"),
               "runs": [json.loads(fixture.read_text())]})  # fmt: skip
    message = add_measurements([result], ["measured: stage 2"])
    assert message is not None and "1 measured config(s) added (2 runs in all)" in message
    profile = load_profile(str(calibrated_cache_path()))
    assert profile.calibration is not None and len(profile.calibration.runs) == 2
    assert profile.calibration.runs[1].startswith("measured: stage 2")
    assert json.loads(runs_cache_path().read_text())["names"] == ["design s2", "measured: stage 2"]
    other = result.model_copy(update={"nproc": 4})
    assert "another device or rank count" in add_measurements([other], ["x"])


def test_calibrate_cli_input_errors(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    run = cli("calibrate", "--distributed")
    assert run.code == 2 and "--distributed runs under torchrun" in run.stderr
    run = cli("calibrate", "--device", "tpu")
    assert run.code == 2 and "--device must be auto, cpu or cuda" in run.stderr
    run = cli("calibrate", "--from-runs", str(tmp_path / "missing.json"))
    assert run.code == 2 and "missing.json" in run.stderr
    run = cli("calibrate", "--repeats", "0")
    assert run.code == 2 and "--repeats must be at least 1" in run.stderr
    (tmp_path / "exists.yaml").write_text("x")
    run = cli("calibrate", "--out", str(tmp_path / "exists.yaml"))
    assert run.code == 2 and "already exists" in run.stderr


LOADED_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "calibrate" / "loaded_runs.json"
"""`zerotune calibrate --save-runs` of a real calibration on this project's 2-core box while other jobs
kept 1.3-1.5 of its 2 cores busy (2026-11-25, load average 6-9): 7 design runs with their load."""


def test_a_calibration_taken_under_load_is_not_cached_and_says_why(cli, cache: Path) -> None:
    run = cli("calibrate", "--from-runs", str(LOADED_RUNS), "--json")
    assert run.code == 1
    line = " ".join(run.stderr.split())
    assert "not cached: other processes used 69% of the CPU" in line and "quiet the machine" in line
    assert "--force-cache caches anyway" in line
    assert not calibrated_cache_path().exists()
    # the refused runs are kept next to the cache, and re-fit to the same decision
    from zerotune.calibrate.feedback import refused_runs_path

    assert str(refused_runs_path()) in line
    again = cli("calibrate", "--from-runs", str(refused_runs_path()), "--json")
    assert again.code == 1 and "not cached: other processes used 69% of the CPU" in " ".join(again.stderr.split())
    import json

    data = json.loads(run.stdout)
    assert data["cached"] is False and data["decision"].startswith("not cached")
    cal = data["profile"]["calibration"]
    assert cal["expected_error_pct"] >= data["held_out_mape_pct"] > 10  # it knows it is not good
    rate = data["profile"]["overheads"]["optimizer_params_per_s"]
    assert 0 < rate <= data["profile"]["host"]["memory_Bps"] / 28
    forced = cli("calibrate", "--from-runs", str(LOADED_RUNS), "--force-cache")
    assert forced.code == 0 and "despite the self-check (--force-cache)" in " ".join(forced.stderr.split())
    assert load_profile(str(calibrated_cache_path())).calibration.expected_error_pct == pytest.approx(
        cal["expected_error_pct"]
    )
