"""Replay candidate mechanisms for the global per-step overhead (issue 18) leave-one-source-out.

    .venv/bin/python scripts/evidence/per_step_candidates.py

The global prior's per-step cost (zerotune/model/overheads.py GLOBAL_PRIOR) was one constant; each candidate
here replaces that constant with `a + b x feature` (a feature the job states, or, for the timer-definition
test, what the source's timer covered), both fitted with the hook and launch terms on every other source's
timed runs, as scripts/evidence/loso.py fits the prior, and judged on the held-out source. The replay is a
vectorised copy of fit_published.fit_global over the same grids (numpy, a dev dependency): its constant-only
row is fit_global(by_rank=False), which `main` checks before it prints anything else. The row "more than one
rank" is the mechanism the prior now carries (`per_step_s` on more than one rank, `single_rank_per_step_s`
on one), here on coarser grids; loso.py judges it at the prior's 10 ms steps.

It also prints, per timer definition (runs.yaml `throughput_note`), the per-step constant each source's runs
want on their own (hook and launch at the prior's values): if what a timer covers were the mechanism, the
definitions would want different constants and the sources within one definition similar ones.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_published as fp  # noqa: E402
import published  # noqa: E402

from zerotune.model.overheads import GLOBAL_PRIOR  # noqa: E402
from zerotune.model.setup import prepare  # noqa: E402

CONSTANT = np.round(np.arange(0, 1.001, 0.01), 2)
"""fit_published.STEP_GRID: 0 to 1 s in 10 ms steps."""


class Suite:
    """The timed runs' predicted step at every (hook, launch, thread-rate) grid point, without a per-step cost."""

    def __init__(self) -> None:
        self.rows = fp.timed_suite()
        grid = (len(self.rows), len(fp.HOOK_GRID), len(fp.LAUNCH_GRID))
        self.measured = np.array([r.measured_s for r in self.rows])
        self.base = np.zeros(grid)
        self.threads = np.zeros((*grid, len(fp.THREAD_GRID)))
        for i, r in enumerate(self.rows):
            for h, j in itertools.product(range(grid[1]), range(grid[2])):
                self.base[i, h, j] = base = r.predicted_s[h, j]
                for t, rate in enumerate(fp.THREAD_GRID):  # Timed.error's CPU Adam at another thread rate
                    if r.adam is None:
                        self.threads[i, h, j, t] = base
                    else:
                        part, shared, threads, at_default = r.adam
                        self.threads[i, h, j, t] = base + part / min(shared, threads * rate) - at_default
        self.threaded = np.array([r.adam is not None for r in self.rows])
        self.source = np.array([r.run.source.url for r in self.rows])
        self.stage3 = np.array([r.run.zero.get("stage", 0) == 3 for r in self.rows])

    def fit(self, idx: np.ndarray, features: np.ndarray, grids: list[np.ndarray]) -> tuple:
        """fit_global with `features @ coefficients` in place of the constant: (coefficients, h, j, t or -1)."""
        coefs = np.array(list(itertools.product(*grids)))
        extra = features[idx] @ coefs.T
        threaded = self.threaded[idx]
        best: tuple = (math.inf,)
        for h in range(len(fp.HOOK_GRID)) if self.stage3[idx].any() else (0,):
            for j in range(len(fp.LAUNCH_GRID)):
                predicted = self.threads[idx, h, j][:, None, :] + extra[:, :, None]
                error = np.abs(self.measured[idx, None, None] / predicted - 1)
                total, t = error[~threaded, :, 0].sum(0), np.full(len(coefs), -1)
                if threaded.any():
                    per_rate = error[threaded].sum(0)
                    t = per_rate.argmin(1)
                    total = total + per_rate[np.arange(len(coefs)), t]
                c = int(total.argmin())
                if total[c] < best[0]:
                    best = (total[c], tuple(float(v) for v in coefs[c]), h, j, int(t[c]))
        return best[1:]

    def error(self, i: int, features: np.ndarray, solution: tuple) -> float:
        coefs, h, j, t = solution
        base = self.threads[i, h, j, t] if t >= 0 else self.base[i, h, j]
        return float(self.measured[i] / (base + features[i] @ np.array(coefs)) - 1)

    def loso(self, features: np.ndarray, grids: list[np.ndarray]) -> tuple[float, tuple]:
        """(leave-one-source-out throughput MAPE %, the fit over every source)."""
        errors = []
        for url in sorted(set(self.source)):
            train, held = np.where(self.source != url)[0], np.where(self.source == url)[0]
            solution = self.fit(train, features, grids)
            errors.extend(abs(self.error(i, features, solution)) for i in held)
        return 100 * float(np.mean(errors)), self.fit(np.arange(len(self.rows)), features, grids)[0]


