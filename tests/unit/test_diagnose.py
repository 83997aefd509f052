"""`zerotune diagnose` on the log corpus (tests/fixtures/logs) and on constructed inputs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from zerotune.cli.app import app
from zerotune.diagnose.analyse import Options, analyse
from zerotune.diagnose.records import normalise
from zerotune.diagnose.report import SCHEMA_VERSION, Report
from zerotune.diagnose.scan import scan_stream
from zerotune.diagnose.signals.memory import size_bytes
from zerotune.model.fit import padded
from zerotune.schema.job import SAFETY_MARGIN

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
MANIFEST = yaml.safe_load((LOGS / "manifest.yaml").read_text())
REAL = MANIFEST["real"]
SYNTHETIC = MANIFEST["synthetic"]
HOLDOUT = MANIFEST["holdout"]
ACCURACY_TARGET = 0.90


def body(kind: str, name: str) -> bytes:
    """The log without its `## ` fixture header."""
    lines = (LOGS / kind / name).read_bytes().splitlines(keepends=True)
    return b"".join(line for line in lines if not line.startswith(b"## "))


def diagnose(data: bytes, **options) -> Report:
    report, _ = analyse(io.BytesIO(data), "test.log", Options(**options))
    return report


def _size(text: str) -> int:
    number, unit = text.split()
    return size_bytes(number, unit)


# ---- the corpus ------------------------------------------------------------------------------------------------


def test_corpus_is_what_the_issue_asks_for() -> None:
    assert len(REAL) >= 25
    files = {p.name for p in (LOGS / "real").glob("*.log")}
    assert files == {e["file"] for e in REAL}, "manifest and real/ disagree"
    for entry in REAL:
        head = (LOGS / "real" / entry["file"]).read_text().splitlines()[:3]
        assert head[0].startswith("## source: https://github.com/"), entry["file"]
        assert head[1].startswith("## cause: "), entry["file"]
    assert {e["file"] for e in SYNTHETIC} == {p.name for p in (LOGS / "synthetic").glob("*.log")}
    assert {e["file"] for e in HOLDOUT} == {p.name for p in (LOGS / "holdout").glob("*.log")}


def test_class_accuracy_on_the_real_corpus() -> None:
    wrong = []
    for entry in REAL:
        got = diagnose(body("real", entry["file"])).diagnosis.cause
        if got != entry["class"]:
            wrong.append(f"{entry['file']}: {got} != {entry['class']}")
    accuracy = 1 - len(wrong) / len(REAL)
    print(f"class accuracy on {len(REAL)} real logs: {accuracy:.1%}")
    assert accuracy >= ACCURACY_TARGET, wrong


def test_class_accuracy_on_the_holdout_logs() -> None:
    """Logs labelled after the classifier was written. First runs: batch 1 8/10 (two SIGKILL-only logs
    were called "rank killed" until SIGKILL without memory figures became host_oom with a caveat),
    batch 2 5/6 (DeepSpeed's "Micro batch size per gpu: 0 has to be greater than 0" assertion was not
    recognised). Both were fixed after the run, so this now passes on data that is no longer unseen."""
    wrong = [e["file"] for e in HOLDOUT if diagnose(body("holdout", e["file"])).diagnosis.cause != e["class"]]
    accuracy = 1 - len(wrong) / len(HOLDOUT)
    print(f"class accuracy on {len(HOLDOUT)} hold-out logs: {accuracy:.1%}")
    assert accuracy >= ACCURACY_TARGET, wrong


@pytest.mark.parametrize("entry", SYNTHETIC, ids=lambda e: e["file"])
def test_synthetic_bench_logs(entry: dict) -> None:
    assert diagnose(body("synthetic", entry["file"])).diagnosis.cause == entry["class"]


RULE_CASES = [(kind, e) for kind in ("real", "holdout", "synthetic") for e in MANIFEST[kind] if "rule" in e]


@pytest.mark.parametrize(("kind", "entry"), RULE_CASES, ids=lambda x: x if isinstance(x, str) else x["file"])
def test_rejected_configs_map_to_the_validate_rule(kind: str, entry: dict) -> None:
    assert entry["rule"] in diagnose(body(kind, entry["file"])).diagnosis.rejected.rule_codes


OOM_CASES = [("real", e) for e in REAL if "oom" in e] + [("holdout", e) for e in HOLDOUT if "oom" in e]


@pytest.mark.parametrize(("kind", "entry"), OOM_CASES, ids=lambda x: x if isinstance(x, str) else x["file"])
def test_oom_numbers_and_phase_match_the_log(kind: str, entry: dict) -> None:
    oom = diagnose(body(kind, entry["file"])).diagnosis.oom
    want = entry["oom"]
    assert oom is not None
    assert oom.phase == want.get("phase", oom.phase)
    assert oom.gpu_index == want.get("gpu")
    assert oom.tried_bytes == (_size(want["tried"]) if "tried" in want else None)
    assert oom.capacity_bytes == (_size(want["capacity"]) if "capacity" in want else None)
    if "allocated" in want:
        assert oom.allocated_bytes == _size(want["allocated"])


COLLECTIVE_CASES = [("real", e) for e in REAL if "collective" in e] + [
    ("holdout", e) for e in HOLDOUT if "collective" in e
]


@pytest.mark.parametrize(
    ("kind", "entry"), COLLECTIVE_CASES, ids=lambda x: x if isinstance(x, str) else x["file"]
)
def test_collective_and_ranks(kind: str, entry: dict) -> None:
    info = diagnose(body(kind, entry["file"])).diagnosis.collective
    assert info is not None
    assert info.ranks == entry["collective"]["ranks"]
    if "op" in entry["collective"]:
        assert info.op == entry["collective"]["op"]


def test_missing_inputs_are_asked_for_and_host_oom_gets_host_ram() -> None:
    notes = diagnose(body("real", "ds1624_oom_allgather.log")).notes
    assert any("pass --model" in n for n in notes) and any("pass --config" in n for n in notes)
    report = diagnose(body("real", "openrlhf841_host_oom_cpuadam.log"), model="llama-7b")
    # ZeRO-2 + CPU Adam rebuilt from the engine lines: fp32 master + moments + fp32 grads + 16-bit copy
    assert any("of host RAM per node" in n for n in report.notes)
    assert report.memory is None  # a host OOM is not explained with GPU terms


def _stage2_config(tmp_path: Path) -> Path:
    """A bf16 ZeRO-2 config of micro-batch 1, written to tmp_path/ds.json."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 2}}))  # fmt: skip
    return cfg


