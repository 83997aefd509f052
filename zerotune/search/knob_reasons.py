"""One reason generator per row of the knob table (dsconfig/knobs.py), and the loop that writes them.

Each generator gives the evidence for the chosen value: the model's layer sizes, the profile's
measured bandwidth. For rows with a search grid the loop appends how the neighbouring grid values
compare, re-evaluated through the search's memoised evaluator (the same models the ranking used).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from zerotune.dsconfig.knobs import knobs_for
from zerotune.model.comm import fill_buckets
from zerotune.search.binding import group_label, signed_pct, smallest_over
from zerotune.search.candidate import Candidate
from zerotune.search.evaluate import Evaluation
from zerotune.search.objective import LADDER, quantize
from zerotune.search.rank import SearchResult
from zerotune.search.saturation import busbw_at
from zerotune.units import DTYPE_BYTES, GB, fmt_bytes, fmt_count


@dataclass(frozen=True)
class KnobContext:
    """What a reason generator reads: the search and the evaluation being explained."""

    result: SearchResult
    best: Evaluation

    @property
    def cand(self) -> Candidate:
        return self.best.candidate

    @property
    def world(self) -> int:
        return self.result.workload.world_size

    @property
    def elem(self) -> int:
        return DTYPE_BYTES[self.cand.precision]

    @property
    def block(self) -> int:
        return self.result.model.block_params

    @cached_property
    def layers(self) -> int:
        return len(self.result.model.blocks)


def _stage(c: KnobContext) -> str:
    result, best, cand = c.result, c.best, c.cand
    key = (cand.stage, *cand.offload)
    others = []
    for k in LADDER:
        g = result.groups.get(k)
        if g is None or k == key:
            continue
        if g.best is not None:
            others.append(
                f"{group_label(k)}: {signed_pct(g.best.tokens_per_s / best.tokens_per_s - 1)} tokens/s"
            )
        elif g.fitting == 0 and g.smallest is not None:
            others.append(f"{group_label(k)} does not fit: {smallest_over(result, g.smallest)}")
    choice = "the best" if result.request.objective != "memory" else "the smallest within 5% of the best"
    return f"{group_label(key)} is {choice} predicted configuration ({result.request.objective}); " + "; ".join(
        others[:4]
    )


def _overlap_comm(c: KnobContext) -> str:
    if c.world == 1:
        return "one rank: no gradient is communicated, so there is nothing to overlap"
    if c.cand.overlap_comm:
        return "on: gradient reductions run on a side stream while backward continues"
    return "off: reductions run after the bucket fills, on the compute stream"


def _contiguous_gradients(c: KnobContext) -> str:
    cand = c.cand
    if cand.contiguous_gradients:
        return "on: gradients are copied into one preallocated buffer (no fragmentation)"
    return "off: saves the preallocated gradient buffer" + (
        "; with overlap_comm on, DeepSpeed synchronizes the device at every bucket flush "
        "(stage_1_and_2.py, no second bucket to swap to)"
        if cand.overlap_comm and cand.stage in (1, 2)
        else ""
    )


def _reduce_scatter(c: KnobContext) -> str:
    if c.cand.stage == 3:
        return (
            "true, DeepSpeed's default, written out: each bucket is reduce-scattered (each rank receives "
            "only its gradient shard, half the bytes of an all-reduce)"
        )
    return (
        "true, DeepSpeed's default, written out; at stage 1/2 DeepSpeed 0.19.8 still all-reduces "
        "each bucket (use_multi_rank_bucket_allreduce, on by default), so it does not halve the bytes"
    )


def _allgather_bucket(c: KnobContext) -> str:
    return (
        f"{fmt_count(c.cand.allgather_bucket_size)} elements (even, as the stage 1/2 optimizer asserts); "
        "unused by DeepSpeed 0.19.8 on torch >= 1.13, which gathers each flat group in one "
        "all_gather_into_tensor call (docs/deepspeed-facts.md §4.1)"
    )


def _prefetch_bucket(c: KnobContext) -> str:
    cand, world, elem, block = c.cand, c.world, c.elem, c.block
    pf = cand.prefetch_bucket_size
    bw = busbw_at(c.result.hardware, "all_gather", pf * elem) if world > 1 else None
    bw_text = f", {bw[0] / bw[1]:.0%} of peak all-gather busbw at {fmt_bytes(pf * elem)}" if bw else ""
    if world == 1:
        fetch = (
            "one rank: nothing is gathered from other ranks; prefetch overlaps the next layer's "
            "host-to-device copy of its offloaded parameters with this one's compute"
            if cand.offload_param != "none"
            else "one rank: nothing is gathered from other ranks, so prefetch moves nothing"
        )
    else:
        fetch = f"the next layer's all-gather starts while this one computes{bw_text}"
    return (
        f"{fmt_count(pf)} elements = {_layers(pf / block)} of {c.result.model.name} ({fmt_count(block)} "
        f"params/layer): {fetch}"
    )


def _persistence(c: KnobContext) -> str:
    return persistence_reason(c.result.model, c.cand.param_persistence_threshold, c.elem)


def _max_live(c: KnobContext) -> str:
    ml = c.cand.max_live_parameters
    return (
        f"{fmt_count(ml)} elements = {_layers(ml / c.block)} ({fmt_bytes(ml * c.elem)}) may be gathered at "
        "once: caps prefetch"
    )


def _max_reuse(c: KnobContext) -> str:
    rd = c.cand.max_reuse_distance
    if rd:
        return (
            f"{fmt_count(rd)} elements: parameters needed again within {_layers(rd / c.block)} stay "
            "gathered instead of being re-fetched"
        )
    return "0: every parameter is released after use and re-gathered in backward (least memory)"


def _sub_group(c: KnobContext) -> str:
    sg = c.cand.sub_group_size
    return (
        f"the optimizer steps this rank's partition in sub-groups of {fmt_count(sg)} elements "
        f"(fp32 buffer up to {fmt_bytes(min(sg, c.result.model.params / c.world) * 4)})"
    )


def _gather_16bit(c: KnobContext) -> str:
    return (
        "true: save_16bit_model() / HF save_pretrained write one full 16-bit checkpoint that "
        "from_pretrained can load (false saves only ZeRO shards)"
    )


def _alternatives(result: SearchResult, best: Evaluation, field: str, values: tuple) -> str:
    """How the neighbours on `field`'s grid compare with the chosen value."""
    chosen = getattr(best.candidate, field)
    rows = []
    for value in values:
        if value == chosen:
            continue
        rows.append((value, result.evaluate(best.candidate.with_(**{field: value}))))
    if not rows:
        return ""
    fmt = _fmt_value
    parts = []
    fitting = [(v, ev) for v, ev in rows if ev.fits]
    if fitting:
        if result.request.objective == "memory":
            v, ev = min(fitting, key=lambda r: (r[1].per_gpu_bytes, r[0]))
            parts.append(
                f"next {fmt(v)}: {signed_pct(ev.per_gpu_bytes / best.per_gpu_bytes - 1)} memory, "
                f"{signed_pct(ev.step_time_s / best.step_time_s - 1)} step time"
            )
        else:
            v, ev = min(fitting, key=lambda r: (r[1].step_time_s, r[0]))
            delta = ev.step_time_s / best.step_time_s - 1
            parts.append(f"best alternative {fmt(v)}: {signed_pct(delta)} step time{_tie_text(best, ev)}")
    nofit = [v for v, ev in rows if not ev.fits]
    if nofit:
        parts.append(f"{', '.join(fmt(v) for v in nofit)} would not fit")
    return f"{len(rows) + 1} values tried; " + "; ".join(parts)


