"""`zerotune bench`: real DeepSpeed training steps of a proxy model, measured per phase, per
collective call (bucket) and per layer. The programmatic entry point is `run_bench`; the ranks run
zerotune.bench.step_worker (the only module here that imports torch and deepspeed at load)."""

from __future__ import annotations

from zerotune.bench.result import BenchResult
from zerotune.bench.run import run_bench

__all__ = ["BenchResult", "run_bench"]