def test_slow_step_is_compared_with_the_step_model(tmp_path: Path) -> None:
    lines = [
        f"[rank0]: [Rank 0] time (ms) | fwd: {f} | bwd: {b} | bwd_inner: {b - 400} | bwd_allreduce: 400.0 | step: 50.0"
        for f, b in ((300.0, 900.0), (320.0, 940.0))
    ]
    cfg = _stage2_config(tmp_path)
    report = diagnose(("\n".join(lines) + "\n").encode(), model="llama-7b", config=str(cfg), world_size=8)
    assert report.step is not None
    assert report.step.measured_ms == pytest.approx((300 + 900 + 50 + 320 + 940 + 50) / 2)
    assert report.step.measured_exposed_comm_ms == pytest.approx(400.0)
    assert report.step.predicted_ms > 0 and "predicted" in report.step.text


def test_throughput_and_step_time_are_facts_with_their_lines() -> None:
    facts = {f.name: f for f in diagnose(body("real", "ds1825_throughput_ok.log")).facts}
    sps = facts["samples_per_s (mean)"]
    assert sps.value == pytest.approx((83.48609168106144 + 83.73838805358588) / 2, abs=1e-3)
    assert sps.source == "log:2 and 1 more lines"
    assert facts["max_mem_allocated_gb"].value == 9.02
    step = {f.name: f for f in diagnose(body("real", "ds1436_slow_allreduce.log")).facts}
    assert step["step_ms (mean fwd + bwd + step)"].value == pytest.approx(435.67 + 744.11 + 0.98)


def test_config_rejection_maps_to_the_validate_rule() -> None:
    report = diagnose(body("real", "llamafactory5252_prefetch_float.log"))
    assert report.diagnosis.rejected.fields[0].field == "stage3_prefetch_bucket_size"
    assert report.diagnosis.rejected.fields[0].value == "15099494.4"
    assert report.diagnosis.rejected.rule_codes == ["ZT601"]


