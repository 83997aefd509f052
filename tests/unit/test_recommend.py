"""`zerotune recommend` end to end: JSON, files, --hf, --hjson, accelerate YAML, errors, --measure."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import hjson
import pytest
import yaml

from zerotune.catalog.hardware import dump_profile, load_profile
from zerotune.catalog.models import load_model
from zerotune.dsconfig import hf_auto
from zerotune.dsconfig.emit import leaf_paths
from zerotune.schema.hardware import CollectivePerf, ComputeSpec, HardwareProfile, HostSpec, LinkClass
from zerotune.search import measure
from zerotune.search.rank import SearchRequest
from zerotune.search.recommend import cheapest_node_count, recommend


@pytest.fixture(autouse=True)
def no_cached_probe(tmp_path, monkeypatch):
    """Tests never see the developer's cached probe."""
    monkeypatch.setenv("ZEROTUNE_CACHE_DIR", str(tmp_path / "cache"))


def test_json_output_explains_every_value(cli) -> None:
    done = cli("recommend", "--model", "llama-7b", "--profile", "dgx-h100", "--json")
    assert done.code == 0, done.stderr
    doc = json.loads(done.stdout)
    config = doc["config"]
    for path in leaf_paths(config):
        assert doc["reasons"].get(path), f"no reason for {path}"
    w = doc["hardware"]["world_size"]
    assert w == 8
    assert (
        config["train_batch_size"]
        == config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * w
    )
    assert doc["predicted"]["memory"]["fits"] is True
    assert doc["predicted"]["tokens_per_s"] > 0 and doc["predicted"]["step_time_s"] > 0
    assert [row["name"] for row in doc["comparison"]] == ["zerotune", "DeepSpeed defaults", 'HF "auto"']
    assert doc["comparison"][0]["tokens_per_s"] >= doc["comparison"][1]["tokens_per_s"] * (1 - 1e-3)
    assert 1 <= len(doc["top"]) <= 5
    assert doc["search"]["candidates"] >= 10_000
    assert doc["binding_constraint"]["kind"] in ("memory", "bandwidth", "compute", "offload", "optimizer")


def test_out_writes_json_and_sidecar_and_never_overwrites(cli, tmp_path) -> None:
    out = tmp_path / "ds.json"
    done = cli("recommend", "--model", "gpt2", "--profile", "dgx-h100", "--out", out)
    assert done.code == 0, done.stderr
    config = json.loads(out.read_text())
    sidecar = tmp_path / "ds.json.reasons.md"
    assert "binding constraint" in sidecar.read_text()
    record = yaml.safe_load((tmp_path / "ds.json.zerotune.yaml").read_text())
    assert record["schema_version"] == 1 and record["model"] == "gpt2" and record["workload"]["seq_len"] > 0
    assert "DeepSpeed defaults" in done.stdout and "binding constraint" in done.stdout
    again = cli("recommend", "--model", "gpt2", "--profile", "dgx-h100", "--out", out)
    assert again.code == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr
    assert json.loads(out.read_text()) == config
    forced = cli("recommend", "--model", "gpt2", "--profile", "dgx-h100", "--out", out, "--force", "--json")
    assert forced.code == 0
    assert json.loads(forced.stdout)["files"]["config"] == str(out)


def test_hf_keeps_auto_keys_and_accelerate_yaml_points_at_the_json(cli, tmp_path) -> None:
    out, acc = tmp_path / "ds.json", tmp_path / "acc.yaml"
    done = cli(
        "recommend",
        "--model",
        "llama-7b",
        "--profile",
        "h100-2node-ib",
        "--hf",
        "--out",
        out,
        "--accelerate-config",
        acc,
        "--json",
    )
    assert done.code == 0, done.stderr
    config = json.loads(out.read_text())
    autos = set(hf_auto.auto_pointers(config))
    assert autos == {p for p in hf_auto.HF_AUTO_KEYS if hf_auto.has(config, p)}
    assert "/zero_optimization/reduce_bucket_size" in autos
    assert {
        "/train_batch_size",
        "/train_micro_batch_size_per_gpu",
        "/gradient_accumulation_steps",
        "/gradient_clipping",
        "/optimizer/params/lr",
    } <= autos
    data = yaml.safe_load(acc.read_text())
    assert data["distributed_type"] == "DEEPSPEED"
    assert data["deepspeed_config"]["deepspeed_config_file"] == str(out)
    assert (data["num_processes"], data["num_machines"]) == (16, 2)
    assert data["mixed_precision"] == "bf16"


def test_hjson_puts_reasons_in_comments(cli, tmp_path) -> None:
    out = tmp_path / "ds.hjson"
    done = cli("recommend", "--model", "gpt2", "--profile", "dgx-h100", "--out", out, "--hjson")
    assert done.code == 0, done.stderr
    text = out.read_text()
    assert text.lstrip().startswith("//") and "// " in text.split("{", 1)[1]
    assert hjson.loads(text)["zero_optimization"]["stage"] in (0, 1, 2, 3)
    assert not (tmp_path / "ds.hjson.reasons.md").exists()