def _tie_text(best: Evaluation, ev: Evaluation) -> str:
    """Why `best` beat a neighbour whose throughput ranks equal (4 significant digits), in the
    ranking's own order (rank.rank_key): contiguous_gradients on, then lower memory, then field order."""
    if quantize(ev.tokens_per_s) != quantize(best.tokens_per_s):
        return ""
    if ev.candidate.contiguous_gradients != best.candidate.contiguous_gradients:
        return " (a tie: contiguous_gradients on wins ties)"
    if ev.per_gpu_bytes > best.per_gpu_bytes:
        return " (a tie: the lower-memory value wins)"
    if ev.per_gpu_bytes == best.per_gpu_bytes:
        return " (a tie in time and memory: the smaller value wins)"
    return " (a tie: the higher-memory value was chosen by another knob's tie-break)"


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _fmt_value(v: object) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, int) and v >= 10_000:
        return fmt_count(v)
    return str(v)


def _layers(x: float) -> str:
    """'0.5 layers', '1 layer', '12 layers'."""
    text = f"{x:.2g}" if x < 10 else f"{x:.0f}"
    return f"{text} layer" + ("" if text == "1" else "s")


def backward_order(model) -> list[int]:
    """Tensor numels in the order their gradients become ready: modules reversed, tensors reversed."""
    return [t for layer in reversed(model.layers) for t in reversed(layer.tensors)]


