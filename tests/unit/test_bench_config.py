"""bench/config.py: the config a bench run gives DeepSpeed keeps the ZeRO section and fixes the rest."""

from __future__ import annotations

import pytest

from zerotune.bench.config import DEFAULT_LR, prepare
from zerotune.dsconfig.settings import resolve
from zerotune.errors import InputError

HF_STYLE = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "bf16": {"enabled": True},
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "torch_adam": True},
    },
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "reduce_bucket_size": "auto"},
    "comms_logger": {"enabled": True},
}


def test_batch_triple_is_consistent_for_the_proxy_world() -> None:
    prepared = prepare(HF_STYLE, nproc=4, micro_batch=2, grad_accum=3)
    cfg = prepared.config
    assert (cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (2, 3)
    assert cfg["train_batch_size"] == 2 * 3 * 4
    assert (prepared.micro_batch, prepared.grad_accum) == (2, 3)


def test_given_batch_values_are_used_and_a_mismatch_is_noted() -> None:
    prepared = prepare(
        {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
        nproc=2,
    )
    assert prepared.config["train_batch_size"] == 16
    assert any("train_batch_size 64 -> 16" in note for note in prepared.notes)


def test_zero_section_is_kept_and_the_stage_can_be_overridden() -> None:
    prepared = prepare(HF_STYLE, nproc=2)
    assert prepared.config["zero_optimization"] == HF_STYLE["zero_optimization"]
    assert resolve(prepared.config).zero.stage == 3
    assert resolve(prepare(HF_STYLE, nproc=2, stage=1).config).zero.stage == 1
    assert HF_STYLE["zero_optimization"]["stage"] == 3, "the user's dict must not be modified"


def test_cpu_runs_fp32_and_a_gpu_keeps_the_precision() -> None:
    assert resolve(prepare(HF_STYLE, nproc=2, device="cpu").config).precision == "fp32"
    assert resolve(prepare(HF_STYLE, nproc=2, device="cuda").config).precision == "bf16"


def test_optimizer_becomes_a_torch_optimizer_with_its_hyperparameters() -> None:
    prepared = prepare(HF_STYLE, nproc=2)
    assert "optimizer" not in prepared.config and "scheduler" not in prepared.config
    assert prepared.optimizer == {
        "type": "adamw",
        "params": {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1},
    }
    assert any("torch_adam" in note for note in prepared.notes)
    assert prepare({}, nproc=1).optimizer == {"type": "adamw", "params": {"lr": DEFAULT_LR}}
    lamb = prepare({"optimizer": {"type": "Lamb", "params": {"lr": 1}}}, nproc=1)
    assert lamb.optimizer["type"] == "adamw" and any("Lamb" in n for n in lamb.notes)
    sgd = prepare({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}}, nproc=1)
    assert sgd.optimizer == {"type": "sgd", "params": {"lr": 0.1, "momentum": 0.9}}
    assert sgd.config["zero_allow_untested_optimizer"] is True


def test_runner_owned_sections_are_replaced() -> None:
    cfg = prepare(HF_STYLE, nproc=2).config
    assert "comms_logger" not in cfg
    assert cfg["wall_clock_breakdown"] is True


def test_optimizer_offload_allows_the_torch_optimizer() -> None:
    user = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    assert prepare(user, nproc=2).config["zero_force_ds_cpu_optimizer"] is False
    assert "zero_force_ds_cpu_optimizer" not in prepare({"zero_optimization": {"stage": 2}}, nproc=2).config


def test_bad_input_is_an_input_error() -> None:
    with pytest.raises(InputError):
        prepare([1, 2], nproc=2)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        prepare({}, nproc=2, micro_batch=-1)


OFFLOADED = {
    "optimizer": {"type": "AdamW", "params": {"lr": 2e-4, "betas": [0.9, 0.95], "torch_adam": True}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
}


def test_cuda_offload_lets_deepspeed_build_its_cpu_adam() -> None:
    """On a GPU host real offload runs use DeepSpeedCPUAdam; a torch AdamW would measure another kernel."""
    prepared = prepare(OFFLOADED, nproc=1, device="cuda")
    assert prepared.optimizer is None
    assert prepared.config["optimizer"] == {"type": "AdamW", "params": {"lr": 2e-4, "betas": [0.9, 0.95]}}
    assert "zero_force_ds_cpu_optimizer" not in prepared.config
    assert any("torch_adam" in note for note in prepared.notes)


def test_cuda_offload_of_another_optimizer_is_measured_as_deepspeed_adamw() -> None:
    user = {**OFFLOADED, "optimizer": {"type": "Lamb", "params": {"lr": 1e-3}}}
    prepared = prepare(user, nproc=1, device="cuda")
    assert prepared.optimizer is None and prepared.config["optimizer"]["type"] == "AdamW"
    assert "zero_allow_untested_optimizer" not in prepared.config


def test_cpu_keeps_the_torch_optimizer() -> None:
    """CPU must not JIT-compile DeepSpeed's ops (~90 s)."""
    on_cpu = prepare(OFFLOADED, nproc=1, device="cpu")
    assert on_cpu.optimizer is not None and on_cpu.optimizer["type"] == "adamw"
    assert "optimizer" not in on_cpu.config and on_cpu.config["zero_force_ds_cpu_optimizer"] is False


def test_cuda_without_offload_lets_deepspeed_build_fused_adam() -> None:
    """What a user with this config runs on a GPU: DeepSpeed's FusedAdam built from the section (the
    first GPU run measured torch AdamW inside DeepSpeed instead, data/gpu/2026-11-28-NVIDIA-H200)."""
    plain = {**OFFLOADED, "zero_optimization": {"stage": 2}}
    prepared = prepare(plain, nproc=1, device="cuda")
    assert prepared.optimizer is None
    assert prepared.config["optimizer"] == {"type": "AdamW", "params": {"lr": 2e-4, "betas": [0.9, 0.95]}}
    stage0 = {**OFFLOADED, "zero_optimization": {"stage": 0}}
    assert prepare(stage0, nproc=1, device="cuda").optimizer is None


def test_cuda_without_an_adam_section_passes_torch_adamw() -> None:
    """No optimizer section: HF's Trainer passes its own torch optimizer, and so does the bench; an
    optimizer DeepSpeed would JIT-build otherwise (Lamb) is measured as torch AdamW, saying so."""
    bare = {"zero_optimization": {"stage": 2}}
    assert prepare(bare, nproc=1, device="cuda").optimizer["type"] == "adamw"
    lamb = {"optimizer": {"type": "Lamb", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}}
    prepared = prepare(lamb, nproc=1, device="cuda")
    assert prepared.optimizer is not None and "optimizer" not in prepared.config
