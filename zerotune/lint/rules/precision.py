"""ZT4xx: fp16 / bf16 / data types (docs/deepspeed-facts.md §3.2, §8; deepspeed/runtime/precision_config.py)."""

from __future__ import annotations

from collections.abc import Iterator

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import pointer_of
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule

_LOSS_SCALE_KEYS = (
    "loss_scale",
    "initial_scale_power",
    "loss_scale_window",
    "hysteresis",
    "min_loss_scale",
    "consecutive_hysteresis",
)


def _bf16_name(ctx: Context) -> str:
    return "bf16" if "bf16" in ctx.config or "bfloat16" not in ctx.config else "bfloat16"


def _flag(ctx: Context, section: str, key: str) -> bool:
    raw = ctx.section(section).get(key)
    if raw is None or schema.is_auto(raw):
        return False
    value, problem = schema.coerce(schema.Field(key, "bool"), raw)
    return bool(value) and problem is None


class Fp16AndBf16(Rule):
    """fp16 and bf16 both enabled.

    ## What it does
    Checks that at most one of `fp16.enabled` and `bf16.enabled` is true (values DeepSpeed reads as true:
    `true`, `"true"`, `1`, …; "auto" counts as false since 0.17+).

    ## Why is this bad?
    DeepSpeed asserts "bfloat16 and fp16 modes cannot be simultaneously enabled" at parse.

    ## Example
    ```json
    {"fp16": {"enabled": true}, "bf16": {"enabled": true}}
    ```

    ## Use instead
    ```json
    {"bf16": {"enabled": true}}
    ```

    ## References
    - deepspeed/runtime/config.py `_initialize_params`
    """

    code = "ZT401"
    name = "fp16-and-bf16"
    severity = Severity.ERROR
    message = "fp16 and bf16 are both enabled; DeepSpeed allows only one"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.enabled("fp16") and ctx.enabled("bf16"):
            yield self.emit(ctx, f"/{_bf16_name(ctx)}/enabled")


class Fp16OnBf16Hardware(Rule):
    """fp16 training on a GPU that supports bf16.

    ## What it does
    With a hardware profile (`--profile`) whose GPU supports bf16 (Ampere and newer), reports
    `fp16.enabled: true`.

    ## Why is this bad?
    bf16 has fp32's exponent range: no loss scaling, no overflow-skipped steps, same speed and memory as fp16
    on these GPUs. fp16 is the source of most "loss scale reached minimum" failures.

    ## Example
    ```json
    {"fp16": {"enabled": true, "loss_scale": 0}}
    ```

    ## Use instead
    ```json
    {"bf16": {"enabled": true}}
    ```

    ## References
    - Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training" (arXiv:1905.12322)
    """

    code = "ZT402"
    name = "fp16-on-bf16-hardware"
    severity = Severity.WARNING
    message = "fp16 on {gpu}, which supports bf16: prefer bf16 (no loss scaling)"
    needs = frozenset({"hardware"})

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if not ctx.enabled("fp16"):
            return
        from zerotune.lint.rules.resources import hardware

        hw = hardware(ctx)
        if hw is not None and hw.bf16_supported:
            yield self.emit(ctx, "/fp16/enabled", gpu=hw.name)


class Fp16SettingsUnderBf16(Rule):
    """Loss-scale settings in an fp16 section while bf16 is the precision.

    ## What it does
    With bf16 enabled and fp16 disabled, reports loss-scale keys set in the `fp16` section.

    ## Why is this bad?
    Loss scaling only applies to fp16 tensors; under bf16 these values are inert, except that a non-zero
    `fp16.loss_scale` still makes `lamb` assert (it reads the fp16 section even when fp16 is off).

    ## Example
    ```json
    {"bf16": {"enabled": true}, "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 16}}
    ```

    ## Use instead
    ```json
    {"bf16": {"enabled": true}}
    ```

    ## References
    - deepspeed/runtime/engine.py `dynamic_loss_scale`; docs/deepspeed-facts.md §3.2, §10
    """

    code = "ZT403"
    name = "fp16-settings-under-bf16"
    severity = Severity.INFO
    message = "fp16 loss-scale settings have no effect under bf16"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        fp16 = ctx.section("fp16")
        if ctx.enabled("bf16") and not ctx.enabled("fp16") and any(k in fp16 for k in _LOSS_SCALE_KEYS):
            yield self.emit(ctx, "/fp16")