def test_hf_mismatch_lists_every_key() -> None:
    fields = diagnose(body("real", "apps9_hf_mismatch.log")).diagnosis.rejected.fields
    assert [f.field for f in fields] == [
        "train_batch_size",
        "optimizer.params.lr",
        "scheduler.params.warmup_max_lr",
        "scheduler.params.warmup_num_steps",
    ]
    assert fields[0].value == "8"


# ---- the fix -----------------------------------------------------------------------------------------------------


def fix_cases() -> list[dict]:
    return [e for e in REAL if "fix" in e]


@pytest.mark.parametrize("entry", fix_cases(), ids=lambda e: e["file"])
def test_fix_fits_changes_at_most_three_keys_and_names_the_term(entry: dict) -> None:
    f = entry["fix"]
    report = diagnose(
        body("real", entry["file"]),
        model=str(LOGS / f["model"]),
        config=str(LOGS / f["config"]),
        world_size=f["world"],
        seq_len=f["seq_len"],
        checkpointing=f["checkpointing"],
    )
    assert report.memory is not None and report.fix is not None
    assert report.memory.overflowing_term == "activations"  # the phase the traceback shows
    assert "activations" in report.memory.text
    assert report.fix.fits and 1 <= len(report.fix.changes) <= 3
    assert padded(report.fix.predicted_bytes, SAFETY_MARGIN) <= report.fix.capacity_bytes  # predict's verdict
    # the gap between what the run needed and what the model has live in the OOM's phase (the forward pass:
    # at most the step's peak) is carried into the check
    m = report.memory
    assert m.phase_live_bytes <= m.predicted_bytes
    assert m.model_gap_bytes == m.observed_need_bytes - m.phase_live_bytes


LLAMA_OOM = (
    '[rank0]:   File "/x/deepspeed/runtime/engine.py", line 1, in forward\n'
    "[rank0]:     loss = self.module(*inputs, **kwargs)\n"
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 79.10 GiB of which 1.00 GiB is free. Of the allocated memory 76.00 GiB is allocated by PyTorch\n"
)


def test_activation_oom_fix_halves_the_micro_batch(tmp_path: Path) -> None:
    cfg = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "bf16": {"enabled": True}}
    cfg["zero_optimization"] = {"stage": 2}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    report = diagnose(
        LLAMA_OOM.encode(), model="llama-7b", config=str(path), world_size=8, checkpointing=False
    )
    assert report.diagnosis.oom.phase == "activations_forward"
    keys = [c.key for c in report.fix.changes]
    assert keys[0] == "train_micro_batch_size_per_gpu"
    new_micro = report.fix.changes[0].new
    accum = next(c.new for c in report.fix.changes if c.key == "gradient_accumulation_steps")
    assert new_micro * accum == 16  # the global batch is kept


GATHER_OOM = (
    '[rank0]:   File "/x/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 435, in __all_gather_params\n'
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.07 GiB. GPU 0 has a total capacity "
    "of 23.68 GiB of which 586.69 MiB is free.\n"
)
GATHER_CONFIG = {
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "zero_optimization": {
        "stage": 3,
        "stage3_max_live_parameters": 3e10,
        "stage3_prefetch_bucket_size": 3e10,
    },
}


def test_gather_oom_fix_caps_the_live_parameters(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(GATHER_CONFIG))
    report = diagnose(GATHER_OOM.encode(), model="llama-7b", config=str(path), world_size=8, seq_len=1024)
    assert report.diagnosis.oom.phase == "param_gather"
    assert report.memory.overflowing_term == "comm_buffers"
    assert [c.key for c in report.fix.changes] == [
        "zero_optimization.stage3_max_live_parameters",
        "zero_optimization.stage3_prefetch_bucket_size",
    ]
    assert report.fix.predicted_bytes <= report.fix.capacity_bytes


