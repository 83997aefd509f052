"""Live bytes of one rank at the phase boundaries of a training step; the peak is their maximum.

Summing each term's own maximum over-estimates the peak: activations peak at the start of backward,
gradients and buckets at the end of autograd, and the reduce and optimizer copies exist only after
the tensors they replace are freed. So this module lists what is live at each boundary, in the order
DeepSpeed 0.19.8 allocates and frees it, and `peak` takes the largest. Every formula below was read
in DeepSpeed's source (file and function named at the term) and checked on a real engine
(scripts/evidence/memory_engine.py; data/evidence/memory_engine.json).

Terms (bytes of one rank; e = model dtype, Ψ parameters, part = ⌈Ψ/N_d⌉, R = reduce_bucket_size):

- S, the steady state between steps: parameters, fp32 master partition, optimizer moments, and at
  stage 3 the gradient partition buffer (`grad_partitions_flat_buffer`) and the contiguous bucket;
- the start of backward (`backward_start`): autograd's first nodes one at a time, the loss's buffers,
  then the head's weight gradient, then the recomputed last block, never the three together;
- stage 0 (deepspeed/runtime/engine.py `allreduce_gradients` -> `buffered_allreduce_fallback` ->
  `allreduce_bucket`): after autograd, all Ψ gradients plus a flattened copy of ≤ 5e8 elements of them;
- stage 1/2 (runtime/zero/stage_1_and_2.py): `setup_buckets` allocates the R-element bucket (two
  with `overlap_comm`) at the first gradient hook; `reduce_independent_p_g_buckets_and_remove_grads`
  copies each gradient into it and repoints `param.grad` there, freeing the full gradient; a flush
  (`reduce_ipg_grads` -> `copy_grads_in_partition`) allocates `grads_in_partition`, the rank's
  partition (part·e), at the first bucket holding one of its parameters. Stage 1 without
  `overlap_comm` reduces after backward (`reduce_gradients`, forward order): every full gradient is
  live until it is copied into the bucket, and the partition buffer is allocated only after the first
  R of them are gone. Stage 2 frees the other ranks' gradients after each flush; stage 1 keeps them
  (viewing the bucket) until the epilogue (`_clear_param_grad_only`). With `reduce_scatter` each
  flush flattens the bucket's slices into a new tensor (`average_tensor` -> `allreduce_and_scatter`
  -> `allreduce_bucket`), freed before `grads_in_partition` is allocated: the copy meets the
  partition buffer from the second flush on. Without contiguous gradients no bucket buffer exists:
  the flush flattens the bucket (≤ min(R, Ψ) elements, `allreduce_bucket`);
- the step (stage_1_and_2.py `step`; stage3.py `_prepare_fp32_grad_for_sub_group`): the partition's
  gradients are flattened into a new tensor (part elements, model dtype) and cast to fp32 (a second
  tensor unless the model is fp32; stage 3 per sub-group), next to the gradients it copies; those are
  freed before the optimizer runs. A torch optimizer then makes two temporaries of the tensor it
  steps (torch.optim.adamw `_single_tensor_adamw`: exp_avg_sq.sqrt() and its quotient), one flat
  partition at stage 1-3; DeepSpeed's fused/CPU Adam makes none;
- on CUDA, from the first forward on: one cuBLAS workspace per thread that runs matmuls
  (`CUBLAS_WORKSPACES`, `cublas_workspace_bytes`), through the caching allocator;
- accumulation: stage 1 keeps the full Ψ gradients across micro-steps; stage 2 keeps the partition's
  averaged gradients (part·e) from the previous micro-step while the next backward allocates a fresh
  `grads_in_partition` (`independent_gradient_partition_epilogue`: `averaged_gradients` still holds
  the old buffer until it is summed into).

Stage 3 is in zerotune.model.stage3_live (gathered parameters, in-flight all-gather).
"""

from __future__ import annotations

from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import NamedTuple

from zerotune.model.memory_facts import ActivationPhases

PARAMS, GRADS, OPTIMIZER, BUFFERS, ACTIVATIONS = "params", "gradients", "optimizer_states", "comm_buffers", "activations"
OVERHEAD = "overhead"
"""The MemoryBreakdown field each live term lands in (OVERHEAD: the framework's own allocations)."""


