"""Stage 3: parameter fetch/release around every module, prefetch, persistence, and the gradient
reduce-scatter buckets (`partitioned_param_coordinator.py`, `parameter_offload.py`, `stage3.py` of
DeepSpeed 0.19.8; zerotune/model/comm.py lists what is issued).

Stage-3 parameter gathers are issued with `async_op=True` (`partition_parameters.py
_dist_allgather_fn`), so they run on the backend's own thread (NCCL stream, or gloo's worker thread)
even on CPU; on GPUs without `overlap_comm` they share the default stream and block.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

from zerotune.model.buckets import buckets_by_layer, reduce
from zerotune.model.comm import persistent_flags
from zerotune.model.memory_facts import reuse_distances
from zerotune.model.offload import param_source_Bps
from zerotune.model.setup import StepSetup
from zerotune.model.timeline import Timeline
from zerotune.units import fmt_bytes

QWZ_BYTES_RATIO = 0.5
"""qwZ: int8 weights instead of 16-bit in the forward all-gather (Wang et al. 2023, ZeRO++ §3.1). The
per-group scales that travel with them are left out: one fp32 scale per group of about 4,000-16,000 weights
(DeepSpeed 0.19.8 runtime/zero/partition_parameters.py `CUDAQuantizer.quantize`: groups sized towards
`target_group_size` 8000, asserted below 16k) adds at most 4 / 4000 bytes per int8 byte, 0.1%."""


def stage3_layout(
    s: StepSetup,
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Per layer: non-persistent tensor numels, their sum, the trace distance from its forward to its
    next use (zerotune/model/memory.py `reuse_distances`, shared with the memory model), and the prefix
    sums of its numels (the prefetch walk finds where a call's budget ends by bisection: a MoE layer
    lists thousands of expert tensors)."""
    z = s.zero
    ckpt = s.workload.activation_checkpointing
    key = ("s3", z.param_persistence_threshold, z.model_persistence_threshold, ckpt)
    cached = s.prep.buckets.get(key)
    if cached is None:
        flat = [t for layer in s.layers for t in layer.tensors]
        flags = persistent_flags(flat, z.param_persistence_threshold, z.model_persistence_threshold)
        parts, k = [], 0
        for layer in s.layers:
            parts.append(
                tuple(
                    t for t, p in zip(layer.tensors, flags[k : k + len(layer.tensors)], strict=True) if not p
                )
            )
            k += len(layer.tensors)
        distance = reuse_distances(
            tuple(layer.tensors for layer in s.layers), tuple(layer.is_block for layer in s.layers), ckpt
        )
        cached = (tuple(parts), tuple(sum(p) for p in parts), distance, tuple(tuple(accumulate(p, initial=0)) for p in parts))
        s.prep.buckets[key] = cached
    return cached