class Bf16Shadowed(Rule):
    """Both `bf16` and the legacy `bfloat16` sections are present.

    ## What it does
    Finds configs that have both spellings of the bf16 section.

    ## Why is this bad?
    DeepSpeed reads `bfloat16` only when `bf16` is absent: the legacy section is ignored, so
    `"bf16": {"enabled": false}` plus `"bfloat16": {"enabled": true}` trains in fp32.

    ## Example
    ```json
    {"bf16": {"enabled": false}, "bfloat16": {"enabled": true}}
    ```

    ## Use instead
    ```json
    {"bf16": {"enabled": true}}
    ```

    ## References
    - deepspeed/runtime/precision_config.py `get_bfloat16_config`
    """

    code = "ZT404"
    name = "bf16-shadowed"
    severity = Severity.WARNING
    message = "`bfloat16` is ignored because `bf16` is present"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if "bf16" in ctx.config and "bfloat16" in ctx.config and ctx.config["bf16"] is not None:
            yield self.emit(ctx, "/bfloat16")


class MasterWeightsWithoutZero(Rule):
    """16-bit master weights or bf16 optimizer states without ZeRO.

    ## What it does
    Checks `fp16.fp16_master_weights_and_grads`, `bf16.bf16_master_weights_and_grads` and
    `bf16.bf16_optimizer_states` against the stage (1–3 required), and that `bf16_optimizer_states` comes with
    `bf16_master_weights_and_grads`.

    ## Why is this bad?
    DeepSpeed asserts at parse ("… is only supported with ZeRO Stage 1, 2, or 3", "bf16_optimizer_states
    requires bf16_master_weights_and_grads"). The fp16 flag is checked even when fp16 is disabled.

    ## Example
    ```json
    {"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}}
    ```

    ## Use instead
    ```json
    {"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, "zero_optimization": {"stage": 2}}
    ```

    ## References
    - deepspeed/runtime/config.py `_do_error_check`
    """

    code = "ZT405"
    name = "master-weights-without-zero"
    severity = Severity.ERROR
    message = "{detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        bf = _bf16_name(ctx)
        checks = (
            ("fp16", "fp16_master_weights_and_grads"),
            (bf, "bf16_master_weights_and_grads"),
            (bf, "bf16_optimizer_states"),
        )
        for section, key in checks:
            if _flag(ctx, section, key) and ctx.stage == 0:
                yield self.emit(
                    ctx, pointer_of(section, key), detail=f"{section}.{key} needs ZeRO stage 1, 2 or 3"
                )
        if _flag(ctx, bf, "bf16_optimizer_states") and not _flag(ctx, bf, "bf16_master_weights_and_grads"):
            yield self.emit(
                ctx,
                pointer_of(bf, "bf16_optimizer_states"),
                detail="bf16_optimizer_states requires bf16_master_weights_and_grads",
            )


class DynamicLossScaleParams(Rule):
    """Non-positive loss-scale window or minimum with dynamic fp16 loss scaling.

    ## What it does
    With fp16 enabled and `loss_scale` 0 (dynamic), checks `loss_scale_window > 0` and
    `min_loss_scale > 0`.

    ## Why is this bad?
    DeepSpeed's validator rejects them: a window of 0 would divide by zero in the scaler, a floor of 0 lets
    the scale collapse.

    ## Example
    ```json
    {"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 0}}
    ```

    ## Use instead
    ```json
    {"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 1000}}
    ```

    ## References
    - deepspeed/runtime/precision_config.py `_validate_dynamic_loss_scale_params`
    """

    code = "ZT406"
    name = "dynamic-loss-scale-params"
    severity = Severity.ERROR
    message = "fp16.{key} must be > 0 with dynamic loss scaling (got {value})"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        fp16 = ctx.section("fp16")
        if not ctx.enabled("fp16"):
            return
        scale, problem = schema.coerce(
            schema.SECTIONS["/fp16"].field("loss_scale"), fp16.get("loss_scale", 0)
        )
        if problem or (scale != 0 and not schema.is_auto(fp16.get("loss_scale"))):
            return
        for key in ("loss_scale_window", "min_loss_scale"):
            if key not in fp16 or schema.is_auto(fp16[key]):
                continue
            value, problem = schema.coerce(schema.SECTIONS["/fp16"].field(key), fp16[key])
            if problem is None and value <= 0:
                yield self.emit(ctx, pointer_of("fp16", key), key=key, value=value)