class Term(NamedTuple):
    label: str
    kind: str
    """one of PARAMS, GRADS, OPTIMIZER, BUFFERS, ACTIVATIONS, OVERHEAD"""
    nbytes: int


_nbytes = itemgetter(2)
_total = attrgetter("total")
"""Term.nbytes, as a function (sums over terms run in C)"""


class Phase:
    """What is live at one boundary of the step (immutable once its timeline is built: `with_host` fills
    in the host terms of the phases it is given, still unshared; hashes by identity: each is made once per
    cached timeline, and the search compares thousands of them)."""

    __slots__ = ("name", "group", "terms", "total", "host", "host_total")

    def __init__(self, name: str, group: str, terms: tuple[Term, ...], host: tuple[Term, ...] = ()) -> None:
        self.name = name
        self.group = group
        """init, forward, backward, step or end: the interval `zerotune bench` measures it in"""
        self.terms = terms
        self.total = sum(map(_nbytes, terms))
        """live bytes on the device"""
        self.host = host
        """what the rank holds in host memory then (optimizer offload)"""
        self.host_total = sum(map(_nbytes, host)) if host else 0

    def __repr__(self) -> str:
        return f"Phase({self.name!r}, {self.total})"

    def by_kind(self, kind: str) -> int:
        return _kinds(self).get(kind, 0)

    def kinds(self) -> dict[str, int]:
        """Live bytes per MemoryBreakdown field (`by_kind` of each at once)."""
        return _kinds(self)

    def terms_named(self, label: str) -> int:
        return sum(t.nbytes for t in self.terms if t.label == label)


class StepInputs(NamedTuple):
    """Everything the timeline needs, in bytes (or elements where named so) for one rank. A NamedTuple:
    the timelines are cached on it, and a tuple hashes and compares in C (a frozen dataclass builds a
    tuple of its fields in Python at every lookup)."""

    stage: int
    elem: int
    """model dtype bytes"""
    comm_elem: int
    """communication dtype bytes (the model's unless communication_data_type says otherwise)"""
    psi: int
    part: int
    """elements of this rank's partition"""
    params: int
    """parameter bytes on the device between steps (stage 3: partitions + persistent + hpZ)"""
    master: int
    moments: int
    master_width: int
    grad_accum_width: int
    largest_tensor: int
    """elements"""
    bucket: int
    """reduce_bucket_size, elements"""
    contiguous: bool
    overlap: bool
    grad_accum: int
    acts: ActivationPhases
    """activation bytes at the end of forward, the start of backward, and how backward frees them"""
    torch_optimizer: bool
    step_elements: int
    """elements the optimizer steps at once (stage 3: a sub-group)"""
    offload: bool
    gathered_bytes: int = 0
    """stage 3: gathered parameters at the end of forward"""
    prefetch_bytes: int = 0
    """stage 3: prefetch_bucket_size elements in the model dtype"""
    in_flight_bytes: int = 0
    """stage 3: parameter bytes all-gathered but not yet waited at the start of a traced forward
    (zerotune.model.memory_facts `first_fetch_elements`)"""
    gloo: bool = False
    """collectives run on gloo (CPU ranks), whose reduce-scatter copies its input"""
    host_init: int = 0
    """optimizer offload: host bytes from `deepspeed.initialize` on (zerotune.model.states `offload_host_timeline`)"""
    host_moments: int = 0
    """optimizer offload: the optimizer's moments, created on the host at the first step"""
    host_accum: int = 0
    """optimizer offload: host gradient accumulators, from the first accumulating backward on"""
    host_step: int = 0
    """optimizer offload: host temporaries of the step"""
    reduce_scatter: bool = True
    """stage 1/2: `reduce_scatter` (a flush flattens the bucket's slices into a new tensor; without
    it the bucket is all-reduced in place)"""
    zero_init: bool = True
    """stage 3: the model is built under deepspeed.zero.Init (else it is on the GPU whole once at init)"""
    frozen: int = 0
    """elements without requires_grad (a LoRA job's base): parameters that get no gradient; `psi` counts
    the trainable ones"""
    foreach: bool = False
    """the torch optimizer runs torch's multi-tensor (foreach) implementation (`optimizer_temporaries`)"""
    blas_workspaces: int = 0
    """bytes of the cuBLAS workspaces live from the first forward on (CUDA ranks; `cublas_workspace_bytes`)"""
    held_logits: int = 0
    """bytes of the logits the training loop keeps from the first forward on (Workload.logits_held)"""