def micro_step(s: StepSetup, tl: Timeline, boundary: bool, tag: str) -> None:
    """Stage 3 (partitioned_param_coordinator.py): fetch + prefetch before each module, release
    after it unless reused within max_reuse_distance, reduce-scatter buckets in backward.

    The trace is the module order of the step: forward 0..L-1, then backward L-1..0 (position
    2L-1-i). Every module with parameters calls fetch_sub_module, and each call prefetches up to
    min(prefetch_bucket_size, max_live_parameters - gathered elements) *new* elements, walking the
    trace from a queue pointer and taking whole tensors (gathered ones are passed for free). A layer
    of k modules is modelled as one walk with k times that budget, issued as the same number of
    calls. A layer the walk passed while still gathered is not released: DeepSpeed marks it
    "fetched for" that later use (`__params_to_release`).
    """
    z, layers, detail = s.zero, s.layers, tl.detail
    parts, part_sum, distance, prefix = stage3_layout(s)
    nl = len(layers)
    last_pos = 2 * nl - 1
    modules = [max(len(layer.tensors), 1) for layer in layers]
    next_t = [0] * nl  # tensors of layer i gathered or in flight (a prefix of parts[i])
    ready = [0.0] * nl
    fetched_for = [-1] * nl  # furthest trace position a prefetch walk passed this layer for
    seen = [False] * nl  # gathered before in this micro-step (hpZ: a secondary copy exists)
    available = 0
    q = 0
    ncalls = 0
    prefetch = 1 if z.allgather_sequential else z.prefetch_bucket_size
    max_live = z.max_live_parameters
    hpz = z.zero_hpz_partition_size > 1
    qwz = z.zero_quantized_weights
    offload_rate = param_source_Bps(s) if z.offload_param.device != "none" else 0.0
    elem, n, cost, concurrent = s.elem_bytes, s.n, s.cost, s.gather_concurrent

    def call(pieces: list[tuple[int, int]], forward: bool, secondary: bool, count: int) -> None:
        """`count` coalesced all-gathers of the pieces' elements; hpZ secondary gathers stay in
        groups of h ranks."""
        nonlocal available, ncalls
        numel = 0
        for p in pieces:
            numel += p[1]
        nbytes = numel * elem / count
        if qwz and not secondary:
            nbytes *= QWZ_BYTES_RATIO
        if secondary:
            seconds = cost.seconds("all_gather", nbytes, ranks=min(z.zero_hpz_partition_size, n), intra=True)
        else:
            seconds = cost.seconds("all_gather", nbytes)
        if offload_rate:
            seconds += numel / count / n * elem / offload_rate
        ncalls += count
        label = ""
        if detail:
            times = f" x{count}" if count > 1 else ""
            label = f"all_gather {'fwd' if forward else 'bwd'} #{ncalls}{times} ({fmt_bytes(nbytes)})"
        end = tl.collective(
            "all_gather",
            nbytes,
            seconds,
            label,
            "forward" if forward else "backward",
            concurrent=concurrent,
            count=count,
        )
        available += numel
        for layer, _ in pieces:
            seen[layer] = True
            if end > ready[layer]:
                ready[layer] = end

    def gather(pieces: list[tuple[int, int]], forward: bool, count: int = 1) -> None:
        if hpz:  # a layer gathered before in this micro-step has its hpZ secondary copy
            again = [p for p in pieces if seen[p[0]]]
            if again:
                call(again, forward, True, 1)
                pieces = [p for p in pieces if not seen[p[0]]]
                if not pieces:
                    return
        call(pieces, forward, False, count)

    def fetch(i: int, pos: int, forward: bool) -> None:
        nonlocal q
        if next_t[i] < len(parts[i]):
            rest = prefix[i][-1] - prefix[i][next_t[i]]
            next_t[i] = len(parts[i])
            gather([(i, rest)], forward)
        if q <= pos:
            q = pos + 1
        if prefetch <= 0 or q > last_pos:
            tl.wait(ready[i])
            return
        # modules[i] calls, each taking whole tensors until it has min(prefetch, max_live -
        # gathered) new elements (so a call takes at least one tensor, however large)
        taken, pieces, calls_made, in_call = 0, [], 0, 0
        budget = min(prefetch, max_live - available)
        while q <= last_pos and budget > 0 and calls_made < modules[i]:
            j = q if q < nl else last_pos - q
            cj, tj = prefix[j], next_t[j]
            end = len(cj) - 1
            got = 0
            while tj < end:
                # the first tensor at which the call's elements reach its budget (whole tensors:
                # integer sums, so the bisection takes exactly the tensors a one-by-one walk would)
                k = bisect_left(cj, cj[tj] + budget - in_call, tj + 1)
                if k > end:
                    got += cj[end] - cj[tj]
                    in_call += cj[end] - cj[tj]
                    tj = end
                    break
                got += cj[k] - cj[tj]
                in_call += cj[k] - cj[tj]
                tj = k
                calls_made += 1
                taken += in_call
                in_call = 0
                budget = min(prefetch, max_live - available - taken)
                if calls_made >= modules[i] or budget <= 0:
                    break
            next_t[j] = tj
            if got:
                pieces.append((j, got))
            if tj < end:
                break
            fetched_for[j] = q
            q += 1
        if in_call:
            calls_made += 1
        if pieces:
            gather(pieces, forward, calls_made)
        tl.wait(ready[i])

    for i, layer in enumerate(layers):
        fetch(i, i, True)
        tl.compute(s.fwd_s[i], f"{tag}fwd {layer.name}" if detail else "", "fwd")
        if distance[i] >= z.max_reuse_distance and fetched_for[i] < last_pos - i:
            available -= part_sum[i]
            next_t[i] = 0
    fire = buckets_by_layer(s.prep, z.reduce_bucket_size)
    op = "reduce_scatter" if z.reduce_scatter else "all_reduce"
    bucket_no = 0
    for i in range(nl - 1, -1, -1):
        fetch(i, last_pos - i, False)
        tl.compute(s.bwd_s[i], f"{tag}bwd {layers[i].name}" if detail else "", "bwd")
        available -= part_sum[i]
        next_t[i] = 0
        for numel in fire[i]:
            bucket_no += 1
            reduce(s, tl, op, numel, bucket_no, "backward", s.reduce_concurrent, boundary)
    tl.wait(tl.comm_free)


def post_step(s: StepSetup, tl: Timeline) -> None:
    """After the optimizer step stage 3 all-gathers every persistent parameter, trained or frozen (DeepSpeed
    0.19.8 runtime/zero/stage3.py:2565-2572 `_post_step`), through `_allgather_params_coalesced`, which despite
    its name launches one all_gather_into_tensor per parameter (partition_parameters.py:2038-2046). A LoRA job's
    adapters are persistent (each under `param_persistence_threshold`): on the CPU engine the step's gathers were
    exactly one per adapter and norm weight (data/evidence/lora_step.json)."""
    if s.n <= 1:
        return
    z = s.zero
    flat = [t for layer in s.layers for t in layer.tensors]
    sizes: dict[int, int] = {}
    for numel, kept in zip(flat, persistent_flags(flat, z.param_persistence_threshold, z.model_persistence_threshold), strict=True):
        if kept:
            sizes[numel] = sizes.get(numel, 0) + 1
    for numel, count in sorted(sizes.items()):
        nbytes = numel * s.elem_bytes
        label = f"all_gather persistent parameters x{count} ({fmt_bytes(nbytes)})" if tl.detail else ""
        tl.collective("all_gather", nbytes, s.cost.seconds("all_gather", nbytes), label, "step", concurrent=False, count=count)