def test_hf_managed_micro_batch_is_left_to_the_trainer(tmp_path: Path) -> None:
    cfg = {
        "train_micro_batch_size_per_gpu": "auto",
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2},
    }
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    report = diagnose(
        LLAMA_OOM.encode(), model="llama-7b", config=str(path), world_size=8, checkpointing=False
    )
    assert report.fix is not None
    assert all(c.key != "train_micro_batch_size_per_gpu" for c in report.fix.changes)


def test_out_writes_config_and_reasons_sidecar(cli, tmp_path: Path) -> None:
    entry = fix_cases()[0]
    f = entry["fix"]
    log = tmp_path / "run.log"
    log.write_bytes(body("real", entry["file"]))
    out = tmp_path / "fixed.json"
    args = ["diagnose", str(log), "--model", str(LOGS / f["model"]), "--config", str(LOGS / f["config"])]
    args += ["--world-size", "6", "--seq-len", "128", "--no-checkpointing", "--out", str(out)]
    result = cli(*args)
    assert result.code == 1, result.stderr
    assert f"wrote {out}" in result.stdout
    fixed = json.loads(out.read_text())
    reasons = Path(f"{out}.reasons.md").read_text()
    assert fixed["zero_optimization"]["stage"] == 3
    assert "written by zerotune diagnose" in reasons and "`zero_optimization.stage`" in reasons
    again = cli(*args)
    assert again.code == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr
    assert cli(*args, "--force").code == 1


# ---- parsing details ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text", "rank"),
    [
        ("[rank3]: RuntimeError: boom", "RuntimeError: boom", 3),
        ("gpu-q-13: [rank12]:[E1101 x] oops", "[E1101 x] oops", 12),
        ("2024-05-01 10:00:00,123 [rank0]: x", "x", 0),
        ("RuntimeError: CUDA out of memory", "RuntimeError: CUDA out of memory", None),
        ("10.0.0.7: hello", "hello", None),
        ("[default5]:[2022-12-08 16:39:23,472] [INFO] x", "[2022-12-08 16:39:23,472] [INFO] x", None),  # local rank
    ],
)
def test_prefixes_are_removed(raw: str, text: str, rank: int | None) -> None:
    assert normalise(raw) == (text, rank)


@pytest.mark.parametrize(
    ("frame", "phase"),
    [
        (
            "deepspeed/runtime/zero/stage3.py, line 1315, in __reduce_and_partition_ipg_grads",
            "gradient_buckets",
        ),
        ("deepspeed/runtime/zero/stage_1_and_2.py, line 1, in reduce_ipg_grads", "gradient_buckets"),
        ("deepspeed/runtime/engine.py, line 3, in save_checkpoint", "checkpoint_save"),
        (
            "deepspeed/runtime/zero/stage_1_and_2.py, line 9, in initialize_optimizer_states",
            "optimizer_states",
        ),
        ("deepspeed/runtime/engine.py, line 1, in _configure_zero_optimizer", "init"),
        ("torch/_tensor.py, line 5, in backward", "activations_backward"),
        ("modeling_llama.py, line 7, in forward", "activations_forward"),
        ("my_script.py, line 1, in main", "unknown"),
    ],
)
def test_oom_phase_from_the_traceback(frame: str, phase: str) -> None:
    log = f'Traceback (most recent call last):\n  File "{frame}\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB\n'
    assert diagnose(log.encode()).diagnosis.oom.phase == phase


def test_config_dump_is_reconstructed_across_blocks() -> None:
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8},
    }
    dump = json.dumps(config, sort_keys=True, indent=4, separators=(",", ":"))
    lines = ["noise"] * 50 + [
        f"[2024-01-01 00:00:00,000] [INFO] [config.py:1:print_user_config]   json = {dump}"
    ]
    data = ("\n".join(f"[rank0]: {line}" for line in "\n".join(lines).split("\n")) + "\n").encode()
    s = scan_stream(io.BytesIO(data), block_bytes=97)  # blocks far smaller than the dump
    assert s.config == config
    assert s.config_line is not None and s.config_line.number == 51
    assert s.lines == data.count(b"\n")


def test_line_numbers_survive_small_blocks() -> None:
    data = (
        b"a\n" * 1000
        + b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 8.00 GiB total capacity)\n"
    )
    for block in (7, 64, 4096):
        s = scan_stream(io.BytesIO(data), block_bytes=block)
        assert s.ooms[0].line.number == 1001
        assert s.ooms[0].tried == 2 * 1024**2


