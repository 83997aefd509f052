"""ZT7xx: communication and buffer settings that cost speed or memory (docs/deepspeed-facts.md §4; seed product
notes on bucket sizing: a reduce bucket of about 2–3 transformer blocks overlaps communication with backward).
"""

from __future__ import annotations

from collections.abc import Iterator

from zerotune.dsconfig.load import pointer_of
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule
from zerotune.lint.rules.resources import hardware, model
from zerotune.schema.job import SAFETY_MARGIN
from zerotune.units import DTYPE_BYTES, fmt_bytes, fmt_count

MANY_COLLECTIVES = 1000
"""Reduce buckets per step above which latency dominates. ASSUMED cut: 1000 reductions at NCCL's ~40 us
small-message time (zerotune/model/comm.py DEFAULT_ALPHA_S) are 40 ms of pure latency per step."""
TINY_BUCKET = 1_000_000
"""Without a model: a bucket moves less than its latency's worth of bytes below S = alpha x busbw / f
(half of peak busbw; alpha-beta model, zerotune/collectives.py). At 40 us, f ~ 2 (all-reduce): 0.8 MB on
400G InfiniBand (40 GB/s busbw), 7.4 MB on H100 NVLink (370 GB/s, zerotune/profiles/hardware/dgx-h100.yaml);
1M elements (2 MB in 16-bit) is between the two."""
LARGE_PERSISTENCE = 10_000_000
"""Without a model: a persistence threshold this large keeps whole weight matrices replicated, e.g.
Llama-3-8B's k_proj and v_proj (4096 x 1024 = 4.2M elements each, every block)."""
PERSISTENT_SHARE = 0.10
"""Share of the parameters kept replicated above which ZT706 reports. ASSUMED: a judgement threshold
(default thresholds keep well under 1%: norm weights and biases); the memory model prices the exact bytes."""
BUFFER_SHARE = SAFETY_MARGIN
"""Share of GPU memory the overlap_comm reduce buffers may take before ZT707 reports: the safety margin's
share (zerotune/schema/job.py), so buffers larger than it are more than the margin alone could absorb."""
BLOCKS_PER_BUCKET = 2.5
"""The reduce bucket ZT703 suggests, in transformer blocks: the middle of the seed product notes' "2-3
layers' worth" rule of thumb (shared/seeds/000, "Rule of Thumb for Bucket Sizing"); `recommend` prices
the sizes around it with the step model instead."""


def _ptr(key: str | None, default: str) -> str:
    return pointer_of("zero_optimization", key or default)


class OverlapCommOff(Rule):
    """ZeRO stage 2/3 without `overlap_comm`.

    ## What it does
    At stage 2 or 3, reports `overlap_comm` false — explicitly (warning) or by default at stage 2 (info:
    DeepSpeed turns it on by default only at stage 3).

    ## Why is this bad?
    Gradient reduction (and stage-3 parameter fetches) then run after, not during, backward: the step
    waits for communication that could have been hidden.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "overlap_comm": false}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "overlap_comm": true}}
    ```
    (stage 1/2 then double-buffers the reduce bucket; see ZT707 on small GPUs).

    ## References
    - deepspeed/runtime/zero/config.py `overlap_comm_valid`; stage_1_and_2.py
    """

    code = "ZT701"
    name = "overlap-comm-off"
    severity = Severity.WARNING
    message = "overlap_comm is off at ZeRO stage {stage}{how}: communication is not overlapped with backward"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage not in (2, 3) or not ctx.stage_known:
            return
        key, value = ctx.zero_value("overlap_comm")
        if key is not None and value is False:
            yield self.emit(ctx, _ptr(key, "overlap_comm"), stage=ctx.stage, how="")
        elif key is None and ctx.stage == 2 and "overlap_comm" not in ctx.zero:
            yield self.emit(
                ctx,
                "/zero_optimization/stage",
                stage=2,
                how=" (the stage-2 default)",
                severity=Severity.INFO,
                help='set "overlap_comm": true',
            )


class ContiguousGradientsOff(Rule):
    """`contiguous_gradients: false` at stage 2/3.

    ## What it does
    Reports `contiguous_gradients` turned off at stage 2 or 3 (stage 1/2 with optimizer offload forces it on).

    ## Why is this bad?
    Gradients are then flattened on the fly for each reduction and memory fragments during backward; the
    contiguous bucket costs one buffer and avoids both.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "contiguous_gradients": false}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "contiguous_gradients": true}}
    ```

    ## References
    - deepspeed/runtime/zero/stage_1_and_2.py; microsoft/DeepSpeed#1302
    """

    code = "ZT702"
    name = "contiguous-gradients-off"
    severity = Severity.WARNING
    message = "contiguous_gradients is off: gradients are re-flattened per bucket and memory fragments"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, value = ctx.zero_value("contiguous_gradients")
        forced = ctx.stage in (1, 2) and ctx.offload("offload_optimizer")
        if key is not None and value is False and ctx.stage in (2, 3) and not forced:
            yield self.emit(ctx, _ptr(key, "contiguous_gradients"))


