"""ZT2xx: which ZeRO knobs act at which stage, and stage-level constraints (docs/deepspeed-facts.md §1.2, §4, §8).

The stage table is `Field.stages` in zerotune/dsconfig/schema.py; these rules only read it.
"""

from __future__ import annotations

from collections.abc import Iterator

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import pointer_of
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule

_ZEROPP = (
    "zero_hpz_partition_size",
    "zero_quantized_weights",
    "zero_quantized_gradients",
    "zero_quantized_nontrainable_weights",
)
_OWN_RULE = _ZEROPP + (
    "offload_param",
    "offload_optimizer",
    "stage",
    "elastic_checkpoint",
    "compute_grad_norm",
    "legacy_stage1",
    "leaf_module",
)


def _set_knobs(ctx: Context) -> Iterator[tuple[str, schema.Field, object]]:
    """(key, field, DeepSpeed value) for zero_optimization keys set to a non-default, readable value."""
    for key, raw in ctx.zero.items():
        f = schema.zero_field(key)
        if f is None or f.deprecated or schema.is_auto(raw) or f.name in _OWN_RULE:
            continue
        value, problem = schema.coerce(f, raw)
        if problem is None and value != f.default:
            yield key, f, value


class Stage12KnobAtStage3(Rule):
    """A ZeRO stage 1/2 knob in a stage-3 config.

    ## What it does
    At stage 3, reports settings only the stage 1/2 optimizer reads: `allgather_bucket_size`,
    `use_multi_rank_bucket_allreduce`, `round_robin_gradients`, `ignore_unused_parameters`,
    `parameter_alignment`, `elastic_checkpoint`.

    ## Why is this bad?
    They have no effect: tuning `allgather_bucket_size` under ZeRO-3 changes nothing (the stage-3 knobs are
    `stage3_prefetch_bucket_size`, `stage3_max_live_parameters`, `stage3_max_reuse_distance` and
    `stage3_param_persistence_threshold`).

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "allgather_bucket_size": 2e8}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 2e8}}
    ```

    ## References
    - microsoft/DeepSpeed#6420; deepspeed/runtime/zero/stage3.py
    """

    code = "ZT201"
    name = "stage12-knob-at-stage3"
    severity = Severity.WARNING
    message = "`{key}` has no effect at ZeRO stage 3 (it is read by the stage 1/2 optimizer only)"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage != 3 or not ctx.stage_known:
            return
        for key, f, _ in _set_knobs(ctx):
            if f.stages == schema.STAGE_1_2:
                yield self.emit(ctx, pointer_of("zero_optimization", key), key=key)


class Stage3KnobBelowStage3(Rule):
    """A stage-3-only knob in a stage 1 or 2 config.

    ## What it does
    At stage 1/2, reports `stage3_*` settings, `sub_group_size` and other parameter-partitioning knobs set to
    a non-default value.

    ## Why is this bad?
    Stage 1/2 never partitions parameters, so these are ignored; the config suggests a tuning that is not
    happening (or the stage is not what the author meant).

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "stage3_max_live_parameters": 3e8, "sub_group_size": 1e12}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2}}
    ```

    ## References
    - deepspeed/runtime/zero/config.py; docs/deepspeed-facts.md §1.2 (Stages column)
    """

    code = "ZT202"
    name = "stage3-knob-below-stage3"
    severity = Severity.WARNING
    message = "`{key}` has no effect at ZeRO stage {stage} (stage 3 only)"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage not in (1, 2) or not ctx.stage_known:
            return
        for key, f, _ in _set_knobs(ctx):
            if f.stages == schema.STAGE_3:
                yield self.emit(ctx, pointer_of("zero_optimization", key), key=key, stage=ctx.stage)