def _reduce_bucket(c: KnobContext) -> str:
    result, cand, elem, block, layers = c.result, c.cand, c.elem, c.block, c.layers
    model, hw = result.model, result.hardware
    r = cand.reduce_bucket_size
    nbytes = r * elem
    world = result.workload.world_size
    parts = [
        f"{fmt_count(r)} elements = {_layers(r / block)} of {model.name} ({fmt_count(block)} params/layer)"
    ]
    if world == 1:
        # One rank: DeepSpeed skips the gradient reduction (nothing to exchange); the bucket is only a
        # copy buffer, so bandwidth and overlap do not apply.
        parts.append("one rank: nothing is communicated, the bucket is only a gradient copy buffer")
        return "; ".join(parts)
    # Stage 1/2 all-reduce each bucket in 0.19.8 (use_multi_rank_bucket_allreduce); stage 3 reduce-scatters.
    op = "reduce_scatter" if cand.stage == 3 else "all_reduce"
    op_text = op.replace("_", "-")
    bw = busbw_at(hw, op, nbytes)
    if bw:
        parts.append(
            f"{fmt_bytes(nbytes)} {cand.precision} reaches {bw[0] / bw[1]:.0%} of the "
            f"{bw[1] / GB:.0f} GB/s peak {op_text} busbw on {hw.name}"
        )
    order = backward_order(model)
    buckets = fill_buckets(order, r)
    if len(buckets) <= 1:
        parts.append(
            f"the whole model ({fmt_count(model.params)}) fits one bucket: it fires only after backward"
        )
    else:
        # the layer (counted from the end of backward) whose gradients flush the first bucket
        owner = [i for i, layer in reversed(list(enumerate(model.layers))) for _ in layer.tensors]
        first_layer = len(model.layers) - owner[buckets[0].after]
        text = (
            f"{len(buckets)} buckets per backward (DeepSpeed's fill rule: a bucket flushes before the "
            f"gradient that would overflow it); the first fires after the {_ordinal(first_layer)} module of backward"
        )
        if cand.overlap_comm and cand.stage >= 2:
            text += f", so the reductions of about {max(0, layers - first_layer)} of {layers} layers overlap compute"
        elif cand.stage == 1:
            text += " (stage 1 reduces at the accumulation boundary only)"
        parts.append(text)
    sat = result.space.grids.saturating_for(cand.stage)
    if sat:
        parts.append(f"90% of peak {op_text} busbw needs >= {fmt_count(sat)} elements")
    return "; ".join(parts)


def persistence_reason(model, threshold: int, elem: int) -> str:
    small = [t for layer in model.layers for t in layer.tensors if t <= threshold]
    if not small:
        return f"{fmt_count(threshold)}: every tensor is partitioned and gathered on use"
    sizes = sorted(set(small))
    size_text = ", ".join(fmt_count(s) for s in sizes[:3]) + (" ..." if len(sizes) > 3 else "")
    return (
        f"{fmt_count(threshold)}: {len(small)} tensors of <= {fmt_count(threshold)} elements ({size_text}) stay "
        f"gathered on every GPU ({fmt_bytes(sum(small) * elem)} per GPU): all-gathered once per step, after "
        f"the optimizer update, instead of before each forward and backward use"
    )


KNOB_REASONS: dict[str, Callable[[KnobContext], str]] = {
    "stage": _stage,
    "overlap_comm": _overlap_comm,
    "contiguous_gradients": _contiguous_gradients,
    "reduce_scatter": _reduce_scatter,
    "reduce_bucket_size": _reduce_bucket,
    "allgather_bucket_size": _allgather_bucket,
    "prefetch_bucket_size": _prefetch_bucket,
    "param_persistence_threshold": _persistence,
    "max_live_parameters": _max_live,
    "max_reuse_distance": _max_reuse,
    "sub_group_size": _sub_group,
    "gather_16bit_weights_on_model_save": _gather_16bit,
}
"""ZeroSettings field -> its reason generator: one per knob-table row (tests/unit/test_knobs.py)."""


def knob_reasons(result: SearchResult, best: Evaluation) -> dict[str, str]:
    """Dotted key -> reason for every row of the knob table the chosen stage writes."""
    ctx = KnobContext(result, best)
    out = {}
    for knob in knobs_for(ctx.cand.stage):
        parts = [KNOB_REASONS[knob.field](ctx)]
        if knob.grid is not None:
            alt = _alternatives(result, best, knob.field, result.space.grids[knob.field])
            parts += [alt] if alt else []
        out[knob.path] = "; ".join(parts)
    return out
