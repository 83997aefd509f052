"""Search speed: candidates, pruned, predicted and wall time for several model x hardware pairs.

    .venv/bin/python scripts/benchmarks/bench_search.py [--repeat 3] [model:profile ...]

Each pair is searched `--repeat` times in this process (the first run includes the per-model
preparation the memory and step models cache); the table shows the first wall time and the
median wall and CPU (process) time of the rest; us/candidate is CPU time per candidate. A
benchmark script, not a test: wall times depend on the host and its load, CPU time less so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from zerotune.catalog.hardware import load_profile  # noqa: E402
from zerotune.catalog.models import load_model  # noqa: E402
from zerotune.search.rank import SearchRequest, search  # noqa: E402

PAIRS = (
    "gpt2:dgx-h100",
    "llama-7b:dgx-h100",
    "llama-7b:8xl40s-pcie",
    "llama-13b:4xrtx4090",
    "llama-70b:dgx-h100",
    "mixtral-8x7b:h100-2node-ib",
    "llama3.1-405b:h100-4node-ib",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="*", default=list(PAIRS), help="model:profile")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    table = Table(title="zerotune search speed", title_justify="left")
    for head in (
        "model",
        "profile",
        "candidates",
        "pruned",
        "predicted",
        "memory calls",
        "step calls",
        "first s",
        "median s",
        "median cpu s",
        "us/candidate",
        "choice",
    ):
        table.add_column(head, justify="left" if head in ("model", "profile", "choice") else "right")
    for pair in args.pairs:
        model_name, profile_name = pair.split(":")
        model, hardware = load_model(model_name), load_profile(profile_name)
        times, cpu = [], []
        result = None
        for _ in range(max(1, args.repeat)):
            t0, c0 = time.perf_counter(), time.process_time()
            result = search(model, hardware, SearchRequest())
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        s = result.stats
        rest = statistics.median(times[1:]) if len(times) > 1 else times[0]
        rest_cpu = statistics.median(cpu[1:]) if len(cpu) > 1 else cpu[0]
        best = result.best
        choice = "nothing fits"
        if best is not None:
            c = best.candidate
            choice = f"z{c.stage} {c.offload_optimizer}/{c.offload_param} mb{c.micro_batch}"
        table.add_row(
            model_name,
            profile_name,
            f"{s.candidates:,}",
            f"{s.pruned:,}",
            f"{s.predicted:,}",
            f"{s.memory_estimates:,}",
            f"{s.step_predictions:,}",
            f"{times[0]:.3f}",
            f"{rest:.3f}",
            f"{rest_cpu:.3f}",
            f"{rest_cpu / s.candidates * 1e6:.0f}",
            choice,
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
