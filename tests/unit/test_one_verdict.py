"""Issue 19: memory, predict and validate read one job the same way and give one verdict.

For random jobs (model, ranks, stage, offload, batch keys DeepSpeed infers from, checkpointing, GPU
size), `predict --json`, the matching row of `memory --json` and `validate`'s memory rules agree on the
per-GPU bytes, the host RAM per node and whether it fits. Each former disagreement has its own case.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import cpu_probe_profile
from zerotune.catalog.hardware import dump_profile

MODELS = ("gpt2-xl", "llama-7b", "llama-13b")


def _row(memory: dict, stage: int, offload: str) -> dict:
    return next(
        r for r in memory["rows"]
        if r["stage"] == stage and r["offload_optimizer"] == offload and r["offload_param"] == "none"
    )  # fmt: skip


def _batch_keys(micro: int, accum: int, world: int, style: int) -> dict:
    """The same (micro, accum) said three ways: DeepSpeed infers the missing one (config.py)."""
    if style == 0:
        return {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": accum}
    if style == 1:
        return {"train_batch_size": micro * accum * world, "gradient_accumulation_steps": accum}
    return {"train_batch_size": micro * accum * world, "train_micro_batch_size_per_gpu": micro}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model=st.sampled_from(MODELS),
    gpus=st.sampled_from((2, 4, 8)),
    stage=st.sampled_from((1, 2, 3)),
    offload=st.sampled_from(("none", "cpu")),
    micro=st.integers(1, 8),
    accum=st.integers(1, 4),
    style=st.integers(0, 2),
    checkpointing=st.booleans(),
    gpu_memory=st.sampled_from((24.0, 40.0, 80.0)),
    margin=st.sampled_from((None, 0.0, 0.25)),
    in_cpu=st.booleans(),
)
def test_memory_predict_validate_agree(
    cli, tmp_path, model, gpus, stage, offload, micro, accum, style, checkpointing, gpu_memory, margin, in_cpu
):
    zero = {"stage": stage}
    if offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu"}
    config = {**_batch_keys(micro, accum, gpus, style), "bf16": {"enabled": True}, "zero_optimization": zero,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}  # fmt: skip
    path = tmp_path / f"ds-{stage}-{offload}-{micro}-{accum}-{style}.json"
    path.write_text(json.dumps(config))
    job = ["--model", model, "--profile", "dgx-h100", "--gpus", str(gpus), "--gpu-memory", str(gpu_memory),
           "--checkpointing" if checkpointing else "--no-checkpointing"]  # fmt: skip
    said = ([] if margin is None else ["--margin", str(margin)]) + (["--checkpoint-in-cpu"] if in_cpu else [])
    job += said

    p = cli("predict", "--config", path, "--json", *job)
    assert p.code in (0, 1), p.stderr
    pred = json.loads(p.stdout)
    m = cli("memory", "--json", "--micro-batch", str(micro), "--grad-accum", str(accum), *job)
    assert m.code == 0, m.stderr
    row = _row(json.loads(m.stdout), stage, offload)
    assert row["total_bytes_per_gpu"] == pred["memory"]["per_gpu_bytes"]
    assert row["cpu_bytes"] == pred["memory"]["cpu_bytes_per_node"]
    assert row["fits"] == pred["memory"]["fits"]

    v = cli("validate", path, "--json", "--model", model, "--gpus", str(gpus), "--world-size", str(gpus),
            "--gpu-memory", str(gpu_memory), "--profile", "dgx-h100",
            "--checkpointing" if checkpointing else "--no-checkpointing", *said)  # fmt: skip
    codes = {d["code"] for f in json.loads(v.stdout)["files"] for d in f["diagnostics"]}
    assert ("ZT901" in codes) == (pred["memory"]["fit"]["reason"] == "gpu"), (codes, pred["memory"])


def test_validate_reads_the_micro_batch_deepspeed_infers(cli, tmp_path):
    # validate used to take micro-batch 1 when the config gives train_batch_size and accumulation only
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 512, "gradient_accumulation_steps": 1,
                                "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))  # fmt: skip
    p = cli("predict", "--config", path, "--json", "--model", "llama-7b", "--profile", "dgx-h100")
    pred = json.loads(p.stdout)
    assert pred["workload"]["micro_batch"] == 64 and pred["memory"]["fits"] is False
    v = cli("validate", path, "--model", "llama-7b", "--profile", "dgx-h100", "--world-size", "8")
    assert v.code == 1 and "ZT901" in v.stdout and "micro batch 64" in v.stdout


def test_memory_says_host_ram_was_not_checked_like_predict(cli, tmp_path):
    # memory used to say "Fits: yes" for offload on a profile without host RAM, with no word
    profile = dump_profile(cpu_probe_profile("no-ram").model_copy(update={"name": "no-ram"}))
    assert profile
    m = cli("memory", "--model", "llama-7b", "--json")
    data = json.loads(m.stdout)
    offload = _row(data, 2, "cpu")
    assert offload["fits"] in (True, None)
    hw = tmp_path / "gpu-no-ram.yaml"
    from zerotune.catalog.hardware import load_profile

    base = load_profile("dgx-h100")
    hw.write_text(dump_profile(base.model_copy(update={"host": base.host.model_copy(update={"ram_bytes": None})})))
    m = cli("memory", "--model", "llama-7b", "--profile", str(hw), "--json")
    row = _row(json.loads(m.stdout), 2, "cpu")
    assert any("host RAM NOT checked" in a for a in row["fit"]["assumptions"])
    assert "host RAM NOT checked" in m.stderr


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model=st.sampled_from(("gpt2-xl", "llama-7b", "mistral-7b")),
    profile=st.sampled_from(("dgx-h100", "8xl40s-pcie", "4xrtx4090")),
    seq_len=st.sampled_from((1024, 2048)),
)
def test_recommend_predict_validate_agree_on_the_chosen_config(cli, tmp_path, model, profile, seq_len):
    """The verdict recommend prints for its config is the one predict and validate give that config
    (they read the job record recommend writes next to it)."""
    out = tmp_path / f"{model}-{profile}-{seq_len}.json"
    r = cli("recommend", "--model", model, "--profile", profile, "--seq-len", str(seq_len), "--out", out,
            "--force", "--json")  # fmt: skip
    if r.code == 1:  # nothing fits: an answer, with the verdict in JSON
        assert json.loads(r.stdout)["fits"] is False
        return
    assert r.code == 0, r.stderr
    rec = json.loads(r.stdout)["predicted"]["memory"]
    p = cli("predict", "--config", out, "--json")
    assert p.code == 0, p.stderr
    pred = json.loads(p.stdout)["memory"]
    assert (pred["per_gpu_bytes"], pred["cpu_bytes_per_node"], pred["fits"]) == (
        rec["per_gpu_bytes"], rec["cpu_bytes_per_node"], rec["fits"],
    )  # fmt: skip
    assert rec["fits"] is True
    v = cli("validate", out, "--json", "--model", model, "--profile", profile)
    codes = {d["code"] for f in json.loads(v.stdout)["files"] for d in f["diagnostics"]}
    # recommend's pick fits validate too (GPU and host RAM; ZT902, a warning at twice the margin, may
    # still say the headroom is thin)
    assert not codes & {"ZT901", "ZT903"}, codes


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model=st.sampled_from(MODELS),
    gpus=st.sampled_from((2, 4, 8)),
    stage=st.sampled_from((1, 2, 3)),
    offload=st.sampled_from(("none", "cpu")),
    micro=st.integers(1, 4),
    checkpointing=st.booleans(),
)
def test_diagnose_puts_the_job_at_predicts_memory(cli, tmp_path, model, gpus, stage, offload, micro, checkpointing):
    """diagnose --config/--model models the run's memory as predict and memory do (same job: the
    ranks and sequence length given, since a log that does not say leaves them to the flags)."""
    zero = {"stage": stage} | ({"offload_optimizer": {"device": "cpu"}} if offload == "cpu" else {})
    config = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
              "bf16": {"enabled": True}, "zero_optimization": zero}  # fmt: skip
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    log = tmp_path / "run.log"
    log.write_text("step 1 done\n")
    ckpt = "--checkpointing" if checkpointing else "--no-checkpointing"
    job = ["--model", model, "--profile", "dgx-h100", "--seq-len", "2048", ckpt]
    d = cli("diagnose", log, "--config", path, "--world-size", str(gpus), "--json", *job)
    assert d.code == 0, d.stderr
    diag = json.loads(d.stdout)["memory"]
    p = cli("predict", "--config", path, "--gpus", str(gpus), "--json", *job)
    pred = json.loads(p.stdout)["memory"]
    m = cli("memory", "--json", "--gpus", str(gpus), "--micro-batch", str(micro), *job)
    row = _row(json.loads(m.stdout), stage, offload)
    assert diag["predicted_bytes"] == pred["per_gpu_bytes"] == row["total_bytes_per_gpu"]
    assert diag["terms"] == pred["breakdown"]
    assert diag["capacity_bytes"] == pred["gpu_capacity_bytes"]


def test_one_margin_everywhere():
    """A bare estimate_memory call judges with the commands' one margin (it used to keep 5% of its
    own); the published suite's "ran but predicted not to fit" asks for peak over capacity, margin 0."""
    from scripts.evidence import published
    from zerotune.catalog.hardware import load_profile
    from zerotune.catalog.models import load_model
    from zerotune.dsconfig.settings import ZeroSettings
    from zerotune.model.fit import fits
    from zerotune.model.memory import estimate_memory
    from zerotune.schema.job import SAFETY_MARGIN
    from zerotune.schema.workload import Workload

    hardware = load_profile("dgx-h100")
    spec, zero = load_model("llama-13b"), ZeroSettings(stage=1)
    for micro in range(1, 12):
        est = estimate_memory(spec, Workload(micro_batch=micro), zero, hardware=hardware)
        assert est.fits == fits(est, hardware, 8, SAFETY_MARGIN).fits
        assert est.fits == (est.per_gpu.total * (1 + SAFETY_MARGIN) <= hardware.gpu.memory_bytes)
    assert published.OVER_CAPACITY == 0
    from zerotune.dsconfig.settings import resolve

    for run in published.load_suite()[:5]:
        row = published.predict_run(run)
        hw = published.run_hardware(run, published.load_run_model(run), resolve(run.ds_config()).precision)
        assert row["fits"] == (row["predicted_memory_bytes"] <= hw.gpu.memory_bytes), run.id


def test_options_that_make_no_job_are_one_usage_error(cli, tmp_path):
    """--world-size 16 on the one-node dgx-h100 is refused whatever the config, as predict refuses it (exit 2,
    one line). Was: ZT000 "zerotune failed while checking this file" from ZT901, ZT902 and ZT903 on every
    file of the run (495 on the 178 unseen configs), exit 1."""
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    for command in (["validate", config], ["predict", "--config", config]):
        res = cli(*command, "--model", "llama-7b", "--profile", "dgx-h100", "--world-size", "16")
        assert res.code == 2 and "no inter_node link" in res.stderr, res.stderr
        assert "ZT000" not in res.stdout and "Traceback" not in res.stderr
    res = cli("validate", config, "--model", "llama-7b", "--profile", "dgx-h100", "--world-size", "8")
    assert res.code == 0, res.stdout
