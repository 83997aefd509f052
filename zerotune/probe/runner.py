"""`zerotune probe` end to end: NVML and host facts, then N spawned ranks (zerotune.launch) that
sweep the collectives and time compute, then a HardwareProfile.

The sweep plan (sizes, iterations, shapes, budgets) is decided here, torch-free, and handed to
every rank as its task; see zerotune.probe.rank_worker for what a rank does with it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from zerotune.errors import InputError, MissingDependency, RunFailed
from zerotune.hw import disk as disk_test
from zerotune.hw.host import read_host
from zerotune.hw.nvml import GpuReport, NvmlUnavailable, read_gpus
from zerotune.launch import LaunchSpec, launch
from zerotune.probe.compute import shape_for
from zerotune.probe.metrics import size_sweep
from zerotune.probe.profile import ProbeOutcome, build_profile, merge_compute, merge_sweep
from zerotune.schema.hardware import GpuSpec
from zerotune.units import KiB, MiB

WORKER = "zerotune.probe.rank_worker"
STEPS = (
    "start-up",
    "init",
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "overlap",
    "compute",
    "done",
)
"""What a rank reports, in order (the progress bar follows rank 0 through them); sweep steps
carry the size too ("all_gather 4096 B")."""


@dataclass(frozen=True)
class ProbeOptions:
    nproc: int | None = None
    """Ranks to launch: default one per GPU, or 2 gloo ranks on a CPU host."""
    quick: bool = False
    model: str | None = None
    nvme_path: str | None = None
    timeout_s: float = 300.0
    fault: dict[str, Any] | None = None
    """Test-only fault injection handed to the ranks (see rank_worker._fault)."""


@dataclass(frozen=True)
class Plan:
    backend: str
    dtype: str
    nproc: int
    sizes: list[int]
    warmup: int
    samples: int


def plan(gpus: GpuReport | None, options: ProbeOptions) -> Plan:
    """Backend, dtype and sweep: NCCL in bf16 (fp16 before Ampere) over 1 KiB..1 GiB on GPUs; gloo
    in fp32 over 4 KiB..16 MiB on a CPU host (bf16 arithmetic is emulated and slow there)."""
    if gpus is not None:
        cc = gpus.devices[0].compute_capability
        dtype = "bf16" if cc is None or float(cc) >= 8.0 else "fp16"
        nproc = options.nproc or len(gpus.devices)
        if nproc > len(gpus.devices):
            raise InputError(f"--nproc {nproc} is more than the {len(gpus.devices)} GPUs found")
        sizes = size_sweep(KiB, 64 * MiB if options.quick else 1024 * MiB)
        return Plan("nccl", dtype, nproc, sizes, warmup=5, samples=3 if options.quick else 5)
    nproc = options.nproc or 2
    sizes = size_sweep(4 * KiB, MiB if options.quick else 16 * MiB)
    return Plan(
        "gloo", "fp32", nproc, sizes, warmup=1 if options.quick else 2, samples=3 if options.quick else 5
    )


def build_task(p: Plan, options: ProbeOptions, model: Any, cores: int, op_timeout_s: float) -> dict[str, Any]:
    on_gpu = p.backend == "nccl"
    shape = shape_for(model, on_gpu)
    if options.quick and not on_gpu:  # half the tokens: a loaded 2-core host still ends in seconds
        shape = dataclasses.replace(shape, seq=shape.seq // 2)
    task: dict[str, Any] = {
        "backend": p.backend,
        "dtype": p.dtype,
        "sizes": p.sizes,
        "warmup": p.warmup,
        "samples": p.samples,
        # a timed sample is a batch of back-to-back calls lasting about this long; loopback gloo
        # jitters by milliseconds, so CPU samples are longer
        "batch_s": 0.005 if on_gpu else 0.02,
        "op_timeout_s": op_timeout_s,
        "compute": True,
        "shape": shape.as_dict(),
        "budget_s": 0.5 if options.quick else 1.5,
        "adam_params": 8_000_000 * (4 if on_gpu else 1),  # flat partition well past the caches
        "threads_per_rank": max(1, cores // p.nproc),
        "compute_threads": cores,
        "overlap_dim": 8192 if on_gpu else 384,
        "overlap_iters": 20,
        "overlap_bytes": (64 if on_gpu else 1) * MiB,
    }
    if options.fault:
        task["fault"] = options.fault
    return task


def model_for(ref: str | None) -> Any:
    """The ModelSpec whose block shapes the compute benchmark uses (None: the default shape)."""
    if ref is None:
        return None
    from zerotune.catalog.models import load_model

    return load_model(ref)


def catalog_gpu(name: str) -> GpuSpec | None:
    """The catalog's datasheet entry for a GPU of this exact NVML name, if any profile has one."""
    from zerotune.catalog.hardware import list_profiles, load_profile

    for ref in list_profiles():
        try:
            gpu = load_profile(ref).gpu
        except InputError:
            continue
        if gpu is not None and gpu.name == name:
            return gpu
    return None


