"""A rank of zerotune/calibrate/pool.py: runs every design run the parent hands it, in this process.

Waits for `job<k>.json` in the pool's folder, runs zerotune.bench.step_worker's rank code on it, writes
`job<k>.rank<r>.json` (with this process's cumulative CPU time), and exits when `stop` appears. A failure
ends the rank with one line on stderr, as step_worker does, which zerotune.launch reports.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zerotune.calibrate.pool import CPU_KEY, write_json
from zerotune.launch import worker_rank, worker_task, write_result

_POLL_S = 0.02


def main(run: Callable[[dict[str, Any], int, int], dict[str, Any]] | None = None) -> None:
    """`run`: the rank code of one run (default: zerotune.bench.step_worker's)."""
    from zerotune.bench import step_worker

    run = run or step_worker._run
    rank, world = worker_rank()
    jobs = Path(worker_task()["jobs"])
    (jobs / f"rank{rank}.pid").write_text(str(os.getpid()))  # for the pool's last-resort stop
    done = 0
    try:
        while True:
            job = jobs / f"job{done}.json"
            while not job.exists():
                if (jobs / "stop").exists():
                    write_result({"runs": done})
                    _exit(0)
                time.sleep(_POLL_S)
            import json

            result = run(json.loads(job.read_text()), rank, world)
            sys.stdout.flush()
            t = os.times()
            write_json(jobs / f"job{done}.rank{rank}.json", {**result, CPU_KEY: t.user + t.system})
            done += 1
    except BaseException as exc:  # one clear line on stderr for the parent, then a non-zero exit
        traceback.print_exc(file=sys.stdout)
        sys.stderr.write(f"{type(exc).__name__}: {step_worker._summary(exc)}\n")
        _exit(1)


def _exit(code: int) -> None:
    # as step_worker: skip interpreter teardown (DeepSpeed/gloo atexit handlers can block on a peer)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