class BucketExceedsModel(Rule):
    """A reduce bucket so large that nothing overlaps.

    ## What it does
    With `--model`, compares `reduce_bucket_size` with the model: a bucket holding half the gradients or
    more means at most two reductions per step.

    ## Why is this bad?
    The first reduction starts only when the bucket is full, near the end of backward, so communication is
    not hidden; the bucket (doubled with overlap_comm at stage 1/2) also costs memory. About 2–3
    transformer blocks' worth of elements overlaps well.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e9}}
    ```
    for a 7B model.

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8}}
    ```

    ## References
    - microsoft/DeepSpeed#724, #3338 (bucket size vs communication time)
    """

    code = "ZT703"
    name = "bucket-exceeds-model"
    severity = Severity.WARNING
    message = (
        "reduce_bucket_size {bucket} holds {share:.0%} of the model's {params} gradients: little overlap"
    )
    needs = frozenset({"model"})

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        m = model(ctx)
        if m is None or ctx.stage <= 0:
            return
        key, bucket = ctx.zero_value("reduce_bucket_size")
        if bucket >= m.params / 2:
            hint = f"about {BLOCKS_PER_BUCKET:g} blocks: {fmt_count(BLOCKS_PER_BUCKET * m.block_params)} elements"
            yield self.emit(
                ctx,
                _ptr(key, "stage"),
                bucket=fmt_count(bucket),
                share=min(1.0, bucket / m.params),
                params=fmt_count(m.params),
                help=hint,
            )


class TinyBuckets(Rule):
    """Reduce buckets so small that the step issues thousands of collectives.

    ## What it does
    With `--model`, reports a `reduce_bucket_size` giving more than 1000 reductions per step; without a
    model, any bucket under 1M elements.

    ## Why is this bad?
    Each collective pays a fixed launch and synchronisation latency (tens of µs with NCCL, more across
    nodes); thousands of them per step make communication latency-bound instead of bandwidth-bound.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 50000}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8}}
    ```

    ## References
    - nccl-tests PERFORMANCE.md (latency vs bandwidth regimes); alpha-beta model in zerotune/collectives.py
    """

    code = "ZT704"
    name = "tiny-buckets"
    severity = Severity.WARNING
    message = "reduce_bucket_size {bucket}: {detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, bucket = ctx.zero_value("reduce_bucket_size")
        if key is None or ctx.stage <= 0 or bucket <= 0:
            return
        m = model(ctx)
        if m is not None:
            count = m.params / bucket
            if count > MANY_COLLECTIVES:
                yield self.emit(
                    ctx,
                    _ptr(key, "reduce_bucket_size"),
                    bucket=fmt_count(bucket),
                    detail=f"about {count:,.0f} reductions per step for {fmt_count(m.params)} params",
                )
        elif bucket < TINY_BUCKET:
            yield self.emit(
                ctx,
                _ptr(key, "reduce_bucket_size"),
                bucket=fmt_count(bucket),
                detail=f"{1e9 / bucket:,.0f} reductions per billion parameters per step",
            )


class PrefetchExceedsMaxLive(Rule):
    """A stage-3 prefetch bucket larger than `max_live_parameters`.

    ## What it does
    At stage 3, compares `stage3_prefetch_bucket_size` with `stage3_max_live_parameters`.

    ## Why is this bad?
    Prefetching is capped at max_live minus what is already gathered, so the larger prefetch never happens;
    the setting suggests memory use that the cap hides (or the cap is smaller than intended).

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e8, "stage3_max_live_parameters": 1e8}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "stage3_max_live_parameters": 1e9}}
    ```

    ## References
    - deepspeed/runtime/zero/partitioned_param_coordinator.py (prefetch budget)
    """

    code = "ZT705"
    name = "prefetch-exceeds-max-live"
    severity = Severity.WARNING
    message = (
        "stage3_prefetch_bucket_size {prefetch} exceeds stage3_max_live_parameters {live}: prefetch is capped"
    )

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage != 3:
            return
        pkey, prefetch = ctx.zero_value("prefetch_bucket_size")
        lkey, live = ctx.zero_value("max_live_parameters")
        if (pkey or lkey) and prefetch > live:
            yield self.emit(
                ctx, _ptr(pkey or lkey, "stage"), prefetch=fmt_count(prefetch), live=fmt_count(live)
            )