def with_host(s: StepInputs, phases: tuple[Phase, ...]) -> tuple[Phase, ...]:
    """The phases with what the rank holds in host memory at each (optimizer offload): the buffers
    `deepspeed.initialize` makes, the moments from the first step on (the steady state, as on the
    device), the accumulators and the step's temporaries."""
    if not s.offload:
        return phases
    by_group, other = _host_terms(s.host_init, s.host_moments, s.host_accum, s.host_step)
    # The phases were made by the caller for this timeline and are not shared yet: completing them
    # in place costs two attributes each, where copies would sum their device terms again.
    for p in phases:
        p.host, p.host_total = by_group.get(p.group, other)
    return phases


@lru_cache(maxsize=1024)
def _host_terms(init_bytes: int, moments: int, accum: int, temporaries: int) -> tuple[dict, tuple]:
    """({"init"/"step": (host terms, their bytes)}, (terms, bytes) of the other phases), on the four
    numbers they read: the search's offload timelines share a few."""
    init = (_t("offloaded optimizer buffers", OPTIMIZER, init_bytes),)
    steady = init + (_t("optimizer moments", OPTIMIZER, moments),)
    if accum:
        steady += (_t("gradient accumulators", GRADS, accum),)
    step = steady + ((_t("step temporaries", OPTIMIZER, temporaries),) if temporaries else ())
    by_group = {group: (host, sum(map(_nbytes, host))) for group, host in (("init", init), ("step", step))}
    return by_group, (steady, sum(map(_nbytes, steady)))


def _t(label: str, kind: str, nbytes: int) -> Term:
    return Term(label, kind, int(nbytes))


def steady(s: StepInputs) -> tuple[Term, ...]:
    # the device-side staging buffer of the largest parameter, made at init
    # (stage_1_and_2.py __init__ `temp_grad_buffer_for_gpu_offload`)
    staging = s.largest_tensor * s.elem if s.offload and s.stage in (1, 2) else None
    return _steady(s.params, staging, s.master, s.moments, s.blas_workspaces, s.held_logits)


@lru_cache(maxsize=4096)
def _steady(params: int, staging: int | None, master: int, moments: int, blas: int, held: int = 0) -> tuple[Term, ...]:
    """`steady` on the numbers it reads: the search's thousands of timelines share a few steady
    states (the knobs it varies move the step's transient terms, not these)."""
    terms = [_t("parameters", PARAMS, params)]
    if staging is not None:
        terms.append(_t("offload staging buffer", BUFFERS, staging))
    if master:
        terms.append(_t("master weights", OPTIMIZER, master))
    if moments:
        terms.append(_t("optimizer moments", OPTIMIZER, moments))
    if blas:
        terms.append(_t(BLAS_WORKSPACES, OVERHEAD, blas))
    if held:
        # A loop that keeps `outputs` holds the last forward's logits through its backward and step,
        # and into the next forward until the model returns the new ones: live at every phase from
        # the first forward on, as one copy (the new logits replace the old only when assigned).
        terms.append(_t(HELD_LOGITS, ACTIVATIONS, held))
    return tuple(terms)


def before_first_step(base: tuple[Term, ...], *, keep_moments: bool = False) -> tuple[Term, ...]:
    """What of the steady state `deepspeed.initialize` has made: no matmul has run yet (no cuBLAS
    workspace), and the optimizer makes its moments at its first step unless `keep_moments` (the
    16-bit wrappers that initialise them at init)."""
    gone = (BLAS_WORKSPACES, HELD_LOGITS) if keep_moments else (BLAS_WORKSPACES, HELD_LOGITS, "optimizer moments")
    return tuple(t for t in base if t.label not in gone)


