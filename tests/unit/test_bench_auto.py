"""bench on configs with HF "auto" values (rejected up front, or filled with --hf), and long
gradient accumulation measured on a bounded number of micro-steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cpu_probe_profile
from zerotune.bench.config import fill_auto
from zerotune.bench.predicted import scale_micro_steps
from zerotune.bench.result import BenchResult
from zerotune.catalog.models import load_model
from zerotune.errors import InputError


def test_auto_values_are_an_input_error_naming_them() -> None:
    config = {
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
    }
    with pytest.raises(InputError) as caught:
        fill_auto(config, load_model("llama-7b"), hf=False)
    message = caught.value.message
    assert "gradient_clipping" in message and "/zero_optimization/reduce_bucket_size" in message
    assert "train_batch_size" not in message and "optimizer" not in message  # the bench sets those
    assert "--hf" in caught.value.hint


def test_hf_fills_auto_as_the_trainer_would() -> None:
    model = load_model("llama-7b")  # hidden 4096
    config = {
        "bf16": {"enabled": "auto"},
        "gradient_clipping": "auto",
        "zero_optimization": {
            "stage": 3,
            "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto",
        },
    }
    filled, notes = fill_auto(config, model, hf=True)
    zero = filled["zero_optimization"]
    # transformers integrations/deepspeed.py: h*h, 0.9*h*h, 10*h
    assert zero["reduce_bucket_size"] == 4096 * 4096
    assert zero["stage3_prefetch_bucket_size"] == int(0.9 * 4096 * 4096)
    assert zero["stage3_param_persistence_threshold"] == 40960
    assert filled["gradient_clipping"] == 1.0 and filled["bf16"]["enabled"] is False
    assert config["zero_optimization"]["reduce_bucket_size"] == "auto"  # the input is not changed
    assert "filled as the Trainer would" in notes[0]


def test_unknown_auto_with_hf_is_still_an_error() -> None:
    with pytest.raises(InputError, match="/zero_optimization/sub_group_size"):
        fill_auto({"zero_optimization": {"sub_group_size": "auto"}}, load_model("llama-7b"), hf=True)


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "result_stage2.json"


def test_a_bounded_accumulation_is_scaled_and_says_how() -> None:
    bench_result = BenchResult.model_validate_json(FIXTURE.read_text())
    short = bench_result.model_copy(update={"proxy": bench_result.proxy.model_copy(update={"grad_accum": 2})})
    plain = scale_micro_steps(short, 64, None)
    assert plain.full_step_time_s == pytest.approx(short.step_time_s * 32)
    assert "in proportion" in plain.notes[-1] and "2 of 64 micro-steps" in plain.notes[-1]
    modelled = scale_micro_steps(short, 64, cpu_probe_profile())
    assert "step-time model's ratio" in modelled.notes[-1]
    # the optimizer and the post-step all-gather are paid once per step, not per micro-step
    assert short.step_time_s < modelled.full_step_time_s < plain.full_step_time_s
