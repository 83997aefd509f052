"""Invariant (issue 11 item 1): `zerotune predict` on the config `zerotune recommend` wrote reproduces
recommend's step time and per-GPU memory exactly, for plain JSON and for --hf output ("auto" values).

The workload (micro-batch, accumulation, checkpointing, sequence length, precision, ranks) travels in
the job record next to the config (zerotune.schema.record), so predict needs no flags. Every catalog model runs once, on a profile chosen in
rotation so that every catalog profile and a CPU host are covered too (all pairs would take minutes).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import cpu_probe_profile
from zerotune.catalog.hardware import dump_profile, list_profiles
from zerotune.catalog.models import list_models

MODELS = sorted(list_models())
PROFILES = sorted(list_profiles())
PAIRS = [(m, PROFILES[(i + 6) % len(PROFILES)]) for i, m in enumerate(MODELS)]


def _check(cli, out, rec: dict) -> None:
    p = cli("predict", "--config", out, "--json")
    assert p.code == 0, p.stderr
    pred = json.loads(p.stdout)
    assert pred["step_time_s"] == rec["step_time_s"]
    assert pred["tokens_per_s"] == rec["tokens_per_s"]
    assert pred["memory"]["per_gpu_bytes"] == rec["memory"]["per_gpu_bytes"]
    assert pred["memory"]["fits"] == rec["memory"]["fits"]
    assert pred["deepspeed_rejects"] == []


def _agree(cli, tmp_path, model: str, profile: str, *extra: str) -> None:
    out = tmp_path / "ds.json"
    r = cli("recommend", "--model", model, "--profile", profile, "--out", out, "--json", *extra)
    if r.code == 1 and "no configuration" in r.stderr:
        pytest.skip(f"{model} fits no configuration on {profile}")
    assert r.code == 0, r.stderr
    _check(cli, out, json.loads(r.stdout)["predicted"])


HF = PAIRS[::3]


@pytest.mark.parametrize(("model", "profile"), [p for p in PAIRS if p not in HF])
def test_predict_reproduces_recommend(cli, tmp_path, model, profile):
    _agree(cli, tmp_path, model, profile)


@pytest.mark.parametrize(("model", "profile"), HF)
def test_predict_reproduces_recommend_and_hf(cli, tmp_path, model, profile):
    """Plain and --hf output of one search, through recommend's core calls (the CLI's are the pairs
    above): the search is the cost, and --hf changes only what is written from its result."""
    from zerotune.errors import NothingFits
    from zerotune.schema.job import SAFETY_MARGIN
    from zerotune.search.job import search_job
    from zerotune.search.outputs import Outputs, write_outputs
    from zerotune.search.recommend import recommend, to_json

    job = search_job(model, profile=profile, gpus=None, nodes=None, seq_len=None, global_batch_tokens=None,
                     task="pretrain", objective="throughput", hourly_rate=None, margin=SAFETY_MARGIN)  # fmt: skip
    try:
        plain = recommend(job.spec, job.hardware, job.request, vary_nodes=True, config_name=str(tmp_path / "ds.json"))
    except NothingFits:
        pytest.skip(f"{model} fits no configuration on {profile}")
    hf = recommend(job.spec, job.hardware, job.request, hf=True, result=plain.result, config_name=str(tmp_path / "hf.json"))
    for rec, name in ((plain, "ds.json"), (hf, "hf.json")):
        write_outputs(rec, Outputs(tmp_path / name), model, job.profile_ref)
        _check(cli, tmp_path / name, to_json(rec)["predicted"])


def test_predict_reproduces_recommend_on_a_cpu_host(cli, tmp_path):
    profile = tmp_path / "cpu.yaml"
    profile.write_text(dump_profile(cpu_probe_profile()))
    _agree(cli, tmp_path, "gpt2", str(profile), "--gpus", "2")


def test_flags_override_the_record_and_the_header_says_checkpointing(cli, tmp_path):
    out = tmp_path / "ds.json"
    assert cli("recommend", "--model", "llama-7b", "--profile", "dgx-h100", "--out", out).code == 0
    plain = cli("predict", "--config", out)
    assert "activation checkpointing off" in plain.stdout  # what recommend chose for llama-7b here
    flipped = cli("predict", "--config", out, "--checkpointing", "--json")
    base = json.loads(cli("predict", "--config", out, "--json").stdout)
    assert json.loads(flipped.stdout)["workload"]["activation_checkpointing"] is True
    assert json.loads(flipped.stdout)["step_time_s"] > base["step_time_s"]  # recompute costs time


def test_without_a_record_the_assumptions_are_said(cli, tmp_path):
    cfg = tmp_path / "hf.json"
    cfg.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "train_batch_size": "auto",
                "bf16": {"enabled": "auto"},
                "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"},
            }
        )
    )
    r = cli("predict", "--config", cfg, "--model", "llama-7b", "--profile", "dgx-h100", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["workload"]["precision"] == "bf16"  # not fp32: "auto" is HF's --bf16 on a bf16 GPU
    assert data["zero"]["reduce_bucket_size"] == 4096 * 4096  # HF's hidden-size formula
    assert 'precision "auto": assumed bf16' in r.stderr
    assert "activation checkpointing assumed on" in r.stderr


def test_the_record_travels_inside_an_hjson_config(cli, tmp_path):
    out = tmp_path / "ds.hjson"
    r = cli("recommend", "--model", "mistral-7b", "--profile", "8xl40s-pcie", "--out", out, "--hjson", "--json")
    assert r.code == 0, r.stderr
    assert not (tmp_path / "ds.hjson.reasons.md").exists()
    rec = json.loads(r.stdout)["predicted"]
    pred = json.loads(cli("predict", "--config", out, "--json").stdout)
    assert (pred["step_time_s"], pred["memory"]["per_gpu_bytes"]) == (
        rec["step_time_s"],
        rec["memory"]["per_gpu_bytes"],
    )
