"""ZT1xx: the batch-size triple (docs/deepspeed-facts.md §3.1, deepspeed/runtime/config.py `_configure_train_batch_size`).

DeepSpeed reads the three keys with dict.get and no conversion, infers the missing members with floor
division, then asserts train_batch_size == train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
world_size. So `null` is the same as absent, a boolean is the int it is in Python (`true` = 1, `false` = 0),
and a float takes part in the arithmetic as it is (a micro batch of 1.5 passes the assertion).
"""

from __future__ import annotations

from collections.abc import Iterator

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import pointer_of
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule

TB, MB, GAS = "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"


def _present(ctx: Context, key: str) -> bool:
    """Set to something DeepSpeed uses: `null` means "derive it", exactly like a missing key."""
    return ctx.config.get(key) is not None


def _value(ctx: Context, key: str) -> int | float | None:
    """The number DeepSpeed computes with (a boolean is 0 or 1 there), or None for a non-number."""
    return schema.loose_number(ctx.config.get(key))


def _numbers(ctx: Context) -> dict[str, float] | None:
    """The present batch keys as DeepSpeed's numbers, or None when any is unusable ("auto", a string, ≤ 0)."""
    out: dict[str, float] = {}
    for key in (TB, MB, GAS):
        if not _present(ctx, key):
            continue
        value = _value(ctx, key)
        if value is None or value <= 0:
            return None
        out[key] = value
    return out


def _world(ctx: Context) -> float | None:
    w = ctx.world_size
    if w is None:
        return None
    sp = ctx.top_number("sequence_parallel_size")
    return w / sp if sp else w


class BatchSizeMismatch(Rule):
    """train_batch_size ≠ micro batch × gradient accumulation × world size.

    ## What it does
    Repeats DeepSpeed's batch inference: given the keys present and the data-parallel world size
    (`--world-size`), fills the missing ones with floor division and checks the product. Without
    `--world-size` it still finds triples no world size can satisfy (train_batch_size not divisible).

    ## Why is this bad?
    DeepSpeed asserts `train_batch_size == micro * gas * world_size` at start-up; a floor division that
    drops a remainder also fails it ("10 != 2 * 1 * 4"). The job dies after scheduling and model loading.

    ## Example
    ```json
    {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}
    ```
    with 8 GPUs (4 × 4 × 8 = 128).

    ## Use instead
    ```json
    {"train_batch_size": 128, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}
    ```
    or give only two of the three and let DeepSpeed infer the third.

    ## References
    - deepspeed/runtime/config.py `_set_batch_related_parameters`, `_batch_assertion`; microsoft/DeepSpeed#6914
    """

    code = "ZT101"
    name = "batch-size-mismatch"
    severity = Severity.ERROR
    message = "{detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        nums = _numbers(ctx)
        if ctx.options.hf and any(schema.is_auto(ctx.config.get(k)) for k in (TB, MB, GAS)):
            return
        if nums is None or (TB not in nums and MB not in nums):
            return
        tb, mb, gas = nums.get(TB), nums.get(MB), nums.get(GAS)
        where = pointer_of(TB) if tb is not None else pointer_of(MB)
        w = _world(ctx)
        if w is None:
            if tb is not None and mb is not None and gas is not None and tb % (mb * gas):
                yield self.emit(
                    ctx,
                    where,
                    detail=f"train_batch_size {tb} is not a multiple of micro batch {mb} × "
                    f"gradient accumulation {gas}: no world size satisfies DeepSpeed's batch assertion",
                )
            elif tb is not None and mb is not None and gas is None and tb % mb:
                yield self.emit(
                    ctx, where, detail=f"train_batch_size {tb} is not a multiple of micro batch {mb}"
                )
            elif tb is not None and gas is not None and mb is None and tb % gas:
                yield self.emit(
                    ctx,
                    where,
                    detail=f"train_batch_size {tb} is not a multiple of gradient_accumulation_steps {gas}",
                )
            return
        if tb is not None and mb is not None and gas is None:
            gas = tb // mb // w
        elif tb is not None and gas is not None and mb is None:
            mb = tb // w // gas
        elif mb is not None and gas is not None and tb is None:
            tb = mb * gas * w
        elif tb is not None and mb is None:
            gas, mb = 1, tb // w
        elif mb is not None and tb is None:
            tb, gas = mb * w, 1
        w_text = f"{w:g}"
        if tb <= 0 or mb <= 0 or gas <= 0:
            yield self.emit(
                ctx,
                where,
                detail=f"with world size {w_text}, DeepSpeed infers micro batch {mb:g} and "
                f"gradient accumulation {gas:g}; both must be > 0",
            )
        elif tb != mb * gas * w:
            yield self.emit(
                ctx,
                where,
                detail=f"train_batch_size {tb:g} != micro batch {mb:g} × gradient "
                f"accumulation {gas:g} × world size {w_text} (= {mb * gas * w:g})",
            )


