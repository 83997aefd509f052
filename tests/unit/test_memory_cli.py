"""`zerotune memory`: JSON contract, human table and chart, input errors, no torch import."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO

import pytest
from rich.console import Console

from zerotune.catalog.models import load_model
from zerotune.model.memory import OFFLOAD_OPTIONS, compare_options
from zerotune.render.memory import memory_chart, memory_table
from zerotune.schema.workload import Workload

ROW_KEYS = {
    "stage",
    "offload_optimizer",
    "offload_param",
    "model_states_bytes_per_gpu",
    "total_bytes_per_gpu",
    "cpu_bytes",
    "breakdown",
    "fits",
}
PARTS = {"params", "gradients", "optimizer_states", "comm_buffers", "activations", "overhead"}


def test_json_rows_for_llama_70b_on_8_gpus(cli) -> None:
    res = cli("memory", "--model", "llama-70b", "--gpus", "8", "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["model"]["name"] == "llama-70b"
    assert data["model"]["params"] == load_model("llama-70b").params
    assert data["workload"]["world_size"] == 8
    rows = data["rows"]
    assert [(r["stage"], r["offload_optimizer"], r["offload_param"]) for r in rows] == list(OFFLOAD_OPTIONS)
    for row in rows:
        assert ROW_KEYS <= set(row) and set(row["breakdown"]) == PARTS
        assert row["total_bytes_per_gpu"] == sum(row["breakdown"].values())
        assert row["model_states_bytes_per_gpu"] == sum(
            row["breakdown"][k] for k in ("params", "gradients", "optimizer_states")
        )
    by = {(r["stage"], r["offload_optimizer"], r["offload_param"]): r for r in rows}
    # 70B on 8 x 80 GB: replicated or ZeRO-2 states cannot fit, ZeRO-3 with CPU offload does
    assert by[(0, "none", "none")]["fits"] is False
    assert by[(2, "none", "none")]["fits"] is False
    assert by[(3, "cpu", "cpu")]["fits"] is True
    assert by[(3, "cpu", "cpu")]["cpu_bytes"] > 0 and by[(3, "none", "none")]["cpu_bytes"] == 0
    assert "dgx-h100" in res.stderr  # the capacity's source is said, on stderr only


def test_stage3_without_zero_init_must_fit_the_whole_model_at_init(cli) -> None:
    """70B in bf16 is 141 GB: built before deepspeed.initialize it is moved to one 80 GB GPU whole and
    cannot be partitioned there, whatever stage-3 offload follows; under zero.Init it fits."""
    rows = {}
    for flag in ("--zero-init", "--no-zero-init"):
        res = cli("memory", "--model", "llama-70b", "--gpus", "8", "--json", flag)
        assert res.code == 0, res.stderr
        rows[flag] = {(r["stage"], r["offload_optimizer"], r["offload_param"]): r for r in json.loads(res.stdout)["rows"]}
    assert rows["--zero-init"][(3, "cpu", "cpu")]["fits"] is True
    assert rows["--no-zero-init"][(3, "cpu", "cpu")]["fits"] is False
    assert rows["--no-zero-init"][(3, "cpu", "cpu")]["breakdown"]["params"] == 2 * load_model("llama-70b").params
    assert rows["--no-zero-init"][(2, "none", "none")] == rows["--zero-init"][(2, "none", "none")]


def test_checkpoint_in_cpu_gives_predicts_numbers(cli, tmp_path) -> None:
    """memory and predict describe the same stage-3 job with the checkpoints in host memory: the same
    bytes per GPU and per node."""
    config = tmp_path / "z3.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}')
    common = ("--model", "llama-7b", "--profile", "dgx-h100", "--seq-len", "2048", "--checkpoint-in-cpu", "--json")
    rows = json.loads(cli("memory", "--micro-batch", "2", *common).stdout)["rows"]
    row = next(r for r in rows if (r["stage"], r["offload_optimizer"], r["offload_param"]) == (3, "none", "none"))
    predicted = json.loads(cli("predict", "--config", config, *common).stdout)["memory"]
    assert row["total_bytes_per_gpu"] == predicted["per_gpu_bytes"]
    assert row["cpu_bytes"] == predicted["cpu_bytes_per_node"] > 0  # 8 ranks x 31 bf16 block inputs


def test_params_without_a_catalog_model(cli) -> None:
    res = cli("memory", "--params", "7.5e9", "--world-size", "8", "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert abs(data["model"]["params"] - 7.5e9) <= 0.01 * 7.5e9
    assert data["workload"]["world_size"] == 8


def test_more_gpus_per_node_than_the_profile_is_refused_as_predict_refuses_it(cli, tmp_path) -> None:
    # memory used to accept --gpus 16 on an 8-GPU profile that predict and recommend refuse
    config = tmp_path / "ds.json"
    config.write_text('{"zero_optimization": {"stage": 2}}')
    for command in (("memory",), ("predict", "--config", str(config))):
        res = cli(*command, "--model", "llama-7b", "--profile", "dgx-h100", "--gpus", "16")
        assert res.code == 2 and "16 GPUs per node requested" in res.stderr, (command, res.stderr)


def test_default_profile_when_no_profile_and_no_gpus(cli) -> None:
    res = cli("memory", "--model", "llama-7b", "--json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["workload"]["world_size"] == 8
    assert "dgx-h100" in res.stderr and "no cached probe or calibration" in res.stderr


def test_no_profile_uses_the_cached_calibration_like_predict(cli, tmp_path, monkeypatch) -> None:
    """memory follows predict/recommend's default-profile rule: a cached calibration of a CPU host
    wins, and its ranks' memory is judged against host RAM."""
    from tests.conftest import cpu_probe_profile
    from zerotune.catalog.hardware import dump_profile
    from zerotune.schema.hardware import Calibration

    monkeypatch.setenv("ZEROTUNE_CACHE_DIR", str(tmp_path))
    profile = cpu_probe_profile("calibrated-host").model_copy(
        update={"calibration": Calibration(created="2026-11-23T00:00:00+00:00")}
    )
    profile.host.ram_bytes = 16 * 2**30
    (tmp_path / "calibrated.yaml").write_text(dump_profile(profile))
    res = cli("memory", "--model", "gpt2", "--json")
    assert res.code == 0, res.stderr
    assert "calibrated-host" in res.stderr and "host RAM (8.00 GiB, host RAM / 2 ranks)" in res.stderr
    assert json.loads(res.stdout)["workload"]["world_size"] == 2


