"""`zerotune bench` on 2 gloo ranks: real DeepSpeed steps under ZeRO stages 0-3.

One `--compare-stages --json` run (four launches, a tiny llama-7b proxy, small buckets) is shared
by the tests below. They check DeepSpeed's real collectives against the bucketing rules of
deepspeed/runtime/zero/stage_1_and_2.py and stage3.py (0.19.8): gradients are reduced in
gradient-ready order (the reverse of the parameter order), a bucket is flushed when the next
gradient would take it past `reduce_bucket_size` elements, and a gradient larger than the bucket
is reduced alone; stage 3 gathers every non-persistent parameter (numel > the persistence
threshold) before its module's forward.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zerotune.bench.decoder import module_names
from zerotune.bench.result import BenchResult
from zerotune.schema.model import ModelSpec

pytestmark = pytest.mark.slow

R = 200_000  # reduce / prefetch bucket size, elements
PERSISTENCE = 1_000
NPROC = 2
FP32 = 4
CONFIG = {
    "train_micro_batch_size_per_gpu": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {
        "stage": 2,
        "overlap_comm": True,
        "reduce_bucket_size": R,
        "allgather_bucket_size": R,
        "stage3_prefetch_bucket_size": R,
        "stage3_param_persistence_threshold": PERSISTENCE,
    },
}
# warm-up 1 + 2 unlogged + 2 logged steps over 4 cycling batches: step 5 sees batch 0 again.
ARGS = ["--model", "llama-7b", "--layers", "2", "--width-scale", "0.03125", "--seq-len", "32",
        "--nproc", str(NPROC), "--device", "cpu", "--warmup", "1", "--steps", "2", "--logged-steps", "2",
        "--timeout", "240"]  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench")


@pytest.fixture(scope="module")
def result(folder: Path) -> BenchResult:
    config = folder / "stage2.json"
    config.write_text(json.dumps(CONFIG))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zerotune",
            "bench",
            *ARGS,
            "--config",
            str(config),
            "--compare-stages",
            "--log",
            str(folder / "bench.log"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # --json: stdout is exactly one JSON document (DeepSpeed's own logging stays in the rank logs).
    return BenchResult.model_validate(json.loads(done.stdout))


def _spec(result: BenchResult) -> ModelSpec:
    return ModelSpec.model_validate(result.proxy.model)


def _expected_buckets(spec: ModelSpec, bucket: int) -> list[int]:
    """Independent restatement of DeepSpeed's bucket filling, in gradient-ready order."""
    ready = [n for layer in reversed(spec.layers) for n in reversed(layer.tensors)]
    out, filled = [], 0
    for numel in ready:
        if filled and filled + numel > bucket:
            out.append(filled)
            filled = 0
        filled += numel
        if numel > bucket:
            out.append(filled)
            filled = 0
    return out + ([filled] if filled else [])


