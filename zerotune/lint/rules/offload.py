"""ZT3xx: optimizer and parameter offload (docs/deepspeed-facts.md §2, §4, §8)."""

from __future__ import annotations

from collections.abc import Iterator

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import pointer_of
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule


def _field(section: str, key: str) -> schema.Field:
    f = schema.SECTIONS[f"/zero_optimization/{section}"].field(key)
    assert f is not None
    return f


def _value(ctx: Context, section: str, key: str) -> tuple[bool, object]:
    """(explicitly set, DeepSpeed's value) for an offload sub-key."""
    sec = ctx.zero.get(section)
    f = _field(section, key)
    if not isinstance(sec, dict) or key not in sec or schema.is_auto(sec[key]):
        return False, f.default
    value, problem = schema.coerce(f, sec[key])
    return True, f.default if problem else value


class OffloadParamBelowStage3(Rule):
    """`offload_param` with ZeRO stage 1 or 2.

    ## What it does
    Reports parameter offload (device cpu or nvme) when the stage is below 3.

    ## Why is this bad?
    Only ZeRO-3 partitions parameters, so only ZeRO-3 can offload them: DeepSpeed accepts the section and
    silently ignores it, and the GPU holds the full parameters you meant to move.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    ```
    or `offload_optimizer` at stage 2.

    ## References
    - deepspeed/runtime/engine.py; docs/deepspeed-facts.md §2.3
    """

    code = "ZT301"
    name = "offload-param-below-stage3"
    severity = Severity.WARNING
    message = "offload_param is ignored at ZeRO stage {stage}: only stage 3 offloads parameters"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage in (1, 2) and ctx.stage_known and ctx.offload("offload_param"):
            key = "offload_param" if "offload_param" in ctx.zero else "cpu_offload_param"
            yield self.emit(ctx, pointer_of("zero_optimization", key), stage=ctx.stage)


class NvmeWithoutPath(Rule):
    """NVMe offload without `nvme_path`.

    ## What it does
    Checks that `offload_param` / `offload_optimizer` with `device: "nvme"` name a folder.

    ## Why is this bad?
    `zero.Init` asserts for parameters; for optimizer state the swapper joins `None` into a path and fails
    with a TypeError at the first swap.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}}
    ```

    ## References
    - deepspeed/runtime/zero/partition_parameters.py `_validate_remote_device`; swap_tensor/
    """

    code = "ZT302"
    name = "nvme-without-path"
    severity = Severity.ERROR
    message = "{section} uses device nvme but sets no nvme_path"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage != 3:
            return  # below stage 3 nothing is swapped to NVMe: offload_optimizer nvme runs like cpu, and
            # offload_param is unused (ZT301); initialize() then succeeds without a path
        for section in ("offload_param", "offload_optimizer"):
            sec = ctx.zero.get(section)
            if isinstance(sec, dict) and sec.get("device") == "nvme" and not sec.get("nvme_path"):
                yield self.emit(ctx, pointer_of("zero_optimization", section, "device"), section=section)


class PartialOffloadBelowStage3(Rule):
    """Partial optimizer offload (`ratio` < 1) below stage 3.

    ## What it does
    Checks `offload_optimizer.ratio` < 1 against the stage.

    ## Why is this bad?
    DeepSpeed's validator asserts "Partial offloading only supported for ZeRO Stage 3."

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}
    ```

    ## References
    - deepspeed/runtime/zero/config.py `offload_ratio_check`
    """

    code = "ZT303"
    name = "partial-offload-below-stage3"
    severity = Severity.ERROR
    message = "offload_optimizer.ratio {ratio:g} < 1 (partial offload) needs ZeRO stage 3, stage is {stage}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        given, ratio = _value(ctx, "offload_optimizer", "ratio")
        if given and ratio < 1 and ctx.stage in (0, 1, 2):
            yield self.emit(ctx, "/zero_optimization/offload_optimizer/ratio", ratio=ratio, stage=ctx.stage)


class PinMemoryOff(Rule):
    """Offload with `pin_memory: false`.

    ## What it does
    Reports `pin_memory: false` on an active offload section.

    ## Why is this bad?
    Host↔GPU copies from pageable memory are slower and not asynchronous; since DeepSpeed 0.19.5 (PR #8207) the default is
    `true` (stage 1/2 then also pins the fp32 master partition). Turn it off only when host RAM is short.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": false}}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true}}}
    ```

    ## References
    - deepspeed/runtime/zero/offload_config.py; PyTorch "pinned memory" CUDA semantics
    """

    code = "ZT304"
    name = "pin-memory-off"
    severity = Severity.INFO
    message = "{section}.pin_memory is false: transfers use pageable memory (slower)"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for section in ("offload_optimizer", "offload_param"):
            given, pin = _value(ctx, section, "pin_memory")
            if given and not pin and ctx.offload(section):
                yield self.emit(ctx, pointer_of("zero_optimization", section, "pin_memory"), section=section)


