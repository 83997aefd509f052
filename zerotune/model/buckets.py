"""Stage 0/1/2 gradient reduction: buckets filled in backward and all-reduced (zerotune/model/comm.py
says what DeepSpeed 0.19.8 issues, and when).

- Stage 0: after the last backward the engine all-reduces every gradient in 5e8-element buffers,
  synchronously (`engine.buffered_allreduce_fallback`).
- Stage 2: every backward copies gradients into `reduce_bucket_size` buckets that are reduced as they
  fill (concurrent with backward under `overlap_comm` on a device with streams).
- Stage 1: only the boundary micro-step reduces: through the same hooks with `overlap_comm`, else
  after backward in parameter order on the training thread (`reduce_gradients`).

Stage 1 vs stage 2 at GA 1 (read in stage_1_and_2.py): both reduce every gradient once per step,
with the same bucket all-reduces (`use_multi_rank_bucket_allreduce`). What differs is where and how:
with `overlap_comm` both reduce inside backward; without it stage 2 still reduces inside backward
(on the compute stream) while stage 1 walks the parameters after backward (`reduce_gradients`), so
its per-parameter hook work cannot hide under queued GPU kernels; and the bucket copies follow the
knobs (`reduce` below). Stage 2 frees the other ranks' gradients after each bucket, stage 1 keeps
them (memory, not time). At GA > 1 stage 1 reduces once per step, stage 2 every micro-step.

The stage-3 reduce-scatter buckets fire at the same points and reuse `buckets_by_layer` and `reduce`.
"""

from __future__ import annotations

from zerotune.model.comm import fill_buckets
from zerotune.model.host_memory import fresh_write_s
from zerotune.model.live_bytes import STAGE0_ALLREDUCE_ELEMENTS
from zerotune.model.offload import gradient_copies_overlap, gradient_copy_s
from zerotune.model.setup import Prepared, StepSetup
from zerotune.model.timeline import Timeline
from zerotune.units import fmt_bytes

QGZ_BYTES_RATIO = 0.25
"""qgZ: 4-bit gradients instead of 16-bit in an all-to-all (Wang et al. 2023, ZeRO++ §3.3)."""


def buckets_by_layer(prep: Prepared, bucket_elements: int) -> tuple[tuple[int, ...], ...]:
    """Per layer (index), the bucket sizes (elements) that fire right after that layer's backward."""
    cached = prep.buckets.get(bucket_elements)
    if cached is not None:
        return cached
    fire: list[list[int]] = [[] for _ in prep.layers]
    for bucket in fill_buckets(prep.backward_tensors, bucket_elements):
        fire[prep.backward_layer[bucket.after]].append(bucket.numel)
    result = tuple(tuple(f) for f in fire)
    prep.buckets[bucket_elements] = result
    return result


def forward_order_buckets(prep: Prepared, bucket_elements: int) -> tuple[int, ...]:
    key = ("fwd-order", bucket_elements)
    cached = prep.buckets.get(key)
    if cached is None:
        order = tuple(reversed(prep.backward_tensors))
        cached = tuple(b.numel for b in fill_buckets(order, bucket_elements))
        prep.buckets[key] = cached
    return cached


def reduce(
    s: StepSetup, tl: Timeline, op: str, numel: int, k: int, phase: str, concurrent: bool, boundary: bool
) -> None:
    """One gradient reduction of `numel` elements in the communication dtype; under optimizer offload
    the rank's share is then copied over PCIe on the same stream (zerotune/model/offload.py).

    Around it, the bucket's gradients are copied at memory bandwidth (`s.copy_Bps`: GPU HBM, or the
    probed host memory bandwidth on a CPU host), in passes of the bucket, each a read or a write:
    into the contiguous bucket (2, `reduce_independent_p_g_buckets_and_remove_grads`); at stage 1/2
    with `reduce_scatter` the bucket's slices are then flattened and copied back around the
    all-reduce (4 more, `allreduce_and_scatter` -> `allreduce_bucket`); without contiguous gradients,
    and at stage 0 (`engine.allreduce_bucket`), only that flatten and copy-back (4); at stage 3 the
    coalesced reduce-scatter flattens its input (2 more).

    Each flatten is a new tensor of the bucket's size: on a CPU host, above glibc's mmap threshold,
    fresh pages written whole (zerotune/model/host_memory.py)."""
    contiguous = s.zero.contiguous_gradients and s.stage > 0
    width = s.comm_bytes if s.stage == 3 else s.elem_bytes  # the stage-3 bucket is in the comm dtype
    if s.copy_Bps:
        if not contiguous or s.stage == 3:
            passes = 4
        else:
            passes = 6 if s.zero.reduce_scatter else 2
        tl.compute(passes * numel * width / s.copy_Bps, f"copy bucket {k}" if tl.detail else "", "copy")
    if s.first_touch_Bps and (not contiguous or s.stage == 3 or s.zero.reduce_scatter):
        fresh = fresh_write_s(numel * width, numel * width, s.first_touch_Bps)
        if fresh:
            tl.compute(fresh, f"first touch of flattened bucket {k}" if tl.detail else "", "copy")
    nbytes = numel * s.comm_bytes
    if op == "reduce_scatter" and s.zero.zero_quantized_gradients and s.nodes > 1:
        op, nbytes = "all_to_all", nbytes * QGZ_BYTES_RATIO
    seconds = s.cost.seconds(op, nbytes)  # type: ignore[arg-type]
    label = f"{op} bucket {k} ({fmt_bytes(nbytes)})" if tl.detail else ""
    tl.collective(op, nbytes, seconds, label, phase, concurrent=concurrent)
    if s.offload_grads:
        copy = gradient_copy_s(s, numel, boundary)
        tl.copy(
            copy,
            f"offload gradients of bucket {k}" if tl.detail else "",
            concurrent=concurrent and gradient_copies_overlap(s),
        )


