"""Smoke test of scripts/accuracy.py: two real bench runs (2 gloo ranks, DeepSpeed on CPU) predicted
by the step-time model, with the metrics it reports. Accuracy itself is judged by the script's full
grid (numbers in the issue report); here the pipeline must run end to end and produce sane values."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO
from zerotune.schema.hardware import CollectivePerf, ComputeSpec, HardwareProfile, HostSpec, LinkClass

pytestmark = pytest.mark.slow


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None or importlib.util.find_spec("torch") is None,
    reason="needs torch and deepspeed",
)
def test_accuracy_pipeline_on_two_configs(tmp_path, capsys):
    profile = HardwareProfile(
        name="cpu-smoke",
        origin="probe",
        gpus_per_node=0,
        host=HostSpec(cpu_adam_params_per_s=1e7),
        intra_node=LinkClass(
            kind="loopback-gloo",
            backend="gloo",
            ranks=2,
            collectives={
                op: CollectivePerf(alpha_s=2e-3, busbw_Bps=2e8) for op in ("all_reduce", "all_gather")
            },
        ),
        compute=ComputeSpec(achieved_flops={"fp32": 1.5e10}),
    )
    path = tmp_path / "profile.json"
    path.write_text(profile.model_dump_json())
    saved = tmp_path / "runs.json"
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        accuracy = __import__("accuracy")
        assert accuracy.main(["--grid", "smoke", "--profile", str(path), "--save", str(saved), "--json"]) == 0
    finally:
        sys.path.remove(str(REPO / "scripts"))
    out = capsys.readouterr().out
    import json

    metrics = json.loads(out.strip().splitlines()[-1])
    for name in ("probe", "calibrated (leave-one-out)", "calibrated (all runs)"):
        assert metrics[name]["mape_pct"] >= 0
        assert -1 <= metrics[name]["spearman"] <= 1
    # the fitted numbers are physical
    fitted = metrics["fitted"]
    assert 1e8 < fitted["achieved_flops_fp32"] < 1e13
    assert fitted["cpu_adam_params_per_s"] > 1e5
    assert saved.is_file()
    assert "s2 rb=1e+05 ov=off" in out and "s3 rb=5e+07 ov=on" in out
