"""scripts/gpu_acceptance.py --dry end to end on CPU (gloo ranks, NVML replayed from a fixture, a
tiny proxy), then a rerun that resumes: the GPU acceptance run cannot rot between GPU loans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

SCRIPT = REPO / "scripts" / "gpu_acceptance.py"


def _dry(out, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZEROTUNE_CACHE_DIR": str(out / "unused-cache")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dry", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=timeout,
    )  # fmt: skip


def test_dry_run_records_every_step_and_a_rerun_resumes(tmp_path) -> None:
    out = tmp_path / "run"
    first = _dry(out, timeout=240)
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-2000:]
    evidence = json.loads((out / "evidence.json").read_text())
    steps = evidence["steps"]
    names = ["environment", "nvml", "probe", "cpu-adam", "calibrate", "recommend"]
    assert set(names) <= set(steps) and len([n for n in steps if n.startswith("bench/")]) == 2
    assert all(s["status"] in ("ok", "skipped") for s in steps.values()), steps
    assert steps["calibrate"]["status"] == "skipped" and steps["calibrate"]["reason"]
    assert evidence["dry"] is True and evidence["machine"]["zerotune"] and evidence["machine"]["torch"]
    # NVML went through the recorded DGX answers: the reader's real code ran
    assert evidence["nvml"]["link_kind"] == "nvlink4" and len(evidence["nvml"]["gpus"]) == 8
    assert json.loads((out / "nvml-record.json").read_text())["devices"]
    assert evidence["cpu_adam"]["torch"]["params_per_s"] > 0
    assert evidence["cpu_adam"]["deepspeed"]["status"] == "skipped"
    for row in evidence["configs"]:
        assert row["status"] == "ok" and row["measured_step_time_s"] > 0, row
        assert row["predicted_step_time_s_probe"] > 0 and row["step_error_pct_probe"] is not None
        assert row["predicted_peak_bytes"] > 0 and row["measured_peak_bytes"] > 0
    offloaded = next(r for r in evidence["configs"] if r["offload_optimizer"])
    assert offloaded["checkpointing"] and offloaded["optimizer_class"] == "AdamW"
    bench = json.loads((out / "bench" / f"{offloaded['id']}.json").read_text())
    assert bench["proxy"]["activation_checkpointing"] is True
    assert evidence["recommend"]["config"]["zero_optimization"]
    assert "predicted vs measured" in first.stdout and offloaded["id"] in first.stdout

    start = time.monotonic()
    second = _dry(out, timeout=60)
    assert second.returncode == 0, second.stderr[-3000:]
    assert time.monotonic() - start < 30, "a rerun of a finished run should only report"
    again = json.loads((out / "evidence.json").read_text())
    assert all(s.get("resumed") for s in again["steps"].values()), again["steps"]
    assert again["configs"] == evidence["configs"]
    assert "(kept)" in second.stdout
