"""A typed, resolved view of the ZeRO-relevant part of a DeepSpeed config.

This is what the memory and step-time models consume. `resolve()` reads a raw config dict the
way DeepSpeed 0.19.8 does for these keys (docs/deepspeed-facts.md §1.1): the keys and aliases come from the
linter's table (dsconfig/schema.py), values in pydantic sections go through `schema.coerce` (pydantic's
lax mode, the one coercion the linter and the bench share), top-level numbers through
`schema.loose_number` (dict.get, no conversion); "auto" values are dropped so the default applies, the
deprecated `cpu_offload`/`cpu_offload_param` booleans become offload sections, `overlap_comm`
defaults to True only at stage 3. It is tolerant on purpose: judging a config is the linter's job
(zerotune/lint); this view only needs the values DeepSpeed would end up with.

Defaults below are DeepSpeed 0.19.8's (`DeepSpeedZeroConfig.model_fields`, offload_config.py);
tests/unit/test_dsconfig_settings.py checks them against the linter's schema table.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from zerotune.dsconfig import schema
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
    memory_efficient_linear: bool = True
    """stage 3: DeepSpeed replaces torch.nn.functional.linear with its own (runtime/zero/linear.py), whose
    saved weight does not keep a released parameter's gathered storage (model.memory_facts
    `linear_keeps_gathered`)."""
    # Top-level keys the ZeRO buffers and reductions use, filled by resolve() (not zero_optimization
    # keys): None = the model dtype, DeepSpeed's default for both (docs/deepspeed-facts.md §3.2, §3.3).
    communication_data_type: Literal["fp16", "bf16", "fp32"] | None = None
    grad_accum_dtype: Literal["fp16", "bf16", "fp32"] | None = None
    # `bf16.bf16_master_weights_and_grads` / `fp16.fp16_master_weights_and_grads` (ZeRO 1-3): the
    # optimizer's master weights and the gradient it steps on in that 16-bit dtype instead of fp32;
    # `bf16.bf16_optimizer_states`: the moments too where the optimizer would otherwise keep them in
    # fp32 (DeepSpeed's CPU Adam under offload). docs/deepspeed-facts.md §3.2; base_optimizer.py
    # `_configure_master_weights`.
    master_dtype: Literal["fp16", "bf16", "fp32"] = "fp32"
    optimizer_states_16bit: bool = False

    @property
    def cpu_optimizer(self) -> bool:
        """DeepSpeed builds its CPU optimizer class (DeepSpeedCPUAdam/Adagrad/Lion) for a DeepSpeed-named
        optimizer: engine.py `zero_use_cpu_optimizer` reads offload_optimizer.device whatever the stage."""
        return self.offload_optimizer.device != "none"

    @property
    def optimizer_offloaded(self) -> bool:
        """Optimizer states and the step live off the GPU. Only a ZeRO optimizer (stage 1-3) moves them:
        at stage 0 offload_optimizer offloads nothing, yet `cpu_optimizer` still holds, so DeepSpeed's
        CPU optimizer is built over GPU parameters and its first step asserts (ops/adam/cpu_adam.py
        `step`: "param ... must be 'cpu'"); the linter reports that (ZT203)."""
        return self.cpu_optimizer and self.stage >= 1


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
    autocast: bool = False
    """`torch_autocast.enabled`: the engine runs the module's forward under torch.autocast (DeepSpeed
    0.19.8 runtime/config.py `get_torch_autocast_enabled`, read as a truth value by
    runtime/engine.py `torch_autocast_enabled`; the forward in `autocast_if_enabled`)."""


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


def _spellings(name: str) -> tuple[str, ...]:
    """The keys DeepSpeed reads a zero_optimization field from, the stage3_* alias first (schema table),
    then a deprecated key that feeds it (DeepSpeedConfigModel copies a deprecated value into `new_param`)."""
    f = schema.zero_field(name)
    if f is None:
        return (name,)
    feeding = tuple(d.name for d in schema.ZERO_FIELDS if d.deprecated == name and d.kind == f.kind)
    return f.spellings + feeding


# field name -> accepted spellings, the stage3_* alias first where DeepSpeed has one
ALIASES: dict[str, tuple[str, ...]] = {
    name: _spellings(name) for name in ZeroSettings.model_fields if len(_spellings(name)) > 1
}


def _read(f: schema.Field, raw: Any) -> Any:
    """DeepSpeed's value for `raw` in a pydantic section (schema.coerce, its lax mode), or None when
    DeepSpeed would reject its type, so the default applies. An out-of-range value is kept: DeepSpeed
    rejects it too, and the linter reports it (ZT602); the models see what was written."""
    value, problem = schema.coerce(f, raw)
    return None if problem is not None and problem.kind == "type" else value


def _clean(section: Any, sec: schema.Section, model: type[BaseModel]) -> dict[str, Any]:
    """The keys of `section` that `model` has a field for, read as DeepSpeed reads them: "auto" dropped
    (runtime/config_utils.py), values through schema.coerce, unreadable ones dropped."""
    if not isinstance(section, dict):
        return {}
    out: dict[str, Any] = {}
    for name in model.model_fields:
        f = sec.field(name)
        if f is None:
            continue  # not a key of this section (the top-level values ZeroSettings carries)
        keys = _spellings(name) if sec.pointer == "/zero_optimization" else f.spellings
        for key in keys:
            if key in section and not schema.is_auto(section[key]):
                value = _read(sec.field(key) or f, section[key])
                if value is not None or f.nullable:
                    out[name] = value
                break
    return out


def _flag(sec: schema.Section, section: Any, key: str) -> bool:
    """A boolean key of a pydantic section as DeepSpeed reads it ("auto" or unreadable: its default)."""
    f = sec.field(key)
    assert f is not None, (sec.pointer, key)
    if not isinstance(section, dict) or key not in section or schema.is_auto(section[key]):
        return bool(f.default)
    value = _read(f, section[key])
    return bool(f.default) if value is None else bool(value)


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


_ZERO = schema.SECTIONS["/zero_optimization"]
_OFFLOAD_OPTIMIZER = schema.SECTIONS["/zero_optimization/offload_optimizer"]
_OFFLOAD_PARAM = schema.SECTIONS["/zero_optimization/offload_param"]
_BF16 = schema.SECTIONS["/bf16"]
_FP16 = schema.SECTIONS["/fp16"]


def resolve_zero(section: Any) -> ZeroSettings:
    """`zero_optimization` (dict, legacy bool, or absent) -> ZeroSettings with DeepSpeed defaults."""
    if section is True:
        return ZeroSettings(stage=1)
    if not isinstance(section, dict):
        return ZeroSettings()
    values = _clean(section, _ZERO, ZeroSettings)
    values.pop("offload_optimizer", None)
    values.pop("offload_param", None)
    opt = section.get("offload_optimizer")
    if isinstance(opt, dict):
        values["offload_optimizer"] = OffloadOptimizer(**_clean(opt, _OFFLOAD_OPTIMIZER, OffloadOptimizer))
    elif _flag(_ZERO, section, "cpu_offload"):  # deprecated: true → offload_optimizer {"device": "cpu"}
        values["offload_optimizer"] = OffloadOptimizer(device="cpu")
    par = section.get("offload_param")
    if isinstance(par, dict):
        values["offload_param"] = OffloadParam(**_clean(par, _OFFLOAD_PARAM, OffloadParam))
    elif _flag(_ZERO, section, "cpu_offload_param"):
        values["offload_param"] = OffloadParam(device="cpu")
    if "overlap_comm" not in values or values["overlap_comm"] is None:
        # runtime/zero/config.py overlap_comm_valid: None → True at stage 3, else False
        values["overlap_comm"] = values.get("stage", 0) == 3
    return ZeroSettings(**values)


def _int(value: Any) -> int | None:
    number = schema.loose_number(value)
    return int(number) if number is not None and float(number).is_integer() else None


def resolve(config: dict[str, Any]) -> ResolvedConfig:
    """A raw DeepSpeed config dict -> ResolvedConfig (never raises on odd values)."""
    # precision_config.py get_bfloat16_config: the deprecated `bfloat16` is read when `bf16` is absent or null
    bf16 = config.get("bf16")
    if bf16 is None:
        bf16 = config.get("bfloat16")
    fp16 = config.get("fp16")
    if _flag(_BF16, bf16, "enabled"):
        precision = "bf16"
    elif _flag(_FP16, fp16, "enabled"):
        precision = "fp16"
    else:
        precision = "fp32"
    optimizer = config.get("optimizer")
    clip = schema.loose_number(config.get("gradient_clipping", 1.0))
    data_types = config.get("data_types")
    # DeepSpeed reads both flags whatever precision is on, and rejects both at once (fp16 read first here)
    master = "fp16" if _flag(_FP16, fp16, "fp16_master_weights_and_grads") else None
    if master is None and _flag(_BF16, bf16, "bf16_master_weights_and_grads"):
        master = "bf16"
    comm = config.get("communication_data_type")
    autocast = config.get("torch_autocast")
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
            "optimizer_states_16bit": master == "bf16" and _flag(_BF16, bf16, "bf16_optimizer_states"),
        }
    )
    return ResolvedConfig(
        zero=zero,
        precision=precision,
        train_batch_size=_int(config.get("train_batch_size")),
        micro_batch=_int(config.get("train_micro_batch_size_per_gpu")),
        grad_accum=_int(config.get("gradient_accumulation_steps")),
        gradient_clipping=float(clip) if clip is not None else 1.0,
        optimizer_type=optimizer.get("type") if isinstance(optimizer, dict) else None,
        communication_data_type=config.get("communication_data_type")
        if isinstance(config.get("communication_data_type"), str)
        else None,
        autocast=isinstance(autocast, dict) and bool(autocast.get("enabled", False)),
    )