def _calls(result: BenchResult, stage: int, op: str, phase: str) -> list[int]:
    run = next(r for r in result.parity.stages if r.stage == stage)
    return [b.bytes // FP32 for b in run.buckets if b.op == op and b.phase == phase]


def test_result_describes_the_proxy_and_the_config_it_ran(result: BenchResult) -> None:
    spec = _spec(result)
    assert result.schema_version == 1 and result.stage == 2 and result.nproc == NPROC
    assert (result.proxy.layers, result.proxy.seq_len, result.proxy.dtype) == (2, 32, "fp32")
    assert spec.num_layers == 2 and spec.hidden_size == 128  # llama-7b: 4096 x 1/32
    assert result.config["zero_optimization"]["reduce_bucket_size"] == R
    assert result.config["train_batch_size"] == NPROC
    assert [layer.name for layer in result.layers] == module_names(spec)
    assert len(result.step_times_s) == 2 and result.step_time_s > 0
    assert result.phases.forward_s > 0 and result.phases.backward_s > 0 and result.phases.step_s > 0
    assert all(layer.forward_s > 0 and layer.backward_s > 0 for layer in result.layers)
    assert {s.phase for s in result.timeline} == {"forward", "backward", "step"}
    assert all(p > b > 0 for p, b in zip(result.peak_memory_bytes, result.baseline_memory_bytes, strict=True))


def test_its_log_is_a_training_log_calibrate_from_log_reads(result: BenchResult, folder: Path) -> None:
    """`--log`: rank 0's DeepSpeed output of the config's own stage, headed by the job it ran, so
    `calibrate --from-log` needs no --model/--config/--seq-len for the proxy no catalog holds."""
    from zerotune.calibrate.observe import observations
    from zerotune.diagnose.analyse import Options
    from zerotune.schema.hardware import HardwareProfile

    log = folder / "bench.log"
    notes: list[str] = []
    calibrated = Path(__file__).resolve().parents[1] / "fixtures" / "calibrate" / "loaded_runs.json"
    cpu = HardwareProfile.model_validate(json.loads(calibrated.read_text())["base"])  # a CPU probe's profile
    (run,) = observations([str(log)], None, Options(), cpu, notes)
    assert run.spec == _spec(result) and run.zero.stage == 2 and run.world == NPROC
    assert (run.workload.seq_len, run.workload.micro_batch, run.workload.grad_accum) == (32, 1, 1)
    # every step's timers: warm-up 1 + 2 measured + 2 logged, the first dropped from the median
    assert "(5 steps, median)" in run.measured.step_s.source
    assert run.measured.compute_s is not None and run.measured.optimizer_s is not None


@pytest.mark.parametrize("stage", [1, 2])
def test_stage_1_and_2_reduce_gradients_in_buckets_of_reduce_bucket_size(
    result: BenchResult, stage: int
) -> None:
    spec = _spec(result)
    reduced = _calls(result, stage, "all_reduce", "backward")
    assert reduced == _expected_buckets(spec, R)
    assert len(reduced) > 2 and sum(reduced) == spec.params
    assert all(size <= max(R, spec.largest_tensor) for size in reduced)
    # After the optimizer step every rank all-gathers its updated partition (padded for alignment).
    (shard,) = _calls(result, stage, "all_gather_into_tensor", "step")
    assert spec.params <= shard * NPROC < spec.params * 1.05


def test_stage_0_reduces_all_gradients_in_one_call(result: BenchResult) -> None:
    assert _calls(result, 0, "all_reduce", "backward") == [_spec(result).params]


def test_stage_3_reduce_scatters_buckets_and_gathers_non_persistent_parameters(result: BenchResult) -> None:
    spec = _spec(result)
    assert _calls(result, 3, "reduce_scatter_tensor", "backward") == _expected_buckets(spec, R)
    gathered = _calls(result, 3, "all_gather_into_tensor", "forward")
    persistent = sum(n for layer in spec.layers for n in layer.tensors if n <= PERSISTENCE)
    assert persistent > 0 and sum(gathered) * NPROC == spec.params - persistent


def test_collective_summary_counts_calls_per_step(result: BenchResult) -> None:
    per_step = sum(c.count for c in result.collectives if c.phase == "backward")
    assert per_step == len(_expected_buckets(_spec(result), R))
    assert result.comm_bytes("all_reduce", "backward") == _spec(result).params * FP32


def test_losses_agree_across_stages_and_training_moved_them(result: BenchResult) -> None:
    parity = result.parity
    assert parity is not None and [r.stage for r in parity.stages] == [0, 1, 2, 3]
    assert parity.agree, parity.model_dump()
    losses = parity.stages[0].losses
    assert len(losses) == 5
    # Step 5 sees step 1's batch again after four updates: the loss fell far more than the tolerance,
    # so agreement means the updates themselves matched, not just the initial forward.
    assert losses[0] - losses[4] > 1000 * max(parity.max_abs_diff, 1e-6)


def test_a_config_deepspeed_rejects_fails_cleanly(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_size": 0}}))
    run = cli("bench", *ARGS, "--config", bad, "--steps", "1", "--logged-steps", "1", "--json")
    assert run.code == 1
    assert json.loads(run.stdout)["exit_code"] == 1  # --json: the error as a JSON object, nothing else
    assert re.search(r"error: rank \d exited with 1 during 'deepspeed.initialize'", run.stderr), run.stderr
    assert "reduce_bucket_size" in run.stderr and "greater than 0" in run.stderr
    assert "Traceback" not in run.stderr
