"""One set of rank processes for every design run of a local calibration (torch stays in the ranks).

A design run launched on its own pays process start-up, `import torch, deepspeed` and the process
group's rendezvous before its first step: about 4.5 s of CPU per rank on the 2-core testbed, a third
of a quick run's wall time, seven times per calibration. The pool starts the ranks once
(zerotune.launch: wall-clock limit, no orphans) and hands them the design runs one by one through
job files; each rank runs zerotune.bench.step_worker's rank code in-process for every run (a new
DeepSpeed engine per run, as `calibrate --distributed` does) and writes its result next to the job.

The ranks are not reaped between runs, so their CPU time is not in os.times()' children fields:
each rank reports its own cumulative CPU time with its result, and `cpu_s` is the ranks' CPU time
since the previous run ended, which the load meter counts as ours (zerotune/calibrate/load.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from zerotune.errors import RunFailed

WORKER = "zerotune.calibrate.pool_worker"
CPU_KEY = "rank_cpu_s"
"""Field of a rank's result with its process's cumulative CPU time (user + system), seconds."""
_POLL_S = 0.02
_STOP_GRACE_S = 10.0
"""How long the ranks get to notice the stop file and exit after the last run."""


def write_json(path: Path, obj: Any) -> None:
    """Atomic for readers polling `path`: written aside, then renamed."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


class RankPool:
    """`with RankPool(nproc, kind, timeout_s, say) as pool: run_bench(..., launcher=pool.launcher)`."""

    def __init__(
        self, nproc: int, kind: str, timeout_s: float, say: Any = lambda _: None, worker: str = WORKER
    ) -> None:
        from zerotune.launch import LaunchSpec

        self.jobs = Path(tempfile.mkdtemp(prefix="zerotune-pool-"))
        self.say = say
        self.label = "start-up"
        self.count = 0
        self.cpu_s = 0.0
        """The ranks' CPU time during the last run (since the one before it ended)."""
        self._cpu: list[float] = [0.0] * nproc
        self._error: BaseException | None = None
        self.steps: dict[int, str] = {}
        # as zerotune.bench.run's own launches: gloo on DeepSpeed's CPU accelerator, one core per rank
        env = {"DS_ACCELERATOR": "cpu"} if kind == "cpu" else {}
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc) if kind == "cpu" else 1)
        self._spec = LaunchSpec(
            module=worker, task={"jobs": str(self.jobs)}, nproc=nproc, timeout_s=timeout_s, env=env
        )
        self._thread = threading.Thread(target=self._launch, daemon=True)

    def _launch(self) -> None:
        from zerotune.launch import launch

        try:
            launch(self._spec, on_step=self._step)
        except BaseException as exc:  # handed to the caller by the next launcher() call
            self._error = exc

    def _step(self, rank: int, step: str) -> None:
        self.steps[rank] = step
        if rank == 0:
            self.say(f"{self.label}: {step}")

    def __enter__(self) -> RankPool:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        (self.jobs / "stop").touch()
        self._thread.join(timeout=_STOP_GRACE_S)
        if self._thread.is_alive():  # a rank busy or hung in a run we no longer wait for: end it now
            for pid_file in self.jobs.glob("rank*.pid"):
                with contextlib.suppress(ValueError, OSError):
                    os.killpg(int(pid_file.read_text()), signal.SIGKILL)  # its own session (launch)
            self._thread.join(timeout=_STOP_GRACE_S)
        shutil.rmtree(self.jobs, ignore_errors=True)

    def launcher(
        self, task: dict[str, Any], nproc: int, kind: str, timeout_s: float, say: Any, label: str
    ) -> list[dict[str, Any]]:
        """zerotune.bench.run's Launcher: run `task` on the pool's ranks, return their results."""
        if nproc != self._spec.nproc:
            raise RunFailed(f"the calibration's ranks are {self._spec.nproc}, a run asked for {nproc}")
        index, self.count = self.count, self.count + 1
        self.label = label
        write_json(self.jobs / f"job{index}.json", task)
        paths = [self.jobs / f"job{index}.rank{rank}.json" for rank in range(nproc)]
        deadline = time.monotonic() + timeout_s
        while not all(p.exists() for p in paths):
            if not self._thread.is_alive():
                if self._error is not None:
                    raise self._error
                raise RunFailed(f"{label}: the calibration's ranks exited before the run ended")
            if time.monotonic() > deadline:
                where = ", ".join(f"rank {r} at '{self.steps.get(r, 'start-up')}'" for r in range(nproc))
                raise RunFailed(
                    f"{label}: timed out after {timeout_s:g} s; still running: {where}",
                    hint="raise --timeout",
                )
            time.sleep(_POLL_S)
        results = [json.loads(p.read_text()) for p in paths]
        cpu = [float(r.pop(CPU_KEY, 0.0)) for r in results]
        self.cpu_s = sum(now - before for now, before in zip(cpu, self._cpu, strict=True))
        self._cpu = cpu
        return results
