"""How fast `zerotune diagnose` reads a large log, and that it streams (bounded memory).

    .venv/bin/python scripts/benchmarks/bench_diagnose.py                 # 100 MB (issue 13 target: < 5 s)
    .venv/bin/python scripts/benchmarks/bench_diagnose.py --size-mb 1024  # 1 GB: memory must stay flat

The log is synthetic but shaped like a real multi-rank DeepSpeed run: 8 interleaved `[rankN]:`
streams of HF Trainer progress bars, DeepSpeed step/timer/throughput lines, wall_clock_breakdown
lines, Python warnings and NCCL INFO noise, with a stage-3 OOM traceback at the very end (so the
whole file must be read). Times are wall-clock of the whole CLI (`python -m zerotune diagnose`,
start-up included) and of the in-process pipeline; peak RSS is the CLI process's maximum resident
set. Numbers depend on the machine and its load: say which when you quote them.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

NOISE = [
    "[rank{r}]: {p}%|████▌     | {i}/100000 [1:02:03<2:03:04,  1.23it/s]",
    "[rank{r}]: [2024-05-01 10:{m:02d}:{s:02d},123] [INFO] [logging.py:128:log_dist] [Rank {r}] step={i}, skipped=0, lr=[2e-05], mom=[(0.9, 0.95)]",
    "[rank{r}]: [2024-05-01 10:{m:02d}:{s:02d},124] [INFO] [timer.py:264:stop] epoch=0/micro_step={i}/global_step={i}, RunningAvgSamplesPerSec=41.2, CurrSamplesPerSec=40.9, MemAllocated=31.2GB, MaxMemAllocated=35.8GB",
    "[rank{r}]: [Rank {r}] time (ms) | fwd: 412.10 | bwd: 801.22 | bwd_inner: 702.10 | bwd_allreduce: 99.02 | step: 120.44",
    "[rank{r}]: /opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:90: UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
    "gpu-node-{r}:{pid}:{pid} [0] NCCL INFO Channel 0{r}/32 : 0 1 2 3 4 5 6 7",
    "[rank{r}]: {{'loss': 1.{i}, 'grad_norm': 0.4, 'learning_rate': 1.9e-05, 'epoch': 0.{i}}}",
]
OOM_TAIL = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 435, in __all_gather_params
[rank3]:     self.__all_gather_params_(nonquantized_params, forward, quantize=self.zero_quantized_weights)
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.07 GiB. GPU 3 has a total capacity of 79.10 GiB of which 586.69 MiB is free.
"""


def make_log(path: Path, size: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    written = 0
    with path.open("w") as out:
        while written < size:
            lines = []
            for _ in range(2000):
                template = NOISE[rng.randrange(len(NOISE))]
                i = rng.randrange(100000)
                lines.append(
                    template.format(r=rng.randrange(8), p=i % 100, i=i, m=i % 60, s=i % 59, pid=1000 + i % 7)
                )
            chunk = "\n".join(lines) + "\n"
            out.write(chunk)
            written += len(chunk.encode())
        out.write(OOM_TAIL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        make_log(log, int(args.size_mb * 1024 * 1024))
        size = log.stat().st_size
        lines = sum(1 for _ in log.open("rb"))
        cli_times, rss = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", _CLI, str(log)], env=env, capture_output=True, text=True, check=False
            )
            cli_times.append(time.perf_counter() - start)
            cause, kb = done.stdout.split()
            rss.append(int(kb))
        sys.path.insert(0, str(ROOT))
        from zerotune.diagnose.scan import scan_stream

        scan_times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            with log.open("rb") as handle:
                scan = scan_stream(handle)
            scan_times.append(time.perf_counter() - start)
    print(
        f"{'log':<28}{'lines':>12}{'CLI best s':>12}{'CLI median s':>14}{'scan best s':>13}{'MB/s':>8}{'peak RSS MiB':>14}  cause"
    )
    mb = size / 2**20
    print(
        f"{f'{mb:.0f} MiB synthetic, 8 ranks':<28}{lines:>12,}{min(cli_times):>12.2f}{sorted(cli_times)[len(cli_times) // 2]:>14.2f}"
        f"{min(scan_times):>13.2f}{mb / min(cli_times):>8.0f}{max(rss) / 1024:>14.0f}  {cause} (OOM on line {scan.ooms[0].line.number:,})"
    )
    print("target (issue 13): 100 MB in < 5 s, memory independent of the log size")


_CLI = """
import io, resource, sys
from zerotune.diagnose.analyse import Options, analyse
with open(sys.argv[1], "rb") as handle:
    report, _ = analyse(handle, sys.argv[1], Options())
print(report.diagnosis.cause, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

if __name__ == "__main__":
    _ = resource  # the child reports its own peak RSS
    main()
