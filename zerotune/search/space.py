"""The candidate space: every knob of a ZeRO configuration the search tries, on grids refined
around the model's layer sizes and the hardware's measured bandwidth curve.

A `Candidate` is one point: stage x offload x batch split x activation checkpointing x the
communication knobs. Grids are small, log-spaced and anchored on evidence:

- bucket sizes (reduce, stage-3 prefetch) around 1/2..4 transformer blocks' worth of elements
  (seed 000, "Rule of Thumb for Bucket Sizing": ~2-3 layers' worth fires early enough to overlap
  and is still large enough to saturate the link), plus the smallest message that reaches 90% of
  the link's peak bus bandwidth (from the profile's curve or alpha-beta pair);
- persistence thresholds at the distinct small tensor sizes of a block (norm weights, biases),
  so each grid point changes which tensors are gathered;
- micro-batch x gradient accumulation for a target number of tokens per optimizer step
  (--global-batch-tokens, default 2**21 ~ 2.1M tokens: seed 002 and the Llama/Chinchilla-era
  recipes train at 1-4M tokens per step).

The enumeration is deterministic: grids are sorted tuples, candidates come out in a fixed order.
Pure Python (no torch): the search evaluates tens of thousands of these per second.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, fields
from functools import cached_property

from zerotune.collectives import busbw_factor, interpolate_busbw
from zerotune.dsconfig.settings import (
    DS_ALLGATHER_BUCKET,
    DS_MAX_LIVE,
    DS_MAX_REUSE,
    DS_PERSISTENCE,
    DS_PREFETCH,
    DS_REDUCE_BUCKET,
    DS_SUB_GROUP,
    STAGE3_KNOBS,  # noqa: F401 (re-exported: the knobs the search refines)
    OffloadOptimizer,
    OffloadParam,
    ZeroSettings,
)
from zerotune.schema.hardware import CollectivePerf, HardwareProfile, LinkClass
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Precision, Workload

DEFAULT_GLOBAL_BATCH_TOKENS = 2**21
"""Target tokens per optimizer step (2,097,152): the middle of the 1-4M range the seeds advise."""
FINETUNE_GLOBAL_BATCH_SEQUENCES = 64
"""--task finetune: sequences per optimizer step, Llama 2's supervised fine-tuning batch (arXiv
2307.09288 §3.1: batch size 64)."""

_ZERO_TEMPLATE = ZeroSettings()

BUSBW_TARGET = 0.9
"""A bucket should reach this share of the link's peak bus bandwidth."""

OffloadChoice = tuple[str, str]
"""(offload_optimizer device, offload_param device)."""

_OFFLOAD_OPT = {d: OffloadOptimizer(device=d) for d in ("none", "cpu", "nvme")}
_OFFLOAD_PAR = {d: OffloadParam(device=d) for d in ("none", "cpu", "nvme")}


