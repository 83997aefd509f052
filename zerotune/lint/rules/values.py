"""ZT6xx: value types, ranges and the value checks DeepSpeed 0.19.8 makes at parse or engine start
(docs/deepspeed-facts.md §1.1, §3.3, §3.4, §8)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import pointer_of
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule

_BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def _strict_values(ctx: Context) -> Iterator[tuple[str, schema.Field, Any, schema.ValueProblem]]:
    for pointer, value, sec in ctx.sections():
        if sec.mode != "strict":
            continue
        for key, raw in value.items():
            f = sec.field(key)
            ptr = pointer + pointer_of(key)
            if f is None or schema.is_auto(raw) or ptr in ctx.placeholders:
                continue
            _, problem = schema.coerce(f, raw)
            if problem is not None:
                yield ptr, f, raw, problem


class InvalidType(Rule):
    """A value DeepSpeed's pydantic model cannot convert to the field's type.

    ## What it does
    Validates every value in a strict section the way pydantic's lax mode does: booleans accept
    `true`/`"yes"`/`1`, integers accept JSON `5e8` and `"500000000"`, but not the string `"5e8"` or a
    number with a fractional part.

    ## Why is this bad?
    `deepspeed.initialize` fails with a ValidationError. The classic case is Hugging Face's old
    `0.9 * hidden_size**2` for `stage3_prefetch_bucket_size` (15099494.4 for h=4096).

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "reduce_bucket_size": "5e8"}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8}}
    ```

    ## References
    - deepspeed/runtime/zero/config.py; pydantic conversion table (lax mode)
    """

    code = "ZT601"
    name = "invalid-type"
    severity = Severity.ERROR
    message = "`{key}`: {problem}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for ptr, f, _raw, problem in _strict_values(ctx):
            if problem.kind == "type" and not (f.kind == "object"):
                yield self.emit(ctx, ptr, key=ptr.rsplit("/", 1)[-1], problem=problem.message)


class OutOfRange(Rule):
    """A number outside the range DeepSpeed allows.

    ## What it does
    Checks the bounds of DeepSpeed's pydantic fields: `reduce_bucket_size > 0` (0 was accepted before
    0.17+), sizes and counts `>= 0`, `offload_optimizer.ratio` and other fractions in [0, 1],
    `fp16.loss_scale >= 0` and finite, `hybrid_engine.max_out_tokens > 0`; and `steps_per_print` ≠ 0.

    ## Why is this bad?
    DeepSpeed rejects the config with a ValidationError at start-up.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 0}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8}}
    ```

    ## References
    - deepspeed/runtime/zero/config.py, offload_config.py, precision_config.py (Field gt/ge/le)
    """

    code = "ZT602"
    name = "out-of-range"
    severity = Severity.ERROR
    message = "`{key}` {problem}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for ptr, _f, _raw, problem in _strict_values(ctx):
            if problem.kind == "range":
                yield self.emit(ctx, ptr, key=ptr.rsplit("/", 1)[-1], problem=problem.message)
        spp = ctx.config.get("steps_per_print")
        if isinstance(spp, (int, float)) and spp == 0:  # engine.py: (global_steps + 1) % steps_per_print
            yield self.emit(
                ctx,
                "/steps_per_print",
                key="steps_per_print",
                problem="must not be 0: the first training step divides by it (ZeroDivisionError)",
            )


class SectionNotObject(Rule):
    """A config section that is not a JSON object.

    ## What it does
    Checks that sections DeepSpeed reads as mappings (`fp16`, `optimizer`, `checkpoint`,
    `zero_optimization.offload_optimizer`, …) are objects. The legacy `"zero_optimization": true` form and
    `"bf16": null` (falls back to defaults) are left to other rules.

    ## Why is this bad?
    DeepSpeed calls `.get`/`.keys()` on them or passes them as keyword arguments: a `true`, a number or a
    list crashes start-up with a TypeError or AttributeError.

    ## Example
    ```json
    {"train_batch_size": 8, "bf16": true}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "bf16": {"enabled": true}}
    ```

    ## References
    - deepspeed/runtime/config.py, precision_config.py `get_bfloat16_config`
    """

    code = "ZT603"
    name = "section-not-object"
    severity = Severity.ERROR
    message = "`{key}` must be an object, got {kind}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for key, raw in ctx.config.items():
            f = schema.SECTIONS[""].field(key)
            if (
                f is None
                or f.kind != "object"
                or isinstance(raw, dict)
                or pointer_of(key) in ctx.placeholders
            ):
                continue
            if key == "zero_optimization" and isinstance(raw, bool):
                continue
            if raw is None and key in _NULL_SECTIONS or schema.is_auto(raw) and key in _AUTO_SECTIONS:
                continue
            yield self.emit(ctx, pointer_of(key), key=key, kind=schema._json_type(raw))
        zero = ctx.zero
        for key in ("offload_param", "offload_optimizer", "zenflow", "leaf_module"):
            raw = zero.get(key)
            if key in zero and raw is not None and not isinstance(raw, dict) and not schema.is_auto(raw):
                yield self.emit(
                    ctx, pointer_of("zero_optimization", key), key=key, kind=schema._json_type(raw)
                )
        for sec in ("optimizer", "scheduler"):
            params = ctx.section(sec).get("params")
            if "params" in ctx.section(sec) and not isinstance(params, dict) and params is not None:
                yield self.emit(
                    ctx, pointer_of(sec, "params"), key=f"{sec}.params", kind=schema._json_type(params)
                )
        for ptr, f, raw, problem in _strict_values(ctx):  # any other pydantic sub-model or dict field
            if f.kind == "object" and problem.kind == "type" and not ptr.startswith("/zero_optimization/"):
                yield self.emit(ctx, ptr, key=ptr[1:].replace("/", "."), kind=schema._json_type(raw))
        timers = ctx.section("timers")
        if "throughput" in timers and not isinstance(timers["throughput"], dict):
            yield self.emit(
                ctx,
                "/timers/throughput",
                key="timers.throughput",
                kind=schema._json_type(timers["throughput"]),
            )


# Sections DeepSpeed 0.19.8's parser and engine accept as `null` (bf16: precision_config falls back to the
# defaults; aio: swap_tensor/aio_config.py tests `is not None`; expert_parallel), and sections built by
# DeepSpeedConfigModel through
# `**{key: param_dict.get(key, {})}`, which drops a value that is exactly "auto" (runtime/config_utils.py):
# the monitors (monitor/config.py get_monitor_config) and timers. Probed with DeepSpeedConfig on each
# object-valued top-level key set to null, "auto", true and 5 (scripts/evidence/differential_corpus.py records the rest).
_NULL_SECTIONS = frozenset({"bf16", "aio", "expert_parallel"})
_AUTO_SECTIONS = frozenset({"timers", "tensorboard", "wandb", "csv_monitor", "comet"})


class LooseType(Rule):
    """A top-level value of the wrong JSON type that DeepSpeed passes on unconverted.

    ## What it does
    Checks top-level scalars DeepSpeed reads with `dict.get` (booleans such as `wall_clock_breakdown`,
    numbers such as `gradient_clipping`, `steps_per_print`) for the expected JSON type.

    ## Why is this bad?
    No conversion happens: the string `"false"` is truthy, so the feature is switched *on*; a string
    `gradient_clipping` fails later when the optimizer compares it with a float. A few values crash the
    parse itself (`wall_clock_breakdown` that is not a bool, a string `vocabulary_size`, a zero or string
    `sequence_parallel_size`): those are errors.

    ## Example
    ```json
    {"train_batch_size": 8, "wall_clock_breakdown": "false", "gradient_clipping": "1.0"}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "wall_clock_breakdown": false, "gradient_clipping": 1.0}
    ```

    ## References
    - deepspeed/runtime/config_utils.py `get_scalar_param` (a plain dict.get)
    """

    code = "ZT604"
    name = "loose-type"
    severity = Severity.WARNING
    message = "`{key}` should be {expected}, got {value}: DeepSpeed does not convert it"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        expected = {"bool": "a boolean", "int": "an integer", "number": "a number", "str": "a string"}
        for key, raw in ctx.config.items():
            f = schema.SECTIONS[""].field(key)
            if f is None or key in _BATCH or f.kind not in expected or pointer_of(key) in ctx.placeholders:
                continue
            if raw is None and f.nullable or schema.is_auto(raw):
                continue
            ok = {
                "bool": isinstance(raw, bool),
                "int": isinstance(raw, int)
                and not isinstance(raw, bool)
                or isinstance(raw, float)
                and raw.is_integer(),
                "number": isinstance(raw, (int, float)) and not isinstance(raw, bool),
                "str": isinstance(raw, str),
            }[f.kind]
            if not ok:
                crash = _crashes_parse(key, raw, ctx.stage, ctx.config)
                yield self.emit(
                    ctx,
                    pointer_of(key),
                    key=key,
                    expected=expected[f.kind],
                    value=schema._short(raw),
                    severity=Severity.ERROR if crash else None,
                )
        enabled = ctx.section("flops_profiler").get("enabled", False)
        if not isinstance(enabled, int):  # `wall_clock_breakdown | enabled` at parse
            yield self.emit(
                ctx,
                "/flops_profiler/enabled",
                key="flops_profiler.enabled",
                expected="a boolean",
                value=schema._short(enabled),
                severity=Severity.ERROR,
            )


def _crashes_parse(key: str, raw: Any, stage: int, config: dict[str, Any]) -> bool:
    """Values DeepSpeedConfig itself trips over (runtime/config.py): `wall_clock_breakdown |
    flops_profiler.enabled` needs a bool/int, and `vocabulary_size % 8` (a warning check) needs a number;
    and the engine's first step needs numbers for `steps_per_print`, `gradient_clipping` and
    `gradient_predivide_factor`."""
    if key == "wall_clock_breakdown":
        return not isinstance(raw, int)
    if key == "vocabulary_size":
        return bool(raw) and not isinstance(raw, (int, float))
    if key == "sequence_parallel_size":  # world size / sequence_parallel_size
        return not isinstance(raw, (int, float)) or raw == 0
    if key == "steps_per_print":  # engine.py: (global_steps + 1) % steps_per_print at every step
        return not isinstance(raw, (int, float))
    if key == "gradient_clipping":  # engine.py: `gradient_clipping() > 0.0` in the first step
        return not isinstance(raw, (int, float))
    if key == "gradient_predivide_factor":
        # engine.py allreduce_bucket: without ZeRO and with post-scaling (prescale_gradients falsy) it
        # divides by the factor
        return not isinstance(raw, (int, float)) and stage == 0 and not config.get("prescale_gradients")
    return False


def _str_choice(ctx: Context, key: str, choices: tuple[str, ...], allow_null: bool) -> Any:
    """The raw value if `key` is present and not one of `choices` (case-insensitive), else None."""
    if key not in ctx.config or pointer_of(key) in ctx.placeholders:
        return None
    raw = ctx.config[key]
    if raw is None and allow_null:
        return None
    if isinstance(raw, str) and raw.lower() in choices:
        return None
    return raw if raw is not None else "null"


class InvalidAllreduceOp(Rule):
    """`gradient_allreduce_op` other than "mean" or "sum".

    ## What it does
    Checks the new (0.19) `gradient_allreduce_op` key.

    ## Why is this bad?
    DeepSpeed raises `ValueError: Invalid gradient_allreduce_op` at parse; `null` is rejected too.

    ## Example
    ```json
    {"train_batch_size": 8, "gradient_allreduce_op": "avg"}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "gradient_allreduce_op": "mean"}
    ```

    ## References
    - deepspeed/runtime/config.py `get_gradient_allreduce_op`
    """

    code = "ZT605"
    name = "invalid-allreduce-op"
    severity = Severity.ERROR
    message = 'gradient_allreduce_op must be "mean" or "sum", got {value}'

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        raw = _str_choice(ctx, "gradient_allreduce_op", ("mean", "sum"), allow_null=False)
        if raw is not None:
            yield self.emit(ctx, "/gradient_allreduce_op", value=schema._short(raw))


class InvalidCommDtype(Rule):
    """A communication data type other than fp16, bf16 or fp32.

    ## What it does
    Checks `communication_data_type` and `seq_parallel_communication_data_type`.

    ## Why is this bad?
    DeepSpeed accepts only "fp16", "bf16", "fp32" (any case) or null: "bfloat16" and "float32" raise
    ValueError, a number raises AttributeError.

    ## Example
    ```json
    {"train_batch_size": 8, "communication_data_type": "bfloat16"}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "communication_data_type": "bf16"}
    ```

    ## References
    - deepspeed/runtime/config.py `get_communication_data_type`
    """

    code = "ZT606"
    name = "invalid-comm-dtype"
    severity = Severity.ERROR
    message = "`{key}` must be one of fp16, bf16, fp32, got {value}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for key in ("communication_data_type", "seq_parallel_communication_data_type"):
            raw = _str_choice(ctx, key, schema.COMM_DTYPES, allow_null=True)
            if raw is not None:
                yield self.emit(ctx, pointer_of(key), key=key, value=schema._short(raw))


class AllreduceSumUnsupported(Rule):
    """`gradient_allreduce_op: "sum"` with ZeRO stage 3, ZenFlow or DeepCompile.

    ## What it does
    Checks the combinations DeepSpeed refuses for summed (not averaged) gradients.

    ## Why is this bad?
    DeepSpeed raises `ValueError: gradient_allreduce_op='sum' is not supported with ZeRO stage 3`
    (resp. ZenFlow, DeepCompile) at parse.

    ## Example
    ```json
    {"gradient_allreduce_op": "sum", "zero_optimization": {"stage": 3}}
    ```

    ## Use instead
    ```json
    {"gradient_allreduce_op": "mean", "zero_optimization": {"stage": 3}}
    ```
    and scale the loss instead.

    ## References
    - deepspeed/runtime/config.py `_do_error_check`
    """

    code = "ZT607"
    name = "allreduce-sum-unsupported"
    severity = Severity.ERROR
    message = 'gradient_allreduce_op "sum" is not supported with {what}'

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        raw = ctx.config.get("gradient_allreduce_op")
        if not (isinstance(raw, str) and raw.lower() == "sum"):
            return
        if ctx.stage == 3:
            yield self.emit(ctx, "/gradient_allreduce_op", what="ZeRO stage 3")
        elif (
            ctx.zero.get("zenflow") is not None
            and "zenflow" in ctx.zero
            and not schema.is_auto(ctx.zero["zenflow"])
        ):
            yield self.emit(ctx, "/gradient_allreduce_op", what="ZenFlow")
        elif _truthy_bool(ctx.section("compile").get("deepcompile")):
            yield self.emit(ctx, "/gradient_allreduce_op", what="DeepCompile")


def _truthy_bool(raw: Any) -> bool:
    value, problem = schema.coerce(schema.Field("x", "bool"), raw) if raw is not None else (False, None)
    return bool(value) and problem is None and not schema.is_auto(raw)


class ComputeGradNormConflict(Rule):
    """`compute_grad_norm: false` with gradient clipping or optimizer offload.

    ## What it does
    Checks the new `zero_optimization.compute_grad_norm: false` switch against `gradient_clipping` (whose
    default is now 1.0) and optimizer offload.

    ## Why is this bad?
    The ZeRO 1/2 optimizer raises ValueError at start-up: without a global norm it cannot clip, and the
    offload path needs the norm.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "compute_grad_norm": false}}
    ```

    ## Use instead
    ```json
    {"gradient_clipping": 0, "zero_optimization": {"stage": 2, "compute_grad_norm": false}}
    ```

    ## References
    - deepspeed/runtime/zero/stage_1_and_2.py; docs/deepspeed-facts.md §8
    """

    code = "ZT608"
    name = "compute-grad-norm-conflict"
    severity = Severity.ERROR
    message = "compute_grad_norm=false {why}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, value = ctx.zero_value("compute_grad_norm")
        if key is None or value or ctx.stage not in (1, 2):
            return
        clip = ctx.top_number("gradient_clipping")
        clip = 1.0 if "gradient_clipping" not in ctx.config else clip
        ptr = pointer_of("zero_optimization", key)
        if clip is not None and clip > 0:
            yield self.emit(
                ctx, ptr, why=f"requires gradient_clipping=0 (it is {clip:g}; the default is 1.0)"
            )
        if ctx.offload("offload_optimizer"):
            yield self.emit(ctx, ptr, why="is not supported with optimizer offload")


class MaxGradNormInOptimizer(Rule):
    """`max_grad_norm` inside optimizer params.

    ## What it does
    Finds `optimizer.params.max_grad_norm`.

    ## Why is this bad?
    DeepSpeed warns at parse and raises ValueError when it builds the optimizer: clipping is configured with
    the top-level `gradient_clipping`.

    ## Example
    ```json
    {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "max_grad_norm": 1.0}}}
    ```

    ## Use instead
    ```json
    {"gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    ```

    ## References
    - deepspeed/runtime/engine.py `_configure_basic_optimizer`
    """

    code = "ZT609"
    name = "max-grad-norm-in-optimizer"
    severity = Severity.ERROR
    message = "optimizer.params.max_grad_norm is not allowed; use top-level gradient_clipping"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        params = ctx.section("optimizer").get("params")
        if isinstance(params, dict) and "max_grad_norm" in params:
            yield self.emit(ctx, "/optimizer/params/max_grad_norm")


class UnsupportedOptimizer(Rule):
    """An optimizer type DeepSpeed cannot build.

    ## What it does
    Checks `optimizer.type` against DeepSpeed's names (adam, adamw, adagrad, lamb, lion, muon, muadam, …,
    case-insensitive) and `torch.optim` class names (case-sensitive).

    ## Why is this bad?
    1-bit Adam, 0/1 Adam and 1-bit LAMB were removed after 0.16; any other unknown name fails with
    "… is not a supported DeepSpeed Optimizer" when the engine starts.

    ## Example
    ```json
    {"optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-4}}}
    ```

    ## Use instead
    ```json
    {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    ```

    ## References
    - deepspeed/runtime/engine.py `_configure_basic_optimizer`; docs/deepspeed-facts.md §3.4
    """

    code = "ZT610"
    name = "unsupported-optimizer"
    severity = Severity.ERROR
    message = "optimizer type {value} is not a DeepSpeed or torch.optim optimizer{detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        opt = ctx.section("optimizer")
        if opt.get("type") is None or pointer_of("optimizer", "type") in ctx.placeholders:
            return  # `"type": null` is read as "no optimizer section" (runtime/config.py get_optimizer_name)
        raw = opt["type"]
        if isinstance(raw, str) and (
            raw.lower() in schema.DEEPSPEED_OPTIMIZERS or raw in schema.TORCH_OPTIMIZERS
        ):
            return
        if isinstance(raw, str) and raw.startswith("sat."):
            # SwissArmyTransformer imports a `sat.` type itself, passes it to deepspeed.initialize as the
            # client optimizer and deletes the section (sat/training/deepspeed_training.py
            # setup_model_untrainable_params_and_optimizer, THUDM/SwissArmyTransformer@63dc23ae lines
            # 213-221): DeepSpeed never reads this type. SAT does so for a JSON given as --deepspeed_config
            # (sat/arguments.py:419-421 json.load) as for its YAML's `deepspeed:` section, so the `sat.`
            # prefix, not the file's form, says who builds it; with a client optimizer DeepSpeed never
            # checks the config's type (deepspeed/runtime/engine.py:2016-2019, 0.19.8).
            detail = " (SwissArmyTransformer builds it and removes the section: DeepSpeed never sees it)"
            yield self.emit(
                ctx, "/optimizer/type", severity=Severity.INFO, value=schema._short(raw), detail=detail
            )
            return
        removed = isinstance(raw, str) and raw.lower() in schema.REMOVED_OPTIMIZERS
        detail = " (removed after DeepSpeed 0.16)" if removed else ""
        yield self.emit(ctx, "/optimizer/type", value=schema._short(raw), detail=detail)


class UntestedOptimizer(Rule):
    """ZeRO with an optimizer it has not been tested with.

    ## What it does
    With ZeRO on, checks that `optimizer.type` is one ZeRO supports (Adam, AdamW, Adagrad, Lion, Muon and
    their DeepSpeed versions) or that `zero_allow_untested_optimizer` is true.

    ## Why is this bad?
    The engine asserts "You are using an untested ZeRO Optimizer" at start-up.

    ## Example
    ```json
    {"optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_optimization": {"stage": 2}}
    ```

    ## Use instead
    ```json
    {"optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_allow_untested_optimizer": true,
     "zero_optimization": {"stage": 2}}
    ```

    ## References
    - deepspeed/runtime/zero/utils.py `is_zero_supported_optimizer`; deepspeed/runtime/engine.py
    """

    code = "ZT611"
    name = "untested-optimizer"
    severity = Severity.ERROR
    message = (
        "optimizer {value} is untested with ZeRO; DeepSpeed asserts unless zero_allow_untested_optimizer"
    )

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        raw = ctx.optimizer_type
        if ctx.stage == 0 or raw is None or _truthy_bool(ctx.config.get("zero_allow_untested_optimizer")):
            return
        known = raw.lower() in schema.DEEPSPEED_OPTIMIZERS or raw in schema.TORCH_OPTIMIZERS
        if (
            known
            and raw not in schema.ZERO_SUPPORTED_TYPES
            and raw.lower() not in schema.ZERO_SUPPORTED_TYPES
        ):
            yield self.emit(
                ctx, "/optimizer/type", value=raw, help='set "zero_allow_untested_optimizer": true'
            )


class InvalidSchedulerSteps(Rule):
    """Scheduler warm-up or step counts that are not positive integers.

    ## What it does
    Checks `warmup_num_steps` (WarmupLR, WarmupDecayLR, WarmupCosineLR), `lr_range_test_step_size`
    (LRRangeTest) and `cycle_first_step_size` (OneCycle).

    ## Why is this bad?
    Since 0.19.6 the schedulers raise ValueError for a non-positive or non-integer count when they are built.
    From a config path DeepSpeed's hjson reads `1000.0` and `1e3` as the int 1000, so they pass; under
    `--hf` the dict comes from `json.load`, where they stay floats and fail (HF fills `max(1, warmup)` for
    `"auto"`).

    ## Example
    ```json
    {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}}
    ```

    ## Use instead
    ```json
    {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}}
    ```

    ## References
    - deepspeed/runtime/lr_schedules.py; docs/deepspeed-facts.md §3.4
    """

    code = "ZT612"
    name = "invalid-scheduler-steps"
    severity = Severity.ERROR
    message = "scheduler.params.{key} must be a positive integer, got {value}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        params = ctx.section("scheduler").get("params")
        if not isinstance(params, dict) or ctx.section("scheduler").get("type") is None:
            return  # no type: DeepSpeed builds no scheduler and never reads the params
        for key in ("warmup_num_steps", "lr_range_test_step_size", "cycle_first_step_size"):
            raw = params.get(key)
            if (
                key not in params
                or schema.is_auto(raw)
                or pointer_of("scheduler", "params", key) in ctx.placeholders
            ):
                continue
            ok = isinstance(raw, int) and not isinstance(raw, bool) and raw > 0
            ptr = pointer_of("scheduler", "params", key)
            if ok and ctx.options.hf and _written_as_float(ctx, ptr):
                ok = False  # HF hands DeepSpeed a json.load dict: 1000.0 stays a float there
            if not ok:
                yield self.emit(
                    ctx, pointer_of("scheduler", "params", key), key=key, value=schema._short(raw)
                )


def _written_as_float(ctx: Context, pointer: str) -> bool:
    """The number at `pointer` has a fraction or exponent in the text (json.load makes it a float; the
    data here follows DeepSpeed's hjson, which makes whole ones ints)."""
    node = ctx.loaded.nodes.get(pointer)
    if node is None:
        return False
    return any(c in ctx.loaded.text[node.value_start : node.value_end] for c in ".eE")


class InvalidCheckpointSetting(Rule):
    """A `checkpoint` or `data_types` value DeepSpeed rejects at parse.

    ## What it does
    Checks `checkpoint.tag_validation` (Ignore/Warn/Fail), `checkpoint.parallel_write.pipeline_stage`
    (boolean), `checkpoint.writer.type` (fast/python/mock), `checkpoint.writer.data_parallel`
    (replica/socket/machine) and `data_types.keep_in_fp32_modules` ("auto" or a list of strings).

    ## Why is this bad?
    DeepSpeed raises DeepSpeedConfigError or AssertionError when it parses the config.

    ## Example
    ```json
    {"train_batch_size": 8, "checkpoint": {"tag_validation": "strict"}}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "checkpoint": {"tag_validation": "Fail"}}
    ```

    ## References
    - deepspeed/runtime/config.py `get_checkpoint_tag_validation_mode`; runtime/model_checkpointing/config.py
    """

    code = "ZT613"
    name = "invalid-checkpoint-setting"
    severity = Severity.ERROR
    message = "`{key}` must be {expected}, got {value}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        ckpt = ctx.section("checkpoint")
        if "tag_validation" in ckpt:
            raw = ckpt["tag_validation"]
            if not (isinstance(raw, str) and raw.upper() in ("WARN", "IGNORE", "FAIL")):
                yield self.emit(
                    ctx,
                    "/checkpoint/tag_validation",
                    key="checkpoint.tag_validation",
                    expected="one of Ignore, Warn, Fail",
                    value=schema._short(raw),
                )
        pw = ckpt.get("parallel_write")
        if isinstance(pw, dict) and "pipeline_stage" in pw and pw["pipeline_stage"] not in (True, False):
            yield self.emit(
                ctx,
                "/checkpoint/parallel_write/pipeline_stage",
                key="checkpoint.parallel_write.pipeline_stage",
                expected="true or false",
                value=schema._short(pw["pipeline_stage"]),
            )
        writer = ckpt.get("writer")
        if isinstance(writer, dict):
            for key, choices in (
                ("type", ("FAST", "PYTHON", "MOCK")),
                ("data_parallel", ("REPLICA", "SOCKET", "MACHINE")),
            ):
                raw = writer.get(key)
                if raw is not None and not (isinstance(raw, str) and raw.upper() in choices):
                    yield self.emit(
                        ctx,
                        pointer_of("checkpoint", "writer", key),
                        key=f"checkpoint.writer.{key}",
                        expected="one of " + ", ".join(c.lower() for c in choices),
                        value=schema._short(raw),
                    )
        dt = ctx.section("data_types")
        raw = dt.get("param_dtype")
        if raw is not None and not (isinstance(raw, str) and raw in schema.DTYPE_NAMES):
            yield self.emit(  # engine.py _assert_valid_mixed_precision_config: DtypeEnum(value) raises
                ctx,
                "/data_types/param_dtype",
                key="data_types.param_dtype",
                expected="a DeepSpeed dtype name (fp16, bf16, fp32, int8, …)",
                value=schema._short(raw),
            )
        if "keep_in_fp32_modules" in dt:
            raw = dt["keep_in_fp32_modules"]
            if raw != "auto" and not (isinstance(raw, list) and all(isinstance(x, str) for x in raw)):
                yield self.emit(
                    ctx,
                    "/data_types/keep_in_fp32_modules",
                    key="data_types.keep_in_fp32_modules",
                    expected='"auto" or a list of name patterns',
                    value=schema._short(raw),
                )


_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


class InvalidAutocast(Rule):
    """A `torch_autocast` dtype or module list DeepSpeed rejects.

    ## What it does
    Checks `torch_autocast.dtype` against DeepSpeed's dtype names (fp16/float16/half, bf16/bfloat16,
    fp32/float32/float, int8, and their `torch.` forms) and `lower_precision_safe_modules` for a list of
    strings; with autocast enabled, each entry must be a dotted class path (`torch.nn.Linear`).

    ## Why is this bad?
    DeepSpeed raises ValueError at parse ("'fp8' is not a valid DtypeEnum", "Expected list of strings"),
    and at `initialize()` for a module entry it cannot import: `["Linear"]` has no package to import, and
    a bare string is read one character at a time.

    ## Example
    ```json
    {"train_batch_size": 8, "torch_autocast": {"enabled": true, "dtype": "fp8"}}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "torch_autocast": {"enabled": true, "dtype": "bfloat16"}}
    ```

    ## References
    - deepspeed/runtime/config.py `get_torch_autocast_dtype`, `get_lower_precision_safe_modules`
    """

    code = "ZT614"
    name = "invalid-autocast"
    severity = Severity.ERROR
    message = "torch_autocast.{key} {problem}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        ac = ctx.section("torch_autocast")
        if "dtype" in ac and not (isinstance(ac["dtype"], str) and ac["dtype"] in schema.AUTOCAST_DTYPES):
            yield self.emit(
                ctx,
                "/torch_autocast/dtype",
                key="dtype",
                problem=f"is not a DeepSpeed dtype name: {schema._short(ac['dtype'])}",
            )
        mods = ac.get("lower_precision_safe_modules")
        if "lower_precision_safe_modules" in ac and not (
            isinstance(mods, (list, str)) and all(isinstance(m, str) for m in mods)
        ):
            yield self.emit(
                ctx,
                "/torch_autocast/lower_precision_safe_modules",
                key="lower_precision_safe_modules",
                problem="must be a list of module class paths (strings)",
            )
        elif mods is not None and _truthy_bool(ac.get("enabled")):
            # initialize() imports each entry as "package.Class" (runtime/torch_autocast.py
            # init_autocast_params); a bare string is iterated character by character.
            bad = [mods] if isinstance(mods, str) else [m for m in mods if not _DOTTED.fullmatch(m)]
            if bad:
                yield self.emit(
                    ctx,
                    "/torch_autocast/lower_precision_safe_modules",
                    key="lower_precision_safe_modules",
                    problem=f'needs a list of importable dotted class paths like "torch.nn.Linear", '
                    f"got {schema._short(bad[0] if isinstance(mods, list) else mods)}",
                )


_NUMERIC_PARAMS = ("lr", "eps", "weight_decay", "momentum", "dampening", "lr_decay", "alpha", "rho")


def _optimizer_kwargs(ctx: Context, opt_type: str, params: dict[str, Any]) -> tuple[str, ...] | None:
    """The keyword arguments the class DeepSpeed builds for `opt_type` takes (None: not known here)."""
    low = opt_type.lower()
    offload = ctx.offload("offload_optimizer") is not None  # engine.zero_use_cpu_optimizer ignores the stage
    if low in ("adam", "adamw"):
        path = "torch" if _truthy_bool(params.get("torch_adam")) else "cpu" if offload else "fused"
        return schema.OPTIMIZER_KWARGS[f"adam:{path}"] + schema.OPTIMIZER_POPPED
    if low == "adagrad":
        return schema.OPTIMIZER_KWARGS["adagrad:cpu" if offload else "adagrad:torch"]
    if low == "lion":
        return schema.OPTIMIZER_KWARGS["lion:cpu" if offload else "lion:fused"]
    if low == "lamb":
        return schema.OPTIMIZER_KWARGS["lamb"]
    if low in schema.DEEPSPEED_OPTIMIZERS:
        return None  # muon reads the keys it knows and ignores the rest; mu* come from the mup package
    return schema.OPTIMIZER_KWARGS.get(opt_type)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))


