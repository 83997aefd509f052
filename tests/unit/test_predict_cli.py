"""`zerotune predict` end to end (in-process CLI) and its renderers."""

from __future__ import annotations

import json

import pytest

from tests.conftest import cpu_probe_profile
from zerotune.catalog.hardware import load_profile
from zerotune.catalog.models import derive, load_model
from zerotune.dsconfig.settings import ZeroSettings
from zerotune.job import batch_triple
from zerotune.model.step import predict_step
from zerotune.render.predict import timeline_text
from zerotune.schema.hardware import OverheadSpec
from zerotune.schema.workload import Workload

STAGE2 = """{
  // DeepSpeed reads hjson: comments and trailing commas load
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 4,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": 2e8,},
}
"""


@pytest.fixture
def stage2(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(STAGE2)
    return path


def test_json_has_the_contract_keys(cli, stage2):
    r = cli("predict", "--config", stage2, "--model", "llama-7b", "--profile", "dgx-h100", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    for key in ("step_time_s", "tokens_per_s", "mfu", "exposed_comm_s", "collectives", "bottleneck"):
        assert key in data
    assert data["memory"]["fits"] is True
    assert data["memory"]["per_gpu_bytes"] > 0
    assert data["workload"]["micro_batch"] == 2 and data["workload"]["grad_accum"] == 4
    assert data["workload"]["world_size"] == 8
    assert data["zero"]["reduce_bucket_size"] == 200_000_000
    ops = {c["op"] for c in data["collectives"]}
    assert ops == {"all_reduce", "all_gather"}
    tokens = 2048 * 2 * 4 * 8
    assert data["tokens_per_s"] == pytest.approx(tokens / data["step_time_s"])


def test_memory_counters_as_a_run_reads_them(cli, stage2):
    """The peak as each counter reads it: live bytes (max_memory_allocated), with cached blocks
    (max_memory_reserved), with the CUDA context (nvidia-smi); said in the text report too."""
    args = ("predict", "--config", stage2, "--model", "llama-7b", "--profile", "dgx-h100")
    c = json.loads(cli(*args, "--json").stdout)["memory"]["counters"]
    assert c["max_allocated"] < c["max_reserved"] < c["nvidia-smi"]
    assert "max_memory_allocated" in cli(*args).stdout


def test_optimizer_option_when_the_config_names_none(cli, stage2):
    """A config without an optimizer section runs the script's optimizer (HF Trainer's AdamW): --optimizer
    says which. SGD keeps one fp32 moment per parameter where AdamW keeps two (model/states.py
    MOMENT_BYTES), so the sharded optimizer states shrink; a config's own optimizer `type` wins."""
    args = ("predict", "--config", stage2, "--model", "llama-7b", "--profile", "dgx-h100", "--json")
    adamw = json.loads(cli(*args).stdout)
    sgd = json.loads(cli(*args, "--optimizer", "sgd").stdout)
    assert (adamw["workload"]["optimizer"], sgd["workload"]["optimizer"]) == ("adamw", "sgd")
    assert sgd["memory"]["per_gpu_bytes"] < adamw["memory"]["per_gpu_bytes"]
    assert cli(*args, "--optimizer", "nadam").code == 2
    named = stage2.parent / "adam.json"
    named.write_text(json.dumps({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}, "optimizer": {"type": "Adam"}}))
    r = cli("predict", "--config", named, "--model", "llama-7b", "--profile", "dgx-h100", "--optimizer", "sgd", "--json")
    assert json.loads(r.stdout)["workload"]["optimizer"] == "adam"


def test_checkpoint_in_cpu_moves_checkpoints_to_host_memory(cli, stage2):
    """--checkpoint-in-cpu: llama-7b's 32 block inputs leave the GPU but 3 (bf16, 2 x 2048 x 4096 each)
    and 31 of them per rank wait in host RAM; the header says so."""
    args = ("predict", "--config", stage2, "--model", "llama-7b", "--profile", "dgx-h100")
    on_gpu = json.loads(cli(*args, "--json").stdout)
    r = cli(*args, "--checkpoint-in-cpu", "--json")
    assert r.code == 0, r.stderr
    moved = json.loads(r.stdout)
    block_input = 2 * 2048 * 2 * 4096
    start = "start of backward"  # where the activations peak
    gpu_drop = on_gpu["memory"]["timeline"][start]["activations"] - moved["memory"]["timeline"][start]["activations"]
    assert gpu_drop == (32 - 3) * block_input
    assert moved["memory"]["cpu_bytes_per_node"] - on_gpu["memory"]["cpu_bytes_per_node"] == 8 * 31 * block_input
    assert moved["workload"]["checkpoint_in_cpu"] is True
    assert "checkpoints in host memory" in cli(*args, "--checkpoint-in-cpu").stdout


def test_a_config_asking_for_cpu_checkpointing_points_at_the_flag(cli, tmp_path):
    """DeepSpeed applies activation_checkpointing only through deepspeed.checkpointing.configure, so the
    config alone does not move the checkpoints: predict says how to describe a framework that does."""
    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": '
                    '{"stage": 3}, "activation_checkpointing": {"cpu_checkpointing": true}}')  # fmt: skip
    args = ("predict", "--config", path, "--model", "llama-7b", "--profile", "dgx-h100")
    r = cli(*args)
    assert r.code == 0 and "pass --checkpoint-in-cpu if yours does" in r.stderr
    assert "pass --checkpoint-in-cpu" not in cli(*args, "--checkpoint-in-cpu").stderr