class LargePersistenceThreshold(Rule):
    """A stage-3 persistence threshold that keeps much of the model replicated.

    ## What it does
    At stage 3, with `--model` computes the share of parameters at or below
    `stage3_param_persistence_threshold` (they stay gathered on every GPU) and reports more than 10%;
    without a model, reports thresholds of 10M elements or more.

    ## Why is this bad?
    Persistent parameters are never partitioned: each GPU holds them in full, eating into the memory ZeRO-3
    was chosen to save.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1e8}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1e5}}
    ```
    (HF's "auto" uses 10·hidden_size).

    ## References
    - deepspeed/runtime/zero/parameter_offload.py `mark_persistent_parameters`
    """

    code = "ZT706"
    name = "large-persistence-threshold"
    severity = Severity.WARNING
    message = "stage3_param_persistence_threshold {threshold}: {detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, threshold = ctx.zero_value("param_persistence_threshold")
        if ctx.stage != 3 or key is None:
            return
        m = model(ctx)
        if m is not None:
            from zerotune.model.memory_facts import persistent_elements

            tensors = tuple(t for layer in m.layers for t in layer.tensors)
            _, cap = ctx.zero_value("model_persistence_threshold")
            kept = persistent_elements(tensors, threshold, cap)
            if kept > PERSISTENT_SHARE * m.params:
                yield self.emit(
                    ctx,
                    _ptr(key, key),
                    threshold=fmt_count(threshold),
                    detail=f"{kept / m.params:.0%} of the parameters stay replicated on every GPU",
                )
        elif threshold >= LARGE_PERSISTENCE:
            yield self.emit(
                ctx,
                _ptr(key, key),
                threshold=fmt_count(threshold),
                detail="weight matrices this large stay replicated on every GPU",
            )


class OverlapBufferMemory(Rule):
    """overlap_comm's double reduce buffer on a small GPU.

    ## What it does
    With a GPU size (`--profile` or `--gpu-memory`), estimates the stage 1/2 reduce buffers under
    `overlap_comm`: two buckets of `reduce_bucket_size` elements plus about one more for flattening
    (docs/deepspeed-facts.md §4.1; HF's docs quote 4.5× the bucket), and reports more than 10% of GPU memory.

    ## Why is this bad?
    With the 5e8 default that is ~3 GB in 16-bit, a large slice of a 16–24 GB GPU, and a common cause of
    "ZeRO-2 uses more memory than ZeRO-1".

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": 5e8}}
    ```
    on a 24 GB GPU.

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": 1e8}}
    ```

    ## References
    - deepspeed/runtime/zero/stage_1_and_2.py (ipg buffers); microsoft/DeepSpeed#1302; HF docs deepspeed.md
    """

    code = "ZT707"
    name = "overlap-buffer-memory"
    severity = Severity.WARNING
    message = "overlap_comm reduce buffers need about {need} ({share:.0%} of {gpu})"
    needs = frozenset({"hardware"})

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.stage not in (1, 2):
            return
        _, overlap = ctx.zero_value("overlap_comm")
        hw = hardware(ctx)
        if not overlap or hw is None or not hw.memory_bytes:
            return
        key, bucket = ctx.zero_value("reduce_bucket_size")
        elem = DTYPE_BYTES[ctx.precision]
        need = 3 * bucket * elem  # 2·R·E double buffer + ~R·E flatten temporary (shared/reference/DEEPSPEED_FACTS.md §4.1)
        if need > BUFFER_SHARE * hw.memory_bytes:
            yield self.emit(
                ctx,
                _ptr(key, "overlap_comm"),
                need=fmt_bytes(need),
                share=need / hw.memory_bytes,
                gpu=fmt_bytes(hw.memory_bytes),
            )


class PrefetchDisabled(Rule):
    """Stage-3 prefetching switched off.

    ## What it does
    At stage 3, notes `stage3_prefetch_bucket_size: 0`.

    ## Why is this bad?
    Every parameter is then fetched when its module runs, exposing all-gather latency in forward and
    backward. It is a valid memory-pressure workaround (microsoft/DeepSpeed#1852), so this is a note.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7}}
    ```

    ## References
    - deepspeed/runtime/zero/partitioned_param_coordinator.py; microsoft/DeepSpeed#1852
    """

    code = "ZT708"
    name = "prefetch-disabled"
    severity = Severity.INFO
    message = "stage-3 prefetching is off: every parameter fetch is on the critical path"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        key, value = ctx.zero_value("prefetch_bucket_size")
        if ctx.stage == 3 and key is not None and value == 0:
            yield self.emit(ctx, _ptr(key, key))


RULES = (
    OverlapCommOff,
    ContiguousGradientsOff,
    BucketExceedsModel,
    TinyBuckets,
    PrefetchExceedsMaxLive,
    LargePersistenceThreshold,
    OverlapBufferMemory,
    PrefetchDisabled,
)