class OffloadNeedsCpuOptimizer(Rule):
    """Optimizer offload without an optimizer DeepSpeed can run on the CPU.

    ## What it does
    With optimizer offload on (at any stage: DeepSpeed's check ignores it), checks that the config names an
    optimizer DeepSpeed can step on CPU-resident states: adam/adamw (DeepSpeedCPUAdam), adagrad, lion, and
    muon (its auxiliary Adam is DeepSpeedCPUAdam in 0.19.8). A config without an `optimizer` section
    relies on the client's optimizer, which must then be DeepSpeedCPUAdam/CPULion unless
    `zero_force_ds_cpu_optimizer` is false.

    ## Why is this bad?
    With a client optimizer (any torch.optim) the engine raises ZeRORuntimeException inside
    `initialize()`. Under HF Trainer or accelerate (`--hf`) that does not happen: accelerate swaps the
    client optimizer for DeepSpeedCPUAdam first, keeping only its lr and weight_decay (info); it reads
    `offload_optimizer.device`, so the deprecated `cpu_offload: true` gets no swap (still an error).
    `Lamb` builds FusedLamb, a CUDA kernel that cannot step CPU tensors. Other torch optimizers named in
    the config run in plain PyTorch on the CPU: they work, slowly (a warning).

    ## Example
    ```json
    {"optimizer": {"type": "SGD", "params": {"lr": 0.1}},
     "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## Use instead
    ```json
    {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
     "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## References
    - deepspeed/runtime/engine.py (`zero_force_ds_cpu_optimizer` check); docs/deepspeed-facts.md §2.3
    - huggingface/accelerate src/accelerate/accelerator.py `_prepare_deepspeed` (the DeepSpeedCPUAdam swap)
    """

    code = "ZT305"
    name = "offload-needs-cpu-optimizer"
    severity = Severity.WARNING
    message = "optimizer offload needs DeepSpeedCPUAdam/CPULion; {detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        # engine.zero_use_cpu_optimizer reads offload_optimizer.device whatever the stage
        if not ctx.offload("offload_optimizer"):
            return
        opt = ctx.optimizer_type
        key = "offload_optimizer" if "offload_optimizer" in ctx.zero else "cpu_offload"
        swapped = ctx.options.hf and key == "offload_optimizer"
        if opt is None and not _truthy_off(ctx.config.get("zero_force_ds_cpu_optimizer")) and swapped:
            # accelerate's Accelerator._prepare_deepspeed (HF Trainer prepares through it) replaces a client
            # optimizer by DeepSpeedCPUAdam(param_groups, lr, weight_decay) when offload_optimizer.device is
            # not "none" and zero_force_ds_cpu_optimizer is unset/true: the engine's check then passes. It
            # reads the raw dict's zero_optimization.offload_optimizer.device, so the deprecated
            # `cpu_offload: true` (which DeepSpeed still turns into optimizer offload) gets no swap
            yield self.emit(
                ctx,
                pointer_of("zero_optimization", key),
                detail="with no optimizer `type`, HF Trainer/accelerate replace the optimizer you chose by "
                "DeepSpeedCPUAdam, keeping only its lr and weight_decay",
                help='name the optimizer in an "optimizer" section to choose its betas and eps',
                severity=Severity.INFO,
            )
        elif opt is None and not _truthy_off(ctx.config.get("zero_force_ds_cpu_optimizer")):
            yield self.emit(
                ctx,
                pointer_of("zero_optimization", key),
                detail="with no optimizer `type` the client's optimizer is used, and DeepSpeed refuses any "
                "other (ZeRORuntimeException)",
                help='add an "optimizer" section (type AdamW), pass DeepSpeedCPUAdam yourself, or set '
                '"zero_force_ds_cpu_optimizer": false',
                severity=Severity.ERROR,
            )
        elif opt is not None and opt.lower() == "lamb":
            yield self.emit(
                ctx,
                "/optimizer/type",
                detail="Lamb is FusedLamb, a CUDA kernel that cannot step offloaded CPU states",
                severity=Severity.ERROR,
            )
        elif opt is not None and opt.lower() not in schema.CPU_OFFLOAD_TYPES + ("muon",):
            yield self.emit(
                ctx,
                "/optimizer/type",
                detail=f"DeepSpeed has no CPU version of {opt}: torch runs it on the CPU, slowly",
            )


def _truthy_off(raw: object) -> bool:
    """zero_force_ds_cpu_optimizer set to something falsy (DeepSpeed reads it with dict.get, no coercion)."""
    return raw is not None and not raw


class OffloadDeviceNone(Rule):
    """An offload section whose device is "none".

    ## What it does
    Notes `offload_optimizer` / `offload_param` blocks with `device: "none"` that set other options.

    ## Why is this bad?
    Nothing is offloaded; the other options (pin_memory, buffer sizes, nvme_path) are inert. Often a
    template was copied and the device never switched.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "none", "pin_memory": true}}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3}}
    ```

    ## References
    - deepspeed/runtime/zero/offload_config.py (`device` default "none")
    """

    code = "ZT306"
    name = "offload-device-none"
    severity = Severity.INFO
    message = '{section} has device "none": nothing is offloaded and its other settings are inert'

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for section in ("offload_optimizer", "offload_param"):
            sec = ctx.zero.get(section)
            if isinstance(sec, dict) and sec.get("device", "none") == "none" and set(sec) - {"device"}:
                yield self.emit(ctx, pointer_of("zero_optimization", section), section=section)