def test_default_profile_is_announced_on_stderr(cli) -> None:
    done = cli("recommend", "--model", "gpt2", "--json")
    assert done.code == 0, done.stderr
    assert "dgx-h100" in done.stderr and "built-in profile" in done.stderr
    assert json.loads(done.stdout)["hardware"]["name"] == "dgx-h100"


def test_gpus_override_counts(cli) -> None:
    done = cli("recommend", "--model", "gpt2", "--profile", "dgx-h100", "--gpus", "4", "--json")
    doc = json.loads(done.stdout)
    assert doc["hardware"]["world_size"] == 4
    c = doc["config"]
    assert c["train_batch_size"] == c["train_micro_batch_size_per_gpu"] * c["gradient_accumulation_steps"] * 4


def test_cpu_profile_uses_fp32_and_the_given_ranks(cli, tmp_path) -> None:
    perf = CollectivePerf(alpha_s=2e-4, busbw_Bps=2e9)
    profile = HardwareProfile(
        name="cpu-host",
        origin="probe",
        gpus_per_node=0,
        host=HostSpec(ram_bytes=16 * 2**30, cpu_cores=2),
        intra_node=LinkClass(
            kind="loopback-gloo",
            backend="gloo",
            ranks=2,
            collectives={op: perf for op in ("all_reduce", "all_gather", "reduce_scatter")},
        ),
        compute=ComputeSpec(achieved_flops={"fp32": 5e10}, overlap_slowdown=1.5),
    )
    path = tmp_path / "cpu.yaml"
    path.write_text(dump_profile(profile))
    done = cli(
        "recommend",
        "--model",
        "gpt2",
        "--profile",
        path,
        "--gpus",
        "2",
        "--seq-len",
        "128",
        "--global-batch-tokens",
        "4096",
        "--json",
    )
    assert done.code == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["config"]["bf16"] == {"enabled": False}
    assert doc["hardware"]["world_size"] == 2
    # on a host without GPUs the ranks share host RAM (issue 11 item 2): 16 GiB / 2 ranks, 10% margin
    assert doc["predicted"]["memory"]["fits"] is True
    assert doc["predicted"]["memory"]["per_gpu_bytes"] * 1.1 <= 8 * 2**30
    assert "offload_optimizer" not in doc["config"]["zero_optimization"]  # nothing to offload from
    big = cli("recommend", "--model", "llama-7b", "--profile", path, "--gpus", "2")
    assert big.code == 1  # nothing fits: an answer, not a usage error
    assert "per rank with the 10% margin vs 8.0 GiB (host RAM / 2 ranks)" in big.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--model", "gpt2", "--accelerate-config", "a.yaml"), "needs --out"),
        (("--model", "lama-7b"), "unknown model"),
        (("--model", "gpt2", "--profile", "8xl40s-pcie", "--objective", "cost"), "hourly"),
        (("--model", "gpt2", "--top", "0"), "--top"),
        (("--model", "gpt2", "--hf-keep-tuned"), "only applies with --hf"),
        (("--model", "gpt2", "--profile", "dgx-h100", "--gpus", "16"), "GPUs per node"),
    ],
)
def test_input_errors_are_one_line(cli, args, message) -> None:
    done = cli("recommend", *args)
    assert done.code == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_no_configuration_fits_is_an_answer_exit_1_with_json(cli) -> None:
    """Nothing fitting is a finding about the job (exit 1), and --json still prints an object."""
    args = ("recommend", "--model", "llama3.1-405b", "--profile", "dgx1-v100-16g")
    plain = cli(*args)
    assert plain.code == 1 and "no configuration of llama3.1-405b fits" in plain.stderr
    done = cli(*args, "--json")
    assert done.code == 1 and "Traceback" not in done.stderr
    doc = json.loads(done.stdout)
    assert doc["fits"] is False and doc["exit_code"] == 1 and "no configuration" in doc["error"]


def test_json_error_path_prints_an_object(cli) -> None:
    done = cli("recommend", "--model", "lama-7b", "--json")
    assert done.code == 2
    doc = json.loads(done.stdout)
    assert "unknown model" in doc["error"] and doc["exit_code"] == 2


def test_measure_picks_the_best_measured_candidate(monkeypatch) -> None:
    rec = recommend(load_model("gpt2"), load_profile("dgx-h100"), SearchRequest(), top_k=3)
    seconds = iter((2.0, 1.0, 3.0))  # runs happen in rank order; the 2nd is fastest per token

    def fake_run_bench(model, config, **kwargs):
        mb = config["train_micro_batch_size_per_gpu"]
        proxy = SimpleNamespace(seq_len=128, micro_batch=mb, grad_accum=1, nproc=2)
        return SimpleNamespace(proxy=proxy, step_time_s=next(seconds) * mb, device="cpu")

    import zerotune.bench.run

    monkeypatch.setattr(zerotune.bench.run, "run_bench", fake_run_bench)
    notes: list[str] = []
    remade, rows = measure.measure_top(rec, 3, say=notes.append)
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert [r.get("chosen", False) for r in rows] == [False, True, False]
    assert remade.best.candidate == rec.top[1].candidate
    assert remade.config["train_micro_batch_size_per_gpu"] == rec.top[1].candidate.micro_batch


