"""diagnose reads the job options as predict does (zerotune.job.read_inputs on JobInputs): the same
config and flags give the two commands the same per-GPU memory and step time, --gpus/--nodes count
the ranks as --world-size does, and a bad option is one line and exit 2."""

from __future__ import annotations

import json

import pytest

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
          "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}  # fmt: skip
# a DeepSpeed wall_clock_breakdown line: diagnose compares the step only where the log measured one
STEP_LOG = "[rank0]: [Rank 0] time (ms) | fwd: 900.0 | bwd: 1800.0 | bwd_inner: 1500.0 | bwd_allreduce: 300.0 | step: 50.0\n"


@pytest.fixture
def files(tmp_path):
    config, log = tmp_path / "ds.json", tmp_path / "train.log"
    config.write_text(json.dumps(CONFIG))
    log.write_text(STEP_LOG)
    return config, log


JOBS = [
    ["--model", "llama-7b", "--profile", "h100-2node-ib", "--gpus", "4", "--nodes", "2", "--seq-len", "4096"],
    ["--model", "llama-13b", "--profile", "dgx-a100-80g", "--gpus", "8", "--micro-batch", "1", "--no-checkpointing",
     "--seq-len", "1024", "--attention", "flash", "--liger"],
    ["--params", "3e9", "--profile", "dgx-h100", "--world-size", "4", "--gpu-memory", "40", "--seq-len", "2048"],
]  # fmt: skip


@pytest.mark.parametrize("job", JOBS)
def test_predict_and_diagnose_report_the_same_job(cli, files, job):
    config, log = files
    p = cli("predict", "--config", config, "--json", *job)
    assert p.code == 0, p.stderr
    pred = json.loads(p.stdout)
    d = cli("diagnose", log, "--config", config, "--json", *job)
    assert d.code in (0, 1), d.stderr
    diag = json.loads(d.stdout)
    assert diag["memory"]["predicted_bytes"] == pred["memory"]["per_gpu_bytes"]
    assert diag["memory"]["terms"] == pred["memory"]["breakdown"]
    assert diag["memory"]["capacity_bytes"] == pred["memory"]["gpu_capacity_bytes"]
    assert diag["step"]["predicted_ms"] == pytest.approx(pred["step_time_s"] * 1000, rel=1e-12)


def test_a_launch_line_describes_the_job_to_both(cli, files, tmp_path):
    """The job read from a launch line (HF Trainer arguments after --), not from flags."""
    config, log = files
    line = ["--", "deepspeed", "--num_gpus", "4", "train.py", "--deepspeed", str(config),
            "--per_device_train_batch_size", "1", "--gradient_checkpointing", "--bf16"]  # fmt: skip
    job = ["--model", "llama-7b", "--profile", "dgx-h100", "--seq-len", "2048"]
    p = cli("predict", "--json", *job, *line)
    assert p.code == 0, p.stderr
    d = cli("diagnose", log, "--json", *job, *line)
    assert d.code in (0, 1), d.stderr
    pred, diag = json.loads(p.stdout), json.loads(d.stdout)
    assert diag["memory"]["predicted_bytes"] == pred["memory"]["per_gpu_bytes"]
    facts = {f["name"]: f["value"] for f in diag["facts"]}
    assert facts["world_size (used)"] == 4


def test_gpus_times_nodes_is_the_world_size(cli, files):
    config, log = files
    job = ["--config", config, "--model", "llama-7b", "--seq-len", "2048", "--json"]
    by_count = json.loads(cli("diagnose", log, *job, "--gpus", "4", "--nodes", "2").stdout)
    by_world = json.loads(cli("diagnose", log, *job, "--world-size", "8").stdout)
    used = {f["name"]: f for f in by_count["facts"]}["world_size (used)"]
    assert used["value"] == 8 and used["source"] == "--gpus/--nodes"
    assert {f["name"]: f for f in by_world["facts"]}["world_size (used)"]["value"] == 8
    # stage 3 shards over all 8 ranks either way: the same per-GPU memory
    assert by_count["memory"]["predicted_bytes"] == by_world["memory"]["predicted_bytes"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--gpus", "0"], "--gpus must be at least 1, got 0"),
        (["--nodes", "-1"], "--nodes must be at least 1, got -1"),
        (["--world-size", "12", "--gpus", "8"], "--world-size 12 is not a multiple of 8 GPUs per node"),
        (["--attention", "fast"], "--attention must be one of"),
        (["--model", "llama-7b", "--params", "7e9"], "--model and --params/--layers/--hidden are exclusive"),
    ],
)
def test_a_bad_job_option_is_one_line_and_exit_2(cli, files, args, says):
    _, log = files
    r = cli("diagnose", log, *args)
    assert r.code == 2
    assert says in r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("error: ") and r.stderr.count("error:") == 1


