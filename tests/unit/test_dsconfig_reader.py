"""One reader (issue 19): validate, resolve and the bench's config preparation read a value the way
DeepSpeed 0.19.8's pydantic models do, and agree with DeepSpeed's own parser where it is installed."""

from __future__ import annotations

import importlib.util
import os

import pytest

from zerotune.bench.config import prepare
from zerotune.dsconfig import schema
from zerotune.dsconfig.load import load_text
from zerotune.dsconfig.settings import resolve
from zerotune.lint.context import LintOptions
from zerotune.lint.runner import lint

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None

# (zero_optimization key, raw value, what DeepSpeed stores; None: DeepSpeed rejects it)
ZERO_VALUES = [
    ("overlap_comm", "t", True),
    ("overlap_comm", "yes", True),
    ("overlap_comm", "on", True),
    ("overlap_comm", 1, True),
    ("overlap_comm", "1", True),
    ("overlap_comm", "off", False),
    ("overlap_comm", "f", False),
    ("overlap_comm", 0.0, False),
    ("overlap_comm", 2, None),
    ("overlap_comm", "maybe", None),
    ("contiguous_gradients", "n", False),
    ("reduce_bucket_size", 5e8, 500_000_000),
    ("reduce_bucket_size", "500000000", 500_000_000),
    ("reduce_bucket_size", "1_000", 1_000),
    ("reduce_bucket_size", "3.0", 3),
    ("reduce_bucket_size", "5e8", None),
    ("reduce_bucket_size", 2.5, None),
    ("allgather_bucket_size", True, 1),
    ("stage3_prefetch_bucket_size", 15099494.4, None),
]


def _job(zero: dict) -> dict:
    return {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2, **zero}}


def _findings(config: dict) -> list:
    import json

    return lint(load_text(json.dumps(config), "<test>"), LintOptions(world_size=2))


def _field_name(key: str) -> str:
    f = schema.zero_field(key)
    assert f is not None
    return f.name


@pytest.mark.parametrize(("key", "raw", "expected"), ZERO_VALUES)
def test_validate_resolve_and_bench_read_a_value_alike(key, raw, expected) -> None:
    config = _job({key: raw})
    errors = [d for d in _findings(config) if d.code == "ZT601"]
    assert bool(errors) == (expected is None), errors
    f = schema.zero_field(key)
    default = f.default if f.name != "overlap_comm" else False  # None → False below stage 3
    resolved = getattr(resolve(config).zero, _field_name(key))
    assert resolved == (default if expected is None else expected)
    # the bench hands the section to DeepSpeed as written, and models it through resolve() too
    prepared = prepare(config, nproc=2, micro_batch=None, grad_accum=None, device="cpu")
    assert prepared.config["zero_optimization"][key] == raw
    assert getattr(resolve(prepared.config).zero, _field_name(key)) == resolved


@pytest.fixture(scope="module")
def ds_models():
    if not HAS_DEEPSPEED:
        pytest.skip("deepspeed is not installed")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime import precision_config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    return DeepSpeedZeroConfig, precision_config.DeepSpeedBF16Config, precision_config.DeepSpeedFP16Config


@pytest.mark.parametrize(("key", "raw", "expected"), ZERO_VALUES)
def test_the_table_is_what_deepspeed_parses(ds_models, key, raw, expected) -> None:
    from pydantic import ValidationError

    zero_model = ds_models[0]
    try:
        parsed = zero_model(**{"stage": 2, key: raw})
    except ValidationError:
        assert expected is None, (key, raw)
        return
    assert expected is not None, (key, raw)
    assert getattr(parsed, _field_name(key)) == expected
    assert getattr(resolve(_job({key: raw})).zero, _field_name(key)) == expected


@pytest.mark.parametrize("raw", [True, "true", "t", "yes", 1, "1", "on", False, "off", "no", 0, "auto"])
def test_precision_enabled_reads_like_deepspeed(ds_models, raw) -> None:
    _, bf16_model, fp16_model = ds_models

    for name, model in (("bf16", bf16_model), ("fp16", fp16_model)):
        enabled = model(**{"enabled": raw}).enabled
        assert (resolve({name: {"enabled": raw}}).precision == name) == enabled, (name, raw)
        lint_ctx_precision = _precision_seen_by_lint({name: {"enabled": raw}})
        assert (lint_ctx_precision == name) == enabled, (name, raw)


def _precision_seen_by_lint(config: dict) -> str:
    import json

    from zerotune.lint.context import Context

    return Context(load_text(json.dumps(config), "<test>"), LintOptions()).precision


def test_overlap_comm_t_is_true_everywhere() -> None:
    config = _job({"overlap_comm": "t"})
    assert not [d for d in _findings(config) if d.severity.name == "ERROR"]
    assert resolve(config).zero.overlap_comm is True
    prepared = prepare(config, nproc=2, micro_batch=None, grad_accum=None, device="cpu")
    assert resolve(prepared.config).zero.overlap_comm is True


def test_stage0_with_offload_optimizer_is_what_deepspeed_does() -> None:
    config = {
        "train_batch_size": 8,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}},
    }
    zero = resolve(config).zero
    # engine.zero_use_cpu_optimizer ignores the stage; no ZeRO optimizer moves the states at stage 0
    assert zero.cpu_optimizer and not zero.optimizer_offloaded
    found = [d for d in _findings(config) if d.code == "ZT203"]
    assert [(d.pointer, d.severity.name) for d in found] == [("/zero_optimization/offload_optimizer", "ERROR")]
    staged = resolve({**config, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}).zero
    assert staged.cpu_optimizer and staged.optimizer_offloaded
    # torch_adam: DeepSpeed builds torch's AdamW on the GPU; the offload does nothing (a warning)
    torch_adam = {**config, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}
    assert [d.severity.name for d in _findings(torch_adam) if d.code == "ZT203"] == ["WARNING"]


def test_legacy_cpu_offload_string_is_read_by_pydantic() -> None:
    config = {"train_batch_size": 8, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2, "cpu_offload": "true"}}
    assert resolve(config).zero.offload_optimizer.device == "cpu"
    import json

    from zerotune.lint.context import Context

    assert Context(load_text(json.dumps(config), "<test>"), LintOptions()).offload("offload_optimizer")


def test_a_misspelt_section_is_an_error() -> None:
    config = {"train_batch_size": 8, "zero_optimisation": {"stage": 3, "overlap_comm": True}}
    found = [d for d in _findings(config) if d.code == "ZT502"]
    assert [(d.pointer, d.severity.name) for d in found] == [("/zero_optimisation", "ERROR")]
    assert "zero_optimization" in (found[0].help or "")
    # a misspelt scalar stays a warning: one setting is lost, not a section
    scalar = [d for d in _findings({"train_batch_size": 8, "gradient_clip": 1.0}) if d.code == "ZT502"]
    assert [d.severity.name for d in scalar] == ["WARNING"]
