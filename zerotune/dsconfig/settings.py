"""A typed, resolved view of the ZeRO-relevant part of a DeepSpeed config.

This is what the memory and step-time models consume. `resolve()` reads a raw config dict the
way DeepSpeed 0.19.8 does for these keys (DEEPSPEED_FACTS §1.1): "auto" values are dropped so the
default applies, `stage3_*` aliases and field names are both accepted, the deprecated
`cpu_offload`/`cpu_offload_param` booleans become offload sections, `overlap_comm` defaults to
True only at stage 3. It is tolerant on purpose: judging a config is the linter's job
(zerotune/lint); this view only needs the values DeepSpeed would end up with.

Defaults below are DeepSpeed 0.19.8's (`DeepSpeedZeroConfig.model_fields`, offload_config.py);
tests/unit/test_dsconfig_settings.py checks them against the linter's schema table.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol, get_args, get_origin

from pydantic import BaseModel, ConfigDict

from zerotune.dsconfig.knobs import STAGE3_KNOBS  # noqa: F401 (re-exported: defined by the knob table)

OffloadDevice = Literal["none", "cpu", "nvme"]


class OffloadOptimizer(BaseModel):
    model_config = ConfigDict(frozen=True)

    device: OffloadDevice = "none"
    nvme_path: str | None = None
    buffer_count: int = 4
    pin_memory: bool = True
    ratio: float = 1.0


class OffloadParam(BaseModel):
    model_config = ConfigDict(frozen=True)

    device: OffloadDevice = "none"
    nvme_path: str | None = None
    buffer_count: int = 5
    buffer_size: int = 100_000_000
    max_in_cpu: int = 1_000_000_000
    pin_memory: bool = True


class ZeroSettings(BaseModel):
    """`zero_optimization` after DeepSpeed's defaults and aliases. Sizes are elements."""

    model_config = ConfigDict(frozen=True)

    stage: int = 0
    contiguous_gradients: bool = True
    reduce_scatter: bool = True
    reduce_bucket_size: int = 500_000_000
    allgather_bucket_size: int = 500_000_000
    overlap_comm: bool = False
    offload_optimizer: OffloadOptimizer = OffloadOptimizer()
    offload_param: OffloadParam = OffloadParam()
    sub_group_size: int = 1_000_000_000
    prefetch_bucket_size: int = 50_000_000
    param_persistence_threshold: int = 100_000
    model_persistence_threshold: int = 2**63 - 1
    max_live_parameters: int = 1_000_000_000
    max_reuse_distance: int = 1_000_000_000
    allgather_sequential: bool = False
    zero_hpz_partition_size: int = 1
    zero_quantized_weights: bool = False
    zero_quantized_gradients: bool = False
    gather_16bit_weights_on_model_save: bool = False
    # Top-level keys the ZeRO buffers and reductions use, filled by resolve() (not zero_optimization
    # keys): None = the model dtype, DeepSpeed's default for both (DEEPSPEED_FACTS §3.2, §3.3).
    communication_data_type: Literal["fp16", "bf16", "fp32"] | None = None
    grad_accum_dtype: Literal["fp16", "bf16", "fp32"] | None = None
    # `bf16.bf16_master_weights_and_grads` / `fp16.fp16_master_weights_and_grads` (ZeRO 1-3): the
    # optimizer's master weights and the gradient it steps on in that 16-bit dtype instead of fp32;
    # `bf16.bf16_optimizer_states`: the moments too where the optimizer would otherwise keep them in
    # fp32 (DeepSpeed's CPU Adam under offload). DEEPSPEED_FACTS §3.2; base_optimizer.py
    # `_configure_master_weights`.
    master_dtype: Literal["fp16", "bf16", "fp32"] = "fp32"
    optimizer_states_16bit: bool = False


class ResolvedConfig(BaseModel):
    """The whole config as the models need it."""

    model_config = ConfigDict(frozen=True)

    zero: ZeroSettings = ZeroSettings()
    precision: Literal["bf16", "fp16", "fp32"] = "fp32"
    train_batch_size: int | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    gradient_clipping: float = 1.0
    optimizer_type: str | None = None
    communication_data_type: str | None = None