BLAS_WORKSPACES = "cuBLAS workspaces"
HELD_LOGITS = "logits the training loop keeps"

CUBLAS_WORKSPACES = 2
"""Threads that run matmuls in a training step: the Python thread (forward) and the autograd engine's
worker thread of the device (backward, and the recomputation of checkpointed blocks inside it:
torch/csrc/autograd/engine.cpp runs a CUDA device's backward on its own thread). cuBLAS handles are
per thread (aten/src/ATen/cuda/CublasHandlePool.cpp `getCurrentCUDABlasHandle`: a thread-local
PoolWindow reserves one) and torch keys each workspace on (handle, stream), so a step on one stream
holds two. Measured: every H200 bench (data/gpu/2026-11-28-NVIDIA-H200, torch 2.11) allocated exactly
2 x 32 MiB (+ <= 20 KiB; one run + 4 MiB) beyond the step's tensors (tests/unit/test_gpu_memory.py).
The rest is the allocator's: the allocated count is each block's size, a request rounded up to 512 B,
and a cached large block reused for a request within 1 MiB of its size is not split, so all of it
counts (c10/cuda/CUDACachingAllocator.cpp `round_size`, `should_split`: remaining > kSmallSize)."""


def cublas_workspace_bytes(compute_capability: str | None) -> int:
    """One cuBLAS workspace, allocated through PyTorch's caching allocator (so counted by
    torch.cuda.memory_allocated) at a handle's first matmul on a stream and kept for the process:
    32 MiB from Hopper on, else `:4096:2:16:8` = 2 x 4096 KiB + 8 x 16 KiB (torch
    aten/src/ATen/cuda/CublasHandlePool.cpp `parseChosenWorkspaceSize`, v2.11.0:
    https://github.com/pytorch/pytorch/blob/v2.11.0/aten/src/ATen/cuda/CublasHandlePool.cpp; the
    CUBLAS_WORKSPACE_CONFIG variable overrides it). An unknown GPU takes the larger."""
    try:
        major = int((compute_capability or "9").split(".")[0])
    except ValueError:
        major = 9
    return 32 * 1024 * 1024 if major >= 9 else (2 * 4096 + 8 * 16) * 1024


def optimizer_temporaries(s: StepInputs, stepped: int, largest: int) -> int:
    """Bytes a torch Adam/AdamW makes while it updates `stepped` elements whose largest tensor holds
    `largest` (0 for DeepSpeed's fused and CPU Adam, which update in their kernels). torch picks the
    implementation by device (torch/optim/optimizer.py `_default_to_fused_or_foreach`: foreach when
    every tensor is on CUDA, never fused by default; "we default to foreach", torch.optim.AdamW's docs:
    https://docs.pytorch.org/docs/stable/generated/torch.optim.AdamW.html):
    - single-tensor (CPU; torch/optim/adam.py `_single_tensor_adam`): one tensor at a time,
      `exp_avg_sq.sqrt()` and its quotient by the bias correction live together: two of the largest
      (measured on the CPU engine, data/evidence/memory_engine.json);
    - multi-tensor (CUDA; `_multi_tensor_adam`): `torch._foreach_sqrt(exp_avg_sqs)` makes one
      tensor for every tensor of the group at once, then divides and adds to them in place: one of
      all the elements stepped (measured on the CPU engine with `foreach: true`, the same rows, and
      on the H200 benches: tests/unit/test_gpu_memory.py)."""
    if not s.torch_optimizer:
        return 0
    return (stepped if s.foreach else 2 * largest) * s.master_width


@lru_cache(maxsize=4096)
def activations_left(walk: tuple[tuple[int, int], ...], reduced: int) -> tuple[int, int]:
    """(activation bytes still live, largest tensor elements of the layer in progress) once backward has
    produced `reduced` gradient elements: the layers whose backward finished have freed theirs."""
    done = 0
    left = sum(a for _, a in walk)
    for elements, acts in walk:
        if done + elements >= reduced:
            return left, elements
        done += elements
        left -= acts
    return left, 0


