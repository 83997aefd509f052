"""One candidate judged (`Evaluation`) and the memoised evaluator the search and the explanations share.

Step-time predictions are memoised on `Space.time_key` and memory estimates on `Space.memory_key`
(the knobs that change each, with DeepSpeed-equivalent values merged). The memory and step models
are passed in as functions, so the search stays pure and testable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from zerotune.model.fit import rejects
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload
from zerotune.search.candidate import Candidate
from zerotune.search.space import Space, workload_for

_NEVER = float("inf")
"""step_time_s of a candidate without a step-time prediction"""

MemoryFn = Callable[..., Any]
StepFn = Callable[..., Any]


class Evaluation(NamedTuple):
    """One candidate, judged (a NamedTuple: the search makes one per candidate, tens of thousands)."""

    candidate: Candidate
    memory: Any
    """MemoryEstimate (zerotune.model.memory)"""
    step: Any | None
    """StepEstimate (zerotune.model.step); None when pruned by memory"""
    reject: str | None
    """why it was pruned (zerotune.model.fit.rejects): "gpu" (GPU memory), "rank" (a CPU host's RAM share per rank) or
    "host" (CPU RAM for offload); None when it fits"""
    per_gpu_bytes: int
    tokens_per_s: float
    step_time_s: float

    @classmethod
    def of(cls, candidate: Candidate, memory: Any, step: Any | None, reject: str | None) -> Evaluation:
        if step is None:
            return cls(candidate, memory, None, reject, memory.per_gpu.total, 0.0, float("inf"))
        return cls(candidate, memory, step, reject, memory.per_gpu.total, step.tokens_per_s, step.step_time_s)

    @property
    def fits(self) -> bool:
        return self.reject is None


class Evaluator:
    """Memoised evaluation: memory per candidate, step time per `Space.time_key`."""

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareProfile,
        base: Workload,
        space: Space,
        safety_margin: float,
        memory_fn: MemoryFn,
        step_fn: StepFn,
    ):
        self.model, self.hardware, self.base, self.space = model, hardware, base, space
        self.margin = safety_margin
        self.memory_fn, self.step_fn = memory_fn, step_fn
        self.cache: dict[Candidate, Evaluation] = {}
        self.steps: dict[tuple, Any] = {}
        self.memories: dict[tuple, tuple[Any, str | None, int]] = {}
        self._workloads: dict[tuple, Workload] = {}
        self._zeros: dict[tuple, Any] = {}

    def _inputs(self, cand: Candidate) -> tuple[Workload, Any]:
        wkey = (cand.micro_batch, cand.grad_accum, cand.checkpointing, cand.precision)
        workload = self._workloads.get(wkey)
        if workload is None:
            workload = self._workloads[wkey] = workload_for(self.base, cand)
        zkey = cand.zero_key
        zero = self._zeros.get(zkey)
        if zero is None:
            zero = self._zeros[zkey] = cand.zero_settings()
        return workload, zero

    def check(self, cand: Candidate) -> Evaluation:
        """Memory only (the step time is left for `__call__`)."""
        hit = self.cache.get(cand)
        if hit is not None:
            return hit
        memory, reject, total = self._memory(cand, self.space.memory_key(cand))
        ev = self.cache[cand] = Evaluation(cand, memory, None, reject, total, 0.0, _NEVER)
        return ev

    def check_many(self, cands: list[Candidate]) -> list[Evaluation]:
        """`check` for many candidates; the stage-3 secondary grid (Space.refine) comes through here."""
        cache, memory_key, out = self.cache, self.space.memory_key, []
        for cand in cands:
            ev = cache.get(cand)
            if ev is None:
                memory, reject, total = self._memory(cand, memory_key(cand))
                ev = cache[cand] = Evaluation(cand, memory, None, reject, total, 0.0, _NEVER)
            out.append(ev)
        return out

    def _memory(self, cand: Candidate, mkey: tuple) -> tuple[Any, str | None, int]:
        """(MemoryEstimate, reject reason, per-GPU bytes) of `cand`, shared by every candidate with its
        memory key."""
        known = self.memories.get(mkey)
        if known is None:
            workload, zero = self._inputs(cand)
            memory = self.memory_fn(
                self.model, workload, zero, hardware=self.hardware, safety_margin=self.margin
            )
            reject = rejects(memory, self.hardware, self.base.gpus_per_node, self.margin)
            known = self.memories[mkey] = (memory, reject, memory.per_gpu.total)
        return known

    def unconstrained(self, cand: Candidate) -> Evaluation:
        """Memory and step time even when it does not fit: the counterfactual "how fast would
        it be" behind a memory-bound explanation. Not stored with the ranked evaluations."""
        ev = self.check(cand)
        if ev.step is not None:
            return ev
        return Evaluation.of(cand, ev.memory, self._step(cand), ev.reject)

    def __call__(self, cand: Candidate) -> Evaluation:
        """Memory and, when it fits, the step time."""
        ev = self.check(cand)
        if not ev.fits or ev.step is not None:
            return ev
        ev = Evaluation.of(cand, ev.memory, self._step(cand), None)
        self.cache[cand] = ev
        return ev

    def _step(self, cand: Candidate) -> Any:
        """The step-time prediction, shared by every candidate with the same time_key."""
        tkey = self.space.time_key(cand)
        step = self.steps.get(tkey)
        if step is None:
            workload, zero = self._inputs(cand)
            step = self.steps[tkey] = self.step_fn(self.model, workload, zero, self.hardware)
        return step