# ---- CLI contract ------------------------------------------------------------------------------------------------


def test_exit_codes_and_stdin(cli, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["diagnose", "-"], input=body("real", "ds1825_throughput_ok.log"))
    assert ok.exit_code == 0, ok.output
    failed = runner.invoke(app, ["diagnose", "-"], input=body("real", "ds6705_nccl_allreduce.log"))
    assert failed.exit_code == 1 and "NCCL ALLREDUCE timed out" in failed.output
    missing = cli("diagnose", tmp_path / "nope.log")
    assert missing.code == 2 and "cannot read" in missing.stderr
    assert cli("diagnose", tmp_path).code == 2
    assert cli("diagnose", "-", "--seq-len", "0").code == 2
    (tmp_path / "empty.log").write_text("")
    empty = cli("diagnose", tmp_path / "empty.log")  # was "No failure found", exit 0
    assert empty.code == 2 and "is empty" in empty.stderr and "Traceback" not in empty.stderr


def test_json_output_is_the_versioned_schema() -> None:
    result = CliRunner().invoke(
        app, ["diagnose", "-", "--json"], input=body("real", "ds1624_oom_allgather.log")
    )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    report = Report.model_validate(doc)
    assert doc["schema_version"] == SCHEMA_VERSION == report.schema_version
    assert report.diagnosis.cause == "gpu_oom" and report.diagnosis.evidence[0].line == 3
    schema = Report.model_json_schema()
    assert {"diagnosis", "exit_code"} <= set(schema["required"]) and "schema_version" in schema["properties"]


def test_github_annotation_points_at_the_evidence_line(tmp_path: Path) -> None:
    log = tmp_path / "train, 1.log"
    log.write_bytes(body("real", "ds1624_oom_allgather.log"))
    result = CliRunner().invoke(app, ["diagnose", str(log), "--format", "github"])
    line = result.stdout.strip()
    assert line.startswith("::error file=")
    assert "train%2C 1.log,line=3,title=zerotune diagnose%3A GPU out of memory" in line
    assert "\n" not in line
    stated = ["--params", "1.35e9", "--profile", "8xrtx3090", "--gpus", "1",
              "--config", str(LOGS / "configs" / "ds1635_zero3_cpu_offload_fp16.json")]  # fmt: skip
    slow = CliRunner().invoke(
        app, ["diagnose", "-", "--format", "github", *stated], input=body("threads", "ds1635_cpu_adam_step_timers.log")
    )
    assert slow.exit_code == 1 and slow.stdout.startswith("::warning ")
    healthy = CliRunner().invoke(app, ["diagnose", "-", "--format", "github"], input=b"all good\n")
    assert healthy.exit_code == 0 and healthy.stdout == ""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=3000),
        st.lists(
            st.sampled_from(
                [
                    "CUDA out of memory. Tried to allocate",
                    "json = {",
                    "1 validation error for DeepSpeedZeroConfig",
                    "Please correct the following DeepSpeed config values that mismatch TrainingArguments values:",
                    "- ds x=1 vs hf y=2",
                    "WorkNCCL(SeqNum=1, OpType=X, Timeout(ms)=5)",
                    "[Rank 1] Running collective: CollectiveFingerPrint(SequenceNumber=9",
                    "exits with return code = -9",
                    "time (ms) | fwd: 1 | bwd: x | step: 3",
                    "Total persistent parameters: 12",
                    "all params: 9999999999999",
                    "[rank2]: ",
                    "\x00\xff",
                ]
            )
            | st.text(max_size=80),
            max_size=40,
        ).map(lambda parts: "\n".join(parts).encode("utf-8", "surrogatepass")),
    )
)
def test_arbitrary_input_never_raises(data: bytes) -> None:
    report = diagnose(data)
    assert report.exit_code in (0, 1)
    Report.model_validate_json(report.model_dump_json())