class InvalidOptimizerParams(Rule):
    """Optimizer params the optimizer's constructor does not take, or of the wrong type.

    ## What it does
    For the class DeepSpeed builds from `optimizer.type` (FusedAdam, DeepSpeedCPUAdam under optimizer
    offload, torch's Adam with `torch_adam`, FusedLamb, FusedLion/DeepSpeedCPULion, Adagrad, or a
    `torch.optim` class), checks that every key of `optimizer.params` is one of its keyword arguments, that
    `lr`, `eps`, `weight_decay`, `momentum`, … are numbers and that `betas` is a pair of numbers.

    ## Why is this bad?
    DeepSpeed passes the params as keyword arguments (`optimizer_class(params, **optimizer.params)`): an
    unknown key (`lrs`, Muon's `ns_method` on AdamW) is a TypeError and a string learning rate
    (`"1.000000e-03"`), `null` or an object fails the constructor's checks, all inside `initialize()`.
    The parser accepts them because it does not look inside `params`.

    ## Example
    ```json
    {"optimizer": {"type": "AdamW", "params": {"lr": "1e-3", "ns_method": "gram"}}}
    ```

    ## Use instead
    ```json
    {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    ```

    ## References
    - deepspeed/runtime/engine.py `_configure_basic_optimizer`, `get_optimizer_configuration`;
      deepspeed/ops/adam/fused_adam.py, cpu_adam.py; torch.optim signatures
    """

    code = "ZT615"
    name = "invalid-optimizer-params"
    severity = Severity.ERROR
    message = "optimizer.params.{key} {problem}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        opt = ctx.section("optimizer")
        opt_type, params = opt.get("type"), opt.get("params")
        if not isinstance(opt_type, str) or not isinstance(params, dict):
            return
        allowed = _optimizer_kwargs(ctx, opt_type, params)
        ns = params.get("ns_method")
        if opt_type.lower() == "muon" and "ns_method" in params and ns not in schema.MUON_NS_METHODS:
            yield self.emit(  # zero/muon/original_muon.py asserts it in the first step
                ctx,
                "/optimizer/params/ns_method",
                key="ns_method",
                problem=f"must be one of {', '.join(schema.MUON_NS_METHODS)}, got {schema._short(ns)}",
            )
        for key, value in params.items():
            ptr = pointer_of("optimizer", "params", key)
            if schema.is_auto(value) or ptr in ctx.placeholders or key == "max_grad_norm":
                continue  # "auto" is ZT801's; max_grad_norm is ZT609's
            if allowed is not None and key not in allowed:
                yield self.emit(
                    ctx, ptr, key=key, problem=f"is not an argument of {opt_type}'s optimizer class"
                )
            elif key in _NUMERIC_PARAMS and (not _is_number(value) or isinstance(value, bool)):
                yield self.emit(ctx, ptr, key=key, problem=f"must be a number, got {schema._short(value)}")
            elif key == "betas" and not (
                isinstance(value, list) and len(value) == 2 and all(_is_number(b) for b in value)
            ):
                yield self.emit(
                    ctx, ptr, key=key, problem=f"must be a pair of numbers, got {schema._short(value)}"
                )