class SuperOffloadBelowStage3(Rule):
    """`super_offload` below stage 3.

    ## What it does
    Reports `offload_optimizer.super_offload: true` with a stage below 3.

    ## Why is this bad?
    Only the stage-3 branch reads it; below stage 3 it is silently ignored (and it needs a CUDA
    accelerator, a Grace-Hopper-class superchip being the target).

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "super_offload": true}}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true}}}
    ```

    ## References
    - deepspeed/runtime/engine.py, runtime/superoffload/
    """

    code = "ZT307"
    name = "super-offload-below-stage3"
    severity = Severity.WARNING
    message = "super_offload is ignored at ZeRO stage {stage} (stage 3 only)"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        given, value = _value(ctx, "offload_optimizer", "super_offload")
        if given and value and ctx.stage in (0, 1, 2):
            yield self.emit(ctx, "/zero_optimization/offload_optimizer/super_offload", stage=ctx.stage)


class PartialOffloadOptimizer(Rule):
    """Partial offload with an optimizer other than DeepSpeedCPUAdam.

    ## What it does
    With `offload_optimizer.ratio` < 1 at stage 3, checks that `optimizer.type` is adam or adamw.

    ## Why is this bad?
    The stage-3 optimizer asserts that the basic optimizer is exactly DeepSpeedCPUAdam for partial offload.

    ## Example
    ```json
    {"optimizer": {"type": "Lion"}, "zero_optimization": {"stage": 3,
     "offload_optimizer": {"device": "cpu", "ratio": 0.3}}}
    ```

    ## Use instead
    ```json
    {"optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3,
     "offload_optimizer": {"device": "cpu", "ratio": 0.3}}}
    ```

    ## References
    - deepspeed/runtime/zero/stage3.py (partial offload assertion)
    """

    code = "ZT308"
    name = "partial-offload-optimizer"
    severity = Severity.ERROR
    message = "partial offload (ratio {ratio:g}) needs DeepSpeedCPUAdam; optimizer type is {opt}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        given, ratio = _value(ctx, "offload_optimizer", "ratio")
        opt = ctx.optimizer_type
        if (
            given
            and ratio < 1
            and ctx.stage == 3
            and opt is not None
            and opt.lower() not in ("adam", "adamw")
        ):
            yield self.emit(ctx, "/optimizer/type", ratio=ratio, opt=opt)


class PartialOffloadToNvme(Rule):
    """Partial optimizer offload (`ratio` < 1) to NVMe.

    ## What it does
    Reports `offload_optimizer.ratio` < 1 with `offload_optimizer.device: nvme` at stage 3.

    ## Why is this bad?
    Partial offload keeps the first `1 - ratio` of the optimizer's sub-groups on the GPU and steps them with a
    GPU AdamW, the rest on the host with DeepSpeedCPUAdam (`subgroup_to_device`). The NVMe swapper does not
    look at that split: every sub-group large enough to swap is swapped (`_swappable_optimizer_subgroup` reads
    only its size), so the GPU sub-groups' states come back in host buffers and the GPU optimizer's step fails
    on CPU tensors ("expected input to be on cuda", DeepSpeed issue 4872). Partial offload is a CPU-offload
    feature (ZeRO-Offload++ "Twin-Flow", blogs/deepspeed-offloadpp in the DeepSpeed repository).

    ## Example
    ```json
    {"optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3,
     "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "ratio": 0.5}}}
    ```

    ## Use instead
    ```json
    {"optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3,
     "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}
    ```

    ## References
    - deepspeed/runtime/zero/stage3.py `_create_fp32_partitions` (`subgroup_to_device`) and
      `_swappable_optimizer_subgroup` (DeepSpeed 0.19.8)
    - https://github.com/deepspeedai/DeepSpeed/issues/4872
    """

    code = "ZT309"
    name = "partial-offload-nvme"
    severity = Severity.ERROR
    message = "partial offload (ratio {ratio:g}) to nvme: the NVMe swapper also swaps the sub-groups kept on the GPU; use device cpu"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        given, ratio = _value(ctx, "offload_optimizer", "ratio")
        sec = ctx.zero.get("offload_optimizer")
        if given and ratio < 1 and ctx.stage == 3 and isinstance(sec, dict) and sec.get("device") == "nvme":
            yield self.emit(ctx, "/zero_optimization/offload_optimizer/ratio", ratio=ratio)


RULES = (
    OffloadParamBelowStage3,
    NvmeWithoutPath,
    PartialOffloadBelowStage3,
    PinMemoryOff,
    OffloadNeedsCpuOptimizer,
    OffloadDeviceNone,
    SuperOffloadBelowStage3,
    PartialOffloadOptimizer,
    PartialOffloadToNvme,
)