def test_a_compact_config_dump_is_read(monkeypatch) -> None:
    dump = json.dumps({"train_micro_batch_size_per_gpu": 0, "zero_optimization": {"stage": 3}})
    log = (
        "trainable params: 1 || all params: 7000000000 || trainable%: 0.0\n"
        f"[INFO] [config.py:1:print_user_config]   json = {dump}\n" + LLAMA_OOM
    )
    report = diagnose(log.encode())
    assert report.diagnosis.cause == "gpu_oom"
    assert any(f.name == "config" and f.source == "log:2" for f in report.facts)
    assert report.memory is not None  # the 7B model from the parameter count, the config from the dump

    # a model failure on values read from a log is a note, never a lost diagnosis
    from zerotune.diagnose import explain

    def broken(*args, **kwargs):
        raise ValueError("micro_batch must be > 0")

    monkeypatch.setattr(explain, "memory_check", broken)
    report = diagnose(log.encode())
    assert report.diagnosis.cause == "gpu_oom" and report.exit_code == 1
    assert any("could not be modelled" in n for n in report.notes)


def test_arbitrary_bytes_through_the_cli_exit_cleanly() -> None:
    """The CLI boundary: exit 0/1/2 and never a traceback (subprocess: the real entry point)."""
    for data in (b"\xff\xfe\x00garbage\n" * 100, b"", b"json = {\n" + b"{" * 5000):
        done = subprocess.run(
            [sys.executable, "-m", "zerotune", "diagnose", "-"], input=data, capture_output=True, timeout=120
        )
        assert done.returncode in (0, 1, 2)
        assert b"Traceback" not in done.stderr


def test_figures_quoted_as_dots_are_not_numbers() -> None:
    """Prose quoting a log field without its number (`SamplesPerSec=...`, `MA ... GB`, a fixture's own
    header in DeepSpeed issue 255's excerpt) stopped the scan with a float() error: no figure, no raise."""
    text = (
        "0/450, SamplesPerSec=...\nCurrSamplesPerSec=.., MaxMemAllocated=..GB\n"
        "MA . GB  Max_MA .. GB  CA . GB  Max_CA . GB\nCPU Virtual Memory:  used = ... GB, percent = .%\n"
        "num_elems = ..B\ntime (ms) | fwd: .. | bwd: . | bwd_inner: . | bwd_allreduce: . | step: .\n"
        " 5/10 [00:05<00:05, ...s/it]\n{'train_runtime': ..., 'train_steps_per_second': .}\n"
    )
    scan = scan_stream(io.BytesIO(text.encode()))
    assert not scan.memory_reports and not scan.series and scan.samples_per_s == [0.0, 0.0]
    assert diagnose(text.encode()).diagnosis.cause == "none"


def test_the_optimizer_is_said_once_and_an_unmodelled_one_is_named(tmp_path: Path, cli) -> None:
    """diagnose takes --optimizer like predict, the config's `optimizer.type` wins where it names one, and
    a type the model does not cost is costed as AdamW with a notice, in both commands (never silently)."""
    from zerotune.model.states import MOMENT_BYTES
    from zerotune.schema.job import modelled_optimizer

    cfg = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 2}}  # fmt: skip
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    run = {"model": "llama-7b", "config": str(path), "world_size": 8, "checkpointing": False}
    adamw = diagnose(LLAMA_OOM.encode(), **run).memory.terms["optimizer_states"]
    sgd = diagnose(LLAMA_OOM.encode(), **run, optimizer="sgd").memory.terms["optimizer_states"]
    params = 6_738_415_616  # llama-7b (HF config counts)
    per_rank = (MOMENT_BYTES["adamw"] - MOMENT_BYTES["sgd"]) * params / 8
    assert adamw - sgd == pytest.approx(per_rank, rel=0.01)
    assert modelled_optimizer("Lamb", None) == ("adam", "optimizer 'Lamb' keeps adam's state: costed as adam")
    assert modelled_optimizer(None, "lion") == ("lion", None) and modelled_optimizer("AdamW", "sgd") == ("adamw", None)
    path.write_text(json.dumps(cfg | {"optimizer": {"type": "Muon", "params": {"lr": 1e-3}}}))
    report = diagnose(LLAMA_OOM.encode(), **run, optimizer="sgd")
    assert report.memory.terms["optimizer_states"] == adamw  # the config's type wins over the flag
    assert sum("'Muon' is not modelled" in n for n in report.notes) == 1
    said = cli("predict", "--model", "llama-7b", "--profile", "dgx-h100", "--gpus", "8", "--config", path)
    assert "'Muon' is not modelled: costed as AdamW" in " ".join(said.stderr.split())