def test_measure_without_deepspeed_keeps_the_prediction(monkeypatch) -> None:
    rec = recommend(load_model("gpt2"), load_profile("dgx-h100"), SearchRequest(), top_k=2)
    monkeypatch.setattr(measure.importlib.util, "find_spec", lambda name: None)
    notes: list[str] = []
    same, rows = measure.measure_top(rec, 2, say=notes.append)
    assert same is rec and rows is None
    assert "not installed" in notes[0]


@pytest.mark.slow
def test_recommend_json_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from zerotune.cli.app import main\n"
        "try:\n"
        "    main(['recommend', '--model', 'llama-7b', '--profile', 'dgx-h100', '--json'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "heavy = [m for m in ('torch', 'deepspeed', 'pynvml') if m in sys.modules]\n"
        "sys.stderr.write(f'HEAVY={heavy}\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "HEAVY=[]" in done.stderr
    assert json.loads(done.stdout)["model"]["name"] == "llama-7b"


def test_cost_objective_compares_node_counts() -> None:
    """--objective cost on a multi-node profile searches 1..N nodes at a per-GPU rate."""
    result, (line,) = cheapest_node_count(
        load_model("gpt2"), load_profile("h100-2node-ib"), SearchRequest(objective="cost")
    )
    assert line.startswith("cost per 1B tokens by node count: 1 node: $") and "2 nodes: $" in line
    costs = [
        float(part.split("$")[1].split(";")[0].split(" ")[0].replace(",", ""))
        for part in line.split(": ")[2:4]
    ]
    assert result.cost(result.best) == pytest.approx(min(costs), abs=0.01)
    assert line.endswith(f"-> {result.workload.nodes} node(s)")


def test_hf_keep_tuned_keeps_the_tuned_sizes() -> None:
    stage3 = SearchRequest(stages=(3,))  # the stage-3 keys are the interesting ones here
    rec = recommend(
        load_model("llama-13b"), load_profile("dgx-a100-80g"), stage3, hf=True, hf_keep_tuned=True
    )
    zero = rec.config["zero_optimization"]
    assert rec.best.candidate.stage == 3
    assert zero["reduce_bucket_size"] == rec.best.candidate.reduce_bucket_size
    assert zero["stage3_prefetch_bucket_size"] == rec.best.candidate.prefetch_bucket_size
    assert rec.config["train_micro_batch_size_per_gpu"] == "auto"
    literal = recommend(
        load_model("llama-13b"), load_profile("dgx-a100-80g"), stage3, hf=True, result=rec.result
    )
    assert literal.config["zero_optimization"]["stage3_param_persistence_threshold"] == "auto"
    assert literal.hf_values["/zero_optimization/stage3_param_persistence_threshold"] == 10 * 5120
    assert any(line.startswith("--hf: HF fills") for line in literal.explanation.summary)
    assert literal.as_run is not literal.best and literal.written is not None


def test_an_offload_pick_on_a_fallback_cpu_adam_rate_is_flagged() -> None:
    """llama-13b does not fit 4x RTX 4090 without optimizer offload, and that profile states no CPU Adam
    rate: the summary warns that the pick's optimizer time is the fallback's, and not once the host's rate
    is known (the same value, measured)."""
    rec = recommend(load_model("llama-13b"), load_profile("4xrtx4090"))
    assert rec.best.candidate.offload_optimizer != "none"
    assert any(line.startswith("WARNING: CPU Adam rate not in the profile") for line in rec.explanation.summary)
    box = load_profile("4xrtx4090")
    measured = box.model_copy(update={"host": box.host.model_copy(update={"cpu_adam_params_per_s": 1e9})})
    sourced = recommend(load_model("llama-13b"), measured)
    assert sourced.best.candidate.offload_optimizer != "none"
    assert not any("CPU Adam rate" in line for line in sourced.explanation.summary)


def test_nothing_fits_names_host_ram_when_the_gpus_would_fit(cli) -> None:
    """DeepSeek-V3 (671B) on two 8xH100 nodes with 2 TiB of RAM each: fully offloaded, each GPU needs
    ~14 GiB, but each node's RAM must hold its half of the offloaded states (at least the 12 B/param of
    fp32 master weights and Adam moments: ~4 TB a node, ZeRO-Offload's accounting); the error names that
    check, not the GPU's memory, which would fit."""
    done = cli("recommend", "--model", "deepseek-v3", "--profile", "h100-2node-ib")
    assert done.code == 1
    line = " ".join(done.stderr.split())
    assert "of host RAM per node" in line and "per GPU fits" in line
    assert "use more nodes" in line