@dataclass(frozen=True, slots=True, order=True)
class Candidate:
    """One configuration the search evaluates. Sizes are elements (DeepSpeed's unit).

    Field order is the deterministic tie-break order: lower stages, no offload, smaller
    micro-batches first.
    """

    stage: int
    offload_optimizer: str
    offload_param: str
    micro_batch: int
    grad_accum: int
    checkpointing: bool
    precision: Precision
    reduce_bucket_size: int = DS_REDUCE_BUCKET
    allgather_bucket_size: int = DS_ALLGATHER_BUCKET
    overlap_comm: bool = False
    contiguous_gradients: bool = True
    prefetch_bucket_size: int = DS_PREFETCH
    param_persistence_threshold: int = DS_PERSISTENCE
    max_live_parameters: int = DS_MAX_LIVE
    max_reuse_distance: int = DS_MAX_REUSE
    sub_group_size: int = DS_SUB_GROUP

    @property
    def offload(self) -> OffloadChoice:
        return (self.offload_optimizer, self.offload_param)

    @property
    def macro(self) -> tuple:
        """The memory-dominant choices; refinement happens within one macro."""
        return (
            self.stage,
            self.offload_optimizer,
            self.offload_param,
            self.micro_batch,
            self.grad_accum,
            self.checkpointing,
        )

    def with_(self, **changes) -> Candidate:
        """A copy with `changes` (dataclasses.replace is 3x slower; the search does this a lot)."""
        values = [getattr(self, name) for name in _FIELD_NAMES]
        for name, value in changes.items():
            values[_FIELD_INDEX[name]] = value
        return Candidate(*values)

    @property
    def zero_key(self) -> tuple:
        """The fields that end up in zero_optimization (candidates sharing it share ZeroSettings)."""
        return (
            self.stage,
            self.offload_optimizer,
            self.offload_param,
            self.reduce_bucket_size,
            self.allgather_bucket_size,
            self.overlap_comm,
            self.contiguous_gradients,
            self.prefetch_bucket_size,
            self.param_persistence_threshold,
            self.max_live_parameters,
            self.max_reuse_distance,
            self.sub_group_size,
        )

    def zero_settings(self) -> ZeroSettings:
        """The ZeroSettings DeepSpeed would resolve from this candidate's emitted config.

        A copy of a validated template (model_copy is ~10x cheaper than construction): every
        value here comes from our own grids, and the search builds thousands of these.
        """
        return _ZERO_TEMPLATE.model_copy(
            update={
                "stage": self.stage,
                "contiguous_gradients": self.contiguous_gradients,
                "reduce_bucket_size": self.reduce_bucket_size,
                "allgather_bucket_size": self.allgather_bucket_size,
                "overlap_comm": self.overlap_comm,
                "offload_optimizer": _OFFLOAD_OPT[self.offload_optimizer],
                "offload_param": _OFFLOAD_PAR[self.offload_param],
                "sub_group_size": self.sub_group_size,
                "prefetch_bucket_size": self.prefetch_bucket_size,
                "param_persistence_threshold": self.param_persistence_threshold,
                "max_live_parameters": self.max_live_parameters,
                "max_reuse_distance": self.max_reuse_distance,
                "gather_16bit_weights_on_model_save": self.stage == 3,
            }
        )

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_FIELD_NAMES = tuple(f.name for f in fields(Candidate))
_FIELD_INDEX = {name: i for i, name in enumerate(_FIELD_NAMES)}

# ---------------------------------------------------------------------------------------------
# Evidence the grids are anchored on


def collective_link(hardware: HardwareProfile) -> LinkClass | None:
    """The link a data-parallel collective is bounded by: inter-node when there are several nodes."""
    if hardware.nodes > 1 and hardware.inter_node is not None:
        return hardware.inter_node
    return hardware.intra_node


def _bounding_perf(hardware: HardwareProfile, op: str) -> tuple[CollectivePerf, float] | None:
    """`op`'s numbers on the bounding link (all_reduce's when it lacks them) and its busbw factor."""
    link = collective_link(hardware)
    if link is None:
        return None
    perf = link.collectives.get(op) or link.collectives.get("all_reduce")
    if perf is None:
        return None
    n = max(2, link.ranks or hardware.world_size or 2)
    return perf, busbw_factor(op if op in ("all_gather", "reduce_scatter", "all_reduce") else "all_reduce", n)


def busbw_at(hardware: HardwareProfile, op: str, size_bytes: float) -> tuple[float, float] | None:
    """(busbw at `size_bytes`, peak busbw) in B/s for `op` on the bounding link, or None.

    Peak is the curve's maximum or the alpha-beta pair's busbw; at a size S the alpha-beta
    model gives busbw_eff = S*f / (alpha + S*f/B) (collectives.py).
    """
    found = _bounding_perf(hardware, op)
    if found is None:
        return None
    perf, f = found
    if perf.curve:
        peak = max(bw for _, bw in perf.curve)
        return interpolate_busbw(perf.curve, size_bytes), peak
    if perf.busbw_Bps is None:
        return None
    alpha = perf.alpha_s or 0.0
    t = alpha + size_bytes * f / perf.busbw_Bps
    return size_bytes * f / t, perf.busbw_Bps