HF_OOM = (
    "[INFO|trainer.py:2082] >>   Instantaneous batch size per device = 4\n"
    "[INFO|trainer.py:2084] >>   Total train batch size (w. parallel, distributed & accumulation) = 64\n"
    "[INFO|trainer.py:2085] >>   Gradient Accumulation steps = 2\n"
    "[INFO] [logging.py:107:log_dist] [Rank 0] Creating torch.bfloat16 ZeRO stage 2 optimizer\n" + LLAMA_OOM
)
HF_AUTO = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
           "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}  # fmt: skip


def test_an_hf_config_is_modelled_as_the_trainer_filled_it(tmp_path: Path, cli) -> None:
    """An HF Trainer run's "auto" config is read the way predict reads it (dsconfig/hf_auto.py
    trainer_values): precision, micro-batch and accumulation from the log's own lines (else the flags),
    buckets from the hidden size; DeepSpeed's defaults (fp32, micro-batch 1) are not what ran. The
    corrected config keeps the "auto" keys and validate judges it as HF's."""
    from zerotune.catalog.models import load_model
    from zerotune.dsconfig import hf_auto

    path = tmp_path / "ds.json"
    path.write_text(json.dumps(HF_AUTO))
    job = ("--model", "llama-7b", "--seq-len", "2048", "--checkpointing", "--profile", "dgx-h100")
    report = diagnose(HF_OOM.encode(), model="llama-7b", config=str(path), seq_len=2048, checkpointing=True)
    filled = hf_auto.fill(HF_AUTO, hf_auto.trainer_values(load_model("llama-7b"), precision="bf16", micro_batch=4,
                                                          grad_accum=2, world_size=8))  # fmt: skip
    filled_path = tmp_path / "filled.json"
    filled_path.write_text(json.dumps(filled))
    said = json.loads(cli("predict", *job, "--gpus", "8", "--config", filled_path, "--margin", "0", "--json").stdout)
    assert report.memory.predicted_bytes == said["memory"]["per_gpu_bytes"]  # the same job as predict's
    assert any("micro_batch 4 (log:1)" in n and "precision bf16 (log:4)" in n for n in report.notes)
    assert not [f for f in report.lint if f.code == "ZT801"]  # HF fills those "auto" keys
    options = Options(model="llama-7b", config=str(path), seq_len=2048, checkpointing=False)
    _, fixed = analyse(io.BytesIO(HF_OOM.encode()), "hf.log", options)
    assert fixed is not None and fixed["train_micro_batch_size_per_gpu"] == "auto"  # HF's keys stay HF's
    flagged = diagnose(HF_OOM.encode(), model="llama-7b", config=str(path), seq_len=2048, checkpointing=True,
                       micro_batch=2)  # fmt: skip
    assert flagged.memory.predicted_bytes < report.memory.predicted_bytes  # the flag wins over the log
    bare = diagnose(LLAMA_OOM.encode(), model="llama-7b", config=str(path), seq_len=2048, world_size=8)
    assert any("micro_batch 1 (assumed: pass --micro-batch)" in n for n in bare.notes)


def test_slow_verdict_is_beyond_the_error_predict_quotes(tmp_path: Path) -> None:
    """'slower than the model expects' only past the expected error predict states for the job."""
    cfg = _stage2_config(tmp_path)

    def step(total_ms: float):
        line = f"[rank0]: [Rank 0] time (ms) | fwd: {total_ms / 3} | bwd: {total_ms * 2 / 3} | step: 0.0"
        return diagnose((line + "\n").encode(), model="llama-7b", config=str(cfg), world_size=8).step

    first = step(1000.0)
    assert first is not None
    predicted = first.predicted_ms
    inside, beyond = step(predicted * 1.1), step(predicted * 3.0)
    assert inside is not None and beyond is not None
    assert "slower than the model expects" not in inside.text
    assert "slower than the model expects" in beyond.text and "expected error" in beyond.text