class KnobWithZeroOff(Rule):
    """ZeRO settings in a config where ZeRO is off (stage 0).

    ## What it does
    At stage 0 (including a missing or "auto" stage), reports ZeRO knobs and offload sections that would
    only act with ZeRO on.

    ## Why is this bad?
    Nothing is partitioned or offloaded: the config looks tuned for memory savings it does not get. A
    stage left as "auto" outside HF means stage 0.

    ## Example
    ```json
    {"zero_optimization": {"overlap_comm": true, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "overlap_comm": true, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## References
    - deepspeed/runtime/engine.py (ZeRO optimizer only built when stage > 0)
    """

    code = "ZT203"
    name = "knob-with-zero-off"
    severity = Severity.WARNING
    message = "`{key}` {what}: ZeRO is off (stage 0)"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage != 0 or not isinstance(ctx.config.get("zero_optimization"), dict):
            return
        for key, _f, _ in _set_knobs(ctx):
            yield self.emit(ctx, pointer_of("zero_optimization", key), key=key, what="has no effect")
        if ctx.offload("offload_param") and "offload_param" in ctx.zero:
            yield self.emit(ctx, pointer_of("zero_optimization", "offload_param"), key="offload_param", what="has no effect")
        # offload_optimizer is not inert at stage 0 (settings.ZeroSettings.cpu_optimizer): it still selects
        # DeepSpeed's CPU optimizer, built over the GPU parameters because no ZeRO optimizer moves them.
        # Without an optimizer section the engine refuses the client's optimizer (ZT305 reports that).
        if ctx.offload("offload_optimizer") and ctx.optimizer_type is not None:
            key = "offload_optimizer" if "offload_optimizer" in ctx.zero else "cpu_offload"
            pointer = pointer_of("zero_optimization", key)
            if ctx.resolved.zero.cpu_optimizer and _builds_cpu_optimizer(ctx):
                yield self.emit(
                    ctx,
                    pointer,
                    key=key,
                    what="offloads nothing",
                    severity=Severity.ERROR,
                    help=f"DeepSpeed still builds its CPU optimizer for `{ctx.optimizer_type}` over the "
                    "GPU parameters, and its first step fails (\"CPUAdam param is on cuda:0 and must be "
                    "'cpu'\"); set stage 1-3 to offload, or remove offload_optimizer",
                )
            else:
                yield self.emit(ctx, pointer, key=key, what="has no effect")


def _builds_cpu_optimizer(ctx: Context) -> bool:
    """The config's optimizer is one DeepSpeed swaps for its CPU class under optimizer offload
    (engine.py `_configure_basic_optimizer` / `get_optimizer_configuration`; `torch_adam` opts out)."""
    opt = (ctx.optimizer_type or "").lower()
    params = ctx.section("optimizer").get("params")
    torch_adam = isinstance(params, dict) and bool(params.get("torch_adam"))  # popped and tested for truth
    return opt in schema.CPU_OFFLOAD_TYPES + ("muon",) and not (opt in ("adam", "adamw") and torch_adam)


class ZeroppBelowStage3(Rule):
    """ZeRO++ (hpZ, qwZ, qgZ) enabled below stage 3.

    ## What it does
    Reports `zero_hpz_partition_size > 1`, `zero_quantized_weights`, `zero_quantized_gradients` or
    `zero_quantized_nontrainable_weights` with a stage below 3.

    ## Why is this bad?
    ZeRO++ is a stage-3 feature: the flags do nothing below stage 3, except that qgZ still builds all-to-all
    process groups and can assert on some node layouts.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "zero_quantized_gradients": true}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "zero_quantized_gradients": true}}
    ```

    ## References
    - ZeRO++ (Wang et al., 2023, arXiv:2306.10209); deepspeed/runtime/engine.py, utils/groups.py
    """

    code = "ZT204"
    name = "zeropp-below-stage3"
    severity = Severity.WARNING
    message = "ZeRO++ `{key}` has no effect at stage {stage} (stage 3 only)"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage == 3 or not ctx.stage_known:
            return
        for key in _ZEROPP:
            raw = ctx.zero.get(key)
            if raw is None or schema.is_auto(raw):
                continue
            value, problem = schema.coerce(schema.zero_field(key), raw)
            if problem is None and (value > 1 if key == "zero_hpz_partition_size" else value):
                yield self.emit(ctx, pointer_of("zero_optimization", key), key=key, stage=ctx.stage)


