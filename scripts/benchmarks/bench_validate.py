"""Wall time of `zerotune validate` over the public-project corpus (tests/fixtures/corpus) in one fresh process, next to `import deepspeed`.

Target (issue 3): the whole corpus in < 1.5 s wall, never importing torch/deepspeed/pynvml.
Usage: python scripts/benchmarks/bench_validate.py [--repeats 5] [--corpus tests/fixtures/corpus/configs]
Prints min/median wall seconds and median CPU seconds per command (fresh interpreter each run).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+sys) of one fresh process; CPU time is robust to a busy machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def print_timings(
    commands: dict[str, list[str]], env: dict[str, str], repeats: int, width: int, digits: int
) -> None:
    """One row per command: min and median wall seconds, median CPU seconds over `repeats` fresh runs."""
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, {repeats} runs each")
    print(f"{'command':<{width}} {'wall min s':>10} {'wall med s':>10} {'cpu med s':>10}")
    for name, cmd in commands.items():
        runs = [run(cmd, env) for _ in range(repeats)]
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(
            f"{name:<{width}} {min(walls):>10.{digits}f} {statistics.median(walls):>10.{digits}f} "
            f"{statistics.median(cpus):>10.{digits}f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--corpus", default=str(REPO / "tests" / "fixtures" / "corpus" / "configs"))
    args = parser.parse_args()
    files = sorted(str(p) for p in Path(args.corpus).iterdir())
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    py = sys.executable
    commands = {
        f"zerotune validate ({len(files)} files, text)": [
            py,
            "-m",
            "zerotune",
            "validate",
            *files,
            "--exit-zero",
        ],
        f"zerotune validate ({len(files)} files, json)": [
            py,
            "-m",
            "zerotune",
            "validate",
            *files,
            "--format",
            "json",
            "--exit-zero",
        ],
        "python -c 'import zerotune.cli.app'": [py, "-c", "import zerotune.cli.app"],
        "python -c 'import deepspeed'": [py, "-c", "import deepspeed"],
    }
    print_timings(commands, env, args.repeats, width=46, digits=3)


if __name__ == "__main__":
    main()