def backward_start(s: StepInputs, live: tuple[Term, ...]) -> tuple[Phase, ...]:
    """The first nodes of backward, one at a time (memory_facts.ActivationPhases): the loss's backward
    (the activation peak), the head's (its weight gradient, the first parameter gradient, next to the
    gradient of the logits) and, with checkpointing, the last block re-materialised while that
    gradient waits in its bucket. `live`: what else is live throughout."""
    grad = _t("first gradient", GRADS, s.largest_tensor * s.elem)
    phases = [
        Phase("start of backward", "backward", live + (_t("activations", ACTIVATIONS, s.acts.backward),)),
        Phase("head backward (weight gradient)", "backward", live + (_t("activations", ACTIVATIONS, s.acts.head), grad)),
    ]
    if s.acts.recompute:
        phases.append(
            Phase("last block recomputed", "backward", live + (_t("activations", ACTIVATIONS, s.acts.recompute), grad))
        )
    return tuple(phases)


@lru_cache(maxsize=8192)
def timeline_below_stage3(s: StepInputs) -> tuple[Phase, ...]:
    """Phases of a stage 0/1/2 step (module docstring)."""
    return with_host(s, _device_phases(s))


def _device_phases(s: StepInputs) -> tuple[Phase, ...]:
    base = steady(s)
    e, part, psi = s.elem, s.part, s.psi
    if s.stage == 1 and s.grad_accum_width > e == 2 and not s.offload:
        base += (_t("fp32 gradient accumulator", GRADS, psi * s.grad_accum_width),)
    # the fp16/bf16 wrappers create the moments at init (`initialize_optimizer_states`)
    init = before_first_step(base, keep_moments=s.stage == 0 and e != s.master_width)
    carried: tuple[Term, ...] = ()
    buffers = min(s.bucket, psi) if not s.contiguous else s.bucket * (2 if s.overlap else 1)
    bucket_term = _t("reduce bucket" + ("s" if s.contiguous and s.overlap else ""), BUFFERS, buffers * e)
    if s.grad_accum > 1 and not s.offload:
        if s.stage == 1 or s.stage == 0:
            carried = (_t("gradients accumulated over micro-steps", GRADS, psi * s.grad_accum_width),)
        else:
            carried = (_t("previous micro-step's gradient partition", GRADS, part * e),)
        if s.stage == 1 and s.contiguous:
            # the first micro-step's gradient hook set the bucket up (`process_gradients` ->
            # `setup_buckets`); only the boundary's epilogue releases it (`_release_ipg_buffers`)
            carried += (_t("reduce bucket set up by the first micro-step", BUFFERS, buffers * e),)
    fwd = Phase("end of forward", "forward", base + carried + (_t("activations", ACTIVATIONS, s.acts.forward),))
    phases = [Phase("after init", "init", init), fwd, *backward_start(s, base + carried)]
    if s.stage == 1 and s.grad_accum_width > e == 2 and not s.offload:
        return _bf16_optimizer(s, phases)
    if s.stage < 2:
        carried = ()  # the accumulated full gradients and the bucket are the ones counted below
    if s.stage == 0:
        flat = min(psi, STAGE0_ALLREDUCE_ELEMENTS)
        grads = _t("gradients", GRADS, psi * e)
        phases.append(Phase("all-reduce (flattened gradients)", "backward", base + (grads, _t("flattened bucket", BUFFERS, flat * e))))
        phases.append(Phase("end of backward", "backward", base + (grads,)))
        phases.append(_stage0_step(s, base, grads))
        phases.append(Phase("after step", "end", base))
        return tuple(phases)
    gip = _t("grads_in_partition", GRADS, part * e)
    if s.offload:
        gip = _t("offload staging buffer", BUFFERS, 0)  # in `base` from init on (steady)
    reduce_in_backward = s.stage == 2 or s.overlap
    if reduce_in_backward:
        # first flush that holds the fullest rank's partition: the last rank owns the end of the
        # model, which backward reduces first. A flush first flattens the bucket's gradient slices
        # into a new tensor (stage_1_and_2.py `average_tensor` -> `allreduce_and_scatter` ->
        # `allreduce_and_copy_with_multiple_ranks` -> `allreduce_bucket`: `self.flatten(bucket)`),
        # freed once the reduced values are copied back; only then does `copy_grads_in_partition`
        # allocate `grads_in_partition`, so the copy meets the partition buffer from the second
        # flush on (traced on the engine, s2-ga2 rank 1: the 191 MB copy of a 50M-element bucket
        # holding 47.8M, with the 286 MB partition buffer and the bucket, set the backward peak).
        first = min(s.bucket, psi)
        second = min(s.bucket, psi - first)
        left, current = activations_left(s.acts.walk, first)
        flat = s.reduce_scatter and s.contiguous
        if s.contiguous:
            # the first gradient hook sets the bucket(s) up (stage_1_and_2.py:1758-1761 `process_gradients`
            # -> `setup_buckets`, :2493-2514): the layer whose backward makes the first gradient still has
            # its activations, and so has every layer before it
            phases.append(
                Phase(
                    "first gradient (buckets set up)",
                    "backward",
                    base + carried + (
                        _t("activations", ACTIVATIONS, activations_left(s.acts.walk, 1)[0]),
                        bucket_term,
                        _t("first gradient", GRADS, s.largest_tensor * e),
                    ),
                )
            )
        if flat:
            phases.append(
                Phase(
                    "first bucket flush (flattened copy)",
                    "backward",
                    base + carried + (
                        _t("activations", ACTIVATIONS, left),
                        bucket_term,
                        _t("flattened bucket", BUFFERS, first * e),
                    ),
                )
            )
        phases.append(
            Phase(
                "first bucket flush",
                "backward",
                base + carried + (
                    _t("activations", ACTIVATIONS, left),
                    bucket_term,
                    gip,
                    _t("gradient being copied", GRADS, min(current, s.largest_tensor) * e),
                ),
            )
        )
        if flat and second > 0:
            phases.append(
                Phase(
                    "second bucket flush (flattened copy)",
                    "backward",
                    base + carried + (
                        _t("activations", ACTIVATIONS, activations_left(s.acts.walk, first + second)[0]),
                        bucket_term,
                        gip,
                        _t("flattened bucket", BUFFERS, second * e),
                    ),
                )
            )
        end_grads: tuple[Term, ...] = (gip,)
        phases.append(Phase("end of autograd", "backward", base + carried + (bucket_term, gip)))
    else:
        # stage 1 without overlap: reduce_gradients after backward, in forward order; rank 0's
        # partition is the first one copied
        phases.append(Phase("end of autograd", "backward", base + carried + (_t("gradients", GRADS, psi * e),)))
        phases.append(Phase("reduce (first bucket)", "backward", base + (_t("gradients", GRADS, psi * e), bucket_term)))
        rest = max(psi - min(s.bucket, psi), 0)
        phases.append(
            Phase("reduce (partition copy)", "backward", base + (_t("gradients not yet reduced", GRADS, rest * e), bucket_term, gip))
        )
        end_grads = (gip,)
    # After the update every rank all-gathers the updated 16-bit partitions into the flat parameter
    # groups (stage_1_and_2.py `step` -> runtime/utils.py `all_gather_dp_groups`); in place on
    # NCCL, while gloo's `all_gather_into_tensor` fills a temporary of the output's size first
    # (measured on the engine: the s2-offload step peak is exactly this on top of the steady state).
    gathered = (_t("all-gather output (gloo)", BUFFERS, psi * e),) if s.gloo else ()
    if s.offload:
        # the update runs on the host (DeepSpeedCPUAdam); the bucket is gone by then (measured:
        # data/evidence/memory_engine.json s2-offload, whose step and after-step live bytes are the
        # steady state plus gloo's all-gather temporary; an earlier harness that missed frees on
        # gloo's worker threads had counted the bucket as kept)
        phases.append(Phase("optimizer step (on the host)", "step", base))
        phases.append(Phase("all-gather updated parameters", "step", base + gathered))
        phases.append(Phase("after step", "end", base))
        return tuple(phases)
    phases.append(_step(s, base, end_grads, part, s.step_elements, flatten=True))
    if gathered:
        phases.append(Phase("all-gather updated parameters", "step", base + gathered))
    phases.append(Phase("after step", "end", base))
    return tuple(phases)