_DEFAULTS = ZeroSettings()
# DeepSpeed 0.19.8's defaults (the fields above), by name: the values written for knobs a stage does not
# read and the "DeepSpeed defaults" baseline.
DS_REDUCE_BUCKET = _DEFAULTS.reduce_bucket_size
DS_ALLGATHER_BUCKET = _DEFAULTS.allgather_bucket_size
DS_PREFETCH = _DEFAULTS.prefetch_bucket_size
DS_PERSISTENCE = _DEFAULTS.param_persistence_threshold
DS_MAX_LIVE = _DEFAULTS.max_live_parameters
DS_MAX_REUSE = _DEFAULTS.max_reuse_distance
DS_SUB_GROUP = _DEFAULTS.sub_group_size



class ConfigChoice(Protocol):
    """What the emitter (dsconfig/emit.py) and the HF baselines (dsconfig/hf_auto.py) read from a chosen
    configuration: the batch split, precision and every zero_optimization knob, sizes in elements.
    The search's Candidate (search/space.py) is one; dsconfig does not depend on the search."""

    @property
    def stage(self) -> int: ...
    @property
    def offload_optimizer(self) -> str: ...
    @property
    def offload_param(self) -> str: ...
    @property
    def micro_batch(self) -> int: ...
    @property
    def grad_accum(self) -> int: ...
    @property
    def precision(self) -> str: ...
    @property
    def reduce_bucket_size(self) -> int: ...
    @property
    def allgather_bucket_size(self) -> int: ...
    @property
    def overlap_comm(self) -> bool: ...
    @property
    def contiguous_gradients(self) -> bool: ...
    @property
    def prefetch_bucket_size(self) -> int: ...
    @property
    def param_persistence_threshold(self) -> int: ...
    @property
    def max_live_parameters(self) -> int: ...
    @property
    def max_reuse_distance(self) -> int: ...
    @property
    def sub_group_size(self) -> int: ...


# field name -> accepted spellings, the stage3_* alias first where DeepSpeed has one
ALIASES = {
    "prefetch_bucket_size": ("stage3_prefetch_bucket_size", "prefetch_bucket_size"),
    "param_persistence_threshold": ("stage3_param_persistence_threshold", "param_persistence_threshold"),
    "model_persistence_threshold": ("stage3_model_persistence_threshold", "model_persistence_threshold"),
    "max_live_parameters": ("stage3_max_live_parameters", "max_live_parameters"),
    "max_reuse_distance": ("stage3_max_reuse_distance", "max_reuse_distance"),
    "allgather_sequential": ("stage3_allgather_sequential", "allgather_sequential"),
    "gather_16bit_weights_on_model_save": (
        "stage3_gather_16bit_weights_on_model_save",
        "gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save",
    ),
}


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == "auto"


def _number(value: Any, cast: type) -> Any:
    """DeepSpeed-lax numeric reading: JSON 5e8 and "500000000" are accepted; anything unreadable
    (a non-numeric string, inf or nan, another type) is None, so the default applies."""
    try:
        if isinstance(value, (bool, int, float)):
            number = cast(value)
        elif isinstance(value, str):
            number = cast(float(value)) if cast is float else cast(int(value))
        else:
            return None
    except (ValueError, OverflowError):
        return None
    return None if cast is float and not math.isfinite(number) else number


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.lower() in ("true", "yes", "on", "1")
    return None


def _clean(section: Any, model: type[BaseModel]) -> dict[str, Any]:
    """Keep the keys of `section` that `model` knows, coerced; drop "auto" and unreadable values."""
    if not isinstance(section, dict):
        return {}
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        spellings = ALIASES.get(name, (name,))
        for key in spellings:
            if key in section and not _is_auto(section[key]):
                raw = section[key]
                ann = field.annotation
                if ann is bool:
                    value = _bool(raw)
                elif ann is int:
                    value = _number(raw, int)
                elif ann is float:
                    value = _number(raw, float)
                elif get_origin(ann) is Literal:  # e.g. an offload device outside none/cpu/nvme
                    value = raw if raw in get_args(ann) else None
                else:
                    value = raw if isinstance(raw, (str, type(None))) else None
                if value is not None or ann in (str | None, type(None)):
                    out[name] = value
                break
    return out


