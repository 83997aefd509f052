"""Speed of the memory model: microseconds per `estimate_memory` call, the search's inner loop.

    .venv/bin/python scripts/benchmarks/bench_memory.py

Prints one row per (model, stage, offload) with the best-of-5 mean over 2,000 calls.
"""

from __future__ import annotations

import timeit
from functools import partial

from rich.console import Console
from rich.table import Table

from zerotune.catalog.hardware import load_profile
from zerotune.catalog.models import load_model
from zerotune.dsconfig.settings import OffloadOptimizer, OffloadParam, ZeroSettings
from zerotune.model.memory import estimate_memory
from zerotune.schema.workload import Workload
from zerotune.units import fmt_gib

CASES = [
    ("gpt2", 2, "none"),
    ("llama-7b", 2, "none"),
    ("llama-7b", 3, "none"),
    ("llama-70b", 3, "cpu"),
    ("llama3.1-405b", 3, "cpu"),
]


def main() -> None:
    hardware = load_profile("dgx-h100")
    workload = Workload(seq_len=4096, micro_batch=1, gpus_per_node=8)
    table = Table(title="estimate_memory speed (best of 5 × 2,000 calls)")
    for column in ("model", "stage", "offload", "µs/call", "GiB/GPU"):
        table.add_column(column, justify="right" if column in ("stage", "µs/call", "GiB/GPU") else "left")
    for name, stage, offload in CASES:
        model = load_model(name)
        zero = ZeroSettings(
            stage=stage,
            overlap_comm=True,
            offload_optimizer=OffloadOptimizer(device=offload),
            offload_param=OffloadParam(device=offload if stage == 3 else "none"),
        )
        estimate = estimate_memory(model, workload, zero, hardware=hardware)
        calls = 2000
        best = min(
            timeit.repeat(
                partial(estimate_memory, model, workload, zero, hardware=hardware), number=calls, repeat=5
            )
        )
        table.add_row(
            name,
            str(stage),
            offload,
            f"{best / calls * 1e6:.1f}",
            fmt_gib(estimate.per_gpu.total, unit=False),
        )
    Console().print(table)


if __name__ == "__main__":
    main()