class HpzWorldSize(Rule):
    """hpZ partition size that does not divide the world size.

    ## What it does
    With `--world-size`, checks that `zero_hpz_partition_size` divides the number of ranks (hpZ builds
    secondary groups of that many consecutive ranks, normally one node).

    ## Why is this bad?
    Group creation asserts at start-up.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}
    ```
    with 12 ranks.

    ## Use instead
    Use the GPUs per node (e.g. 4 with 12 ranks on 3 nodes).

    ## References
    - deepspeed/utils/groups.py `_create_zero_param_parallel_group`; ZeRO++ paper §3.1
    """

    code = "ZT205"
    name = "hpz-world-size"
    severity = Severity.ERROR
    message = "zero_hpz_partition_size {hpz} does not divide the world size {world}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        world = ctx.world_size
        key, hpz = ctx.zero_value("zero_hpz_partition_size")
        if world is None or key is None or ctx.stage != 3 or hpz <= 1:
            return
        if world % min(hpz, world):
            yield self.emit(ctx, pointer_of("zero_optimization", key), hpz=hpz, world=world)


class OddAllgatherBucket(Rule):
    """An odd `allgather_bucket_size` at stage 1/2.

    ## What it does
    Checks that `allgather_bucket_size` is even when the stage 1/2 optimizer reads it.

    ## Why is this bad?
    The stage 1/2 optimizer asserts "allgather_bucket_size must be a multiple of 2" at start-up.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "allgather_bucket_size": 200000001}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "allgather_bucket_size": 200000000}}
    ```

    ## References
    - deepspeed/runtime/zero/stage_1_and_2.py (`__init__` assertion)
    """

    code = "ZT206"
    name = "odd-allgather-bucket"
    severity = Severity.ERROR
    message = "allgather_bucket_size {value} must be even at stage 1/2"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, value = ctx.zero_value("allgather_bucket_size")
        if key and ctx.stage in (1, 2) and value % 2:
            yield self.emit(ctx, pointer_of("zero_optimization", key), value=value)


class LegacyStage1(Rule):
    """`legacy_stage1: true`.

    ## What it does
    Finds the removed legacy stage-1 implementation switch.

    ## Why is this bad?
    The legacy stage 1 was removed in DeepSpeed 0.5.9; the engine raises an exception when it is requested.

    ## Example
    ```json
    {"zero_optimization": {"stage": 1, "legacy_stage1": true}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 1}}
    ```

    ## References
    - deepspeed/runtime/engine.py (`_configure_zero_optimizer`)
    """

    code = "ZT207"
    name = "legacy-stage1"
    severity = Severity.ERROR
    message = "legacy_stage1 was removed in DeepSpeed 0.5.9; the engine raises when it is true"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, value = ctx.zero_value("legacy_stage1")
        if key and value:
            yield self.emit(ctx, pointer_of("zero_optimization", key))


class LegacyZeroBool(Rule):
    """`"zero_optimization": true` (the pre-1.0 boolean form).

    ## What it does
    Finds a boolean `zero_optimization`.

    ## Why is this bad?
    DeepSpeed still maps `true` to stage 1 (taking `allgather_size` from the top level) and `false` to
    stage 0, but logs a deprecation warning; readers of the config cannot tell which stage runs.

    ## Example
    ```json
    {"train_batch_size": 8, "zero_optimization": true}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "zero_optimization": {"stage": 1}}
    ```

    ## References
    - deepspeed/runtime/zero/config.py `read_zero_config_deprecated`
    """

    code = "ZT208"
    name = "legacy-zero-bool"
    severity = Severity.WARNING
    message = "boolean zero_optimization is deprecated; it means stage {stage}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        raw = ctx.config.get("zero_optimization")
        if isinstance(raw, bool):
            yield self.emit(
                ctx, "/zero_optimization", stage=1 if raw else 0, help=f'write {{"stage": {1 if raw else 0}}}'
            )


class ComputeGradNormStage(Rule):
    """`compute_grad_norm: false` outside stage 1/2.

    ## What it does
    Checks that `compute_grad_norm: false` is used only with ZeRO stage 1 or 2.

    ## Why is this bad?
    DeepSpeed's validator raises "compute_grad_norm=false is supported only with ZeRO Stage 1 or 2".

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "compute_grad_norm": false}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3}}
    ```

    ## References
    - deepspeed/runtime/zero/config.py `compute_grad_norm_valid`
    """

    code = "ZT209"
    name = "compute-grad-norm-stage"
    severity = Severity.ERROR
    message = "compute_grad_norm=false is supported only with ZeRO stage 1 or 2 (stage is {stage})"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, value = ctx.zero_value("compute_grad_norm")
        if key and value is False and ctx.stage in (0, 3):
            yield self.emit(ctx, pointer_of("zero_optimization", key), stage=ctx.stage)


