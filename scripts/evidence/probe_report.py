"""How long each phase of `zerotune probe` takes on this machine (speed targets: --quick about
10 s and a full CPU probe under 60 s on a 2-core host), with the headline numbers it measured.

    .venv/bin/python scripts/evidence/probe_report.py [--full] [--nproc N]

Prints one table: phase, seconds (rank 0's step reports, as the parent saw them).
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from zerotune.probe.runner import ProbeOptions, run_probe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="time the full probe instead of --quick")
    parser.add_argument("--nproc", type=int, default=None)
    args = parser.parse_args()
    marks: list[tuple[str, float]] = [("start-up", time.monotonic())]

    def on_step(rank: int, step: str) -> None:
        if rank == 0:
            marks.append((step, time.monotonic()))

    outcome = run_probe(ProbeOptions(nproc=args.nproc, quick=not args.full, timeout_s=600), on_step=on_step)
    marks.append(("(end)", time.monotonic()))
    table = Table(title=f"zerotune probe {'full' if args.full else '--quick'}: phases")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    for (step, start), (_, end) in zip(marks, marks[1:], strict=False):
        table.add_row(step, f"{end - start:.2f}")
    table.add_row("total", f"{marks[-1][1] - marks[0][1]:.2f}", style="bold")
    console = Console()
    console.print(table)
    profile = outcome.profile
    console.print(
        f"avg large-message busbw {outcome.intra.avg_busbw_GBps:.3f} GB/s over {outcome.intra.ranks} "
        f"{outcome.intra.backend} ranks; achieved {profile.compute.achieved_flops}; "
        f"overlap slowdown {profile.compute.overlap_slowdown}"
    )


if __name__ == "__main__":
    main()