def test_profile_without_gpus_is_accepted_with_a_note(cli, tmp_path) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text("schema_version: 1\nname: cpu-host\norigin: probe\ngpus_per_node: 0\n")
    res = cli("memory", "--model", "llama-7b", "--profile", str(path), "--gpus", "2", "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["gpu_capacity_bytes"] is None
    assert all(row["fits"] is None for row in data["rows"])
    assert "NOT checked" in res.stderr


def test_human_output_has_table_chart_and_notes(cli) -> None:
    res = cli("memory", "--model", "llama-7b", "--gpus", "8", "--seq-len", "4096", "--no-checkpointing")
    assert res.code == 0, res.stderr
    for text in (
        "ZeRO-3 opt=cpu param=cpu",
        "ZeRO-1 opt=nvme",
        "Total",
        "▒ Optim",  # NO_COLOR (the cli fixture): one glyph per part, so the legend reads without colour
        "GPU capacity",
        "note:",
        "10% margin",
    ):
        assert text in res.stdout, text
    assert "no activation checkpointing" in res.stdout
    assert not any(line.endswith(" ") for line in res.stdout.splitlines())  # piped: no trailing spaces


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--model", "llama-7b", "--gpus", "0"), "--gpus"),
        (("--model", "llama-7b", "--nodes", "0"), "--nodes"),
        (("--model", "llama-7b", "--seq-len", "-1"), "--seq-len"),
        (("--model", "llama-7b", "--precision", "fp8"), "--precision"),
        (("--model", "llama-7b", "--optimizer", "rmsprop"), "--optimizer"),
        (("--params", "-5"), "--params"),
        ((), "--model"),
    ],
)
def test_bad_numbers_exit_2_naming_the_field(cli, args: tuple[str, ...], needle: str) -> None:
    res = cli("memory", *args)
    assert res.code == 2
    assert needle in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_unknown_model_is_one_line_with_close_names(cli) -> None:
    res = cli("memory", "--model", "llama-70c", "--json")
    assert res.code == 2
    first = res.stderr.splitlines()[0]
    assert first.startswith("error:") and "llama-70c" in first and "llama-70b" in res.stderr
    assert "Traceback" not in res.stderr
    assert json.loads(res.stdout)["error"].startswith("unknown model")  # --json: an object on every path


def test_renderers_are_pure_and_show_every_option() -> None:
    rows = compare_options(load_model("llama-7b"), Workload())
    buf = StringIO()
    console = Console(file=buf, width=200, color_system=None)
    console.print(memory_table(rows))
    console.print(memory_chart(rows, capacity=80 * 2**30))
    text = buf.getvalue()
    assert text.count("ZeRO-") >= 2 * len(OFFLOAD_OPTIONS)
    assert "▶" in text  # ZeRO-0 overflows the 1.25x-capacity scale


def test_memory_json_never_imports_torch() -> None:
    """Acceptance: the command runs without importing torch/deepspeed (a fresh interpreter)."""
    code = (
        "import sys\n"
        "from zerotune.cli.app import main\n"
        "try:\n"
        "    main(['memory', '--model', 'llama-70b', '--gpus', '8', '--json'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "heavy = [m for m in ('torch', 'deepspeed', 'pynvml') if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "HEAVY=\n" in done.stderr
    assert json.loads(done.stdout)["rows"]