def _stage0_step(s: StepInputs, base: tuple[Term, ...], grads: Term) -> Phase:
    """Stage 0. fp32 steps the gradients in place. A 16-bit model steps through DeepSpeed's
    mixed-precision wrapper (runtime/engine.py `_configure_fp16_optimizer`): with DeepSpeed's fused
    Adam, FP16_Optimizer flattens the gradients and casts them to fp32 (fp16/fused_optimizer.py
    `step`, one flat fp32 group); with a torch optimizer, FP16_UnfusedOptimizer casts each gradient
    to an fp32 copy (fp16/unfused_optimizer.py `step`), and the optimizer steps the fp32 copies of all
    the tensors, its temporaries over all of them on CUDA (`optimizer_temporaries`)."""
    e, psi = s.elem, s.psi
    temps = optimizer_temporaries(s, psi, s.largest_tensor)
    temp = (_t("optimizer temporaries", OPTIMIZER, temps),) if temps else ()
    if e == s.master_width:
        return Phase("optimizer step", "step", base + (grads,) + temp)
    fp32 = _t("fp32 gradient copy", GRADS, psi * s.master_width)
    if s.torch_optimizer:
        return Phase("optimizer step", "step", base + (grads, fp32) + temp)
    flat = _t("flattened gradients", GRADS, psi * e)
    return Phase("optimizer step (gradient copy)", "step", base + (grads, flat, fp32))