def timer(run: published.Run) -> str:
    """What the source's throughput figure covers, from its runs.yaml throughput_note."""
    note = run.measured.throughput_note or ""
    if "autotuner metric" in note:
        return "DeepSpeed engine timers (fwd+bwd+step)"
    if "ThroughputTimer" in note or "RunningAvgSamplesPerSec" in note:
        return "DeepSpeed ThroughputTimer"
    if "HF Trainer" in note or "tqdm" in note:
        return "HF Trainer s/it or train_runtime"
    if any(
        s in note
        for s in ("run_bench_lm", "train.py", "benchmark.py", "bench_decompose", "finetune_llama", "plot.py")
    ):
        return "the script's own step loop"
    return "other or not stated"


def features(suite: Suite) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (per-run feature, grid of its coefficient)."""
    runs = [r.run for r in suite.rows]
    world = np.array([r.world for r in runs], float)
    stage = np.array([r.zero.get("stage", 0) for r in runs])
    preps = [prepare(published.load_run_model(r)) for r in runs]
    params = np.array([p.params for p in preps], float) / 1e9
    tensors = np.array([len(p.backward_tensors) for p in preps], float)
    per_rank = np.where(stage >= 1, params / world, params)
    stepped = np.where(stage == 3, tensors, np.where(stage >= 1, tensors / world + 1, tensors))
    return {
        "parameter tensors the step loops over (/1000)": (stepped / 1000, np.arange(0, 2.01, 0.1)),
        "parameter tensors, all (/1000)": (tensors / 1000, np.arange(0, 2.01, 0.1)),
        "parameters per rank (B)": (per_rank, np.arange(0, 0.41, 0.02)),
        "micro-steps per step": (np.array([r.grad_accum for r in runs], float), np.arange(0, 0.31, 0.01)),
        "log2 ranks": (np.log2(world), np.arange(0, 0.15, 0.005)),
        "straggler sqrt(2 ln ranks)": (np.sqrt(2 * np.log(world)), np.arange(0, 0.21, 0.01)),
        "more than one rank": ((world > 1).astype(float), np.arange(0, 0.41, 0.02)),
        "more than one node": (np.array([r.nodes > 1 for r in runs], float), np.arange(0, 1.01, 0.05)),
        "stage 1/2 (not 3)": (np.isin(stage, (1, 2)).astype(float), np.arange(0, 1.01, 0.05)),
        "timer is HF Trainer's": (
            np.array([timer(r).startswith("HF") for r in runs], float),
            np.arange(0, 1.01, 0.05),
        ),
    }


def main() -> int:
    suite = Suite()
    n = len(suite.rows)
    constant = np.ones((n, 1))
    baseline, (step,) = suite.loso(constant, [CONSTANT])
    reference = fp.fit_global(suite.rows, by_rank=False).per_step_s
    assert math.isclose(step, reference), f"replay fits {step} s, fit_published {reference} s"
    print(f"constant per-step ({step:.2f} s in sample): leave-one-source-out throughput MAPE {baseline:.2f}%")
    coarse = np.round(np.arange(0, 1.001, 0.02), 2)
    print(f"{'candidate: a + b x feature':48} {'LOSO %':>7}  in-sample (a s, b s)")
    for name, (feature, grid) in features(suite).items():
        mape, coefs = suite.loso(np.stack([np.ones(n), feature], 1), [coarse, grid])
        print(f"{name:48} {mape:7.2f}  ({coefs[0]:.2f}, {coefs[1]:.3g})")
    print(
        "\nper timer definition: the per-step constant each source wants alone (hook, launch at the prior's)"
    )
    h, j = (
        fp.HOOK_GRID.index(GLOBAL_PRIOR.per_module_hook_s),
        fp.LAUNCH_GRID.index(GLOBAL_PRIOR.per_layer_launch_s),
    )
    wide = np.round(np.arange(-0.3, 1.501, 0.01), 2)
    kinds = np.array([timer(r.run) for r in suite.rows])
    for kind in sorted(set(kinds)):
        wanted = []
        for url in sorted(set(suite.source[kinds == kind])):
            idx = np.where((suite.source == url) & (kinds == kind))[0]
            base = suite.base[idx, h, j][:, None] + wide[None, :]
            wanted.append(wide[np.abs(suite.measured[idx, None] / base - 1).mean(0).argmin()])
        idx = np.where(kinds == kind)[0]
        pooled = wide[
            np.abs(suite.measured[idx, None] / (suite.base[idx, h, j][:, None] + wide) - 1).mean(0).argmin()
        ]
        print(f"  {kind:40} {len(idx):3} runs, {len(wanted):2} sources: pooled {pooled:5.2f} s; "
              f"per source {' '.join(f'{w:.2f}' for w in sorted(wanted))}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
