"""The candidate space: which candidates the search tries, in which phases.

A `Candidate` (search/candidate.py) is one point: stage x offload x batch split x activation
checkpointing x the communication knobs. The knob grids come from the knob table (dsconfig/knobs.py,
evaluated by search/grids.py); this module adds the choices that are not zero_optimization keys:

- stage x offload devices DeepSpeed supports (offload_choices);
- micro-batch x gradient accumulation for a target number of tokens per optimizer step
  (--global-batch-tokens, default 2**21 ~ 2.1M tokens: seed 002 and the Llama/Chinchilla-era
  recipes train at 1-4M tokens per step);
- precision (HardwareProfile.default_precision).

It also says which knob values DeepSpeed treats alike (memory_key, time_key), so the search memoises
its models on them. The enumeration is deterministic: grids are sorted tuples, candidates come out in
a fixed order. Pure Python (no torch): the search evaluates tens of thousands of these per second.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from functools import cached_property

from zerotune.dsconfig.knobs import STAGE3_KNOBS
from zerotune.dsconfig.settings import DS_ALLGATHER_BUCKET, DS_MAX_REUSE, DS_PERSISTENCE, DS_SUB_GROUP
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Precision, Workload
from zerotune.search.candidate import Candidate, OffloadChoice
from zerotune.search.grids import Grids, build_grids

__all__ = [  # Candidate and the grids moved out of this module; imported from here by older callers
    "Candidate",
    "Grids",
    "OffloadChoice",
    "STAGE3_KNOBS",
    "Space",
    "batch_splits",
    "build_grids",
    "offload_choices",
    "workload_for",
]

DEFAULT_GLOBAL_BATCH_TOKENS = 2**21
"""Target tokens per optimizer step (2,097,152): the middle of the 1-4M range the seed notes advise for
stable Adam at scale (shared/seeds/002); published pre-training runs sit in it (GPT-3 0.5-3.2M tokens,
arXiv 2005.14165 Table 2.1; Llama 2 4M, arXiv 2307.09288 §2.2)."""
FINETUNE_GLOBAL_BATCH_SEQUENCES = 64
"""--task finetune: sequences per optimizer step, Llama 2's supervised fine-tuning batch (arXiv
2307.09288 §3.1: batch size 64)."""


def _even(n: int) -> int:
    """allgather_bucket_size must be even (assert in stage_1_and_2.py)."""
    return n + (n % 2)


# ---------------------------------------------------------------------------------------------
# Batch split and precision


def batch_splits(
    seq_len: int, world_size: int, global_batch_tokens: int, max_micro_batch: int = 64
) -> tuple[tuple[int, int], ...]:
    """(micro_batch, grad_accum) pairs whose tokens per step are closest to the target.

    micro_batch runs over powers of two; grad_accum = round(target_sequences / (micro*W)), at
    least 1. Pairs that overshoot the target by more than 2x are dropped unless nothing else
    is left (a tiny target on a big cluster). `max_micro_batch` (64) bounds the search, ASSUMED: per-micro-step
    costs are amortised well before it at the default 2048 tokens (131K tokens per GPU per micro-step);
    very short sequences could gain past it.
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
            _nearest(g["reduce_bucket_size"], 2 * block),
            _nearest(g["prefetch_bucket_size"], block),
            _nearest(g["max_live_parameters"], 2 * block),
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
        g = self.grids
        for rb in g["reduce_bucket_size"]:
            for overlap in g["overlap_comm"]:
                for contig in g["contiguous_gradients"]:
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
        grids = [self.grids[field] for field in STAGE3_KNOBS]
        head, make = seed[: -len(STAGE3_KNOBS)], Candidate._make
        return [make(head + values) for values in itertools.product(*grids)]

    def secondary_grid(self, field: str) -> tuple[int, ...]:
        return self.grids[field]

    @cached_property
    def _tensor_sizes(self) -> tuple[int, ...]:
        return tuple(sorted(t for layer in self.model.layers for t in layer.tensors))

    def _persistent_count(self, threshold: int) -> int:
        return bisect.bisect_right(self._tensor_sizes, threshold)

    def _stage3_knobs(self, cand: Candidate) -> tuple:
        """The stage-3 secondary knobs with DeepSpeed-equivalent values merged (exact): a
        persistence threshold acts only through which tensors it makes persistent; max_live and
        max_reuse_distance saturate at the model's size (the trace of a step holds every
        parameter at most twice); sub-groups saturate at this rank's partition. Memoised on the
        raw values: the secondary grid repeats them thousands of times."""
        raw = cand[-len(STAGE3_KNOBS) :]
        merged = self._merged_stage3.get(raw)
        if merged is None:
            total = self.model.params
            merged = self._merged_stage3[raw] = (
                cand.prefetch_bucket_size,
                self._persistent_count(cand.param_persistence_threshold),
                min(cand.max_live_parameters, total),
                min(cand.max_reuse_distance, 2 * total),
                min(cand.sub_group_size, -(-total // self.world_size)),
            )
        return merged

    @cached_property
    def _merged_stage3(self) -> dict[tuple, tuple]:
        return {}

    def memory_key(self, cand: Candidate) -> tuple:
        """The inputs per-GPU memory depends on, DeepSpeed-equivalent values merged:
        allgather_bucket_size allocates nothing on torch with all_gather_into_tensor (§4.1)."""
        head = cand[:7]  # macro + precision
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
        head = cand[:7]  # macro + precision
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
