"""Does the speed reference track the machine? (zerotune/calibrate/check.py PACE_SPIKE)

Runs design configs of `zerotune calibrate` round after round on one set of ranks (as calibrate does,
zerotune/calibrate/pool.py), each with its pace read just before and just after its steps
(zerotune/probe/compute.py measure_pace), and prints, per run, the median step time, the two pace
readings and the foreign load (zerotune/calibrate/load.py). The summary: on the quiet runs (foreign
load under 0.05 cores) how far a run's pace (mean of its two readings) strays above the median pace,
and on the loaded ones how much pace and step time rose together.

    .venv/bin/python scripts/evidence/pace.py --rounds 12 --out data/evidence/pace.json
    .venv/bin/python scripts/evidence/pace.py --load data/evidence/pace.json      # the summary only

Time it only with nothing else running (2-core testbed: ~40 s per round of 4 runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

QUIET_CORES = 0.05
"""Foreign cores below which a run counts as quiet (a few ticks of other processes)."""


def measure(rounds: int, names: list[str]) -> list[dict[str, Any]]:
    from zerotune.bench.run import run_bench
    from zerotune.calibrate.design import design
    from zerotune.calibrate.load import LoadMeter
    from zerotune.calibrate.pool import RankPool
    from zerotune.calibrate.run import CPU_WIDTH_SCALE, LOGGED_STEPS, MAX_STEPS, PRECISION, TIME_CAP_S
    from zerotune.catalog.models import load_model

    model = load_model("llama-7b")
    plan = {r.name: r for r in design(1, 256, wide=True, precision="fp32")}
    rows = []
    with RankPool(2, "cpu", 3600) as pool:
        for k in range(rounds):
            for name in names:
                run = plan[name]
                meter = LoadMeter()
                result = run_bench(
                    model, run.config(), layers=2, width_scale=min(1.0, CPU_WIDTH_SCALE * run.width_factor),
                    seq_len=run.seq_len, micro_batch=run.micro_batch, grad_accum=run.grad_accum, nproc=2,
                    device="cpu", warmup=1, steps=3, max_steps=MAX_STEPS, precision=PRECISION,
                    time_cap_s=TIME_CAP_S, logged_steps=LOGGED_STEPS, timeout_s=600, max_micro_steps=None,
                    pace=True, launcher=pool.launcher,
                )  # fmt: skip
                load = meter.stop(pool.cpu_s)
                row = {
                    "round": k,
                    "name": name,
                    "step_s": statistics.median(result.step_times_s),
                    "pace_s": result.pace_s,
                    "foreign_cores": load.foreign_cores,
                }
                rows.append(row)
                print(line(row), flush=True)
    return rows


def line(row: dict[str, Any]) -> str:
    pace = " / ".join(f"{p * 1e3:.2f}" for p in row["pace_s"])
    return f"{row['round']:3d} {row['name']:10s} step {row['step_s']:.3f} s  pace {pace} ms  foreign {row['foreign_cores']:.2f}"


def summary(rows: list[dict[str, Any]]) -> None:
    quiet = [r for r in rows if r["foreign_cores"] < QUIET_CORES]
    loaded = [r for r in rows if r["foreign_cores"] >= QUIET_CORES]
    reference = statistics.median(statistics.mean(r["pace_s"]) for r in quiet)
    above = sorted(statistics.mean(r["pace_s"]) / reference - 1 for r in quiet)
    print(f"quiet runs: {len(quiet)}, median pace {reference * 1e3:.2f} ms; pace above the median: "
          f"largest {above[-1]:+.1%}, 90th percentile {above[int(0.9 * (len(above) - 1))]:+.1%}")  # fmt: skip
    steps: dict[str, list[float]] = defaultdict(list)
    for r in quiet:
        steps[r["name"]].append(r["step_s"])
    for r in loaded:
        usual = statistics.median(steps[r["name"]]) if steps[r["name"]] else None
        if usual:
            print(f"loaded {r['name']:10s} ({r['foreign_cores']:.2f} cores): step x{r['step_s'] / usual:.2f}, "
                  f"pace x{statistics.mean(r['pace_s']) / reference:.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--names", default="s0,s2-small,s3-small,s0-wide")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--load", type=Path)
    args = parser.parse_args(argv)
    if args.load:
        rows = json.loads(args.load.read_text())["runs"]
        for row in rows:
            print(line(row))
    else:
        rows = measure(args.rounds, args.names.split(","))
        if args.out:
            args.out.write_text(json.dumps({"runs": rows}, indent=1) + "\n")
    summary(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