class InvalidSchedulerParams(Rule):
    """Scheduler params the scheduler does not take, or a scheduler without params.

    ## What it does
    For DeepSpeed's schedulers (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest) checks
    that `scheduler.params` is present, holds the arguments without a default (`total_num_steps` for
    WarmupDecayLR/WarmupCosineLR, `cycle_min_lr`/`cycle_max_lr` for OneCycle) and nothing the scheduler
    does not take.

    ## Why is this bad?
    DeepSpeed builds the scheduler as `scheduler_class(optimizer, **scheduler.params)` inside
    `initialize()`: `WarmupLR` with `total_num_steps` (a WarmupDecayLR argument) is a TypeError, and a
    scheduler without `params` is `**None`, also a TypeError.

    ## Example
    ```json
    {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100, "total_num_steps": 1000}}}
    ```

    ## Use instead
    ```json
    {"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 100, "total_num_steps": 1000}}}
    ```

    ## References
    - deepspeed/runtime/engine.py `_scheduler_from_config`; deepspeed/runtime/lr_schedules.py
    """

    code = "ZT616"
    name = "invalid-scheduler-params"
    severity = Severity.ERROR
    message = "scheduler {name} {problem}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        sched = ctx.section("scheduler")
        name = sched.get("type")
        allowed = schema.SCHEDULER_KWARGS.get(name) if isinstance(name, str) else None
        if allowed is None or pointer_of("scheduler", "type") in ctx.placeholders:
            return
        params = sched.get("params")
        if params is None:
            yield self.emit(
                ctx, "/scheduler", name=name, problem="has no params: DeepSpeed calls it with **None"
            )
            return
        if not isinstance(params, dict):
            return  # ZT603
        missing = [k for k in schema.SCHEDULER_REQUIRED.get(name, ()) if k not in params]
        if missing:
            yield self.emit(
                ctx,
                "/scheduler/params",
                name=name,
                problem=f"needs {', '.join(missing)} (no default: initialize() raises TypeError)",
            )
        for key in params:
            if key not in allowed:
                yield self.emit(
                    ctx,
                    pointer_of("scheduler", "params", key),
                    name=name,
                    problem=f"does not take `{key}`",
                    help=f"{name} takes " + ", ".join(allowed),
                )