def saturating_bytes(hardware: HardwareProfile, op: str, target: float = BUSBW_TARGET) -> float | None:
    """Smallest message (bytes, total array) reaching `target` x peak busbw, or None if unknown.

    Curve: the first measured/interpolated size where busbw >= target*peak (searched on a
    log grid of 2**(k/4) bytes from 1 KiB). Alpha-beta: S*f >= target/(1-target) * alpha * B.
    """
    found = _bounding_perf(hardware, op)
    if found is None:
        return None
    perf, f = found
    if perf.curve:
        peak = max(bw for _, bw in perf.curve)
        size = 2.0**10
        while size < 2.0**36:
            if interpolate_busbw(perf.curve, size) >= target * peak:
                return size
            size *= 2**0.25
        return max(s for s, _ in perf.curve)
    if perf.busbw_Bps is None or not perf.alpha_s:
        return None
    return target / (1 - target) * perf.alpha_s * perf.busbw_Bps / f


def _log_points(lo: float, hi: float, per_decade: tuple[float, ...] = (1, 2, 5)) -> list[int]:
    out = []
    for exp in range(int(math.floor(math.log10(max(lo, 1)))), int(math.ceil(math.log10(max(hi, 1)))) + 1):
        for m in per_decade:
            v = m * 10**exp
            if lo <= v <= hi:
                out.append(int(v))
    return out