class GradAccumDtypeWithoutZero(Rule):
    """A gradient-accumulation dtype that differs from the model dtype without ZeRO.

    ## What it does
    At stage 0, checks that `data_types.grad_accum_dtype` is unset or equals the training precision.

    ## Why is this bad?
    Without ZeRO, DeepSpeed 0.19 supports only matching pairs (fp16/fp16, bf16/bf16, fp32/fp32); bf16 with
    `grad_accum_dtype: "fp32"` raises NotImplementedError "unsupported mix" (0.16 used BF16_Optimizer there).

    ## Example
    ```json
    {"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}}
    ```

    ## Use instead
    ```json
    {"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}, "zero_optimization": {"stage": 1}}
    ```

    ## References
    - deepspeed/runtime/engine.py `_do_optimizer_sanity_check`; docs/deepspeed-facts.md §3.2
    """

    code = "ZT407"
    name = "grad-accum-dtype-without-zero"
    severity = Severity.ERROR
    message = "grad_accum_dtype {dtype} with {precision} training and ZeRO off is an unsupported mix"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        raw = ctx.section("data_types").get("grad_accum_dtype")
        if not isinstance(raw, str) or ctx.stage != 0:
            return
        canon = _canon(raw)
        if canon is not None and canon != ctx.precision:
            yield self.emit(ctx, "/data_types/grad_accum_dtype", dtype=raw, precision=ctx.precision)


def _canon(name: str) -> str | None:
    for canon, names in (
        ("fp16", ("fp16", "float16", "half", "torch.float16")),
        ("bf16", ("bf16", "bfloat16", "torch.bfloat16")),
        ("fp32", ("fp32", "float32", "float", "torch.float32")),
    ):
        if name in names:
            return canon
    return None


class ParamDtypeMismatch(Rule):
    """`data_types.param_dtype` that differs from the precision mode.

    ## What it does
    Checks `data_types.param_dtype` against fp16/bf16/fp32 as chosen by the `fp16`/`bf16` sections.

    ## Why is this bad?
    The engine asserts that the parameter dtype matches the precision mode at initialisation.

    ## Example
    ```json
    {"bf16": {"enabled": true}, "data_types": {"param_dtype": "fp16"}}
    ```

    ## Use instead
    ```json
    {"bf16": {"enabled": true}, "data_types": {"param_dtype": "bf16"}}
    ```

    ## References
    - deepspeed/runtime/engine.py (param_dtype assertion); docs/deepspeed-facts.md §3.2
    """

    code = "ZT408"
    name = "param-dtype-mismatch"
    severity = Severity.ERROR
    message = "data_types.param_dtype {dtype} does not match the precision mode ({precision})"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        raw = ctx.section("data_types").get("param_dtype")
        if isinstance(raw, str) and _canon(raw) not in (None, ctx.precision):
            yield self.emit(ctx, "/data_types/param_dtype", dtype=raw, precision=ctx.precision)


class MasterWeightsNeedOffload(Rule):
    """16-bit master weights without optimizer offload and DeepSpeedCPUAdam.

    ## What it does
    With `fp16_master_weights_and_grads` (or `bf16_master_weights_and_grads` without
    `bf16_optimizer_states`), checks for optimizer offload and an Adam-type optimizer.

    ## Why is this bad?
    The ZeRO optimizer asserts "Master weights feature requires … Offload with DeepSpeedCPUAdam".

    ## Example
    ```json
    {"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}, "zero_optimization": {"stage": 2}}
    ```

    ## Use instead
    ```json
    {"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}, "optimizer": {"type": "Adam"},
     "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## References
    - deepspeed/runtime/zero/stage_1_and_2.py, stage3.py (master weights assertion)
    """

    code = "ZT409"
    name = "master-weights-need-offload"
    severity = Severity.ERROR
    message = "{key} needs optimizer offload with DeepSpeedCPUAdam"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage <= 0:
            return
        bf = _bf16_name(ctx)
        wanted = []
        if _flag(ctx, "fp16", "fp16_master_weights_and_grads"):
            wanted.append(("fp16", "fp16_master_weights_and_grads"))
        if _flag(ctx, bf, "bf16_master_weights_and_grads") and not _flag(ctx, bf, "bf16_optimizer_states"):
            wanted.append((bf, "bf16_master_weights_and_grads"))
        opt = ctx.optimizer_type
        ok = ctx.offload("offload_optimizer") and (opt is None or opt.lower() in ("adam", "adamw"))
        for section, key in wanted:
            if not ok:
                yield self.emit(ctx, pointer_of(section, key), key=f"{section}.{key}")


RULES = (
    Fp16AndBf16,
    Fp16OnBf16Hardware,
    Fp16SettingsUnderBf16,
    Bf16Shadowed,
    MasterWeightsWithoutZero,
    DynamicLossScaleParams,
    GradAccumDtypeWithoutZero,
    ParamDtypeMismatch,
    MasterWeightsNeedOffload,
)
