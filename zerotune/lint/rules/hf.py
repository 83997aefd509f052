"""ZT8xx: Hugging Face "auto" values and saving (docs/deepspeed-facts.md §6; transformers integrations/deepspeed.py).

HF's HfTrainerDeepSpeedConfig replaces "auto" with TrainingArguments/model values for a fixed list of keys
(dsconfig/hf_auto.py HF_AUTO_KEYS) and never inserts a missing key. Anything else left as "auto" reaches DeepSpeed: inside
pydantic sections it is dropped (the default applies), at the top level it is passed on as a string.
"""

from __future__ import annotations

from collections.abc import Iterator

from zerotune.dsconfig import hf_auto, schema
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule


def _all_autos(ctx: Context) -> list[str]:
    """Pointers of every "auto" in the config, walked once per file for the three rules below."""
    memo = ctx.memo.get("autos")
    if memo is None:
        memo = ctx.memo["autos"] = [p for p in hf_auto.auto_pointers(ctx.config) if not _unread(ctx, p)]
    return memo


def _unread(ctx: Context, pointer: str) -> bool:
    """DeepSpeed reads only `type` and `params` of optimizer/scheduler, and nothing of a section without a
    type (runtime/config.py get_optimizer_params, get_scheduler_params)."""
    for s in ("optimizer", "scheduler"):
        if pointer.startswith(f"/{s}/"):
            return ctx.section(s).get("type") is None or not pointer.startswith((f"/{s}/params/", f"/{s}/type"))
    return False


def _filled(ctx: Context, pointer: str) -> bool:
    """Would HF replace this "auto"? (stage-3-only keys only when stage == 3)."""
    if pointer.startswith("/zero_optimization/"):
        pointer = pointer.replace("/prefetch_bucket_size", "/stage3_prefetch_bucket_size")
    return hf_auto.hf_fills(pointer, ctx.stage)


# "auto" values DeepSpeed itself accepts: keep_in_fp32_modules' own default is "auto" (runtime/config.py
# get_data_types), and a whole monitor/timers section set to "auto" is dropped by DeepSpeedConfigModel.
_HARMLESS = frozenset(
    {"/data_types/keep_in_fp32_modules", "/timers", "/tensorboard", "/wandb", "/csv_monitor", "/comet"}
)


def _strict_pointer(pointer: str) -> bool:
    parent = pointer.rsplit("/", 1)[0]
    sec = schema.section(parent)
    return sec is not None and sec.mode == "strict"


class AutoOutsideHf(Rule):
    """A top-level "auto" value in a config used without Hugging Face.

    ## What it does
    Without `--hf`, reports top-level keys set to "auto" (`train_batch_size`, `gradient_clipping`, …) and
    "auto" inside `optimizer`/`scheduler` params, in one finding per file that lists them all. Values
    DeepSpeed accepts as "auto" are left alone (`data_types.keep_in_fp32_modules`, whose default it is,
    and whole `tensorboard`/`wandb`/`csv_monitor`/`comet`/`timers` sections, which it drops). Keys HF
    Trainer does not fill either (`steps_per_print`, ...) are named apart, since `--hf` does not help them.

    ## Why is this bad?
    Only HF Trainer/accelerate replace "auto". DeepSpeed's own launcher passes the string on: the batch
    arithmetic fails with `TypeError: '>' not supported between 'str' and 'int'`, and optimizer
    parameters fail when the optimizer is built.

    ## Example
    ```json
    {"train_batch_size": "auto", "gradient_clipping": "auto"}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 256, "gradient_clipping": 1.0}
    ```
    or run with HF Trainer/accelerate (`zerotune validate --hf`).

    ## References
    - microsoft/DeepSpeed#1270; deepspeed/runtime/config.py `_batch_assertion`
    """

    code = "ZT801"
    name = "auto-outside-hf"
    severity = Severity.ERROR
    message = "{where}; DeepSpeed alone fails on it"
    help_text = "set concrete values, or pass --hf if HF Trainer/accelerate loads this config"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.options.hf:
            return
        found = [p for p in _all_autos(ctx) if not _strict_pointer(p) and p not in _HARMLESS]
        if not found:
            return
        # An HF template has a dozen of them: one finding that lists them, at the first one. Those HF's
        # trainer_config_process does not fill (`steps_per_print`, ...) are named apart: under HF they
        # still reach DeepSpeed as "auto" (ZT803), so "pass --hf" is no fix for them.
        filled = [p for p in found if _filled(ctx, p)]
        unfilled = [p for p in found if p not in filled]
        parts = []
        if filled:
            parts.append(f'"auto" at {_places(filled)} is only filled by HF Trainer/accelerate')
        if unfilled:
            parts.append(f'HF Trainer does not fill the "auto" at {_places(unfilled)}')
        help_text = None if filled else "set concrete values (HF Trainer passes these on as \"auto\" too)"
        yield self.emit(ctx, found[0], where="; ".join(parts), help=help_text)