def _bf16_optimizer(s: StepInputs, phases: list[Phase]) -> tuple[Phase, ...]:
    """Stage 1, bf16 with an fp32 `grad_accum_dtype`: the engine runs BF16_Optimizer
    (runtime/engine.py `_do_optimizer_sanity_check`), whose full-model fp32 gradient accumulator
    (bf16_optimizer.py `fp32_groups_gradients_flat`, allocated at init) replaces the buckets and
    grads_in_partition; the optimizer steps on its partition in place."""
    base = phases[0].terms + tuple(t for t in steady(s) if t.label in ("optimizer moments", BLAS_WORKSPACES))
    temps = optimizer_temporaries(s, s.part, s.part)
    step = base + ((_t("optimizer temporaries", OPTIMIZER, temps),) if temps else ())
    return (*phases, Phase("optimizer step", "step", step), Phase("after step", "end", base))


def _step(
    s: StepInputs, base: tuple[Term, ...], grads: tuple[Term, ...], elements: int, stepped: int, *, flatten: bool
) -> Phase:
    """The optimizer step. Stage 0 steps the gradients in place (plus the update's temporaries); ZeRO
    first flattens the partition's gradients and casts them to fp32 next to the gradients, frees
    those, then updates: the larger of the two moments."""
    temps = optimizer_temporaries(s, stepped, stepped)
    temp = (_t("optimizer temporaries", OPTIMIZER, temps),) if temps else ()
    if not flatten:
        return Phase("optimizer step", "step", base + grads + temp)
    copy = [_t("flattened gradient partition", GRADS, elements * s.elem)]
    if s.elem != s.master_width:
        copy.append(_t("fp32 gradient copy", GRADS, elements * s.master_width))
    fp32 = _t("fp32 gradient copy", GRADS, elements * s.master_width)
    first = Phase("optimizer step (gradient copy)", "step", base + grads + tuple(copy))
    second = Phase("optimizer step (update)", "step", base + (fp32,) + temp)
    return first if first.total >= second.total else second


STAGE0_ALLREDUCE_ELEMENTS = 500_000_000
"""Without ZeRO the engine all-reduces gradients in flattened buckets of this many elements
(DeepSpeed 0.19.8 runtime/engine.py:151 MEMORY_OPT_ALLREDUCE_SIZE, the default bucket_size of
`allreduce_gradients`, engine.py:3073)."""


@lru_cache(maxsize=8192)
def _kinds(phase: Phase) -> dict[str, int]:
    """Live bytes per MemoryBreakdown field (phases are made once per cached timeline: identity hash)."""
    out: dict[str, int] = {}
    for t in phase.terms:
        out[t.kind] = out.get(t.kind, 0) + t.nbytes
    return out


def peak(phases: tuple[Phase, ...]) -> Phase:
    return max(phases, key=_total)