def fresh_buffers(s: StepSetup, tl: Timeline, sizes: tuple[int, ...]) -> None:
    """Stage 1/2 with contiguous gradients, in a backward that reduces (bucket `sizes`, in firing
    order): the buffers DeepSpeed allocates anew for it (stage_1_and_2.py), priced by first touch
    on a CPU host (zerotune/model/host_memory.py; nothing on a GPU).

    - `setup_buckets`: one `reduce_bucket_size` staging buffer, two with `overlap_comm`, which then
      alternate bucket by bucket (`reduce_independent_p_g_buckets_and_remove_grads`): each is
      written up to its largest bucket (a gradient larger than `reduce_bucket_size` bypasses them);
    - `copy_grads_in_partition`: `grads_in_partition`, the rank's gradient partition, written whole.
    Both are dropped by `_release_ipg_buffers` at the end of the backward."""
    rate = s.first_touch_Bps
    if not rate or not sizes:
        return
    width = s.elem_bytes
    buffer = s.zero.reduce_bucket_size * width
    # a gradient larger than the bucket bypasses the staging buffer (reduced on its own)
    staged = tuple(numel if numel <= s.zero.reduce_bucket_size else 0 for numel in sizes)
    groups = (staged[0::2], staged[1::2]) if s.zero.overlap_comm else (staged,)
    seconds = sum(fresh_write_s(buffer, max(g) * width, rate) for g in groups if g)
    partition = s.prep.params // s.n * s.elem_bytes  # allocated in the model dtype
    seconds += fresh_write_s(partition, partition, rate)
    if seconds:
        tl.compute(seconds, "first touch of fresh gradient buffers" if tl.detail else "", "copy")


def micro_step(s: StepSetup, tl: Timeline, boundary: bool, tag: str) -> None:
    """One forward + backward below stage 3 (or stage 3 on one rank); reductions as DeepSpeed issues them."""
    layers, z, n = s.layers, s.zero, s.n
    detail = tl.detail

    # ---- forward: no collectives below stage 3
    if detail:
        for i, layer in enumerate(layers):
            tl.compute(s.fwd_s[i], f"{tag}fwd {layer.name}", "fwd")
    else:
        tl.compute(s.fwd_total, "", "fwd")

    # ---- backward (reverse order); gradient buckets fire as they fill
    hooks = n > 1 and (s.stage == 2 or (s.stage == 1 and boundary and z.overlap_comm))
    if not hooks:
        if detail:
            for i in range(len(layers) - 1, -1, -1):
                tl.compute(s.bwd_s[i], f"{tag}bwd {layers[i].name}", "bwd")
        else:
            tl.compute(s.bwd_total, "", "bwd")
    else:
        fire = buckets_by_layer(s.prep, z.reduce_bucket_size)
        if z.contiguous_gradients:
            fresh_buffers(s, tl, tuple(numel for sizes in fire[::-1] for numel in sizes))
        bucket_no = 0
        pending = 0.0
        for i in range(len(layers) - 1, -1, -1):
            if detail:
                tl.compute(s.bwd_s[i], f"{tag}bwd {layers[i].name}", "bwd")
            else:
                pending += s.bwd_s[i]
            if fire[i]:
                if pending:
                    tl.compute(pending, "", "bwd")
                    pending = 0.0
                for numel in fire[i]:
                    bucket_no += 1
                    reduce(s, tl, "all_reduce", numel, bucket_no, "backward", s.reduce_concurrent, boundary)
        if pending:
            tl.compute(pending, "", "bwd")
    tl.wait(tl.comm_free)  # the epilogue synchronizes the reduction stream

    if boundary and s.stage == 1 and not z.overlap_comm:
        # reduce_gradients walks the parameters after backward, on the training thread
        tl.host(
            sum(s.overheads.grad_hook_s), "gradient hooks (reduce_gradients)" if detail else "", "overhead"
        )
    if n <= 1 or not boundary:
        return
    if s.stage == 0:
        total, k = s.prep.params, 0
        while total > 0:
            chunk = min(total, STAGE0_ALLREDUCE_ELEMENTS)
            k += 1
            reduce(s, tl, "all_reduce", chunk, k, "step", False, boundary)
            total -= chunk
    elif s.stage == 1 and not z.overlap_comm:
        # reduce_gradients: parameters in model order, bucketed, on the training thread
        order = forward_order_buckets(s.prep, z.reduce_bucket_size)
        if z.contiguous_gradients:
            fresh_buffers(s, tl, order)
        for k, numel in enumerate(order, 1):
            reduce(s, tl, "all_reduce", numel, k, "step", False, boundary)
