"""The job record recommend writes next to a config (zerotune.schema.record): typed, versioned, read
back by predict and validate through resolve_job, and an old or foreign one is a one-line error."""

from __future__ import annotations

import json

import yaml

from zerotune.schema.record import JobRecord, dump_record, record_path
from zerotune.schema.workload import Workload

CONFIG = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}


def _write(tmp_path, record: JobRecord | None = None):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CONFIG))
    if record is not None:
        record_path(cfg).write_text(dump_record(record))
    return cfg


def _record(**workload) -> JobRecord:
    w = Workload(seq_len=512, micro_batch=4, gpus_per_node=4, nodes=1, activation_checkpointing=False, **workload)
    return JobRecord(model="gpt2", profile="dgx-h100", workload=w, safety_margin=0.10)


def test_predict_and_validate_read_the_record(cli, tmp_path) -> None:
    cfg = _write(tmp_path, _record())
    pred = cli("predict", "--config", cfg, "--json")
    assert pred.code == 0, pred.stderr
    doc = json.loads(pred.stdout)
    assert doc["workload"]["seq_len"] == 512 and doc["workload"]["activation_checkpointing"] is False
    assert doc["workload"]["world_size"] == 4  # the recorded 4 ranks, not the profile's 8
    assert "ds.json.zerotune.yaml" in pred.stderr
    # validate's memory rule judges the same job: a GPU just under the recorded job's padded peak fails it
    need = doc["memory"]["per_gpu_bytes"] * 1.10 / 2**30
    small = cli("validate", cfg, "--model", "gpt2", "--gpu-memory", f"{need * 0.99:.3f}", "--json")
    big = cli("validate", cfg, "--model", "gpt2", "--gpu-memory", f"{need * 1.01:.3f}", "--json")
    codes = lambda r: {d["code"] for f in json.loads(r.stdout)["files"] for d in f["diagnostics"]}  # noqa: E731
    assert "ZT901" in codes(small) and "ZT901" not in codes(big)


def test_an_old_sidecar_is_a_one_line_error(cli, tmp_path) -> None:
    cfg = _write(tmp_path)
    (tmp_path / "ds.json.reasons.md").write_text('`zerotune-workload: {"model":"gpt2"}`\n')
    r = cli("predict", "--config", cfg)
    assert r.code == 2 and "old, unversioned" in r.stderr and "--force" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 2  # error + hint


def test_an_unknown_version_or_field_is_refused(cli, tmp_path) -> None:
    cfg = _write(tmp_path, _record())
    data = yaml.safe_load(record_path(cfg).read_text())
    record_path(cfg).write_text(yaml.safe_dump(data | {"schema_version": 2}))
    r = cli("predict", "--config", cfg)
    assert r.code == 2 and "schema_version 2" in r.stderr
    record_path(cfg).write_text(yaml.safe_dump(data | {"workload": {**data["workload"], "seq_len": -1}}))
    r = cli("predict", "--config", cfg)
    assert r.code == 2 and "workload.seq_len" in r.stderr


def test_predict_margin_is_the_records_unless_said(cli, tmp_path) -> None:
    """The recorded margin (what recommend judged the config with) applies when none is said; --margin 0
    overrides it and asks whether the job can run at all: headroom = capacity - peak, to the byte."""
    cfg = _write(tmp_path, _record().model_copy(update={"safety_margin": 0.2}))
    recorded = json.loads(cli("predict", "--config", cfg, "--json").stdout)["memory"]
    bare = json.loads(cli("predict", "--config", cfg, "--margin", "0", "--json").stdout)["memory"]
    assert (recorded["safety_margin"], bare["safety_margin"]) == (0.2, 0)
    assert recorded["per_gpu_bytes"] == bare["per_gpu_bytes"]
    assert bare["headroom_bytes"] == bare["gpu_capacity_bytes"] - bare["per_gpu_bytes"]
    assert recorded["headroom_bytes"] < bare["headroom_bytes"]
