"""The search: enumerate candidates, prune by memory, screen, predict step time, rank.

1. Memory first: every candidate of the coarse space (space.py: stage x offload x batch split x
   checkpointing x reduce bucket x overlap x contiguous gradients) goes through
   `estimate_memory`; a candidate fits when its peak x (1 + safety margin) <= GPU memory and its
   offload buffers fit the host RAM with the same margin.
2. Stage-3 secondary grid, memory only: prefetch x persistence x max_live x reuse distance x
   sub-group around, per (offload, checkpointing), the SCREEN_SPLITS largest micro-batches that
   fit and the next larger one (smaller prefetch/max_live may let it fit).
3. Screening: per (stage, offload, checkpointing), the SCREEN_SPLITS largest micro-batches that
   fit get one step-time prediction at the rule-of-thumb communication knobs. Throughput rises
   with the micro-batch (the per-micro-step collectives and launch costs are amortised over
   more tokens), so smaller ones are not screened.
4. The best screened macros (the TOP_MACROS best by the objective, plus any within
   SCREEN_TOLERANCE of the best) get their full communication grid predicted.
5. Coordinate descent over the stage-3 secondary knobs (one knob at a time over its grid, until
   no move improves) from the DESCENT_SEEDS best stage-3 points within DESCENT_WINDOW.

Step-time predictions are memoised on `Space.time_key` and memory estimates on
`Space.memory_key` (the knobs that change each, with DeepSpeed-equivalent values merged), so
candidates that differ only in knobs one of them cannot see share one call. The memory and step
models are passed in as functions (defaults: zerotune.model.memory and zerotune.model.step), so
the search stays pure and testable.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from zerotune.errors import InputError
from zerotune.model.fit import SAFETY_MARGIN
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import DEFAULT_SEQ_LEN, Precision, Workload
from zerotune.search.candidate import Candidate
from zerotune.search.evaluate import Evaluation, Evaluator, MemoryFn, StepFn
from zerotune.search.objective import (
    OBJECTIVES,
    TIE_BAND,
    Objective,
    cost_per_billion_tokens,
    rank_key,
)
from zerotune.search.space import (
    DEFAULT_GLOBAL_BATCH_TOKENS,
    FINETUNE_GLOBAL_BATCH_SEQUENCES,
    STAGE3_KNOBS,
    Space,
)

__all__ = [  # Evaluation lives in evaluate.py; the CLI imports it from here
    "SAFETY_MARGIN",
    "Evaluation",
    "Evaluator",
    "SearchRequest",
    "SearchResult",
    "base_workload",
    "default_global_batch_tokens",
    "rank_key",
    "search",
]

SCREEN_SPLITS = 2
"""Micro-batches screened per (stage, offload, checkpointing): the largest ones that fit."""
TOP_MACROS = 4
SCREEN_TOLERANCE = 2 * TIE_BAND
"""Macros whose screened throughput is within this share of the best get the full grid too. The pick is
the simplest configuration within TIE_BAND of the fastest, and a macro screened at rule-of-thumb knobs
ends there when its grid gains what separates it: 2 x TIE_BAND lets the grid gain up to one more
TIE_BAND. Checked against the search without pruning (TOP_MACROS, MAX_MACROS, DESCENT_SEEDS unbounded,
every macro on the full grid) on the 4 golden jobs and 6 more (llama-13b, mistral-7b on 8xa100-pcie,
llama3-8b on 4xrtx4090 and 8xa6000, qwen3-30b-a3b, llama-70b on h100-2node-ib): the same pick on all 10; at 0.05 llama-13b on dgx-h100 missed the
simpler stage 2 inside the tie band (stage 3 picked, +4.2%)."""
MAX_MACROS = 8
REFINE_SEEDS = 24
"""Cap on the stage-3 points (distinct stage/offload/batch/checkpointing) whose secondary grid is
memory-checked: per (offload, checkpointing) the SCREEN_SPLITS largest micro-batches that fit
and the next larger one."""
DESCENT_SEEDS = 2
"""Stage-3 points tuned by coordinate descent over the secondary knobs..."""
DESCENT_WINDOW = 0.10
"""... when their throughput is within this share of the best so far (the secondary knobs move
the step time by a few percent, not by tens). TOP_MACROS, MAX_MACROS, DESCENT_SEEDS and DESCENT_WINDOW
bound the search's work, not its answer: with SCREEN_TOLERANCE they give the unpruned search's pick on
the 10 jobs above (REFINE_SEEDS was not varied)."""

@dataclass(frozen=True)
class SearchRequest:
    """What the user asked for (the CLI's options), validated."""

    seq_len: int = DEFAULT_SEQ_LEN
    global_batch_tokens: int = DEFAULT_GLOBAL_BATCH_TOKENS
    objective: Objective = "throughput"
    hourly_rate_usd: float | None = None
    safety_margin: float = SAFETY_MARGIN
    precision: Precision | None = None
    world_size: int | None = None
    """ranks for a profile without GPUs (a CPU host running gloo ranks)"""
    allow_offload: bool = True
    stages: tuple[int, ...] = (0, 1, 2, 3)
    task: str = "pretrain"
    """pretrain or finetune: the AdamW values written (dsconfig/emit.py) and the default global batch"""
    workload_options: tuple[tuple[str, object], ...] = ()
    """Workload fields the job states (kernels, packing, activation offloading, MoE experts:
    JobInputs.workload_options), the same for every candidate"""

    def __post_init__(self) -> None:
        if self.task not in ("pretrain", "finetune"):
            raise InputError(f"--task must be pretrain or finetune, got {self.task!r}")
        if self.seq_len <= 0:
            raise InputError(f"--seq-len must be positive, got {self.seq_len}")
        if self.global_batch_tokens < self.seq_len:
            raise InputError(
                f"--global-batch-tokens {self.global_batch_tokens} is smaller than one sequence "
                f"(--seq-len {self.seq_len})"
            )
        if not 0 <= self.safety_margin < 1:
            raise InputError(f"--margin must be in [0, 1), got {self.safety_margin:g}")
        if self.objective not in OBJECTIVES:
            raise InputError(
                f"unknown objective {self.objective!r}", hint=f"use one of {', '.join(OBJECTIVES)}"
            )
        if self.hourly_rate_usd is not None and self.hourly_rate_usd <= 0:
            raise InputError(f"--hourly-rate must be positive, got {self.hourly_rate_usd}")


@dataclass
class Group:
    """Per (stage, offload_optimizer, offload_param): how its candidates fared."""

    key: tuple[int, str, str]
    candidates: int = 0
    fitting: int = 0
    predicted: int = 0
    smallest: Evaluation | None = None
    """the candidate with the lowest per-GPU memory (fitting or not)"""
    best: Evaluation | None = None
    """the best fitting candidate by the objective"""


@dataclass(frozen=True)
class SearchStats:
    candidates: int
    """distinct candidates memory-checked"""
    pruned: int
    """... that do not fit (GPU memory or host RAM)"""
    screened_out: int
    """... that fit but were not step-predicted (screening or refinement left them out)"""
    predicted: int
    """... with a step-time prediction (ranked)"""
    memory_estimates: int
    """calls to the memory model (memoised on Space.memory_key, so fewer than `candidates`)"""
    step_predictions: int
    """calls to the step model (memoised on Space.time_key, so fewer than `predicted`)"""
    wall_s: float


@dataclass(frozen=True)
class SearchResult:
    model: ModelSpec
    hardware: HardwareProfile
    request: SearchRequest
    workload: Workload
    """the base workload (world size, seq_len, precision); batch split is per candidate"""
    space: Space
    ranked: tuple[Evaluation, ...]
    """fitting candidates, best first"""
    groups: dict[tuple[int, str, str], Group]
    stats: SearchStats
    hourly_rate_usd: float | None
    evaluate: Evaluator = field(repr=False)
    """the memoised evaluator, for explanations that probe neighbours of the winner"""

    @property
    def best(self) -> Evaluation | None:
        return self.ranked[0] if self.ranked else None

    def cost(self, ev: Evaluation) -> float | None:
        if self.hourly_rate_usd is None or ev.step is None:
            return None
        return cost_per_billion_tokens(ev.tokens_per_s, self.hourly_rate_usd)


def default_global_batch_tokens(task: str, seq_len: int) -> int:
    """--global-batch-tokens when none is given: 2^21 tokens to pre-train, 64 sequences to fine-tune."""
    return FINETUNE_GLOBAL_BATCH_SEQUENCES * seq_len if task == "finetune" else DEFAULT_GLOBAL_BATCH_TOKENS


def _default_memory_fn() -> MemoryFn:
    from zerotune.model.memory import estimate_memory

    return estimate_memory


def _default_step_fn() -> StepFn:
    from zerotune.model.step import predict_step

    return predict_step


def world_size_of(hardware: HardwareProfile, request: SearchRequest) -> tuple[int, int]:
    """(ranks per node, nodes): the profile's, or --gpus ranks on a host without GPUs."""
    if hardware.has_gpus:
        return hardware.gpus_per_node, hardware.nodes
    ranks = request.world_size or (hardware.intra_node.ranks if hardware.intra_node else None) or 2
    return ranks, 1


def base_workload(hardware: HardwareProfile, request: SearchRequest) -> Workload:
    per_node, nodes = world_size_of(hardware, request)
    return Workload(
        seq_len=request.seq_len,
        precision=request.precision or hardware.default_precision,
        optimizer="adamw",
        gpus_per_node=per_node,
        nodes=nodes,
        **dict(request.workload_options),
    )


def search(
    model: ModelSpec,
    hardware: HardwareProfile,
    request: SearchRequest | None = None,
    *,
    memory_fn: MemoryFn | None = None,
    step_fn: StepFn | None = None,
) -> SearchResult:
    """Find the best configuration of `model` on `hardware` for `request` (see module docstring)."""
    with _no_cycle_collection():
        return _search(model, hardware, request or SearchRequest(), memory_fn, step_fn)


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector. The search allocates some 10^5 objects that form no
    cycles (candidates, evaluations, estimates; reference counting frees them), and each collection
    the allocations trigger walks all of them again: ~10% of the search's instructions."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _search(
    model: ModelSpec,
    hardware: HardwareProfile,
    request: SearchRequest,
    memory_fn: MemoryFn | None,
    step_fn: StepFn | None,
) -> SearchResult:
    started = time.perf_counter()
    memory_fn = memory_fn or _default_memory_fn()
    step_fn = step_fn or _default_step_fn()
    rate = request.hourly_rate_usd if request.hourly_rate_usd is not None else hardware.hourly_rate_usd
    if request.objective == "cost" and rate is None:
        raise InputError(
            f"--objective cost needs an hourly rate: profile {hardware.name!r} has no hourly_rate_usd",
            hint="pass --hourly-rate USD (whole cluster, per hour)",
        )
    base = base_workload(hardware, request)
    space = Space(
        model=model,
        hardware=hardware,
        world_size=base.world_size,
        seq_len=request.seq_len,
        global_batch_tokens=request.global_batch_tokens,
        precision=base.precision,
        allow_offload=request.allow_offload,
        stages=request.stages,
    )
    evaluate = Evaluator(model, hardware, base, space, request.safety_margin, memory_fn, step_fn)

    # 1. memory for the whole coarse space
    by_macro: dict[tuple, list[Evaluation]] = {}
    for ev in evaluate.check_many(space.coarse()):
        by_macro.setdefault(ev.candidate.macro, []).append(ev)
    families: dict[tuple, list[Candidate]] = {}
    for base_cand in space.macros():
        c = base_cand
        families.setdefault((c.stage, c.offload_optimizer, c.offload_param, c.checkpointing), []).append(c)

    def fits_somewhere(macro: tuple) -> bool:
        return any(ev.fits for ev in by_macro.get(macro, ()))

    # 2. stage-3 secondary grid (memory only) around the largest micro-batches that fit, and the
    #    next larger one: a smaller prefetch/max_live may let it fit
    seeds: list[Candidate] = []
    for (stage, *_), members in families.items():
        if stage != 3:
            continue
        by_size = sorted(members, key=lambda c: -c.micro_batch)
        fitting_at = [i for i, c in enumerate(by_size) if fits_somewhere(c.macro)]
        if not fitting_at:
            picks = by_size[-1:]  # the smallest micro-batch: the last chance to fit
        else:
            first = fitting_at[0]
            picks = by_size[max(0, first - 1) : first + SCREEN_SPLITS]
        for c in picks:
            seeds.append(min(by_macro[c.macro], key=lambda e: (e.per_gpu_bytes, e.candidate)).candidate)
    for seed in seeds[:REFINE_SEEDS]:
        by_macro[seed.macro].extend(evaluate.check_many(space.refine(seed)))

    # 3. screening: the largest fitting micro-batches per (stage, offload, checkpointing)
    screened: list[Evaluation] = []
    for members in families.values():
        fitting_macros = [c for c in members if fits_somewhere(c.macro)]
        for c in sorted(fitting_macros, key=lambda c: -c.micro_batch)[:SCREEN_SPLITS]:
            ev = evaluate.check(space.representative(c))
            if not ev.fits:  # the starting point does not fit: the macro's smallest fitting point
                ev = min(
                    (e for e in by_macro[c.macro] if e.fits), key=lambda e: (e.per_gpu_bytes, e.candidate)
                )
            screened.append(evaluate(ev.candidate))

    # 4. the full communication grid of the best macros
    fastest = max((ev.tokens_per_s for ev in screened), default=0.0)
    key = rank_key(request.objective, fastest, rate)
    order = sorted(screened, key=key)
    top = order[:TOP_MACROS] + [
        ev for ev in order[TOP_MACROS:] if ev.tokens_per_s >= (1 - SCREEN_TOLERANCE) * fastest
    ]
    for ev in top[:MAX_MACROS]:
        for e in by_macro.get(ev.candidate.macro, ()):
            if e.fits and space.is_coarse(e.candidate):
                evaluate(e.candidate)

    # 5. coordinate descent over the stage-3 secondary knobs from the best stage-3 points
    predicted = [e for e in evaluate.cache.values() if e.step is not None]
    best_tps = max((e.tokens_per_s for e in predicted), default=0.0)
    key = rank_key(request.objective, best_tps, rate)
    starts: list[Evaluation] = []
    seen_macros: set[tuple] = set()
    for ev in sorted((e for e in predicted if e.candidate.stage == 3), key=key):
        if ev.candidate.macro not in seen_macros and ev.tokens_per_s >= (1 - DESCENT_WINDOW) * best_tps:
            seen_macros.add(ev.candidate.macro)
            starts.append(ev)
    for ev in starts[:DESCENT_SEEDS]:
        _descend(evaluate, space, ev.candidate, key)

    evaluations = list(evaluate.cache.values())
    fitting = [ev for ev in evaluations if ev.fits]
    done = [ev for ev in fitting if ev.step is not None]
    key = rank_key(request.objective, max((ev.tokens_per_s for ev in done), default=0.0), rate)
    ranked = tuple(sorted(done, key=key))

    groups: dict[tuple[int, str, str], Group] = {}
    for ev in evaluations:
        c = ev.candidate
        g = groups.get(c[:3])  # (stage, offload_optimizer, offload_param)
        if g is None:
            g = groups[c[:3]] = Group(c[:3])
        g.candidates += 1
        if g.smallest is None or (ev.per_gpu_bytes, ev.candidate) < (
            g.smallest.per_gpu_bytes,
            g.smallest.candidate,
        ):
            g.smallest = ev
        if ev.fits:
            g.fitting += 1
        if ev.step is not None:
            g.predicted += 1
    for ev in ranked:  # ranked order: the first fitting one per group is its best
        g = groups[(ev.candidate.stage, *ev.candidate.offload)]
        if g.best is None:
            g.best = ev

    stats = SearchStats(
        candidates=len(evaluations),
        pruned=len(evaluations) - len(fitting),
        screened_out=len(fitting) - len(done),
        predicted=len(done),
        memory_estimates=len(evaluate.memories),
        step_predictions=len(evaluate.steps),
        wall_s=time.perf_counter() - started,
    )
    return SearchResult(
        model=model,
        hardware=hardware,
        request=request,
        workload=base,
        space=space,
        ranked=ranked,
        groups=groups,
        stats=stats,
        hourly_rate_usd=rate,
        evaluate=evaluate,
    )


def _descend(
    evaluate: Evaluator, space: Space, start: Candidate, key: Callable[[Evaluation], tuple]
) -> Evaluation:
    """Coordinate descent over the stage-3 secondary knobs from `start`: each knob in turn takes
    its best grid value (by `key`) with the others fixed; stop when a full pass moves nothing."""
    best = evaluate(start)
    for _ in range(2):
        moved = False
        for name in STAGE3_KNOBS:
            for value in space.secondary_grid(name):
                if value == getattr(best.candidate, name):
                    continue
                ev = evaluate(best.candidate.with_(**{name: value}))
                if ev.fits and key(ev) < key(best):
                    best, moved = ev, True
        if not moved:
            break
    return best