def _places(pointers: list[str]) -> str:
    return pointers[0] if len(pointers) == 1 else f"{len(pointers)} places ({', '.join(pointers)})"


class AutoDropped(Rule):
    """An "auto" inside a DeepSpeed section that nothing will fill.

    ## What it does
    Reports "auto" inside `zero_optimization`, `fp16`, `bf16` and other pydantic sections when no HF
    integration fills it: without `--hf` all of them; with `--hf` those HF does not fill (for example
    `overlap_comm`, `sub_group_size`, and the `stage3_*` keys below stage 3).

    ## Why is this bad?
    DeepSpeed silently drops "auto" there and uses the default: `"fp16": {"enabled": "auto"}` means fp16
    *off*, `"stage": "auto"` means ZeRO *off*.

    ## Example
    ```json
    {"train_batch_size": 64, "zero_optimization": {"stage": "auto", "overlap_comm": "auto"}}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 64, "zero_optimization": {"stage": 2, "overlap_comm": true}}
    ```

    ## References
    - deepspeed/runtime/config_utils.py `DeepSpeedConfigModel.__init__`; huggingface/transformers#16495
    """

    code = "ZT802"
    name = "auto-dropped"
    severity = Severity.WARNING
    message = '"auto" at {where} is not filled by anyone; DeepSpeed drops it and uses the default ({default})'

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for ptr in _all_autos(ctx):
            if not _strict_pointer(ptr) or (ctx.options.hf and _filled(ctx, ptr)):
                continue
            parent, key = ptr.rsplit("/", 1)
            f = schema.section(parent).field(key)
            default = "n/a" if f is None else f"{f.default!r}" if f.name != "overlap_comm" else "stage 3 only"
            yield self.emit(ctx, ptr, where=ptr, default=default)


class AutoNotFilledByHf(Rule):
    """A top-level "auto" that HF Trainer/accelerate does not fill.

    ## What it does
    With `--hf`, reports "auto" outside pydantic sections on keys that HF's `trainer_config_process` /
    `trainer_config_finalize` do not replace (they fill the batch trio, `gradient_clipping`, optimizer
    lr/betas/eps/weight_decay and scheduler warm-up/total steps).

    ## Why is this bad?
    The string reaches DeepSpeed unchanged and fails where the value is used.

    ## Example
    ```json
    {"train_batch_size": "auto", "steps_per_print": "auto"}
    ```

    ## Use instead
    ```json
    {"train_batch_size": "auto", "steps_per_print": 100}
    ```

    ## References
    - transformers integrations/deepspeed.py `HfTrainerDeepSpeedConfig`
    """

    code = "ZT803"
    name = "auto-not-filled-by-hf"
    severity = Severity.ERROR
    message = 'HF does not fill "auto" at {where}; DeepSpeed receives the string "auto"'

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if not ctx.options.hf:
            return
        for ptr in _all_autos(ctx):
            if not _strict_pointer(ptr) and not _filled(ctx, ptr) and ptr not in _HARMLESS:
                yield self.emit(ctx, ptr, where=ptr)


class AutoPrefetchFloat(Rule):
    """`stage3_prefetch_bucket_size: "auto"` and the 0.9·h² float trap.

    ## What it does
    With `--hf` at stage 3, notes that "auto" prefetch is filled with 0.9·hidden_size².

    ## Why is this bad?
    Older transformers releases (and DeepSpeed's autotuner template) write the float `0.9 * h * h`: for
    h=4096 that is 15099494.4, which DeepSpeed's integer field rejects (`int_from_float`). Current
    transformers rounds it.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto"}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 15099494}}
    ```
    or require a transformers release that applies `int()`.

    ## References
    - transformers integrations/deepspeed.py `trainer_config_finalize`; docs/deepspeed-facts.md §6
    """

    code = "ZT804"
    name = "auto-prefetch-float"
    severity = Severity.INFO
    message = '"auto" prefetch becomes 0.9·h²; older transformers write a float DeepSpeed rejects'
    needs = frozenset({"hf"})

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.options.hf and ctx.stage == 3:
            for key in ("stage3_prefetch_bucket_size", "prefetch_bucket_size"):
                if schema.is_auto(ctx.zero.get(key)):
                    yield self.emit(ctx, f"/zero_optimization/{key}")


