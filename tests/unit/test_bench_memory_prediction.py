"""The bench's memory prediction and the fields a GPU run adds (max_memory_reserved, optimizer
class, checkpointing), on the recorded CPU result (tests/fixtures/bench/result_stage2.json)."""

from __future__ import annotations

from pathlib import Path

from zerotune.bench.predicted import predict, predict_memory, proxy_workload
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
    result = _result()
    plain = predict_memory(result)
    assert plain and plain > 0
    ckpt = result.model_copy(update={"proxy": result.proxy.model_copy(update={"activation_checkpointing": True})})
    assert proxy_workload(ckpt.proxy).activation_checkpointing is True
    assert predict_memory(ckpt) < plain
    no_profile = predict(result, None)
    assert no_profile.step_time_s is None and no_profile.peak_memory_bytes == plain


def test_step_and_memory_predictions_come_together_with_a_profile() -> None:
    prediction = predict(_result(), load_profile("dgx-h100"))
    assert prediction.step_time_s and prediction.step_time_s > 0
    assert prediction.peak_memory_bytes == predict_memory(_result())
