"""Run N ranks of a worker module on loopback, with no hangs and no orphans.

`probe` and `bench` measure with torch.distributed in separate processes (one per GPU, or N gloo ranks
on a CPU host). This module is the parent side and the small worker-side protocol:

- every rank is `python -m <module>` in its own session (process group), with the torch.distributed
  environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT);
- a rank reads its task, reports progress steps and writes its result as files in a private run
  folder (ZEROTUNE_RUN_DIR); its stdout/stderr go to log files there, never to our stdout;
- the parent polls: the first rank to exit non-zero, the wall-clock timeout, Ctrl-C or SIGTERM stop
  every rank (SIGTERM, then SIGKILL, to the whole process group) and raise RunFailed naming the rank,
  its last step and the tail of its stderr. Ranks also get PR_SET_PDEATHSIG so they die with us even
  if we are SIGKILLed.

Pure stdlib: the workers import torch, this module does not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerotune.errors import RunFailed

ENV_RUN_DIR = "ZEROTUNE_RUN_DIR"
ENV_KEEP = "ZEROTUNE_KEEP_RUN_DIR"
_POLL_S = 0.05
_TERM_GRACE_S = 2.0


@dataclass(frozen=True)
class LaunchSpec:
    module: str
    """Worker entry point, run as `python -m <module>` in every rank."""
    task: dict[str, Any]
    """JSON-serialisable task handed to every rank."""
    nproc: int
    timeout_s: float
    """Wall-clock limit for the whole run."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for the ranks."""
    log: str | None = None
    """Copy rank 0's stdout here when the ranks end, failed or not (`zerotune bench --log`)."""


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept)


_PEER_FAILURE_MARKS = ("Connection reset by peer", "Connection closed by peer", "remote worker", "Broken pipe")
"""How gloo/NCCL word a failure caused by another rank's exit (gloo's tcp pair.cc read/write errors)."""

_ORIGIN_GRACE_S = 2.0
"""How long to wait, after only peers' connection errors are seen, for the rank that caused them."""


def _peer_failure(cause: str) -> bool:
    return any(mark in cause for mark in _PEER_FAILURE_MARKS)


def _cause(path: Path) -> str:
    """The most telling line of a rank's stderr: the last exception line, else the last line."""
    tail = _tail(path, 40).splitlines()
    for line in reversed(tail):
        head = line.split(":", 1)[0].strip()
        if head.endswith(("Error", "Exception", "Interrupt")):
            return line.strip()
    return tail[-1].strip() if tail else "no output"


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While ranks run, SIGTERM to us unwinds like Ctrl-C so the ranks are stopped too."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + _TERM_GRACE_S
        for proc in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:  # reap; also kill stragglers left in a rank's group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)


def launch(spec: LaunchSpec, on_step: Callable[[int, str], None] | None = None) -> list[dict[str, Any]]:
    """Run `spec.nproc` ranks to completion and return their results (index = rank).

    Raises RunFailed when a rank exits non-zero or without a result, or on timeout; KeyboardInterrupt
    passes through. In every case no rank outlives this call.
    """
    if spec.nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {spec.nproc}")
    run_dir = Path(tempfile.mkdtemp(prefix="zerotune-run-"))
    _write_json(run_dir / "task.json", spec.task)
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        with _sigterm_as_interrupt():
            for rank in range(spec.nproc):
                env = {
                    **os.environ,
                    **spec.env,
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(spec.nproc),
                    "LOCAL_WORLD_SIZE": str(spec.nproc),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    ENV_RUN_DIR: str(run_dir),
                    "PYTHONUNBUFFERED": "1",
                }
                out = open(run_dir / f"rank{rank}.out", "wb")  # noqa: SIM115 - closed in finally
                err = open(run_dir / f"rank{rank}.err", "wb")  # noqa: SIM115
                logs += [out, err]
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", spec.module],
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        start_new_session=True,
                        preexec_fn=_die_with_parent,
                    )
                )
            return _supervise(spec, procs, run_dir, on_step)
    finally:
        _stop(procs)
        for handle in logs:
            handle.close()
        if spec.log and (run_dir / "rank0.out").exists():
            with contextlib.suppress(OSError):  # the run's outcome is what to report, not a full disk
                shutil.copyfile(run_dir / "rank0.out", spec.log)
        if not os.environ.get(ENV_KEEP):
            shutil.rmtree(run_dir, ignore_errors=True)


def _supervise(
    spec: LaunchSpec,
    procs: list[subprocess.Popen[bytes]],
    run_dir: Path,
    on_step: Callable[[int, str], None] | None,
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + spec.timeout_s
    steps: dict[int, str] = {}
    first_failure_at: float | None = None
    while True:
        for rank in range(len(procs)):
            step = _read_step(run_dir, rank)
            if step is not None and step != steps.get(rank):
                steps[rank] = step
                if on_step:
                    on_step(rank, step)
        codes = [proc.poll() for proc in procs]
        failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            # Peers of a dead rank fail too (a broken connection), sometimes before the parent sees the
            # rank that caused it: give the origin a moment to exit, then name a rank whose own cause is
            # not a peer's failure.
            origins = [r for r in failed if not _peer_failure(_cause(run_dir / f"rank{r}.err"))]
            first_failure_at = first_failure_at or time.monotonic()
            if not origins and None in codes and time.monotonic() < first_failure_at + _ORIGIN_GRACE_S:
                time.sleep(_POLL_S)
                continue
            rank = (origins or failed)[0]
            code = codes[rank]
            how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with {code}"
            raise RunFailed(
                f"rank {rank} {how} during '{steps.get(rank, 'start-up')}': {_cause(run_dir / f'rank{rank}.err')}",
                hint=f"last lines of rank {rank}'s stderr:\n{_tail(run_dir / f'rank{rank}.err')}",
            )
        if all(code == 0 for code in codes):
            break
        if time.monotonic() > deadline:
            waiting = [rank for rank, code in enumerate(codes) if code is None]
            where = ", ".join(f"rank {r} at '{steps.get(r, 'start-up')}'" for r in waiting)
            raise RunFailed(
                f"timed out after {spec.timeout_s:g} s; still running: {where}",
                hint="raise --timeout, or look for a hung collective (a rank that died or a blocked port)",
            )
        time.sleep(_POLL_S)
    results = []
    for rank in range(len(procs)):
        path = run_dir / f"rank{rank}.result.json"
        if not path.exists():
            raise RunFailed(
                f"rank {rank} exited without writing a result", hint=_tail(run_dir / f"rank{rank}.err")
            )
        results.append(json.loads(path.read_text()))
    return results


def _read_step(run_dir: Path, rank: int) -> str | None:
    try:
        return (run_dir / f"rank{rank}.step").read_text()
    except OSError:
        return None


# ---- worker side ---------------------------------------------------------------------------------


def _run_dir() -> Path:
    try:
        return Path(os.environ[ENV_RUN_DIR])
    except KeyError:
        raise RuntimeError(
            f"{ENV_RUN_DIR} is not set: this module is a rank started by zerotune.launch"
        ) from None


def worker_rank() -> tuple[int, int]:
    """(rank, world_size) of this worker."""
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def worker_task() -> dict[str, Any]:
    return json.loads((_run_dir() / "task.json").read_text())


def report_step(step: str) -> None:
    """Tell the parent what this rank is doing now (named in any failure message)."""
    rank, _ = worker_rank()
    path = _run_dir() / f"rank{rank}.step"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(step)
    os.replace(tmp, path)


def write_result(result: dict[str, Any]) -> None:
    rank, _ = worker_rank()
    _write_json(_run_dir() / f"rank{rank}.result.json", result)