class Zero3SaveWithoutGather(Rule):
    """ZeRO-3 without `stage3_gather_16bit_weights_on_model_save`.

    ## What it does
    At stage 3, checks that 16-bit weights are gathered when the model is saved.

    ## Why is this bad?
    Each rank holds only a shard. Without gathering, DeepSpeed's `save_16bit_model()` saves nothing (it logs
    "Did not save the model" and returns False, engine.py in 0.19.8), and HF `save_model()` writes no usable
    weights file (older transformers wrote a 905 KB `pytorch_model.bin` of empty shards; current ones only
    the sharded DeepSpeed checkpoint). You then need `zero_to_fp32.py` on that checkpoint. A training loop
    that saves only with `save_checkpoint()` (Megatron-DeepSpeed style) is not affected: without `--hf` this
    is a note.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}}
    ```

    ## References
    - huggingface/transformers#25817, hiyouga/LlamaFactory#253, huggingface/accelerate#883
    """

    code = "ZT805"
    name = "zero3-save-without-gather"
    severity = Severity.WARNING
    message = "ZeRO-3 without stage3_gather_16bit_weights_on_model_save: {detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage != 3 or not ctx.stage_known:
            return
        key, value = ctx.zero_value("gather_16bit_weights_on_model_save")
        legacy = ctx.zero.get("stage3_gather_fp16_weights_on_model_save")
        if not value and legacy is not True:
            pointer = f"/zero_optimization/{key}" if key else "/zero_optimization/stage"
            if ctx.options.hf:
                detail = "HF save_model() writes no usable weights file (zero_to_fp32.py needed)"
                yield self.emit(ctx, pointer, detail=detail)
            else:
                detail = "save_16bit_model() saves nothing (returns False); save_checkpoint() is unaffected"
                yield self.emit(ctx, pointer, detail=detail, severity=Severity.INFO)


class ClippingDefault(Rule):
    """No `gradient_clipping` key in a config used with HF.

    ## What it does
    With `--hf`, notes a missing `gradient_clipping`.

    ## Why is this bad?
    HF only fills keys that are present, so `max_grad_norm` is not passed on; DeepSpeed 0.19 clips at its
    own default of 1.0 (0.16 did not clip at all), whatever `--max_grad_norm` says.

    ## Example
    ```json
    {"train_batch_size": "auto", "zero_optimization": {"stage": 2}}
    ```

    ## Use instead
    ```json
    {"train_batch_size": "auto", "gradient_clipping": "auto", "zero_optimization": {"stage": 2}}
    ```

    ## References
    - docs/deepspeed-facts.md §3.3, §6 (gradient_clipping default 1.0 since 0.17+)
    """

    code = "ZT806"
    name = "clipping-default"
    severity = Severity.INFO
    message = "no gradient_clipping: HF's max_grad_norm is ignored and DeepSpeed clips at 1.0"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.options.hf and "gradient_clipping" not in ctx.config:
            yield self.emit(ctx, "")


class CheckpointingSectionUnused(Rule):
    """`activation_checkpointing` settings in a config that HF Trainer runs.

    ## What it does
    With `--hf`, reports each `activation_checkpointing` setting that is switched on:
    `partition_activations`, `cpu_checkpointing`, `contiguous_memory_optimization`,
    `synchronize_checkpoint_boundary`, `profile`.

    ## Why is this bad?
    DeepSpeed's engine never applies this section. It takes effect only when the training code calls
    `deepspeed.checkpointing.configure(..., deepspeed_config=...)` and checkpoints through
    `deepspeed.checkpointing.checkpoint`, as Megatron-DeepSpeed does. HF Trainer does neither: its
    `gradient_checkpointing` is PyTorch's. With `cpu_checkpointing`, the checkpoints stay on the GPU, so the
    memory you planned to free is not freed.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3}, "activation_checkpointing": {"cpu_checkpointing": true}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3}}
    ```
    Turn on checkpointing with `--gradient_checkpointing`. For a framework that does apply the section,
    `zerotune predict --checkpoint-in-cpu` shows its memory and time.

    ## References
    - docs/deepspeed-facts.md §3.5 (the engine never applies the section)
    - transformers integrations/deepspeed.py: nothing there calls `deepspeed.checkpointing`
    """

    code = "ZT807"
    name = "checkpointing-section-unused-by-hf"
    severity = Severity.WARNING
    message = (
        "activation_checkpointing.{key} has no effect under HF Trainer: nothing calls "
        "deepspeed.checkpointing.configure"
    )
    KEYS = (
        "partition_activations",
        "cpu_checkpointing",
        "contiguous_memory_optimization",
        "synchronize_checkpoint_boundary",
        "profile",
    )

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        section = ctx.config.get("activation_checkpointing")
        if not ctx.options.hf or not isinstance(section, dict):
            return
        for key in self.KEYS:
            if section.get(key) is True:
                yield self.emit(ctx, f"/activation_checkpointing/{key}", key=key)


RULES = (
    AutoOutsideHf,
    AutoDropped,
    AutoNotFilledByHf,
    AutoPrefetchFloat,
    Zero3SaveWithoutGather,
    ClippingDefault,
    CheckpointingSectionUnused,
)
