"""What DeepSpeed 0.19.8 reads from a config: every section, key, type, default, unit, alias and status.

Pure data (no deepspeed import). Sources, all in the installed 0.19.8 wheel and summarised in
docs/deepspeed-facts.md: `runtime/zero/config.py` (DeepSpeedZeroConfig, 43 fields), `runtime/zero/offload_config.py`,
`runtime/zenflow/zenflow_config.py`, `runtime/zero/leaf_module_config.py`, `runtime/precision_config.py`,
`runtime/config.py` (top-level readers, removed keys), `runtime/constants.py`, `comm/config.py`,
`monitor/config.py`, `compile/config.py`, `utils/config.py`, `inference/config.py`,
`runtime/tensor_parallel/config.py`, `runtime/swap_tensor/constants.py`, `autotuning/constants.py`.
tests/unit/test_dsconfig_schema.py proves the pydantic tables equal DeepSpeed's `model_fields` (names,
aliases, defaults) when deepspeed is installed.

Parsing rules that matter for a linter (docs/deepspeed-facts.md §1.1, §3.8):
- *strict* sections are pydantic models with extra="forbid": an unknown key is a DeepSpeed error, a value is
  coerced in pydantic's lax mode (JSON 5e8 → int OK, the string "5e8" rejected, 2.5 rejected for an int), and
  a value that is exactly the string "auto" is dropped so the default applies;
- *tolerant* sections are read with dict.get: unknown keys are silently ignored and values are not checked;
- *free* sections (optimizer/scheduler params, data_efficiency, …) are passed on as they are.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, Literal

Kind = Literal[
    "bool", "int", "float", "str", "stage", "device", "path", "object", "list", "number", "any", "never"
]
Status = Literal["stable", "new", "changed"]

ALL_STAGES = frozenset({0, 1, 2, 3})
ZERO_STAGES = frozenset({1, 2, 3})
STAGE_1_2 = frozenset({1, 2})
STAGE_3 = frozenset({3})


@dataclass(frozen=True)
class Field:
    """One config key. `stages` = ZeRO stages where it has an effect (None: not stage-dependent)."""

    name: str
    kind: Kind
    default: Any = None
    alias: str | None = None
    unit: str | None = None
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    nullable: bool = False
    stages: frozenset[int] | None = None
    deprecated: str | None = None
    status: Status = "stable"
    doc: str = ""

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.alias, self.name) if self.alias else (self.name,)


@dataclass(frozen=True)
class Section:
    """A mapping in the config. `mode`: strict (pydantic, extra forbidden), tolerant (dict.get), free."""

    pointer: str
    mode: Literal["strict", "tolerant", "free"]
    fields: tuple[Field, ...] = ()
    source: str = ""

    _index: dict[str, Field] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index.update({k: f for f in self.fields for k in f.spellings})

    def field(self, key: str) -> Field | None:
        return self._index.get(key)

    @cached_property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._index)


F = Field
E = "elements"

# DeepSpeedZeroConfig (runtime/zero/config.py); defaults dumped from model_fields on 0.19.8.
ZERO_FIELDS: tuple[Field, ...] = (
    F("stage", "stage", 0, stages=ALL_STAGES, doc="0 off, 1 optimizer states, 2 +gradients, 3 +parameters"),
    F(
        "contiguous_gradients",
        "bool",
        True,
        stages=ZERO_STAGES,
        doc="copy gradients into a contiguous bucket",
    ),
    F("reduce_scatter", "bool", True, stages=ZERO_STAGES, doc="reduce-scatter instead of all-reduce"),
    F(
        "reduce_bucket_size",
        "int",
        500_000_000,
        unit=E,
        gt=0,
        stages=ZERO_STAGES,
        status="changed",
        doc="elements per gradient-reduction bucket (0 rejected since 0.17+)",
    ),
    F("use_multi_rank_bucket_allreduce", "bool", True, stages=STAGE_1_2),
    F("allgather_partitions", "bool", True, stages=frozenset(), doc="no reader in 0.19.8"),
    F(
        "allgather_bucket_size",
        "int",
        500_000_000,
        unit=E,
        ge=0,
        stages=STAGE_1_2,
        doc="elements per parameter all-gather (stage 1/2; unused when torch has all_gather_into_tensor)",
    ),
    F(
        "overlap_comm",
        "bool",
        None,
        nullable=True,
        stages=ZERO_STAGES,
        doc="None → True at stage 3, else False",
    ),
    F("compute_grad_norm", "bool", True, stages=STAGE_1_2, status="new"),
    F("load_from_fp32_weights", "bool", True, stages=ZERO_STAGES),
    F("elastic_checkpoint", "bool", False, stages=STAGE_1_2),
    F("offload_param", "object", None, nullable=True, stages=STAGE_3),
    F("offload_optimizer", "object", None, nullable=True, stages=ZERO_STAGES),
    F("zenflow", "object", None, nullable=True, stages=ZERO_STAGES, status="new"),
    F("sub_group_size", "int", 1_000_000_000, unit=E, ge=0, stages=STAGE_3),
    F("cpu_offload_param", "bool", None, nullable=True, deprecated="offload_param"),
    F(
        "cpu_offload_use_pin_memory",
        "bool",
        None,
        nullable=True,
        deprecated="offload_param or offload_optimizer",
    ),
    F("cpu_offload", "bool", None, nullable=True, deprecated="offload_optimizer"),
    F(
        "prefetch_bucket_size",
        "int",
        50_000_000,
        alias="stage3_prefetch_bucket_size",
        unit=E,
        ge=0,
        stages=STAGE_3,
    ),
    F(
        "param_persistence_threshold",
        "int",
        100_000,
        alias="stage3_param_persistence_threshold",
        unit=E,
        ge=0,
        stages=STAGE_3,
    ),
    F(
        "model_persistence_threshold",
        "int",
        sys.maxsize,
        alias="stage3_model_persistence_threshold",
        unit=E,
        ge=0,
        stages=STAGE_3,
    ),
    F(
        "max_live_parameters",
        "int",
        1_000_000_000,
        alias="stage3_max_live_parameters",
        unit=E,
        ge=0,
        stages=STAGE_3,
    ),
    F(
        "max_reuse_distance",
        "int",
        1_000_000_000,
        alias="stage3_max_reuse_distance",
        unit=E,
        ge=0,
        stages=STAGE_3,
    ),
    F(
        "gather_16bit_weights_on_model_save",
        "bool",
        False,
        alias="stage3_gather_16bit_weights_on_model_save",
        stages=STAGE_3,
    ),
    F("module_granularity_threshold", "int", 0, alias="stage3_module_granularity_threshold", stages=STAGE_3),
    F(
        "use_all_reduce_for_fetch_params",
        "bool",
        False,
        alias="stage3_use_all_reduce_for_fetch_params",
        stages=STAGE_3,
    ),
    F(
        "allgather_sequential",
        "bool",
        False,
        alias="stage3_allgather_sequential",
        stages=STAGE_3,
        status="new",
    ),
    F(
        "stage3_gather_fp16_weights_on_model_save",
        "bool",
        False,
        stages=STAGE_3,
        deprecated="gather_16bit_weights_on_model_save",
    ),
    F("ignore_unused_parameters", "bool", True, stages=STAGE_1_2),
    F("legacy_stage1", "bool", False),
    F("round_robin_gradients", "bool", False, stages=STAGE_1_2),
    F("parameter_alignment", "bool", False, stages=STAGE_1_2, status="new"),
    F("zero_hpz_partition_size", "int", 1, ge=0, stages=STAGE_3, doc="ZeRO++ hpZ"),
    F("zero_quantized_weights", "bool", False, stages=STAGE_3, doc="ZeRO++ qwZ"),
    F("zero_quantized_nontrainable_weights", "bool", False, stages=STAGE_3),
    F("zero_quantized_gradients", "bool", False, stages=STAGE_3, doc="ZeRO++ qgZ"),
    F("memory_efficient_linear", "bool", True, stages=STAGE_3),
    F("pipeline_loading_checkpoint", "bool", False, stages=STAGE_3),
    F("override_module_apply", "bool", True, stages=STAGE_3),
    F("log_trace_cache_warnings", "bool", False, stages=STAGE_3),
    F("enable_sanity_checks", "bool", False, stages=STAGE_3, status="new"),
    F("save_muon_momentum_buffer_in_memory", "bool", False, stages=STAGE_3, status="new"),
    F("leaf_module", "object", None, stages=STAGE_3, status="new"),
)

OFFLOAD_PARAM_FIELDS: tuple[Field, ...] = (
    F("device", "device", "none"),
    F("nvme_path", "path", None, nullable=True),
    F("buffer_count", "int", 5, ge=0),
    F("buffer_size", "int", 100_000_000, unit=E, ge=0),
    F("max_in_cpu", "int", 1_000_000_000, unit=E, ge=0),
    F("pin_memory", "bool", True, status="changed"),
)

OFFLOAD_OPTIMIZER_FIELDS: tuple[Field, ...] = (
    F("device", "device", "none"),
    F("nvme_path", "path", None, nullable=True),
    F("buffer_count", "int", 4, ge=0),
    F("pin_memory", "bool", True, status="changed"),
    F("pipeline_read", "bool", False),
    F("pipeline_write", "bool", False),
    F("fast_init", "bool", False),
    F("ratio", "float", 1.0, ge=0.0, le=1.0, unit="fraction"),
    F("super_offload", "bool", False, stages=STAGE_3, status="new"),
    F("cpuadam_cores_perc", "float", 0.8, ge=0.0, le=1.0, unit="fraction", status="new"),
)

ZENFLOW_FIELDS: tuple[Field, ...] = (
    F("topk_ratio", "float", 0.1, gt=0.0, lt=1.0),
    F("select_strategy", "str", "auto"),
    F("select_interval", "any", "auto"),
    F("update_interval", "any", "auto"),
    F("overlap_step", "bool", False),
    F("offload", "bool", False),
    F("auto_ratio", "float", 0.99, ge=0.0, le=1.0),
    F("full_warm_up_rounds", "int", 0),
    F("pt_reserved_cores_perc", "float", 0.5, ge=0.0, le=1.0),
    F("steps_per_epoch", "int", None, nullable=True),
)

LEAF_MODULE_FIELDS: tuple[Field, ...] = (
    F("classes", "list", None),
    F("names", "list", None),
    F("name_suffixes", "list", None),
)

FP16_FIELDS: tuple[Field, ...] = (
    F("enabled", "bool", False),
    F("auto_cast", "bool", False),
    F("loss_scale", "float", 0, ge=0, doc="0 = dynamic loss scaling"),
    F("initial_scale_power", "int", 16),
    F("loss_scale_window", "int", 1000),
    F("hysteresis", "int", 2),
    F("consecutive_hysteresis", "bool", False),
    F("min_loss_scale", "int", 1),
    F("fp16_master_weights_and_grads", "bool", False),
)

BF16_FIELDS: tuple[Field, ...] = (
    F("enabled", "bool", False),
    F("immediate_grad_update", "bool", False),
    F("check_grad_overflow", "bool", True, status="new"),
    F("bf16_master_weights_and_grads", "bool", False, status="new"),
    F("bf16_optimizer_states", "bool", False, status="new"),
)


def _names(kind: Kind, *names: str) -> tuple[Field, ...]:
    return tuple(F(n, kind) for n in names)


def _any(*names: str) -> tuple[Field, ...]:
    return _names("any", *names)


_MONITOR_COMMON = (
    F("enabled", "bool", False),
    F("output_path", "str", ""),
    F("job_name", "str", "DeepSpeedJobName"),
)

# Top-level keys 0.19.8 reads (docs/deepspeed-facts.md §3.0). Sections are "object"; scalar types are what the
# readers need to work (dict.get does not coerce: a string batch size breaks the arithmetic).
TOP_FIELDS: tuple[Field, ...] = (
    F("train_batch_size", "int", None, gt=0),
    F("train_micro_batch_size_per_gpu", "int", None, gt=0),
    F("gradient_accumulation_steps", "int", None, gt=0),
    F("managed_gradient_accumulation", "bool", True, status="new"),
    F("steps_per_print", "int", None, nullable=True),  # engine.py tests `is not None` before using it
    F("dump_state", "bool", False),
    F("disable_allgather", "bool", False),
    F("dataloader_drop_last", "bool", False),
    F("wall_clock_breakdown", "bool", False),
    F("memory_breakdown", "bool", False),
    F("use_data_before_expert_parallelism", "bool", False),
    F("disable_python_gc", "bool", False, status="new"),
    F("log_level", "str", None, nullable=True, status="new"),
    F("vocabulary_size", "int", None, nullable=True),
    F("communication_data_type", "str", None, nullable=True),
    F("seq_parallel_communication_data_type", "str", "fp32", nullable=True, status="changed"),
    F("seq_parallel_comm_data_type", "str", None, deprecated="seq_parallel_communication_data_type"),
    F("prescale_gradients", "bool", False),
    F("gradient_predivide_factor", "number", 1.0),
    F("gradient_allreduce_op", "str", "mean", status="new"),
    F("gradient_clipping", "number", 1.0, ge=0, status="changed"),
    F("zero_allow_untested_optimizer", "bool", False),
    F("zero_force_ds_cpu_optimizer", "bool", True),
    F("allgather_size", "int", 500_000_000, unit=E),
    F("sequence_parallel_size", "number", None, gt=0, status="new"),
    F("data_parallel_size", "int", None, status="new"),
    F("zero_optimization", "object"),
    F("fp16", "object"),
    F("bf16", "object"),
    F("bfloat16", "object", deprecated="bf16"),
    F("torch_autocast", "object", status="new"),
    F("data_types", "object", status="changed"),
    F("optimizer", "object"),
    F("scheduler", "object"),
    F("activation_checkpointing", "object"),
    F("flops_profiler", "object"),
    F("aio", "object"),
    F("autotuning", "object"),
    F("pipeline", "object"),
    F("data_efficiency", "object"),
    F("checkpoint", "object", status="changed"),
    F("datastates_ckpt", "any", status="new"),
    F("comms_logger", "object"),
    F("timers", "object"),
    F("tensorboard", "object"),
    F("wandb", "object"),
    F("csv_monitor", "object"),
    F("comet", "object"),
    F("hybrid_engine", "object"),
    F("weight_quantization", "object"),
    F("tensor_parallel", "object"),
    F("compile", "object", status="new"),
    F("expert_parallel", "object", status="new"),
)

SECTIONS: dict[str, Section] = {
    s.pointer: s
    for s in (
        Section("", "tolerant", TOP_FIELDS, "runtime/config.py"),
        Section("/zero_optimization", "strict", ZERO_FIELDS, "runtime/zero/config.py"),
        Section(
            "/zero_optimization/offload_param",
            "strict",
            OFFLOAD_PARAM_FIELDS,
            "runtime/zero/offload_config.py",
        ),
        Section(
            "/zero_optimization/offload_optimizer",
            "strict",
            OFFLOAD_OPTIMIZER_FIELDS,
            "runtime/zero/offload_config.py",
        ),
        Section("/zero_optimization/zenflow", "strict", ZENFLOW_FIELDS, "runtime/zenflow/zenflow_config.py"),
        Section(
            "/zero_optimization/leaf_module",
            "strict",
            LEAF_MODULE_FIELDS,
            "runtime/zero/leaf_module_config.py",
        ),
        Section("/fp16", "strict", FP16_FIELDS, "runtime/precision_config.py"),
        Section("/bf16", "strict", BF16_FIELDS, "runtime/precision_config.py"),
        Section("/bfloat16", "strict", BF16_FIELDS, "runtime/precision_config.py"),
        Section(
            "/comms_logger",
            "strict",
            (
                F("enabled", "bool", False),
                F("prof_all", "bool", True),
                F("prof_ops", "list", None),
                F("verbose", "bool", False),
                F("debug", "bool", False),
            ),
            "comm/config.py",
        ),
        Section(
            "/hybrid_engine",
            "strict",
            (
                F("enabled", "bool", False),
                F("max_out_tokens", "int", 512, gt=0),
                F("inference_tp_size", "int", 1),
                F("release_inference_cache", "bool", False),
                F("pin_parameters", "bool", True),
                F("tp_gather_partition_size", "int", 8),
                F("enable_cuda_graph", "bool", False),
            ),
            "runtime/config.py",
        ),
        Section("/timers", "tolerant", (F("throughput", "object"),), "utils/config.py"),
        Section(
            "/timers/throughput",
            "strict",
            (F("enabled", "bool", True), F("synchronized", "bool", True)),
            "utils/config.py",
        ),
        Section("/tensorboard", "strict", _MONITOR_COMMON, "monitor/config.py"),
        Section("/csv_monitor", "strict", _MONITOR_COMMON, "monitor/config.py"),
        Section(
            "/wandb",
            "strict",
            (
                F("enabled", "bool", False),
                F("group", "str", None, nullable=True),
                F("team", "str", None, nullable=True),
                F("project", "str", "deepspeed"),
            ),
            "monitor/config.py",
        ),
        Section(
            "/comet",
            "strict",
            (F("enabled", "bool", False), F("samples_log_interval", "int", 100))
            + tuple(
                F(n, "str", None, nullable=True)
                for n in ("project", "workspace", "api_key", "experiment_name", "experiment_key", "mode")
            )
            + (F("online", "bool", None, nullable=True),),
            "monitor/config.py",
        ),
        Section(
            "/compile",
            "strict",
            (
                F("deepcompile", "bool", False),
                F("free_activation_threshold", "int", 10 * 1024 * 1024),
                F("passes", "list", None, nullable=True),
            )
            + _names(
                "bool",
                "autoep_non_moe",
                "free_activation",
                "offload_activation",
                "offload_activation_pin_memory",
                "offload_opt_states",
                "double_buffer",
                "symmetric_memory",
                "debug_log",
                "offload_parameters",
                "sync_before_reduce",
                "sync_after_reduce",
                "sync_before_allgather",
                "sync_after_allgather",
                "keep_int_input_tensors",
                "keep_all_input_tensors",
            ),
            "compile/config.py",
        ),
        Section(
            "/weight_quantization",
            "strict",
            (
                F("enabled", "bool", True),
                F("num_bits", "int", 8),
                F("q_type", "any", "symmetric"),
                F("q_groups", "int", 1),
                F("quantized_initialization", "object"),
                F("post_init_quant", "object"),
            ),
            "inference/config.py",
        ),
        Section(
            "/tensor_parallel",
            "strict",
            (
                F("dtype", "never", doc="a torch.dtype: no JSON value validates"),
                F("autotp_size", "int", 0),
                F("tp_overlap_comm", "bool", False),
                F("vocab_parallel_lm_head", "bool", None, nullable=True),
                F("vocab_parallel_ce_backend", "any", "torch"),
                F("injection_policy_tuple", "any"),
                F("partition_config", "object", None, nullable=True),
                F("preset_model", "str", None, nullable=True),
                F("keep_module_on_host", "bool", False),
                F("tensor_parallel", "object", alias="tp"),
                F("replace_with_kernel_inject", "bool", False, alias="kernel_inject"),
            ),
            "runtime/tensor_parallel/config.py",
        ),
        Section(
            "/optimizer",
            "tolerant",
            (F("type", "str"), F("params", "object"), F("legacy_fusion", "bool", False)),
            "runtime/config.py",
        ),
        Section("/scheduler", "tolerant", (F("type", "str"), F("params", "object")), "runtime/config.py"),
        Section(
            "/activation_checkpointing",
            "tolerant",
            _names(
                "bool",
                "partition_activations",
                "contiguous_memory_optimization",
                "cpu_checkpointing",
                "synchronize_checkpoint_boundary",
                "profile",
            )
            + _any("number_checkpoints"),
            "runtime/activation_checkpointing/config.py",
        ),
        Section(
            "/flops_profiler",
            "tolerant",
            _any(
                "enabled",
                "recompute_fwd_factor",
                "profile_step",
                "module_depth",
                "top_modules",
                "detailed",
                "output_file",
            ),
            "profiling/config.py",
        ),
        Section(
            "/aio",
            "tolerant",
            _any(
                "block_size",
                "queue_depth",
                "intra_op_parallelism",
                "single_submit",
                "overlap_events",
                "use_gds",
            )
            + (F("thread_count", "any", deprecated="intra_op_parallelism"),),
            "runtime/swap_tensor/constants.py",
        ),
        Section(
            "/autotuning",
            "tolerant",
            _any(
                "enabled",
                "fast",
                "results_dir",
                "exps_dir",
                "overwrite",
                "start_profile_step",
                "end_profile_step",
                "metric_path",
                "tuner_type",
                "tuner_early_stopping",
                "tuner_num_trials",
                "arg_mappings",
                "max_train_batch_size",
                "min_train_batch_size",
                "max_train_micro_batch_size_per_gpu",
                "min_train_micro_batch_size_per_gpu",
                "num_tuning_micro_batch_sizes",
                "mp_size",
                "metric",
                "model_info",
                "model_info_path",
            ),
            "autotuning/constants.py",
        ),
        Section(
            "/checkpoint",
            "tolerant",
            _any(
                "tag_validation",
                "load_universal",
                "use_node_local_storage",
                "parallel_write",
                "checkpoint_serialization",
                "writer",
            ),
            "runtime/model_checkpointing/config.py",
        ),
        Section(
            "/data_types",
            "tolerant",
            _any("grad_accum_dtype", "param_dtype", "buffer_dtype", "keep_in_fp32_modules"),
            "runtime/config.py",
        ),
        Section(
            "/pipeline",
            "tolerant",
            _any(
                "stages",
                "partition",
                "seed_layers",
                "activation_checkpoint_interval",
                "pipe_partitioned",
                "grad_partitioned",
                "use_reentrant",
            ),
            "runtime/config.py",
        ),
        Section(
            "/torch_autocast",
            "tolerant",
            _any("enabled", "dtype", "lower_precision_safe_modules"),
            "runtime/config.py",
        ),
    )
}

# Presence alone raises DeepSpeedConfigError in 0.19.8 (checked before anything else; §1.4, §3.0.1).
REMOVED_TOP: dict[str, str] = {
    "nebula": "Nebula checkpointing was removed",
    "compression_training": "the compression library was removed",
    "amp": "NVIDIA Apex AMP integration was removed; use fp16, bf16 or torch_autocast",
    "quantize_training": "Mixture-of-Quantization (MoQ) was removed",
    "sparse_gradients": "sparse compression of dense embedding gradients was removed",
    "eigenvalue": "eigenvalue-based MoQ was removed",
    "sparse_attention": "DeepSpeed Sparse Attention was removed",
    "elasticity": "elastic training was removed; set the batch sizes directly",
    "graph_harvesting": "graph harvesting was removed",
    "curriculum_learning": "top-level curriculum_learning was removed; use data_efficiency.data_sampling",
    "progressive_layer_drop": "Progressive Layer Dropping was removed",
}
REMOVED_ZERO: dict[str, str] = {
    "mics_shard_size": "MiCS ZeRO-3 sharding was removed",
    "mics_hierarchical_params_gather": "MiCS ZeRO-3 sharding was removed",
    "zeropp_loco_param": "LoCo-ZeRO++ was removed",
}

# DeepSpeed optimizer names (lower-cased when they match; runtime/config.py DEEPSPEED_OPTIMIZERS) and those
# removed since 0.16 (onebit family). Any other name must be a torch.optim class name, case-sensitive.
DEEPSPEED_OPTIMIZERS = ("adagrad", "adam", "adamw", "lamb", "muadam", "muadamw", "musgd", "lion", "muon")
REMOVED_OPTIMIZERS = ("onebitadam", "zerooneadam", "onebitlamb")
TORCH_OPTIMIZERS = (
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "ASGD",
    "LBFGS",
    "Muon",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SGD",
    "SparseAdam",
)
# Optimizers ZeRO accepts without zero_allow_untested_optimizer (runtime/zero/utils.py), by config type.
ZERO_SUPPORTED_TYPES = ("adam", "adamw", "adagrad", "lion", "muon", "Adam", "AdamW", "Adagrad")
# Types for which DeepSpeed builds a CPU optimizer under optimizer offload (DeepSpeedCPUAdam/Adagrad/Lion).
CPU_OFFLOAD_TYPES = ("adam", "adamw", "adagrad", "lion")
SCHEDULERS = ("LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR")

# Keyword arguments each optimizer class takes (inspect.signature on 0.19.8 / torch 2.x; a slow test in
# tests/unit/test_dsconfig_schema.py re-reads them). DeepSpeed passes `optimizer.params` as **kwargs
# (runtime/engine.py `_configure_basic_optimizer`), so any other key is a TypeError at initialize().
# Keys the engine pops before the call, for every Adam/AdamW/Muon path (`get_optimizer_configuration`):
OPTIMIZER_POPPED = ("adam_w_mode", "torch_adam", "fp32_optimizer_states")
_TORCH_COMMON = ("foreach", "maximize", "capturable", "differentiable")
OPTIMIZER_KWARGS: dict[str, tuple[str, ...]] = {
    # DeepSpeed types (lower-case), by the class the engine builds
    "adam:fused": ("lr", "bias_correction", "betas", "eps", "weight_decay", "amsgrad", "set_grad_none"),
    "adam:cpu": ("lr", "bias_correction", "betas", "eps", "weight_decay", "amsgrad"),
    "adam:torch": ("lr", "betas", "eps", "weight_decay", "amsgrad", "fused", "decoupled_weight_decay")
    + _TORCH_COMMON,
    "adagrad:cpu": ("lr", "eps", "weight_decay", "amsgrad", "fp32_optimizer_states"),
    "adagrad:torch": ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "fused")
    + ("foreach", "maximize", "differentiable"),
    "lamb": (
        "lr",
        "bias_correction",
        "betas",
        "eps",
        "eps_inside_sqrt",
        "weight_decay",
        "max_grad_norm",
        "max_coeff",
        "min_coeff",
        "amsgrad",
    ),
    "lion:fused": ("lr", "betas", "weight_decay", "set_grad_none"),
    "lion:cpu": ("lr", "betas", "weight_decay", "fp32_optimizer_states"),
    # torch.optim names (case-sensitive) DeepSpeed builds with getattr(torch.optim, type)
    "Adadelta": ("lr", "rho", "eps", "weight_decay") + _TORCH_COMMON,
    "Adafactor": ("lr", "beta2_decay", "eps", "d", "weight_decay", "foreach", "maximize"),
    "Adamax": ("lr", "betas", "eps", "weight_decay") + _TORCH_COMMON,
    "ASGD": ("lr", "lambd", "alpha", "t0", "weight_decay") + _TORCH_COMMON,
    "LBFGS": (
        "lr",
        "max_iter",
        "max_eval",
        "tolerance_grad",
        "tolerance_change",
        "history_size",
        "line_search_fn",
    ),
    "NAdam": ("lr", "betas", "eps", "weight_decay", "momentum_decay", "decoupled_weight_decay")
    + _TORCH_COMMON,
    "RAdam": ("lr", "betas", "eps", "weight_decay", "decoupled_weight_decay") + _TORCH_COMMON,
    "RMSprop": ("lr", "alpha", "eps", "weight_decay", "momentum", "centered") + _TORCH_COMMON,
    "Rprop": ("lr", "etas", "step_sizes") + _TORCH_COMMON,
    "SGD": ("lr", "momentum", "dampening", "weight_decay", "nesterov", "fused")
    + ("foreach", "maximize", "differentiable"),
    "SparseAdam": ("lr", "betas", "eps", "maximize"),
}
# Scheduler keyword arguments (deepspeed/runtime/lr_schedules.py, built as `cls(optimizer, **params)`).
SCHEDULER_KWARGS: dict[str, tuple[str, ...]] = {
    "LRRangeTest": (
        "lr_range_test_min_lr",
        "lr_range_test_step_size",
        "lr_range_test_step_rate",
        "lr_range_test_staircase",
        "last_batch_iteration",
    ),
    "OneCycle": (
        "cycle_min_lr",
        "cycle_max_lr",
        "decay_lr_rate",
        "cycle_first_step_size",
        "cycle_second_step_size",
        "cycle_first_stair_count",
        "cycle_second_stair_count",
        "decay_step_size",
        "cycle_momentum",
        "cycle_min_mom",
        "cycle_max_mom",
        "decay_mom_rate",
        "last_batch_iteration",
    ),
    "WarmupLR": ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"),
    "WarmupDecayLR": (
        "total_num_steps",
        "warmup_min_lr",
        "warmup_max_lr",
        "warmup_num_steps",
        "warmup_type",
        "last_batch_iteration",
    ),
    "WarmupCosineLR": (
        "total_num_steps",
        "warmup_min_ratio",
        "warmup_num_steps",
        "cos_min_ratio",
        "warmup_type",
        "last_batch_iteration",
    ),
}
# Scheduler arguments without a default (the signatures above).
SCHEDULER_REQUIRED: dict[str, tuple[str, ...]] = {
    "WarmupDecayLR": ("total_num_steps",),
    "WarmupCosineLR": ("total_num_steps",),
    "OneCycle": ("cycle_min_lr", "cycle_max_lr"),
}
# Muon's Newton-Schulz methods (runtime/zero/muon/original_muon.py NS_METHODS, asserted per step).
MUON_NS_METHODS = ("standard", "gram")
# DtypeEnum's accepted names (runtime/config.py): data_types.param_dtype goes through DtypeEnum(value).
DTYPE_NAMES = (
    "torch.float16",
    "fp16",
    "float16",
    "half",
    "torch.float32",
    "fp32",
    "float32",
    "float",
    "torch.int8",
    "int8",
    "torch.bfloat16",
    "bf16",
    "bfloat16",
)

COMM_DTYPES = ("fp16", "bf16", "fp32")
AUTOCAST_DTYPES = (
    "fp16",
    "float16",
    "half",
    "torch.float16",
    "bf16",
    "bfloat16",
    "torch.bfloat16",
    "fp32",
    "float32",
    "float",
    "int8",
)

def section(pointer: str) -> Section | None:
    return SECTIONS.get(pointer)


def zero_field(key: str) -> Field | None:
    return SECTIONS["/zero_optimization"].field(key)


@cache
def known_keys_anywhere() -> dict[str, list[str]]:
    """key → section pointers that define it (for "this key belongs in another section")."""
    out: dict[str, list[str]] = {}
    for sec in SECTIONS.values():
        for key in sec.keys:
            out.setdefault(key, []).append(sec.pointer)
    return out


# ---- DeepSpeed's value coercion -------------------------------------------------------------------------------
# Strict sections validate with pydantic 2 in lax mode. The rules below restate pydantic's conversion table
# (https://docs.pydantic.dev/latest/concepts/conversion_table/) for the types DeepSpeed's fields use; building
# pydantic TypeAdapters instead costs ~0.4 s at start-up. tests/unit/test_dsconfig_schema.py checks these
# functions against pydantic itself on a battery of values.


@dataclass(frozen=True)
class ValueProblem:
    kind: Literal["type", "range"]
    message: str


_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}
# pydantic-core's string → number grammar (tests/unit/test_dsconfig_schema.py checks it against pydantic
# itself): surrounding whitespace stripped, ASCII digits only (Python's int()/float() also take "٣"),
# single underscores between digits, and for an int only a fraction of zeros ("3.0" yes; "3.", "3e0" no).
_DIGITS = r"[0-9](?:_?[0-9])*"
_INT_STR = re.compile(rf"[+-]?{_DIGITS}(?:\.0+)?")
_FLOAT_STR = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)",
    re.IGNORECASE,
)
_INT_MAX_DIGITS = 4300  # pydantic-core refuses longer digit strings ("exceeded maximum size")
_FLOAT_INT_LIMIT = 2.0**63  # a float is converted through i64: |x| >= 2**63 "exceeded maximum size"
_MISSING = object()


def _lax_bool(v: Any) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, float) and v in (0.0, 1.0):
        return bool(v)
    if isinstance(v, str) and v.lower() in _TRUE | _FALSE:
        return v.lower() in _TRUE
    return _MISSING


def _lax_int(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer() and abs(v) < _FLOAT_INT_LIMIT:
            return int(v)
        return _MISSING
    if isinstance(v, str):
        text = v.strip()
        if not _INT_STR.fullmatch(text) or len(text) > _INT_MAX_DIGITS:
            return _MISSING
        return int(text.split(".", 1)[0].replace("_", ""))
    return _MISSING


def _lax_float(v: Any) -> Any:
    if isinstance(v, (bool, int, float)):
        return float(v)
    if isinstance(v, str):
        text = v.strip()
        if "_" in text:  # pydantic-core drops single inner underscores anywhere, if the text has no blanks
            if text != v or text[0] == "_" or text[-1] == "_" or "__" in text:
                return _MISSING
            text = text.replace("_", "")
        return float(text) if _FLOAT_STR.fullmatch(text) else _MISSING
    return _MISSING


def _lax(kind: str, v: Any) -> Any:
    if kind == "bool":
        return _lax_bool(v)
    if kind == "int":
        return _lax_int(v)
    if kind in ("float", "number"):
        return _lax_float(v)
    if kind in ("str", "path"):
        return v if isinstance(v, str) else _MISSING
    if kind == "stage":
        if isinstance(v, (str, float)):
            v = _lax_int(v)
        return int(v) if isinstance(v, int) and v in (0, 1, 2, 3) else _MISSING
    if kind == "device":
        return v if isinstance(v, str) and v in ("none", "cpu", "nvme") else _MISSING
    if kind == "list":
        return v if isinstance(v, list) and all(isinstance(x, str) for x in v) else _MISSING
    raise ValueError(kind)


_EXPECT = {
    "bool": "a boolean",
    "int": "an integer",
    "float": "a number",
    "number": "a number",
    "str": "a string",
    "stage": "one of 0, 1, 2, 3",
    "device": 'one of "none", "cpu", "nvme"',
    "path": "a path string",
    "list": "a list of strings",
    "object": "an object",
}


def coerce(f: Field, value: Any) -> tuple[Any, ValueProblem | None]:
    """The value DeepSpeed's pydantic model would store for `value`, or the reason it rejects it."""
    if value is None:
        if f.nullable or f.name == "leaf_module":
            return None, None
        return None, ValueProblem("type", f"null is not allowed, expected {_EXPECT.get(f.kind, f.kind)}")
    if f.kind == "any":
        return value, None
    if f.kind == "never":
        return value, ValueProblem("type", f"cannot be set from JSON ({f.doc})")
    if f.kind == "object":
        if isinstance(value, dict):
            return value, None
        return value, ValueProblem("type", f"expected an object, got {_json_type(value)}")
    if f.kind == "list" and isinstance(value, str):
        value = [value]  # leaf_module wraps a bare string
    strict_number = f.name in (
        "loss_scale",
        "loss_scale_window",
        "min_loss_scale",
    )  # precision_config validators
    if strict_number and isinstance(value, bool):
        return value, ValueProblem("type", f"expected {_EXPECT[f.kind]}, got a boolean")
    out = _lax(f.kind, value)
    if out is _MISSING:
        if f.kind == "int" and isinstance(value, float) and math.isfinite(value) and value.is_integer():
            why = f'{_short(value)} exceeds pydantic\'s integer range (|x| < 2**63): "exceeded maximum size"'
        elif f.kind == "int" and isinstance(value, float) and math.isfinite(value):
            why = f"expected an integer, got a number with a fractional part ({_short(value)})"
        else:
            why = f"expected {_EXPECT[f.kind]}, got {_short(value)}"
        return value, ValueProblem("type", why)
    if isinstance(out, float) and not math.isfinite(out) and strict_number:
        return out, ValueProblem("range", "must be a finite number")
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        for bound, ok, text in (
            (f.gt, lambda b: out > b, "> {b}"),
            (f.ge, lambda b: out >= b, ">= {b}"),
            (f.lt, lambda b: out < b, "< {b}"),
            (f.le, lambda b: out <= b, "<= {b}"),
        ):
            if bound is not None and not ok(bound):
                return out, ValueProblem(
                    "range", f"must be {text.format(b=_num(bound))} (got {_short(value)})"
                )
    return out, None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _short(value: Any) -> str:
    import json

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else "null"


def loose_number(value: Any) -> int | float | None:
    """A top-level number as DeepSpeed computes with it: those keys are read with dict.get and no
    conversion (runtime/config_utils.py get_scalar_param), so a boolean is the int it is in Python, a
    string is not a number, and inf/nan are not usable."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) or isinstance(value, float) and math.isfinite(value):
        return value
    return None


def is_auto(value: Any) -> bool:
    """DeepSpeedConfigModel drops exactly the string "auto" (runtime/config_utils.py)."""
    return isinstance(value, str) and value == "auto"
