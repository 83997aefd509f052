"""Make the synthetic `diagnose` fixtures from real `zerotune bench` runs on this host (CPU, gloo).

    .venv/bin/python scripts/evidence/diagnose_synthetic.py            # writes tests/fixtures/logs/synthetic/*.log
    .venv/bin/python scripts/evidence/diagnose_synthetic.py --only killed

Each run is `zerotune bench` on a small llama-7b proxy (2 ranks, 2 blocks, width 0.125, seq 64) with
ZEROTUNE_KEEP_RUN_DIR set, so the ranks' stdout/stderr survive; the fixture is the bench command's
own stderr followed by each rank's output with a torchrun-style `[rankN]:` prefix. Faults:

- healthy: no fault (the DeepSpeed start-up log, its config dump and the step lines);
- rejected: a config whose `stage3_prefetch_bucket_size` is fractional (15099494.4, what HF's
  "auto" used to produce), which DeepSpeed's pydantic model refuses;
- killed: SIGKILL to rank 1 once both ranks report the measured step (what the kernel's OOM killer
  does); rank 1 is found by its environment (our private run folder and RANK=1);
- tinymem: an over-large micro-batch (512 x 512 tokens) under a 5 GiB address-space limit
  (RLIMIT_AS, inherited by the ranks): torch's CPU allocator refuses the activations mid-step.

Paths and the host name in the output are replaced so the fixtures carry no personal data.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "logs" / "synthetic"
BENCH = [
    sys.executable, "-m", "zerotune", "bench", "--model", "llama-7b", "--layers", "2", "--width-scale", "0.125",
    "--seq-len", "64", "--nproc", "2", "--device", "cpu", "--warmup", "0", "--steps", "2", "--logged-steps", "1",
    "--timeout", "300",
]  # fmt: skip
CONFIG = {
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 3},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "steps_per_print": 1,
}


def _rank_pid(run_root: Path, rank: int) -> int | None:
    """The pid of `rank` among our own bench ranks (their env names a run folder under run_root)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and any(
            e.startswith(b"ZEROTUNE_RUN_DIR=" + str(run_root).encode()) for e in env
        ):
            return int(proc.name)
    return None


TINY_MEMORY_BYTES = 5 * 1024**3
"""Address-space cap for the tinymem run: the proxy model and DeepSpeed start within it (measured on
this host), a 512 x 512-token micro-batch's activations do not."""


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (TINY_MEMORY_BYTES, TINY_MEMORY_BYTES))


def run(name: str, config: dict, kill_rank: int | None = None, extra: tuple[str, ...] = ()) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f"zt-synth-{name}-"))
    cfg = tmp / "ds.json"
    cfg.write_text(json.dumps(config, indent=2))
    env = {**os.environ, "ZEROTUNE_KEEP_RUN_DIR": "1", "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*BENCH, *extra, "--config", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_cap_memory if name == "tinymem" else None,  # noqa: PLW1509 - only setrlimit
    )
    if kill_rank is not None:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            runs = list(tmp.glob("zerotune-run-*"))
            steps = [r / f"rank{i}.step" for r in runs for i in (0, 1)]
            if steps and all(s.exists() and "step" in s.read_text() for s in steps):
                pid = _rank_pid(tmp, kill_rank)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    break
            time.sleep(0.2)
    out, err = proc.communicate(timeout=600)
    parts = [
        f"$ zerotune bench --config ds.json --nproc 2 --device cpu  (exit {proc.returncode})\n",
        err.decode(),
    ]
    for run_dir in sorted(tmp.glob("zerotune-run-*")):
        for rank in (0, 1):
            for stream in ("out", "err"):
                path = run_dir / f"rank{rank}.{stream}"
                if path.exists():
                    parts += [
                        f"[rank{rank}]: {line}\n" for line in path.read_text(errors="replace").splitlines()
                    ]
    text = _scrub("".join(parts), tmp)
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"bench_{name}.log"
    target.write_text(text)
    return target


def _scrub(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "/tmp/run").replace(str(ROOT), "/repo")
    text = text.replace(sys.prefix, "/venv").replace(str(Path.home()), "/home/user")
    text = text.replace(socket.gethostname(), "host")
    return re.sub(r"/tmp/run/zerotune-run-\w+", "/tmp/run/zerotune-run", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("healthy", "rejected", "killed", "tinymem"))
    args = parser.parse_args()
    rejected = json.loads(json.dumps(CONFIG))
    rejected["zero_optimization"]["stage3_prefetch_bucket_size"] = 15099494.4
    stage2 = {**CONFIG, "zero_optimization": {"stage": 2}}
    big = ("--seq-len", "512", "--micro-batch", "512")
    jobs = {
        "healthy": (CONFIG, None, ()),
        "rejected": (rejected, None, ()),
        "killed": (CONFIG, 1, ()),
        "tinymem": (stage2, None, big),
    }
    for name, (config, kill, extra) in jobs.items():
        if args.only in (None, name):
            started = time.monotonic()
            path = run(name, config, kill, extra)
            print(
                f"{name}: {path.relative_to(ROOT)} ({path.stat().st_size} bytes, {time.monotonic() - started:.0f} s)"
            )


if __name__ == "__main__":
    main()
