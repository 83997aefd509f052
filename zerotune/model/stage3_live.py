"""Live bytes of one stage-3 rank at the phase boundaries of a step (zerotune.model.live_bytes has the
terms and the stage 0-2 timeline; DeepSpeed 0.19.8, runtime/zero/stage3.py and
partitioned_param_coordinator.py).

- Between steps: the parameter partitions (`_create_fp16_partitions_with_defragmentation`: one flat
  `lp_param_buffer`) and the persistent tensors, the fp32 master partition (`_create_fp32_partitions`,
  a clone even for an fp32 model), the moments, the gradient partitions
  (`_setup_for_real_optimizer`: `grad_partitions_flat_buffer`, part elements in the accumulation
  dtype) and, with contiguous gradients, one `reduce_bucket_size` bucket in the communication dtype.
- Init, only for a model built outside `deepspeed.zero.Init`: the whole 16-bit model on the GPU once
  (`whole_model_at_init`), before it is partitioned.
- End of forward: the parameters still gathered (the whole model at the default
  `stage3_max_reuse_distance` of 1e9: a module is released only if its next use is further away;
  zerotune.model.memory_facts `gathered_elements`, which includes the prefetch issued ahead: its
  coalesced all-gather's flat buffer, `partition_parameters.py all_gather_coalesced`, is counted
  there once) and the activations. Measured on the engine (data/evidence/memory_engine.json, every
  stage-3 row): the end of forward is exactly the steady state, the gathered model and the
  activations, with no further all-gather in flight.
- Backward: the loss's backward (the activation peak), then the head's (its weight gradient), then
  with checkpointing the last block re-materialised (live_bytes `backward_start`); the gradients are
  reduce-scattered bucket by bucket into the partition buffer (`__reduce_and_partition_ipg_grads`),
  each module's parameters are released after its backward while the prefetcher keeps the max_live
  fill gathered or in flight for the modules ahead; at the end only the steady state is left.
- Step (`_prepare_fp32_grad_for_sub_group`): per sub-group of ≤ `sub_group_size` elements, the
  gradients are flattened (a new tensor, the model dtype) and cast to fp32 (a second one unless the
  model is fp32), then the optimizer updates (a torch optimizer's temporaries: live_bytes `_step`).
"""

from __future__ import annotations

from functools import lru_cache

from zerotune.model.live_bytes import (
    ACTIVATIONS,
    BUFFERS,
    GRADS,
    OPTIMIZER,
    PARAMS,
    Phase,
    StepInputs,
    Term,
    activations_left,
    backward_start,
    before_first_step,
    optimizer_temporaries,
    steady,
    with_host,
)

GLOO_THREADS = 2
"""Collectives a gloo process group runs at once: its worker threads, two by default
(`torch.distributed.ProcessGroupGloo._Options()._threads` is 2 at torch 2.13; ProcessGroupGloo.cpp)."""


@lru_cache(maxsize=4096)
def _between_steps(steady_terms: tuple[Term, ...], grad_buffer: int, bucket: int) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """(live between steps, live after init: no moments yet), on the numbers they read: the search's
    stage-3 grid varies the transient terms around a few of these."""
    base = steady_terms + (Term("gradient partition buffer", GRADS, grad_buffer), Term("reduce bucket", BUFFERS, bucket))
    return base, before_first_step(base)