def test_a_config_with_torch_autocast_runs_the_loss_in_fp32(cli, tmp_path):
    """DeepSpeed's torch_autocast section runs the forward under torch.autocast: torch's loss on the
    16-bit logits becomes an fp32 log-softmax (12 B/logit instead of 3 x 2 B)."""
    plain = '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}'
    runs = {}
    for name, extra in (("off", ""), ("on", ', "torch_autocast": {"enabled": true, "dtype": "bfloat16"}')):
        path = tmp_path / f"{name}.json"
        path.write_text(plain + extra + "}")
        r = cli("predict", "--config", path, "--model", "llama-7b", "--profile", "dgx-h100", "--seq-len", "2048",
                "--cross-entropy", "native", "--json")  # fmt: skip
        assert r.code == 0, r.stderr
        runs[name] = json.loads(r.stdout)
    assert (runs["off"]["workload"]["autocast"], runs["on"]["workload"]["autocast"]) == (False, True)
    start = "start of backward"
    grew = runs["on"]["memory"]["timeline"][start]["activations"] - runs["off"]["memory"]["timeline"][start]["activations"]
    assert grew == (12 - 6) * 2048 * 32000
    # a script's own torch.autocast: --autocast says so, and the flag wins over the config
    r = cli("predict", "--config", tmp_path / "off.json", "--model", "llama-7b", "--profile", "dgx-h100",
            "--seq-len", "2048", "--cross-entropy", "native", "--autocast", "--json")  # fmt: skip
    said = json.loads(r.stdout)
    assert said["workload"]["autocast"] is True
    assert said["memory"]["timeline"][start]["activations"] == runs["on"]["memory"]["timeline"][start]["activations"]
    r = cli("predict", "--config", tmp_path / "on.json", "--model", "llama-7b", "--profile", "dgx-h100",
            "--no-autocast", "--json")  # fmt: skip
    assert json.loads(r.stdout)["workload"]["autocast"] is False


def test_human_output_shows_breakdowns_and_timeline(cli, stage2):
    r = cli("predict", "--config", stage2, "--model", "llama-7b", "--profile", "dgx-h100", "--gpus", "4")
    assert r.code == 0, r.stderr
    for text in (
        "memory per GPU",
        "one optimizer step",
        "bottleneck",
        "compute |",
        "comm    |",
        "all_reduce bucket 1",
    ):
        assert text in r.stdout
    assert "1x4 ranks" in r.stdout


def test_default_profile_is_announced(cli, stage2):
    r = cli("predict", "--config", stage2, "--model", "llama-7b", "--json")
    assert r.code == 0
    assert "dgx-h100" in r.stderr
    json.loads(r.stdout)  # stdout stays pure JSON


def test_a_parse_error_names_line_and_column(cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "zero_optimization": {"stage": 2,,}\n}\n')
    r = cli("predict", "--config", bad, "--model", "llama-7b")
    assert r.code == 2
    assert f"{bad}:2:" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_input_is_one_line(cli, stage2, tmp_path):
    assert cli("predict", "--config", tmp_path / "none.json", "--model", "llama-7b").code == 2
    r = cli(
        "predict", "--config", stage2, "--model", "llama-7b", "--profile", "dgx-h100", "--world-size", "12"
    )
    assert r.code == 2 and "multiple of 8" in r.stderr


