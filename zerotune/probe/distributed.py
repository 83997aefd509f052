"""`zerotune probe --distributed`: every rank of a torchrun job runs the probe in-process, e.g.

    torchrun --nnodes 2 --nproc-per-node 8 ... -m zerotune probe --distributed --out cluster.yaml

Intra-node links are measured in one group per node, inter-node links in a group of one rank per
node (while the rest wait), so a profile gets both link classes. Rank 0 builds and reports the
profile; other ranks return None. A watchdog ends this rank (exit 124) past --timeout, and torchrun
then stops the others.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timezone

from zerotune.errors import InputError, MissingDependency
from zerotune.hw import disk as disk_test
from zerotune.hw.host import read_host
from zerotune.hw.nvml import GpuReport, NvmlUnavailable, read_gpus
from zerotune.probe.profile import ProbeOutcome, build_profile, merge_compute, merge_sweep
from zerotune.probe.runner import ProbeOptions, build_task, catalog_gpu, model_for, plan
from zerotune.units import MiB

_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _watchdog(timeout_s: float) -> threading.Timer:
    def expire() -> None:
        sys.stderr.write(f"error: probe timed out after {timeout_s:g} s on rank {os.environ.get('RANK')}\n")
        sys.stderr.flush()
        os._exit(124)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    return timer


def run_distributed(
    options: ProbeOptions, notice: Callable[[str], None] = lambda _: None
) -> ProbeOutcome | None:
    missing = [name for name in _TORCHRUN_ENV if name not in os.environ]
    if missing:
        raise InputError(
            f"--distributed runs under torchrun, but {', '.join(missing)} is not set",
            hint="torchrun --nproc-per-node N -m zerotune probe --distributed (or drop --distributed)",
        )
    if importlib.util.find_spec("torch") is None:
        raise MissingDependency("torch", "probe")
    world = int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    if world < 2 or world % local_world:
        raise InputError(
            f"--distributed needs >= 2 ranks and equal ranks per node, got {world} / {local_world}"
        )
    rank = int(os.environ["RANK"])
    timer = _watchdog(options.timeout_s)
    try:
        try:
            gpus: GpuReport | None = read_gpus()
        except NvmlUnavailable as exc:
            gpus = None
            if rank == 0:
                notice(f"no NVIDIA GPU / NVML not found ({exc}); measuring gloo over the CPU")
        p = plan(gpus, ProbeOptions(nproc=local_world if gpus else None, quick=options.quick))
        host = read_host()
        threads = max(1, (host.cpu_cores or 1) // local_world)
        task = build_task(
            p, options, model_for(options.model), host.cpu_cores or 1, min(60.0, options.timeout_s)
        )
        task["threads_per_rank"] = threads
        from zerotune.probe import rank_worker  # torch from here on

        gathered = rank_worker.run_distributed(task, lambda _step: None)
    finally:
        timer.cancel()
    if gathered is None:
        return None
    disk = None
    if options.nvme_path:  # rank 0's host only
        disk = disk_test.measure(options.nvme_path, max_bytes=(256 if options.quick else 1024) * MiB)
    ranks = gathered["ranks"]
    lw, nodes = gathered["local_world"], gathered["nodes"]
    notes = [f"measured under torchrun: {nodes} node(s) x {lw} ranks; intra-node numbers from node 0"]
    if disk:
        notes.append(f"disk test in {disk.path} on rank 0's host: {disk.method}")
    inter = None
    if nodes > 1:
        inter = merge_sweep([{**ranks[k * lw]["inter"], "backend": p.backend} for k in range(nodes)], p.dtype)
    if lw > 1:
        intra = merge_sweep([{**r["intra"], "backend": p.backend} for r in ranks[:lw]], p.dtype)
    else:  # one rank per node: the only links measured are the inter-node ones
        intra, inter = inter, None  # type: ignore[assignment]
        notes.append("one rank per node: intra_node holds the inter-node measurement")
    profile = build_profile(
        name=f"probe-{socket.gethostname()}-x{nodes}",
        date=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        dtype=p.dtype,
        host=host,
        intra=intra,
        inter=inter,
        nodes=nodes,
        compute=merge_compute(ranks[:lw]),
        overlap=ranks[0].get("overlap"),
        gpus=gpus,
        disk=disk,
        notes=notes,
        datasheet=catalog_gpu(gpus.devices[0].name) if gpus else None,
    )
    return ProbeOutcome(profile=profile, intra=intra, inter=inter, gpus=gpus, disk=disk, notes=notes)