_DTYPES = {
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}


_COMM = ("fp16", "bf16", "fp32")


def _dtype(value: Any) -> str | None:
    """A DeepSpeed dtype spelling (DtypeEnum aliases, case-insensitive) -> fp16/bf16/fp32, else None."""
    return _DTYPES.get(value.lower()) if isinstance(value, str) else None


def resolve_zero(section: Any) -> ZeroSettings:
    """`zero_optimization` (dict, legacy bool, or absent) -> ZeroSettings with DeepSpeed defaults."""
    if section is True:
        return ZeroSettings(stage=1)
    if not isinstance(section, dict):
        return ZeroSettings()
    values = _clean(section, ZeroSettings)
    values.pop("offload_optimizer", None)
    values.pop("offload_param", None)
    values.pop("communication_data_type", None)
    values.pop("grad_accum_dtype", None)
    values.pop("master_dtype", None)
    values.pop("optimizer_states_16bit", None)
    stage = values.get("stage", 0)
    if stage not in (0, 1, 2, 3):
        values["stage"] = 0
    opt = section.get("offload_optimizer")
    if isinstance(opt, dict):
        values["offload_optimizer"] = OffloadOptimizer(**_clean(opt, OffloadOptimizer))
    elif _bool(section.get("cpu_offload")):
        values["offload_optimizer"] = OffloadOptimizer(device="cpu")
    par = section.get("offload_param")
    if isinstance(par, dict):
        values["offload_param"] = OffloadParam(**_clean(par, OffloadParam))
    elif _bool(section.get("cpu_offload_param")):
        values["offload_param"] = OffloadParam(device="cpu")
    if "overlap_comm" not in values:
        values["overlap_comm"] = values.get("stage", 0) == 3
    return ZeroSettings(**values)


def resolve(config: dict[str, Any]) -> ResolvedConfig:
    """A raw DeepSpeed config dict -> ResolvedConfig (never raises on odd values)."""

    def section_enabled(name: str) -> bool:
        section = config.get(name)
        return isinstance(section, dict) and bool(_bool(section.get("enabled")))

    if section_enabled("bf16") or ("bf16" not in config and section_enabled("bfloat16")):
        precision = "bf16"
    elif section_enabled("fp16"):
        precision = "fp16"
    else:
        precision = "fp32"
    optimizer = config.get("optimizer")
    clip = config.get("gradient_clipping", 1.0)
    data_types = config.get("data_types")
    bf16, fp16 = config.get("bf16") or config.get("bfloat16"), config.get("fp16")
    bf16 = bf16 if isinstance(bf16, dict) else {}
    fp16 = fp16 if isinstance(fp16, dict) else {}
    # DeepSpeed reads both flags whatever precision is on, and rejects both at once (fp16 read first here)
    master = "fp16" if _bool(fp16.get("fp16_master_weights_and_grads")) else None
    if master is None and _bool(bf16.get("bf16_master_weights_and_grads")):
        master = "bf16"
    comm = config.get("communication_data_type")
    zero = resolve_zero(config.get("zero_optimization")).model_copy(
        update={
            # DeepSpeed accepts exactly fp16/bf16/fp32 here (any case); other spellings fail its parse
            "communication_data_type": _dtype(comm)
            if isinstance(comm, str) and comm.lower() in _COMM
            else None,
            "grad_accum_dtype": _dtype(
                data_types.get("grad_accum_dtype") if isinstance(data_types, dict) else None
            ),
            "master_dtype": master or "fp32",
            "optimizer_states_16bit": master == "bf16" and bool(_bool(bf16.get("bf16_optimizer_states"))),
        }
    )
    return ResolvedConfig(
        zero=zero,
        precision=precision,
        train_batch_size=_number(config.get("train_batch_size"), int),
        micro_batch=_number(config.get("train_micro_batch_size_per_gpu"), int),
        grad_accum=_number(config.get("gradient_accumulation_steps"), int),
        gradient_clipping=_number(clip, float) if _number(clip, float) is not None else 1.0,
        optimizer_type=optimizer.get("type") if isinstance(optimizer, dict) else None,
        communication_data_type=config.get("communication_data_type")
        if isinstance(config.get("communication_data_type"), str)
        else None,
    )