class OptimizerWithoutType(Rule):
    """An `optimizer` section without `type`.

    ## What it does
    Finds an `optimizer` section that has no `type` key.

    ## Why is this bad?
    DeepSpeed reads the optimizer name from `type` only; without it the section, params included, is
    ignored and no optimizer is built. Under HF Trainer/accelerate (`--hf`), which leave the optimizer to
    DeepSpeed when the section exists, the job has no optimizer at all: an error. Called directly, your
    own optimizer is used and the params are dead text: a warning.

    ## Example
    ```json
    {"optimizer": {"params": {"lr": 1e-4}}}
    ```

    ## Use instead
    ```json
    {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    ```

    ## References
    - deepspeed/runtime/config.py `get_optimizer_name`; transformers integrations/deepspeed.py
      `deepspeed_optim_sched`
    """

    code = "ZT617"
    name = "optimizer-without-type"
    severity = Severity.WARNING
    message = "the optimizer section has no `type`: DeepSpeed ignores it and builds no optimizer"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if isinstance(ctx.config.get("optimizer"), dict) and "type" not in ctx.config["optimizer"]:
            yield self.emit(ctx, "/optimizer", severity=Severity.ERROR if ctx.options.hf else None)


RULES = (
    InvalidType,
    OutOfRange,
    SectionNotObject,
    LooseType,
    InvalidAllreduceOp,
    InvalidCommDtype,
    AllreduceSumUnsupported,
    ComputeGradNormConflict,
    MaxGradNormInOptimizer,
    UnsupportedOptimizer,
    UntestedOptimizer,
    InvalidSchedulerSteps,
    InvalidCheckpointSetting,
    InvalidAutocast,
    InvalidOptimizerParams,
    InvalidSchedulerParams,
    OptimizerWithoutType,
)
