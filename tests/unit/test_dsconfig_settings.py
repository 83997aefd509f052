"""resolve(): the values DeepSpeed 0.19.8 would use, never an exception on odd input."""

from zerotune.dsconfig.settings import resolve, resolve_zero


def test_auto_and_aliases_resolve_like_deepspeed():
    zero = resolve_zero(
        {
            "stage": 3,
            "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": 5e7,
            "max_live_parameters": "1000",
        }
    )
    assert zero.reduce_bucket_size == 500_000_000  # "auto" dropped -> default
    assert zero.prefetch_bucket_size == 50_000_000  # JSON 5e7 accepted for an int
    assert zero.max_live_parameters == 1000  # numeric string coerced
    assert zero.overlap_comm is True  # default True only at stage 3
    assert resolve_zero({"stage": 2}).overlap_comm is False


def test_legacy_forms():
    assert resolve_zero(True).stage == 1
    assert resolve_zero({"stage": 2, "cpu_offload": True}).offload_optimizer.device == "cpu"
    assert resolve_zero({"stage": 3, "cpu_offload_param": "true"}).offload_param.device == "cpu"


def test_odd_values_fall_back_to_defaults():
    zero = resolve_zero({"stage": 7, "offload_optimizer": {"device": "gpu"}, "offload_param": {"device": 3}})
    assert zero.stage == 0
    assert zero.offload_optimizer.device == "none"
    assert zero.offload_param.device == "none"
    cfg = resolve({"bf16": {"enabled": "true"}, "gradient_clipping": "x", "optimizer": "adam"})
    assert cfg.precision == "bf16" and cfg.gradient_clipping == 1.0 and cfg.optimizer_type is None


def test_non_finite_numbers_fall_back_to_defaults():
    zero = resolve_zero({"reduce_bucket_size": float("inf"), "stage": float("nan")})
    assert zero.reduce_bucket_size == 500_000_000 and zero.stage == 0
    cfg = resolve({"train_batch_size": float("inf"), "gradient_clipping": float("nan")})
    assert cfg.train_batch_size is None and cfg.gradient_clipping == 1.0


def test_torch_autocast_enabled_is_read_as_deepspeed_reads_it():
    # runtime/config.py get_torch_autocast_enabled: the section's `enabled`, False when absent
    assert resolve({"torch_autocast": {"enabled": True, "dtype": "bfloat16"}}).autocast is True
    assert resolve({"torch_autocast": {"enabled": False}}).autocast is False
    assert resolve({"torch_autocast": {"dtype": "bfloat16"}}).autocast is False
    assert resolve({"bf16": {"enabled": True}}).autocast is False
