"""The bench's memory prediction and the fields a GPU run adds (max_memory_reserved, optimizer
class, checkpointing), on the recorded CPU result (tests/fixtures/bench/result_stage2.json)."""

from __future__ import annotations

from pathlib import Path

from zerotune.bench.predicted import predict, predict_memory, proxy_workload, ran_torch_optimizer
from zerotune.bench.result import BenchResult
from zerotune.catalog.hardware import load_profile

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "result_stage2.json"


def _result() -> BenchResult:
    return BenchResult.model_validate_json(FIXTURE.read_text())


def test_a_result_recorded_before_the_gpu_fields_still_loads() -> None:
    result = _result()
    assert result.peak_reserved_bytes is None and result.optimizer_class is None
    assert result.proxy.activation_checkpointing is False
    assert result.prediction is None or result.prediction.peak_memory_bytes is None


def test_memory_is_predicted_without_a_profile_and_checkpointing_lowers_it() -> None:
    """The prediction is max_memory_allocated's view (no context, no cached blocks). At seq 128 the
    torch optimizer's update sets the peak and checkpointing cannot move it; at seq 1024 the
    activations do, and checkpointing lowers it."""
    result = _result()
    plain = predict_memory(result)
    assert plain and plain > 0
    ckpt = result.model_copy(update={"proxy": result.proxy.model_copy(update={"activation_checkpointing": True})})
    assert proxy_workload(ckpt.proxy).activation_checkpointing is True
    assert predict_memory(ckpt) == plain
    longer = result.model_copy(update={"proxy": result.proxy.model_copy(update={"seq_len": 1024})})
    long_ckpt = longer.model_copy(update={"proxy": longer.proxy.model_copy(update={"activation_checkpointing": True})})
    assert plain < predict_memory(long_ckpt) < predict_memory(longer)
    no_profile = predict(result, None)
    assert no_profile.step_time_s is None and no_profile.peak_memory_bytes == plain


def test_the_prediction_steps_the_optimizer_the_ranks_ran() -> None:
    """`prepare` leaves the config's optimizer section only when DeepSpeed builds the optimizer; a
    torch optimizer's update temporaries are then not predicted."""
    result = _result()
    assert ran_torch_optimizer(result)
    built = result.model_copy(update={"config": {**result.config, "optimizer": {"type": "AdamW", "params": {}}}})
    assert not ran_torch_optimizer(built)
    assert predict_memory(built) < predict_memory(result)


def test_step_and_memory_predictions_come_together_with_a_profile() -> None:
    prediction = predict(_result(), load_profile("dgx-h100"))
    assert prediction.step_time_s and prediction.step_time_s > 0
    assert prediction.peak_memory_bytes == predict_memory(_result())