def test_hf_reads_auto_values_as_hf_trainer_fills_them(cli, tmp_path):
    """--hf: the config goes through HF Trainer, as predict and validate take it: "auto" is not a finding."""
    config, log = tmp_path / "ds.json", tmp_path / "train.log"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    log.write_text("step 1\n")
    codes = {f["code"] for f in json.loads(cli("diagnose", log, "--config", config, "--json").stdout)["lint"]}
    assert "ZT801" in codes
    codes = {f["code"] for f in json.loads(cli("diagnose", log, "--config", config, "--hf", "--json").stdout)["lint"]}
    assert "ZT801" not in codes


def test_without_profile_both_take_the_profile_predict_takes(cli, files, tmp_path, monkeypatch):
    """No --profile: diagnose resolves the profile as predict does (catalog.hardware.default_profile):
    this machine's cached GPU probe wins over the built-in dgx-h100, for both commands alike."""
    from zerotune.catalog.hardware import dump_profile, load_profile

    monkeypatch.setenv("ZEROTUNE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    probe = load_profile("dgx-a100-80g").model_copy(update={"origin": "probe"})
    (tmp_path / "cache" / "last-probe.yaml").write_text(dump_profile(probe))
    config, log = files
    job = ["--model", "llama-7b", "--gpus", "8", "--seq-len", "2048"]
    pred = json.loads(cli("predict", "--config", config, "--json", *job).stdout)
    diag = json.loads(cli("diagnose", log, "--config", config, "--json", *job).stdout)
    assert diag["memory"]["capacity_bytes"] == pred["memory"]["gpu_capacity_bytes"] == probe.gpu.memory_bytes
    assert diag["step"]["predicted_ms"] == pytest.approx(pred["step_time_s"] * 1000, rel=1e-12)
    assert pred["step_time_s"] != pytest.approx(
        json.loads(cli("predict", "--config", config, "--json", "--profile", "dgx-h100", *job).stdout)["step_time_s"]
    )


def test_the_release_a_log_prints_is_the_one_predicted(cli, files, tmp_path):
    """A stage-3 model built outside zero.Init keeps more gathered before DeepSpeed 0.19.4: diagnose takes
    the release from the log's `DeepSpeed info` line, as predict takes --deepspeed-version."""
    config, _ = files
    log = tmp_path / "old.log"
    log.write_text("[2025-12-20 10:00:00,000] [INFO] [logging.py:107:log_dist] [Rank 0] DeepSpeed info: "
                   "version=0.18.3, git-hash=unknown, git-branch=unknown\n" + STEP_LOG)  # fmt: skip
    job = ["--model", "llama-7b", "--profile", "dgx-h100", "--gpus", "8", "--seq-len", "1024", "--no-checkpointing",
           "--no-zero-init"]  # fmt: skip
    old = json.loads(cli("predict", "--config", config, "--json", *job, "--deepspeed-version", "0.18.3").stdout)
    new = json.loads(cli("predict", "--config", config, "--json", *job).stdout)
    assert old["memory"]["per_gpu_bytes"] > new["memory"]["per_gpu_bytes"]
    d = cli("diagnose", log, "--config", config, "--json", *job)
    assert d.code in (0, 1), d.stderr
    assert json.loads(d.stdout)["memory"]["predicted_bytes"] == old["memory"]["per_gpu_bytes"]