class BatchSizeMissing(Rule):
    """Neither train_batch_size nor train_micro_batch_size_per_gpu is set.

    ## What it does
    Checks that at least one of the two batch sizes is present.

    ## Why is this bad?
    DeepSpeed cannot infer the batch triple from gradient accumulation alone and asserts "Either
    train_batch_size or train_micro_batch_size_per_gpu needs to be provided". Hugging Face only fills keys
    that are present, so it does not help either.

    ## Example
    ```json
    {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}
    ```

    ## Use instead
    ```json
    {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}
    ```

    ## References
    - deepspeed/runtime/config.py `_set_batch_related_parameters`
    """

    code = "ZT102"
    name = "batch-size-missing"
    severity = Severity.ERROR
    message = "neither train_batch_size nor train_micro_batch_size_per_gpu is set (null counts as unset); DeepSpeed cannot start"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if not _present(ctx, TB) and not _present(ctx, MB):
            yield self.emit(ctx, "")


class BatchSizeInvalid(Rule):
    """A batch-size key that is not a positive integer.

    ## What it does
    Checks `train_batch_size`, `train_micro_batch_size_per_gpu` and `gradient_accumulation_steps` are
    positive numbers (`"auto"` is left to the HF rules; `null` means "derive it" and `true` is 1 for
    DeepSpeed, so both pass). A positive fraction is a warning: DeepSpeed's arithmetic accepts it.

    ## Why is this bad?
    DeepSpeed reads these keys with `dict.get` and does no conversion: the string `"8"` breaks the arithmetic
    with a TypeError, 0, `false` or a negative value fails the "has to be greater than 0" assertion. A
    fraction passes DeepSpeed's checks but is not a batch size: the data loader gets 1.5 samples per step.

    ## Example
    ```json
    {"train_batch_size": 64, "gradient_accumulation_steps": "8"}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 64, "gradient_accumulation_steps": 8}
    ```

    ## References
    - deepspeed/runtime/config.py `get_train_batch_size`, `_batch_assertion`
    """

    code = "ZT103"
    name = "batch-size-invalid"
    severity = Severity.ERROR
    message = "`{key}` must be a positive integer, got {value}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for key in (TB, MB, GAS):
            if (
                not _present(ctx, key)
                or schema.is_auto(ctx.config[key])
                or pointer_of(key) in ctx.placeholders
            ):
                continue
            value = _value(ctx, key)
            if value is None or value <= 0:
                yield self.emit(ctx, pointer_of(key), key=key, value=schema._short(ctx.config[key]))
            elif value != int(value):
                yield self.emit(
                    ctx,
                    pointer_of(key),
                    key=key,
                    value=schema._short(ctx.config[key]),
                    severity=Severity.WARNING,
                    help="DeepSpeed accepts the fraction in its arithmetic; use a whole number",
                )


class ImpliedWorldSize(Rule):
    """The batch triple fixes the world size; say it so it can be checked.

    ## What it does
    When all three batch keys are set and `--world-size` is not given, reports the data-parallel world size
    the triple implies.

    ## Why is this bad?
    A config with all three keys only runs on exactly that many data-parallel ranks; moving it to another
    node count fails the batch assertion.

    ## Example
    ```json
    {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8}
    ```
    runs only with 8 data-parallel ranks.

    ## Use instead
    Pass `--world-size N` to check it, or set two of the three keys so DeepSpeed infers the third.

    ## References
    - deepspeed/runtime/config.py `_batch_assertion`
    """

    code = "ZT104"
    name = "implied-world-size"
    severity = Severity.INFO
    message = "this batch triple only works with a data-parallel world size of {world}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        nums = _numbers(ctx)
        if ctx.world_size is not None or nums is None or len(nums) < 3:
            return
        tb, mb, gas = nums[TB], nums[MB], nums[GAS]
        if tb % (mb * gas) == 0:
            yield self.emit(ctx, pointer_of(TB), world=f"{tb // (mb * gas):g}")


RULES = (BatchSizeMismatch, BatchSizeMissing, BatchSizeInvalid, ImpliedWorldSize)