def run_probe(
    options: ProbeOptions,
    *,
    notice: Callable[[str], None] = lambda _: None,
    on_step: Callable[[int, str], None] | None = None,
) -> ProbeOutcome:
    """Probe this host; raise RunFailed on a failed or timed-out rank (no rank survives it)."""
    deadline = time.monotonic() + options.timeout_s
    if options.nproc is not None and options.nproc < 1:
        raise InputError(f"--nproc must be at least 1, got {options.nproc}")
    if importlib.util.find_spec("torch") is None:
        raise MissingDependency("torch", "probe")
    model = model_for(options.model)
    notes: list[str] = []
    try:
        gpus: GpuReport | None = read_gpus()
    except NvmlUnavailable as exc:
        gpus = None
        notice(f"no NVIDIA GPU / NVML not found ({exc}); probing the CPU host with gloo")
        notes.append(f"no NVIDIA GPU: {exc}")
    host = read_host()
    disk = None
    if options.nvme_path:
        disk = disk_test.measure(
            options.nvme_path,
            max_bytes=(256 if options.quick else 1024) * MiB,
            max_seconds=min(4.0 if options.quick else 10.0, max(1.0, (deadline - time.monotonic()) / 4)),
        )
        notes.append(
            f"disk test in {disk.path}: {disk.method}, {disk.bytes_written / MiB:.0f} MiB sequential"
        )
    p = plan(gpus, options)
    remaining = deadline - time.monotonic()
    if remaining <= 1:
        raise RunFailed(f"no time left for the collective sweep (--timeout {options.timeout_s:g} s)")
    task = build_task(p, options, model, host.cpu_cores or 1, op_timeout_s=min(60.0, remaining))
    env = {"DS_ACCELERATOR": "cpu"} if p.backend == "gloo" else {}
    env["OMP_NUM_THREADS"] = str(task["threads_per_rank"])
    results = launch(LaunchSpec(WORKER, task, p.nproc, remaining, env), on_step=on_step)
    date = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    intra = merge_sweep(results, p.dtype)
    compute = merge_compute(results)
    overlap = results[0].get("overlap")
    if intra.reduce_scatter_impl != "reduce_scatter_single":
        notes.append(f"reduce_scatter measured as {intra.reduce_scatter_impl}")
    if compute:
        notes.append(
            "cpu_adam_params_per_s is a ZeRO-shaped step (grad norm, clip, torch AdamW, copy-back) on a flat fp32 partition; DeepSpeedCPUAdam (SIMD) is faster"
        )
        notes.append(f"achieved_flops measured on one {compute['shape']}")
        queued = (compute.get("block") or {}).get("queued")
        if queued:  # recorded for the next GPU run to judge (zerotune/probe/compute.py measure_block)
            notes.append(
                f"the same block enqueued {queued['calls']} calls at a time: {queued['flops'] / 1e12:.0f} TFLOP/s "
                f"(synced each call: {compute['block']['flops'] / 1e12:.0f})"
            )
    profile = build_profile(
        name=f"probe-{socket.gethostname()}",
        date=date,
        dtype=p.dtype,
        host=host,
        intra=intra,
        compute=compute,
        overlap=overlap,
        gpus=gpus,
        disk=disk,
        notes=notes,
        datasheet=catalog_gpu(gpus.devices[0].name) if gpus else None,
    )
    return ProbeOutcome(profile=profile, intra=intra, gpus=gpus, disk=disk, notes=notes)