def _thin(values: list[int], limit: int, keep: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Sorted unique values, at most `limit`, picked evenly over the sorted list; `keep` always stays."""
    uniq = sorted(set(v for v in values if v >= 0))
    if len(uniq) <= limit:
        return tuple(uniq)
    kept = set(k for k in keep if k in uniq)
    rest = [v for v in uniq if v not in kept]
    slots = max(0, limit - len(kept))
    if slots and rest:
        step = (len(rest) - 1) / max(1, slots - 1) if slots > 1 else 0
        picks = {rest[round(i * step)] for i in range(slots)} if slots > 1 else {rest[len(rest) // 2]}
        kept |= picks
    return tuple(sorted(kept))


def _even(n: int) -> int:
    """allgather_bucket_size must be even (assert in stage_1_and_2.py)."""
    return n + (n % 2)


@dataclass(frozen=True)
class Grids:
    """The value grids for one model x hardware x precision (see the module docstring)."""

    reduce_bucket: tuple[int, ...]
    prefetch_bucket: tuple[int, ...]
    persistence: tuple[int, ...]
    max_live: tuple[int, ...]
    max_reuse: tuple[int, ...]
    sub_group: tuple[int, ...]
    saturating_elements: int | None
    """elements of the smallest reduce-scatter message reaching 90% of peak busbw (None: unknown):
    a stage-3 gradient bucket"""
    saturating_allreduce_elements: int | None = None
    """the same for all-reduce: a stage 1/2 gradient bucket (DeepSpeed 0.19.8 all-reduces it, see
    model/comm.py)"""

    def saturating_for(self, stage: int) -> int | None:
        """Elements a gradient bucket of `stage` needs to reach 90% of peak busbw."""
        return self.saturating_elements if stage == 3 else self.saturating_allreduce_elements


def build_grids(model: ModelSpec, hardware: HardwareProfile, precision: Precision) -> Grids:
    """Grids anchored on the model's block size and the profile's busbw curve."""
    elem = 4 if precision == "fp32" else 2
    block = model.block_params
    total = model.params
    # Gradient buckets are reduce-scattered at stage 3 but all-reduced at stage 1/2 (DeepSpeed 0.19.8's
    # default use_multi_rank_bucket_allreduce, model/comm.py): the grid holds both saturating sizes.
    sat_bytes = saturating_bytes(hardware, "reduce_scatter")
    sat = int(sat_bytes / elem) if sat_bytes else None
    sat_ar_bytes = saturating_bytes(hardware, "all_reduce")
    sat_ar = int(sat_ar_bytes / elem) if sat_ar_bytes else None
    lo, hi = max(1_000_000, block // 8), max(2_000_000, min(total, 1_000_000_000))
    anchors = [int(block * k) for k in (0.5, 1, 2, 3, 4)]
    sats = [v for v in (sat, sat_ar) if v]
    reduce = [v for v in anchors + _log_points(lo, hi) + sats if lo <= v <= hi]
    keep = tuple(v for v in (int(block), int(2 * block), *sats) if v and lo <= v <= hi)
    reduce_grid = _thin(reduce, 8, keep)
    prefetch = [int(block * k) for k in (0.25, 0.5, 1, 2)] + [DS_PREFETCH]
    prefetch_grid = _thin([v for v in prefetch if v <= max(total, DS_PREFETCH)], 5)
    # Persistence thresholds just at the distinct small tensor sizes of a block: each grid
    # point flips a class of tensors (norm weights, biases) between gathered and persistent.
    small = sorted({t for layer in model.blocks for t in layer.tensors if t <= 1_000_000})
    persistence = [0, DS_PERSISTENCE] + small[:2] + [10 * model.hidden_size]
    persistence_grid = _thin(persistence, 4, keep=(0, DS_PERSISTENCE))
    max_live_grid = tuple(sorted({int(block), int(2 * block), int(4 * block), DS_MAX_LIVE}))
    max_reuse_grid = tuple(sorted({0, int(block), DS_MAX_REUSE}))
    sub_group_grid = tuple(sorted({100_000_000, DS_SUB_GROUP, 10 * DS_SUB_GROUP}))
    return Grids(
        reduce_bucket=reduce_grid,
        prefetch_bucket=prefetch_grid,
        persistence=persistence_grid,
        max_live=max_live_grid,
        max_reuse=max_reuse_grid,
        sub_group=sub_group_grid,
        saturating_elements=sat,
        saturating_allreduce_elements=sat_ar,
    )


# ---------------------------------------------------------------------------------------------
# Batch split and precision


def batch_splits(
    seq_len: int, world_size: int, global_batch_tokens: int, max_micro_batch: int = 64
) -> tuple[tuple[int, int], ...]:
    """(micro_batch, grad_accum) pairs whose tokens per step are closest to the target.

    micro_batch runs over powers of two; grad_accum = round(target_sequences / (micro*W)), at
    least 1. Pairs that overshoot the target by more than 2x are dropped unless nothing else
    is left (a tiny target on a big cluster).
    """
    target_seqs = max(1, round(global_batch_tokens / seq_len))
    pairs: list[tuple[int, int]] = []
    mb = 1
    while mb <= max_micro_batch:
        ga = max(1, round(target_seqs / (mb * world_size)))
        if mb * ga * world_size <= 2 * target_seqs or not pairs:
            pairs.append((mb, ga))
        mb *= 2
    return tuple(dict.fromkeys(pairs))


def choose_precision(hardware: HardwareProfile) -> Precision:
    """bf16 where the GPU supports it (Ampere+), fp16 on older GPUs, fp32 on a CPU profile
    (bf16 matmuls are ~150x slower than fp32 on CPUs, fp16 is unsupported)."""
    if not hardware.has_gpus or hardware.gpu is None:
        return "fp32"
    if hardware.gpu.bf16_supported:
        return "bf16"
    if hardware.gpu.bf16_supported is None and (hardware.gpu.compute_capability or "0") >= "8.0":
        return "bf16"
    return "fp16"


def offload_choices(
    stage: int, hardware: HardwareProfile, allow_offload: bool = True
) -> tuple[OffloadChoice, ...]:
    """Offload options DeepSpeed supports at `stage` (§2.3): none at stage 0; CPU optimizer at
    1/2; CPU optimizer, CPU optimizer+params and, with an NVMe bandwidth in the profile, NVMe
    (ZeRO-Infinity) at 3. Offload needs a GPU to offload from."""
    if stage == 0 or not allow_offload or not hardware.has_gpus:
        return (("none", "none"),)
    if stage in (1, 2):
        return (("none", "none"), ("cpu", "none"))
    choices = [("none", "none"), ("cpu", "none"), ("cpu", "cpu")]
    if hardware.host.nvme_read_Bps and hardware.host.nvme_write_Bps:
        choices += [("nvme", "none"), ("nvme", "nvme")]
    return tuple(choices)


def workload_for(base: Workload, cand: Candidate) -> Workload:
    """The workload of `base` with the candidate's batch split, checkpointing and precision."""
    return base.model_copy(
        update={
            "micro_batch": cand.micro_batch,
            "grad_accum": cand.grad_accum,
            "activation_checkpointing": cand.checkpointing,
            "precision": cand.precision,
        }
    )


@dataclass(frozen=True)
class Space:
    """Everything enumerate() needs, computed once per search."""

    model: ModelSpec
    hardware: HardwareProfile
    world_size: int
    seq_len: int
    global_batch_tokens: int
    precision: Precision
    allow_offload: bool = True
    stages: tuple[int, ...] = (0, 1, 2, 3)

    @cached_property
    def grids(self) -> Grids:
        return build_grids(self.model, self.hardware, self.precision)

    @cached_property
    def splits(self) -> tuple[tuple[int, int], ...]:
        return batch_splits(self.seq_len, self.world_size, self.global_batch_tokens)

    def macros(self) -> list[Candidate]:
        """One base candidate per stage x offload x batch split x checkpointing (DeepSpeed's
        defaults for the communication knobs), in deterministic order."""
        out = []
        for stage in self.stages:
            for opt, par in offload_choices(stage, self.hardware, self.allow_offload):
                for mb, ga in self.splits:
                    for ckpt in (True, False):
                        out.append(Candidate(stage, opt, par, mb, ga, ckpt, self.precision))
        return out

    @cached_property
    def _starting_knobs(self) -> tuple[int, int, int]:
        g, block = self.grids, self.model.block_params
        return (
            _nearest(g.reduce_bucket, 2 * block),
            _nearest(g.prefetch_bucket, block),
            _nearest(g.max_live, 2 * block),
        )

    def representative(self, base: Candidate) -> Candidate:
        """`base` with the communication knobs at the rule-of-thumb starting point: a reduce
        bucket of ~2 layers (seed 000), overlap and contiguous gradients on, prefetch ~1 layer,
        max_live ~2 layers, DeepSpeed's persistence/reuse/sub-group defaults."""
        if base.stage == 0:
            return base
        rb, pf, ml = self._starting_knobs
        if base.stage in (1, 2):
            return base.with_(
                reduce_bucket_size=rb,
                allgather_bucket_size=_even(rb),
                overlap_comm=True,
                contiguous_gradients=True,
            )
        return base.with_(
            reduce_bucket_size=rb,
            overlap_comm=True,
            contiguous_gradients=True,
            prefetch_bucket_size=pf,
            param_persistence_threshold=DS_PERSISTENCE,
            max_live_parameters=ml,
            max_reuse_distance=DS_MAX_REUSE,
            sub_group_size=DS_SUB_GROUP,
        )

    def comm_variants(self, base: Candidate) -> list[Candidate]:
        """The main communication knobs of one macro: reduce bucket x overlap x contiguous
        gradients (stage-3 secondary knobs at the representative values)."""
        if base.stage == 0:
            return [base]
        rep = self.representative(base)
        out = []
        for rb in self.grids.reduce_bucket:
            for overlap in (True, False):
                for contig in (True, False):
                    if base.offload_optimizer != "none" and base.stage < 3 and not contig:
                        continue  # forced True under offload at stage 1/2 (§2.3)
                    # allgather_bucket_size is unused by DeepSpeed 0.19.8 on torch >= 1.13
                    # (all_gather_into_tensor, docs/deepspeed-facts.md §4.1): not searched, kept equal
                    # to the reduce bucket (even) for older torch.
                    out.append(
                        rep.with_(
                            reduce_bucket_size=rb,
                            allgather_bucket_size=_even(rb) if base.stage < 3 else DS_ALLGATHER_BUCKET,
                            overlap_comm=overlap,
                            contiguous_gradients=contig,
                        )
                    )
        return out

    def coarse(self) -> list[Candidate]:
        """Phase 1: every macro x its main communication knobs."""
        return [c for base in self.macros() for c in self.comm_variants(base)]

    def is_coarse(self, cand: Candidate) -> bool:
        """True for points of `coarse()` (stage-3 secondary knobs at the representative values)."""
        if cand.stage < 3:
            return True
        _, pf, ml = self._starting_knobs
        return (
            cand.prefetch_bucket_size == pf
            and cand.max_live_parameters == ml
            and cand.param_persistence_threshold == DS_PERSISTENCE
            and cand.max_reuse_distance == DS_MAX_REUSE
            and cand.sub_group_size == DS_SUB_GROUP
        )

    def refine(self, seed: Candidate) -> list[Candidate]:
        """Phase 2: the stage-3 secondary knobs in full around one promising candidate."""
        if seed.stage != 3:
            return []
        g = self.grids
        head = (
            seed.stage,
            seed.offload_optimizer,
            seed.offload_param,
            seed.micro_batch,
            seed.grad_accum,
            seed.checkpointing,
            seed.precision,
            seed.reduce_bucket_size,
            seed.allgather_bucket_size,
            seed.overlap_comm,
            seed.contiguous_gradients,
        )
        return [
            Candidate(*head, pf, pt, ml, rd, sg)
            for pf in g.prefetch_bucket
            for pt in g.persistence
            for ml in g.max_live
            for rd in g.max_reuse
            for sg in g.sub_group
        ]

    def secondary_grid(self, field: str) -> tuple[int, ...]:
        g = self.grids
        return {
            "prefetch_bucket_size": g.prefetch_bucket,
            "param_persistence_threshold": g.persistence,
            "max_live_parameters": g.max_live,
            "max_reuse_distance": g.max_reuse,
            "sub_group_size": g.sub_group,
        }[field]

    @cached_property
    def _tensor_sizes(self) -> tuple[int, ...]:
        return tuple(sorted(t for layer in self.model.layers for t in layer.tensors))

    def _persistent_count(self, threshold: int) -> int:
        return bisect.bisect_right(self._tensor_sizes, threshold)

    def _stage3_knobs(self, cand: Candidate) -> tuple:
        """The stage-3 secondary knobs with DeepSpeed-equivalent values merged (exact): a
        persistence threshold acts only through which tensors it makes persistent; max_live and
        max_reuse_distance saturate at the model's size (the trace of a step holds every
        parameter at most twice); sub-groups saturate at this rank's partition."""
        total = self.model.params
        return (
            cand.prefetch_bucket_size,
            self._persistent_count(cand.param_persistence_threshold),
            min(cand.max_live_parameters, total),
            min(cand.max_reuse_distance, 2 * total),
            min(cand.sub_group_size, -(-total // self.world_size)),
        )

    def memory_key(self, cand: Candidate) -> tuple:
        """The inputs per-GPU memory depends on, DeepSpeed-equivalent values merged:
        allgather_bucket_size allocates nothing on torch with all_gather_into_tensor (§4.1)."""
        head = cand.macro + (cand.precision,)
        if cand.stage == 0:
            return head
        if cand.stage in (1, 2):
            return (*head, cand.reduce_bucket_size, cand.overlap_comm, cand.contiguous_gradients)
        return (
            *head,
            cand.reduce_bucket_size,
            cand.overlap_comm,
            cand.contiguous_gradients,
            *self._stage3_knobs(cand),
        )

    def time_key(self, cand: Candidate) -> tuple:
        """The inputs the step time depends on, DeepSpeed-equivalent values merged (see
        `_stage3_knobs`): contiguous_gradients and allgather_bucket_size change memory only (a
        bucket copy; a buffer unused on modern torch); the stage-3 knobs are unread below stage
        3; sub_group_size changes the step only under optimizer offload, where the host-device
        copies of one sub-group hide behind the CPU Adam update of the next."""
        head = cand.macro + (cand.precision,)
        if cand.stage == 0:
            return head
        if cand.stage in (1, 2):
            return (*head, cand.reduce_bucket_size, cand.overlap_comm)
        pf, persistent, live, reuse, sub = self._stage3_knobs(cand)
        return (
            *head,
            cand.reduce_bucket_size,
            cand.overlap_comm,
            pf,
            persistent,
            live,
            reuse,
            sub if cand.offload_optimizer != "none" else None,
        )


def _nearest(grid: tuple[int, ...], value: float) -> int:
    return min(grid, key=lambda v: (abs(math.log(v) - math.log(max(value, 1))), v))