class ElasticCheckpointStage3(Rule):
    """`elastic_checkpoint: true` at stage 3.

    ## What it does
    Reports the legacy elastic checkpoint switch with ZeRO-3.

    ## Why is this bad?
    DeepSpeed 0.19 warns that it is deprecated and unsupported with ZeRO-3; the checkpoint is not elastic.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "elastic_checkpoint": true}}
    ```

    ## Use instead
    Remove it and use Universal Checkpointing (`checkpoint.load_universal`).

    ## References
    - deepspeed/runtime/zero/config.py `elastic_checkpoint_deprecated`
    """

    code = "ZT210"
    name = "elastic-checkpoint-stage3"
    severity = Severity.WARNING
    message = "elastic_checkpoint is not supported with ZeRO stage 3; use Universal Checkpointing"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, value = ctx.zero_value("elastic_checkpoint")
        if key and value and ctx.stage == 3:
            yield self.emit(ctx, pointer_of("zero_optimization", key))


class ReduceScatterConflict(Rule):
    """Reduce-scatter combined with settings the ZeRO 2/3 optimizer refuses.

    ## What it does
    At stage 2/3 with `reduce_scatter` on, checks `gradient_predivide_factor == 1` and
    `prescale_gradients: false` (stage 2: only when averaging), and that qgZ (`zero_quantized_gradients`) is
    not combined with `reduce_scatter: false` at stage 3.

    ## Why is this bad?
    The optimizer asserts at start-up.

    ## Example
    ```json
    {"gradient_predivide_factor": 2.0, "zero_optimization": {"stage": 2}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2}}
    ```

    ## References
    - deepspeed/runtime/zero/stage_1_and_2.py, stage3.py (`__init__` assertions)
    """

    code = "ZT211"
    name = "reduce-scatter-conflict"
    severity = Severity.ERROR
    message = "{detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage not in (2, 3):
            return
        _, rs = ctx.zero_value("reduce_scatter")
        op = ctx.config.get("gradient_allreduce_op")
        averaging = not (isinstance(op, str) and op.lower() == "sum")
        if rs and (ctx.stage == 3 or averaging):
            factor = ctx.top_number("gradient_predivide_factor")
            if factor is not None and factor != 1:
                yield self.emit(
                    ctx,
                    "/gradient_predivide_factor",
                    detail=f"gradient_predivide_factor {factor:g} is not supported with reduce_scatter",
                )
            prescale = ctx.config.get("prescale_gradients")
            if prescale:  # read with dict.get and tested for truth: "yes" and even "false" are on
                how = "" if prescale is True else f" ({schema._short(prescale)} is true to DeepSpeed)"
                yield self.emit(
                    ctx,
                    "/prescale_gradients",
                    detail=f"prescale_gradients{how} is not supported with reduce_scatter",
                )
        if ctx.stage == 3 and rs and (ctx.optimizer_type or "").lower() == "muon":
            yield self.emit(  # zero/stage3.py: "Muon and reduce scatter cannot be used together"
                ctx,
                "/optimizer/type",
                detail="Muon at ZeRO stage 3 needs reduce_scatter disabled (it is on by default)",
            )
        _, qgz = ctx.zero_value("zero_quantized_gradients")
        if ctx.stage == 3 and qgz and not rs:
            yield self.emit(
                ctx,
                "/zero_optimization/reduce_scatter",
                detail="zero_quantized_gradients (qgZ) needs reduce_scatter enabled",
            )


RULES = (
    Stage12KnobAtStage3,
    Stage3KnobBelowStage3,
    KnobWithZeroOff,
    ZeroppBelowStage3,
    HpzWorldSize,
    OddAllgatherBucket,
    LegacyStage1,
    LegacyZeroBool,
    ComputeGradNormStage,
    ElasticCheckpointStage3,
    ReduceScatterConflict,
)
