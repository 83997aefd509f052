"""Fit the step model's global overhead prior across every published source (issue 18: one prior for
all profiles, never one constant per profile fitted on a handful of runs).

    .venv/bin/python scripts/evidence/fit_published.py     # the prior, and its fit over the whole suite

The published sources time whole optimizer steps, so they identify these host-side terms, each the
same mechanism on every GPU box:

- `per_step_s` and `single_rank_per_step_s`: the fixed cost of one optimizer step of a job on more
  than one rank (fitted on the multi-rank runs) and on one rank (fitted on the one-rank runs): engine
  bookkeeping, timers, scheduler, Python, and across ranks their synchronisation at the step
  (zerotune/model/overheads.py GLOBAL_PRIOR says why two);
- `per_module_hook_s`: stage 3's fetch/release bookkeeping per module per pass, which the host pays
  while the GPU waits when per-layer work is small (`layer_seconds`);
- `per_layer_launch_s`: one transformer block's Python and kernel launches per forward, every stage,
  hidden under the block's kernels unless those are shorter.

All are chosen together to minimise the throughput MAPE over the runs given (a grid over the hook
and launch costs, each step time simulated by predict_step itself; the per-step costs enter the step
additively, so they are scanned in closed form, each over its own runs). The printed values go into zerotune/model/overheads.py GLOBAL_PRIOR
by hand; scripts/evidence/loso.py refits them without each source in turn to judge them.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from scripts.evidence import published  # noqa: E402
from zerotune.dsconfig.settings import resolve  # noqa: E402
from zerotune.model.step import predict_step  # noqa: E402
from zerotune.schema.hardware import OverheadSpec  # noqa: E402

HOOK_GRID = (0.0, 2.5e-5, 5e-5, 1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3)
"""Stage-3 hook seconds per module per pass tried: 0 to 1.6 ms, doubling (2021 DeepSpeed's stage 3 was
measured near 1 ms per module on V100 boxes, 0.19.8's path is far faster)."""

LAUNCH_GRID = (0.0, 1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3)
"""Host seconds per block forward tried: 0 to 1.6 ms, doubling (a Llama block's forward enqueues tens
of kernels at a few microseconds of launch latency each, plus its Python)."""

STEP_GRID = tuple(i * 0.01 for i in range(0, 101))
"""Per-step seconds tried: 0 to 1 s in 10 ms steps (published steps take 0.3 s to minutes)."""

THREAD_GRID = tuple(round(25e6 * 2 ** (k / 2), -5) for k in range(11))
"""DeepSpeedCPUAdam params/s of one OpenMP thread tried (runs whose launcher leaves one thread per rank,
Workload.omp_threads): 25M to 800M in steps of sqrt(2), from about one core's share of the DGX-2
anchor (33M AVX-512, 17M AVX2: zerotune/model/offload.py) to what one core's memory bandwidth allows
for the update's 28 B per parameter (fp32 parameter, gradient and both moments read, three written)."""


@dataclass(frozen=True)
class Timed:
    """A run's measured step time and its predicted step time at each hook cost, with no per-step cost."""

    run: published.Run
    measured_s: float
    predicted_s: dict[tuple[int, int], float]
    """Per (HOOK_GRID index, LAUNCH_GRID index)."""
    adam: tuple[float, float, int, float] | None = None
    """A run whose ranks run CPU Adam on `omp_threads` threads: (parameters per rank, the rank's share
    of the node rate, threads, the CPU Adam seconds inside predicted_s at the default thread rate).
    CPU Adam is host time added to the step, so another thread rate changes the step by the difference."""

    @property
    def one_rank(self) -> bool:
        """The job runs on one rank: it pays `single_rank_per_step_s` (overheads.step_seconds)."""
        return self.run.world == 1

    def error(self, step_s: float, hook_index: int, launch_index: int = 0, thread_rate: float | None = None) -> float:
        """Throughput error (predicted tokens/s / measured - 1) with these terms."""
        predicted = self.predicted_s[hook_index, launch_index] + step_s
        if self.adam is not None and thread_rate:
            part, shared, threads, at_default = self.adam
            predicted += part / min(shared, threads * thread_rate) - at_default
        return self.measured_s / predicted - 1


def _setup(run: published.Run, overheads: OverheadSpec):
    spec = published.load_run_model(run)
    resolved = resolve(run.ds_config())
    hardware = published.run_hardware(run, spec, resolved.precision)
    hardware = hardware.model_copy(update={"overheads": overheads})
    return spec, published.run_workload(run, resolved.precision), resolved.zero, hardware


def timed(run: published.Run) -> Timed:
    """Simulate `run` at every hook cost of the grid (stage 0-2 runs do not use it: simulated once)."""
    predicted: dict[tuple[int, int], float] = {}
    spec = None
    for i, hook in enumerate(HOOK_GRID):
        for j, launch in enumerate(LAUNCH_GRID):
            if i and run.zero.get("stage", 0) != 3:
                predicted[i, j] = predicted[0, j]
                continue
            terms = OverheadSpec(
                per_step_s=0.0, per_module_hook_s=hook, per_micro_step_s=0.0, per_param_grad_hook_s=0.0,
                per_layer_launch_s=launch,
            )  # fmt: skip
            spec, workload, zero, hardware = _setup(run, terms)
            predicted[i, j] = predict_step(spec, workload, zero, hardware).step_time_s
    workload = published.run_workload(run, run.precision)
    measured = workload.tokens_per_step / published.measured_tokens_per_s(run, spec)
    return Timed(run, measured, predicted, _adam(run))


def _adam(run: published.Run) -> tuple[float, float, int, float] | None:
    """Timed.adam for a run with optimizer offload on one-thread-per-rank ranks, else None."""
    threads = run.omp_threads
    offload = (run.zero.get("offload_optimizer") or {}).get("device", "none") not in ("none", None)
    if threads is None or not offload:
        return None
    from zerotune.model.offload import node_cpu_adam, thread_cpu_adam
    from zerotune.model.setup import prepare

    spec, _, _, hardware = _setup(run, OverheadSpec())
    part = prepare(spec).params / run.world
    shared = node_cpu_adam(hardware)[0] / run.gpus_per_node
    return part, shared, threads, part / min(shared, threads * thread_cpu_adam(hardware)[0])


def timed_suite(runs: list[published.Run] | None = None) -> list[Timed]:
    runs = runs if runs is not None else published.load_suite()
    return [timed(r) for r in runs if r.measured.has_throughput]


@dataclass(frozen=True)
class Prior:
    """The terms fit_global chooses (GLOBAL_PRIOR's fields)."""

    per_step_s: float
    single_rank_per_step_s: float | None
    """None where the runs hold no one-rank job: nothing identifies it, and `per_step_s` serves one rank."""
    per_module_hook_s: float
    per_layer_launch_s: float
    cpu_adam_thread_params_per_s: float | None

    def step_s(self, row: Timed) -> float:
        """The per-step cost `row`'s job pays (overheads.step_seconds)."""
        if row.one_rank and self.single_rank_per_step_s is not None:
            return self.single_rank_per_step_s
        return self.per_step_s

    def error(self, row: Timed) -> float:
        h, j = HOOK_GRID.index(self.per_module_hook_s), LAUNCH_GRID.index(self.per_layer_launch_s)
        return row.error(self.step_s(row), h, j, self.cpu_adam_thread_params_per_s)

    def spec(self, source: str) -> OverheadSpec:
        return OverheadSpec(
            per_step_s=self.per_step_s, single_rank_per_step_s=self.single_rank_per_step_s,
            per_module_hook_s=self.per_module_hook_s, per_layer_launch_s=self.per_layer_launch_s,
            cpu_adam_thread_params_per_s=self.cpu_adam_thread_params_per_s, origin="published", source=source,
        )  # fmt: skip


def _group_best(rows: list[Timed], h: int, j: int) -> tuple[list[float], int]:
    """Summed |error| of `rows` at each thread rate (index into THREAD_GRID, or one entry when none of
    them runs CPU Adam on one thread), minimised over the per-step cost, and the best STEP_GRID index
    at each rate."""
    threaded = [r for r in rows if r.adam is not None]
    plain = [sum(abs(r.error(step, h, j)) for r in rows if r.adam is None) for step in STEP_GRID]
    if not threaded:
        k = min(range(len(STEP_GRID)), key=lambda i: plain[i])
        return [plain[k]], [k]
    totals, steps = [], []
    for t in THREAD_GRID:
        both = [plain[i] + sum(abs(r.error(step, h, j, t)) for r in threaded) for i, step in enumerate(STEP_GRID)]
        k = min(range(len(STEP_GRID)), key=lambda i: both[i])
        totals.append(both[k])
        steps.append(k)
    return totals, steps


def fit_global(rows: list[Timed], by_rank: bool = True) -> Prior:
    """The prior minimising the throughput MAPE of `rows`. The hook cost is fitted only when `rows` hold a
    stage-3 run (else 0), the thread rate only when they hold a one-thread-per-rank offload run (else
    None: nothing identifies it, and the model's stated default applies), the one-rank per-step cost only
    when they hold a one-rank run (else None). The two per-step costs move disjoint runs, so each is
    chosen on its own runs at every grid point of the others (and at each thread rate, which both share).
    `by_rank` False: one per-step cost for every run (the prior before the split, which
    scripts/evidence/per_step_candidates.py replays as its constant row)."""
    has_stage3 = any(r.run.zero.get("stage", 0) == 3 for r in rows)
    hooks = range(len(HOOK_GRID)) if has_stage3 else (0,)
    split = ([r for r in rows if not r.one_rank], [r for r in rows if r.one_rank]) if by_rank else (rows,)
    groups = [g for g in split if g]
    threaded = any(r.adam is not None for r in rows)
    best: tuple = (float("inf"),)
    for h in hooks:
        for j in range(len(LAUNCH_GRID)):
            fits = [_group_best(g, h, j) for g in groups]
            for t in range(len(THREAD_GRID) if threaded else 1):
                # a group without one-thread runs has one entry, the same at every thread rate
                total = sum(f[0][min(t, len(f[0]) - 1)] for f in fits)
                mape = total / len(rows)
                if mape < best[0]:
                    steps = [STEP_GRID[f[1][min(t, len(f[1]) - 1)]] for f in fits]
                    best = (mape, steps, groups, h, j, THREAD_GRID[t] if threaded else None)
    _, steps, fitted, h, j, rate = best
    if not by_rank:
        return Prior(steps[0], None, HOOK_GRID[h], LAUNCH_GRID[j], rate)
    chosen = {g[0].one_rank: s for g, s in zip(fitted, steps, strict=True)}
    single = chosen.get(True)
    return Prior(
        per_step_s=chosen.get(False, single if single is not None else 0.0),
        single_rank_per_step_s=single,
        per_module_hook_s=HOOK_GRID[h],
        per_layer_launch_s=LAUNCH_GRID[j],
        cpu_adam_thread_params_per_s=rate,
    )


def main() -> int:
    rows = timed_suite()
    sources = {r.run.source.url for r in rows}
    prior = fit_global(rows)
    before = statistics.fmean(abs(r.error(0.0, 0)) for r in rows)
    after = statistics.fmean(abs(prior.error(r)) for r in rows)
    one = [r for r in rows if r.one_rank]
    print(f"global prior over {len(rows)} timed runs from {len(sources)} sources:")
    print(f"  per_step_s        {prior.per_step_s:.3f}   ({len(rows) - len(one)} runs on more than one rank)")
    single = "none (no one-rank run)" if prior.single_rank_per_step_s is None else f"{prior.single_rank_per_step_s:.3f}"
    print(f"  single_rank_per_step_s {single}   ({len(one)} one-rank runs from "
          f"{len({r.run.source.url for r in one})} sources)")  # fmt: skip
    print(f"  per_module_hook_s {prior.per_module_hook_s:.2e}")
    print(f"  per_layer_launch_s {prior.per_layer_launch_s:.2e}")
    threaded = sorted({r.run.source.url for r in rows if r.adam is not None})
    rate = prior.cpu_adam_thread_params_per_s
    rate = "none (no one-thread run)" if rate is None else f"{rate:.3g}"
    print(f"  cpu_adam_thread_params_per_s {rate}   identified by {len(threaded)} source(s): {', '.join(threaded)}")
    print(f"  throughput MAPE   {100 * before:.1f}% without overheads -> {100 * after:.1f}% with the prior (in-sample)")
    print("leave-one-source-out judgement: scripts/evidence/loso.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
