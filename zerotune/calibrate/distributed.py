"""`zerotune calibrate --distributed`: every rank of a torchrun job calibrates in-process, e.g.

    torchrun --nnodes 2 --nproc-per-node 8 ... -m zerotune calibrate --distributed --out cluster.yaml

so a cluster calibrates its inter-node path: the probe runs as `probe --distributed` does, then each
design run executes zerotune.bench.step_worker's rank code in this process on the torchrun world
(every rank, one DeepSpeed engine per run), and rank 0 gathers the ranks' records, fits and
reports. A watchdog ends this rank (exit 124) past --timeout, and torchrun then stops the others.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from zerotune.calibrate.run import CalibrateOptions, Outcome, Say
from zerotune.errors import InputError
from zerotune.launch import ENV_RUN_DIR

_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _in_process(
    task: dict[str, Any], nproc: int, kind: str, timeout_s: float, say: Say, label: str
) -> list[dict[str, Any]]:
    """A bench Launcher for torchrun ranks: run this rank's part here, gather every rank's result."""
    import torch.distributed as tdist

    from zerotune.bench import step_worker

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # DeepSpeed prints its timers on stdout; our stdout carries the report (or --json) only
    log = os.path.join(os.environ[ENV_RUN_DIR], f"rank{rank}.out")
    sys.stdout.flush()
    saved = os.dup(1)
    with open(log, "ab") as handle:
        os.dup2(handle.fileno(), 1)
        try:
            result = step_worker._run(task, rank, world)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
    gathered: list[Any] = [None] * world
    tdist.all_gather_object(gathered, result)
    return gathered


def _init_group(kind: str, timeout_s: float) -> None:
    """The process group of the design runs. The probe destroyed its own, and a second env://
    init would read the first group's rendezvous keys from torchrun's store (gloo then dials rank
    0's closed listener), so this group rendezvouses under its own key prefix."""
    from datetime import timedelta

    import torch.distributed as tdist

    if tdist.is_initialized():
        return
    timeout = timedelta(seconds=max(30.0, timeout_s / 2))
    backend = "nccl" if kind == "cuda" else "gloo"
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        store = tdist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            int(os.environ["WORLD_SIZE"]),
            is_master=False,
            timeout=timeout,
        )
        tdist.init_process_group(
            backend,
            store=tdist.PrefixStore("zerotune-calibrate/", store),
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=timeout,
        )
    else:
        tdist.init_process_group(backend, init_method="env://", timeout=timeout)


def run_distributed(options: CalibrateOptions, say: Say = lambda _: None) -> Outcome | None:
    """The calibration on rank 0, None on the other ranks."""
    import time

    missing = [name for name in _TORCHRUN_ENV if name not in os.environ]
    if missing:
        raise InputError(
            f"--distributed runs under torchrun, but {', '.join(missing)} is not set",
            hint="torchrun --nproc-per-node N -m zerotune calibrate --distributed (or drop --distributed)",
        )
    world, local_world = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_WORLD_SIZE"])
    if world < 2 or world % local_world:
        raise InputError(
            f"--distributed needs >= 2 ranks and equal ranks per node, got {world} / {local_world}"
        )
    rank = int(os.environ["RANK"])
    from zerotune.bench.run import check_dependencies, detect_device, run_bench
    from zerotune.calibrate.design import design
    from zerotune.calibrate.fit import fit
    from zerotune.calibrate.run import CPU_WIDTH_SCALE, decision, gpu_precision, proxy_seq_len
    from zerotune.catalog.hardware import load_profile
    from zerotune.catalog.models import load_model
    from zerotune.probe.distributed import _watchdog
    from zerotune.probe.distributed import run_distributed as probe_distributed
    from zerotune.probe.runner import ProbeOptions

    check_dependencies()
    start = time.monotonic()
    timer = _watchdog(options.timeout_s)
    try:
        kind, _ = detect_device(options.device)
        if kind == "cpu":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        os.environ[ENV_RUN_DIR] = tempfile.mkdtemp(prefix="zerotune-calibrate-")  # step files of this rank
        model = load_model(options.model)
        if options.profile:
            base, origin = load_profile(options.profile), f"profile {options.profile}"
        else:
            outcome = probe_distributed(
                ProbeOptions(quick=True, model=options.model, timeout_s=options.timeout_s)
            )
            base, origin = (outcome.profile if outcome else None), "a --quick distributed probe run now"
        _init_group(kind, options.timeout_s)
        nodes = world // local_world
        scale = options.width_scale or (1.0 if kind == "cuda" else CPU_WIDTH_SCALE)
        seq = options.seq_len or proxy_seq_len(kind, model)
        plan = design(
            options.micro_batch,
            seq,
            wide=kind == "cpu",
            precision=gpu_precision() if kind == "cuda" else "fp32",
        )
        runs = []
        for i, run in enumerate(plan, 1):
            if rank == 0:
                say(f"run {i}/{len(plan)} {run.name}: {run.describe()}")
            result = run_bench(
                model, run.config(), layers=options.layers, width_scale=min(1.0, scale * run.width_factor),
                seq_len=run.seq_len, micro_batch=run.micro_batch, grad_accum=run.grad_accum, nproc=world,
                device=kind, warmup=1, steps=3, max_steps=options.max_steps, precision=options.precision,
                time_cap_s=options.time_cap_s, logged_steps=2, timeout_s=options.timeout_s,
                max_micro_steps=None, launcher=_in_process,
                nodes=nodes if base is None or base.inter_node is not None else 1,
            )  # fmt: skip
            runs.append(result.model_dump(mode="json"))
    finally:
        timer.cancel()
    if rank != 0 or base is None:
        return None
    fitted = fit(runs, base, names=[r.name for r in plan])
    fitted.notes.insert(0, f"calibrated {origin}; {nodes} node(s) x {local_world} rank(s) under torchrun")
    if fitted.profile.calibration is not None:
        fitted.profile.calibration.notes.insert(0, f"base: {origin}; torchrun {nodes} x {local_world}")
    return Outcome(fit=fitted, base=base, design=plan, runs=runs, elapsed_s=time.monotonic() - start,
                   decision=decision(fitted, options.repeats))  # fmt: skip