@lru_cache(maxsize=8192)
def timeline_stage3(s: StepInputs) -> tuple[Phase, ...]:
    e, part = s.elem, s.part
    # under optimizer offload the gradient partitions live in pinned host memory (`self.device` is cpu)
    grad_buffer = 0 if s.offload else part * s.grad_accum_width
    base, init = _between_steps(steady(s), grad_buffer, s.bucket * s.comm_elem if s.contiguous else 0)
    gathered = Term("gathered parameters", PARAMS, s.gathered_bytes)
    fwd = Phase(
        "end of forward (gathered)",
        "forward",
        base + (gathered, Term("activations", ACTIVATIONS, s.acts.forward)),
    )
    # From step 2 on (complete trace) the forward starts with the whole fetchable model in flight
    # (memory_facts `first_fetch_elements`): flat buffers of every issued all-gather, plus the
    # parameters of the bucket being waited, copied out of its buffer while the buffer still lives
    # (partition_parameters.py `AllGatherCoalescedHandle.wait`: one `torch.cat` per parameter). The
    # copies of earlier buckets and the buffers of later ones partition the rest, so no gathered
    # parameter is counted twice. On gloo each running all-gather also fills a temporary of its
    # output's size (the `all_gather_into_tensor` copy of live_bytes' stage 1/2 step), and gloo runs
    # two collectives at once (torch ProcessGroupGloo's two worker threads).
    waited = min(s.prefetch_bytes, s.in_flight_bytes)
    first_fetch = Phase(
        "start of forward (all-gathers in flight)",
        "forward",
        base
        + (
            Term("all-gather buffers in flight", BUFFERS, s.in_flight_bytes),
            Term("gathered parameters", PARAMS, waited),
        )
        + ((Term("all-gather output (gloo)", BUFFERS, GLOO_THREADS * waited),) if s.gloo else ()),
    )
    # Each bucket flush reduce-scatters through `__avg_scatter_grads` (the default
    # `reduce_scatter: true`), whose `reduce_scatter_coalesced` (runtime/comm/coalesced_collectives.py)
    # interleaves the bucket's gradients into one new flat tensor of the bucket's elements in the
    # communication dtype; the partitions are copied out of it (`partition_grads`). On gloo,
    # `reduce_scatter_tensor` works on a copy of that input (measured on the engine: a second
    # allocation of the same size inside deepspeed/comm/torch.py `reduce_scatter_tensor`). The first
    # flush holds the end of the model, whose backward has freed its activations and released its
    # parameters; without contiguous gradients the bucket's gradients are separate tensors. The
    # prefetcher keeps issuing through backward as through forward (memory_facts `gathered_elements`):
    # besides what is still kept, up to the max_live fill (`in_flight_bytes`) is gathered or in flight
    # for the modules still ahead, none once the rest of the trace holds no more (a model smaller
    # than the bucket flushes once, at the end of backward, with nothing left to fetch).
    fill = min(s.bucket, s.psi)
    ahead = min(s.in_flight_bytes, max(s.psi - fill, 0) * e)
    left, _ = activations_left(s.acts.walk, fill)
    flush = (
        Term("flattened bucket (reduce-scatter)", BUFFERS, fill * s.comm_elem * (2 if s.gloo else 1)),
        Term("gathered parameters", PARAMS, max(s.gathered_bytes - fill * e, ahead)),
        Term("activations", ACTIVATIONS, left if fill < s.psi else 0),
    )
    if not s.contiguous:
        flush += (Term("bucket gradients", GRADS, fill * e),)
    reduce = Phase("bucket flush (reduce-scatter)", "backward", base + flush)
    # A gradient larger than the bucket is never copied into it (stage3.py:1626 copies only while the
    # bucket's elements plus the gradient's fit reduce_bucket_size): it stays its own tensor and the
    # next gradient's hook reduce-scatters it alone (stage3.py:1583), through a flattened copy of its
    # size. The largest tensor is the head (or embedding), reduced right after the head's backward,
    # which has released the head's parameters: what else is gathered then, or one prefetch bucket
    # issued by the next module's fetch.
    oversized = ()
    if s.contiguous and s.largest_tensor > s.bucket:
        big = s.largest_tensor
        oversized = (
            Phase(
                "flush of a gradient larger than the bucket",
                "backward",
                base
                + (
                    Term("gradient larger than the bucket", GRADS, big * e),
                    Term("flattened gradient (reduce-scatter)", BUFFERS, big * s.comm_elem * (2 if s.gloo else 1)),
                    Term("gathered parameters", PARAMS, max(s.gathered_bytes - big * e, min(s.prefetch_bytes, ahead))),
                    Term("activations", ACTIVATIONS, s.acts.after_head),
                ),
            ),
        )
    if s.offload:
        step = Phase("optimizer step", "step", base)
    else:
        flat = Term("flattened gradient sub-group", GRADS, s.step_elements * e)
        fp32 = Term("fp32 gradient copy", GRADS, s.step_elements * s.master_width)
        copy = (flat,) if e == s.master_width else (flat, fp32)
        temps = optimizer_temporaries(s, s.step_elements, s.step_elements)
        first = Phase("optimizer step (gradient copy)", "step", base + copy)
        second = Phase(
            "optimizer step (update)", "step", base + (fp32,) + ((Term("optimizer temporaries", OPTIMIZER, temps),) if temps else ())
        )
        step = first if first.total >= second.total else second
    # a model built outside zero.Init is on the GPU whole before any host buffer exists
    whole = () if s.zero_init else (whole_model_at_init(s.psi + s.frozen, e),)
    return whole + with_host(s, (
        Phase("after init", "init", init),
        *((first_fetch,) if s.in_flight_bytes else ()),
        fwd,
        *backward_start(s, base + (gathered,)),
        *oversized,
        reduce,
        Phase("end of backward", "backward", base),
        step,
        Phase("after step", "end", base),
    ))


def whole_model_at_init(psi: int, elem: int) -> Phase:
    """Stage 3 with a model built outside deepspeed.zero.Init: `deepspeed.initialize` casts it to the
    training dtype and moves it to the GPU whole (runtime/engine.py `_configure_distributed_model`:
    `self.module.to(self.device)` unless the parameters already carry `ds_id`), and only then partitions
    it parameter by parameter (parameter_offload.py `_convert_to_zero_parameters`), freeing each full
    tensor. So all Ψ 16-bit weights are live on one GPU once, before any optimizer state exists; the
    caching allocator keeps those blocks reserved after they are freed."""
    return Phase(
        "init: whole model on the GPU (no zero.Init)", "init", (Term("16-bit parameters, whole model", PARAMS, psi * elem),)
    )