def test_cpu_probe_profile(cli, stage2, tmp_path):
    profile = cpu_probe_profile()
    path = tmp_path / "cpu.json"
    path.write_text(profile.model_dump_json())
    config = tmp_path / "fp32.json"
    config.write_text(
        '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}'
    )
    r = cli(
        "predict",
        "--config",
        config,
        "--model",
        "gpt2",
        "--profile",
        path,
        "--world-size",
        "4",
        "--seq-len",
        "128",
        "--json",
    )
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["memory"]["fits"] is None and data["mfu"] is None
    assert data["workload"]["world_size"] == 4
    assert data["workload"]["grad_accum"] == 2  # DeepSpeed: TB // MB // W
    assert data["workload"]["precision"] == "fp32"


def test_batch_triple_follows_deepspeed():
    assert batch_triple(64, 2, None, 8) == (2, 4)
    assert batch_triple(64, None, 2, 8) == (4, 2)
    assert batch_triple(64, None, None, 8) == (8, 1)
    assert batch_triple(None, 2, 3, 8) == (2, 3)
    assert batch_triple(None, None, None, 8) == (1, 1)


def test_timeline_text_draws_both_streams():
    model = derive(load_model("llama-7b"), num_layers=2)
    e = predict_step(
        model,
        Workload(seq_len=1024, gpus_per_node=8),
        ZeroSettings(stage=2, overlap_comm=True, reduce_bucket_size=50_000_000),
        # without the per-step overhead prior, whose 0.3 s would fill a 2-layer model's timeline
        load_profile("8xl40s-pcie").model_copy(update={"overheads": OverheadSpec()}),
        detail=True,
    )
    text = timeline_text(e, width=60)
    lines = text.splitlines()
    compute = next(line for line in lines if line.startswith("compute |"))
    comm = next(line for line in lines if line.startswith("comm    |"))
    assert len(compute) == len(comm) == len("compute |") + 60 + 1
    assert "F" in compute and "B" in compute and "a" in comm and "g" in comm
    assert "all_reduce bucket 1" in text
    assert timeline_text(
        predict_step(model, Workload(gpus_per_node=8), ZeroSettings(), load_profile("dgx-h100"))
    ).startswith("(no timeline")


@pytest.mark.parametrize(
    ("sections", "flags", "runs"),
    [
        # accelerate's set_mixed_precision adds the bf16 section HF's --bf16 finds missing (was: fp32)
        ({"fp16": {"enabled": "auto"}}, [], "bf16"),
        ({"fp16": {"enabled": "auto"}}, ["--precision", "fp16"], "fp16"),
        # a concrete `true` pins HF's flag (HF refuses a mismatch): fp16, not the assumed bf16
        ({"fp16": {"enabled": True}, "bf16": {"enabled": "auto"}}, [], "fp16"),
        # nothing said of precision: the flag is unknown, DeepSpeed's fp32 stays
        ({}, [], "fp32"),
        ({}, ["--precision", "bf16"], "bf16"),
    ],
)
def test_hf_precision_is_what_accelerate_runs(cli, tmp_path, sections, flags, runs):
    """HF Trainer hands its config to accelerate, whose DeepSpeedPlugin.set_mixed_precision adds the section
    of the run's mixed precision when it is missing (huggingface/accelerate src/accelerate/utils/
    dataclasses.py set_mixed_precision, called by AcceleratorState). Was: microsoft/onnxruntime-training-
    examples mistral zero_stage_2.json (only `"fp16": {"enabled": "auto"}`) predicted in fp32 under the
    note 'precision "auto": assumed bf16'."""
    config = tmp_path / "hf.json"
    config.write_text(
        json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}, **sections})
    )
    r = cli(
        "predict",
        "--config",
        config,
        "--model",
        "llama-7b",
        "--profile",
        "dgx-h100",
        "--hf",
        "--json",
        *flags,
    )
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["workload"]["precision"] == runs


def test_step_table_rows_add_up_to_the_step(cli, stage2):
    """The text report's step rows (compute, exposed communication, optimizer, offload, fixed overheads)
    are the step's parts: with the published prior's 0.24 s per-step cost on dgx-h100 they left that
    cost out and summed to 93% of the step. The JSON's parts add up to step_time_s."""
    args = ("predict", "--config", stage2, "--model", "llama-7b", "--profile", "dgx-h100")
    data = json.loads(cli(*args, "--json").stdout)
    parts = ("compute_s", "exposed_comm_s", "optimizer_s", "offload_s", "overhead_s")
    assert data["overhead_s"] > 0
    assert sum(data[p] for p in parts) == pytest.approx(data["step_time_s"], rel=1e-9)
    text = " ".join(cli(*args).stdout.split())
    assert "fixed overheads (per step, micro-step)" in text
    # where those overheads come from, in words, not cut inside a term's name (was "(per_step_s, ..., per_l)")
    assert "overheads from the profile (global prior fitted across all" in text
