"""`run_bench`: the programmatic API of `zerotune bench` (orchestration; torch stays in the ranks).

A run derives the proxy (zerotune.catalog.models.derive), prepares the DeepSpeed config
(zerotune.bench.config), launches N ranks of zerotune.bench.step_worker through zerotune.launch
(separate processes, a wall-clock timeout, no orphans) and folds their records into a BenchResult.
With `compare_stages` the same proxy, seed and data run under ZeRO stages 0-3, one launch each,
and the losses are compared: ZeRO partitions state, it must not change the math.

CPU default proxy: measured on the 2-core CI host, a 2-layer llama-7b-shaped proxy at full width
(667M params, fp32, seq 64) under stage 2 on 2 gloo ranks took 28 s to initialise, 36-56 s per
step and 11 GB per rank. So on CPU the width (hidden, FFN, heads, vocab) is scaled by
CPU_WIDTH_SCALE unless `width_scale` is given; GPUs keep the real per-layer shapes.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable
from typing import Any

import zerotune
from zerotune.bench import aggregate, noise
from zerotune.bench.config import Prepared, fill_auto, prepare
from zerotune.bench.decoder import module_names
from zerotune.bench.predicted import predict, scale_micro_steps, with_predicted_phases
from zerotune.bench.result import BenchResult, Parity, Proxy, StageRun, median
from zerotune.catalog.models import derive
from zerotune.dsconfig.settings import resolve
from zerotune.errors import InputError, MissingDependency
from zerotune.schema.model import ModelSpec

WORKER = "zerotune.bench.step_worker"
CPU_WIDTH_SCALE = 0.25
"""llama-7b at 0.25: hidden 1024, 8 heads of 128, FFN 2752, vocab 8000; 2 layers = 41.7M params."""
DEFAULT_LAYERS = 2
CPU_SEQ_LEN = 128
GPU_SEQ_LEN = 2048
DEFAULT_MAX_MICRO_STEPS = 4
"""Micro-steps run per measured step at most: a recommended config's accumulation (64-128 on a
small cluster) would take hours on a CPU host; the rest is scaled by the step-time model."""
PARITY_RTOL = 1e-4
"""fp32 losses under different stages differ only by reduction order: measured max 1.1e-7 relative
(llama-7b proxy at width 0.125, 6 steps, 2 gloo ranks) while the loss itself moves by ~0.9."""

Progress = Callable[[str], None]
Launcher = Callable[[dict[str, Any], int, str, float, Progress, str], list[dict[str, Any]]]
"""(task, nproc, device kind, timeout_s, progress, label) -> one result dict per rank."""


def check_dependencies() -> None:
    for module in ("torch", "deepspeed"):
        if importlib.util.find_spec(module) is None:
            raise MissingDependency(module, "bench")


def detect_device(device: str) -> tuple[str, int]:
    """("cuda", visible GPU count) or ("cpu", 0); `device` is auto, cpu or cuda."""
    if device == "cpu":
        return "cpu", 0
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and count == 0:
        raise InputError("--device cuda: no CUDA GPU is visible", hint="use --device cpu (gloo ranks)")
    return ("cuda", count) if count else ("cpu", 0)


def run_bench(
    model: ModelSpec,
    config: dict[str, Any],
    *,
    layers: int = DEFAULT_LAYERS,
    width_scale: float | None = None,
    seq_len: int | None = None,
    micro_batch: int | None = None,
    grad_accum: int | None = None,
    nproc: int | None = None,
    device: str = "auto",
    warmup: int = 1,
    steps: int = 3,
    logged_steps: int = 2,
    seed: int = 0,
    timeout_s: float = 600.0,
    compare_stages: bool = False,
    hardware: Any = None,
    progress: Progress | None = None,
    max_steps: int | None = 20,
    precision: float = 0.02,
    time_cap_s: float | None = 30.0,
    max_micro_steps: int | None = DEFAULT_MAX_MICRO_STEPS,
    hf: bool = False,
    fault: dict[str, Any] | None = None,
    launcher: Launcher | None = None,
    nodes: int = 1,
    activation_checkpointing: bool = False,
    memory_phases: bool = False,
    keep_precision: bool = False,
    cpu_adam: bool = False,
    host_memory_s: float | None = None,
    pace: bool = False,
    log: str | None = None,
    lora: dict[str, Any] | None = None,
) -> BenchResult:
    """Measure real DeepSpeed steps of a proxy of `model` under `config` (see module doc).

    `model` is the full model; the proxy is derived from it (`layers` blocks, `width_scale`,
    default 1 on GPU and CPU_WIDTH_SCALE on CPU). `hardware` (a HardwareProfile) is used for the
    predicted-vs-measured comparison when the step-time model is available.

    Noise: `steps` measured steps at least, repeated up to `max_steps` until the median's relative
    standard error is <= `precision` (zerotune.bench.noise) or `time_cap_s` of measured steps.
    Long accumulation: at most `max_micro_steps` micro-steps are run per step; the full step is
    scaled from them by the step-time model (or linearly without a profile), and the result says so.
    HF "auto" values: an input error unless `hf`, which fills them as the HF Trainer would.
    `launcher` runs the ranks (default: `nproc` local processes through zerotune.launch; under
    torchrun, zerotune.calibrate.distributed runs them in-process, `nodes` nodes of nproc/nodes).
    `memory_phases` records the live bytes of every phase (zerotune.bench.live_memory) next to the
    memory model's timeline; `keep_precision` keeps a bf16 config in bf16 on CPU (slow: keep the
    proxy's sequence short); `cpu_adam` runs DeepSpeedCPUAdam under optimizer offload on CPU too.
    `host_memory_s` (calibrate, CPU): every rank also measures the host memory rates for about this
    long after its steps, so the rates are as fresh as the steps; `pace` (calibrate, CPU): the ranks time a
    fixed matmul just before and just after the measured steps (BenchResult.pace_s). `log`: rank 0's output (DeepSpeed's
    wall_clock_breakdown timers, headed by the job it ran) is copied there, for `calibrate --from-log`;
    with `compare_stages`, the config's own stage's.
    """
    check_dependencies()
    if layers < 1 or warmup < 0 or steps < 1 or logged_steps < 1:
        raise InputError("--layers, --steps and --logged-steps must be at least 1, --warmup at least 0")
    kind, gpus = detect_device(device)
    if nproc is None:
        nproc = gpus if kind == "cuda" else 2
    if launcher is None and (nproc < 1 or (kind == "cuda" and nproc > gpus)):
        raise InputError(
            f"--nproc {nproc}: {gpus} GPU(s) visible" if kind == "cuda" else "--nproc must be >= 1"
        )
    scale = width_scale if width_scale is not None else (1.0 if kind == "cuda" else CPU_WIDTH_SCALE)
    spec = derive(model, num_layers=layers, width_scale=scale)
    seq = seq_len or (CPU_SEQ_LEN if kind == "cpu" else min(GPU_SEQ_LEN, model.max_seq_len or GPU_SEQ_LEN))

    config, auto_notes = fill_auto(config, model, hf=hf)
    full = prepare(
        config, nproc=nproc, micro_batch=micro_batch, grad_accum=grad_accum, device=kind, keep_precision=keep_precision, cpu_adam=cpu_adam
    )
    bounded = full.grad_accum
    if max_micro_steps is not None and full.grad_accum > max_micro_steps:
        bounded = max(1, max_micro_steps)

    def prepared_for(stage: int | None = None) -> Prepared:
        return prepare(
            config,
            nproc=nproc,
            micro_batch=micro_batch,
            grad_accum=bounded,
            device=kind,
            stage=stage,
            keep_precision=keep_precision,
            cpu_adam=cpu_adam,
        )

    prepared = prepared_for()
    stage = resolve(prepared.config).zero.stage

    def task(cfg: dict[str, Any]) -> dict[str, Any]:
        return {
            "spec": spec.model_dump(mode="json"),
            "layer_names": module_names(spec),
            "config": cfg,
            "optimizer": prepared.optimizer,
            "seq_len": seq,
            "micro_batch": prepared.micro_batch,
            "grad_accum": prepared.grad_accum,
            "warmup": warmup,
            "steps": steps,
            # parity compares the stages step by step: every stage runs exactly `steps`
            "max_steps": steps if compare_stages else max(steps, max_steps or steps),
            "precision": 0.0 if compare_stages else precision,
            "time_cap_s": time_cap_s,
            "logged_steps": logged_steps,
            "seed": seed,
            "device": kind,
            "collective_timeout_s": max(30.0, timeout_s / 2),
            "threads_per_rank": max(1, (os.cpu_count() or 1) // max(1, nproc // nodes)) if kind == "cpu" else 1,
            "fault": fault,
            "activation_checkpointing": activation_checkpointing,
            "memory_phases": memory_phases,
            "host_memory": host_memory_s,
            "pace": pace,
            "lora": lora,
        }

    say = progress or (lambda message: None)
    runs: dict[int, list[dict[str, Any]]] = {}
    plan = [stage] + [s for s in (0, 1, 2, 3) if s != stage] if compare_stages else [stage]
    for index, run_stage in enumerate(plan):
        cfg = prepared.config if run_stage == stage else prepared_for(run_stage).config
        label = f"stage {run_stage}" + (f" ({index + 1}/{len(plan)})" if len(plan) > 1 else "")
        say(f"{label}: launching {nproc} rank(s)")
        if launcher is None:
            runs[run_stage] = _launch(task(cfg), nproc, kind, timeout_s, say, label, log=log if index == 0 else None)
        else:
            runs[run_stage] = launcher(task(cfg), nproc, kind, timeout_s, say, label)

    notes = auto_notes + list(prepared.notes)
    if kind == "cpu" and 3 in runs:
        notes.append(
            "stage 3 parameter all-gathers are issued with async_op=True and the CPU accelerator's "
            "synchronize is a no-op, so their logged latency is the time to issue them; the wait is "
            "inside the module's forward interval"
        )
    ranks = runs[stage]
    rank0 = ranks[0]
    times = aggregate.step_times(ranks)
    result = BenchResult(
        zerotune_version=zerotune.__version__,
        deepspeed_version=rank0["deepspeed_version"],
        torch_version=rank0["torch_version"],
        device=rank0["device"],
        backend=rank0["backend"],
        nproc=nproc,
        stage=stage,
        proxy=Proxy(
            model=spec.model_dump(mode="json"),
            layers=layers,
            width_scale=scale,
            seq_len=seq,
            micro_batch=prepared.micro_batch,
            dtype=resolve(prepared.config).precision,
            nproc=nproc,
            grad_accum=prepared.grad_accum,
            nodes=nodes,
            activation_checkpointing=activation_checkpointing,
            lora=lora,
        ),
        step_time_precision_pct=noise.relative_precision(times) * 100 if len(times) >= 3 else None,
        step_time_spread_pct=noise.spread(times) * 100,
        stop_reason=rank0.get("stop_reason") or None,
        config=prepared.config,
        warmup_steps=warmup,
        steps=steps,
        step_time_s=median(times),
        step_times_s=times,
        logged_step_time_s=median(aggregate.step_times(ranks, "logged_step_times_s")),
        phases=aggregate.phases(rank0),
        collectives=aggregate.collectives(rank0),
        buckets=aggregate.buckets(rank0),
        timeline=aggregate.timeline(rank0),
        layers=aggregate.layers(rank0),
        peak_memory_bytes=[r["peak_memory_bytes"] for r in ranks],
        baseline_memory_bytes=[r["baseline_memory_bytes"] for r in ranks],
        memory_method=rank0["memory_method"],
        peak_reserved_bytes=[r["peak_reserved_bytes"] for r in ranks]
        if all(r.get("peak_reserved_bytes") is not None for r in ranks)
        else None,
        optimizer_class=rank0.get("optimizer_class"),
        memory_phases=aggregate.memory_phases(ranks),
        host_memory=aggregate.host_memory(ranks),
        pace_s=aggregate.pace(ranks),
        losses={str(s): runs[s][0]["losses"] for s in sorted(runs)},
        parity=parity(runs) if compare_stages else None,
        notes=notes,
    )
    result = with_predicted_phases(
        result.model_copy(update={"prediction": predict(result, hardware)}),
        torch_optimizer=prepared.optimizer is not None,
    )
    if bounded < full.grad_accum:
        result = scale_micro_steps(result, full.grad_accum, hardware)
    return result


def _launch(
    task: dict[str, Any], nproc: int, kind: str, timeout_s: float, say: Progress, label: str, log: str | None = None
) -> list[dict[str, Any]]:
    from zerotune.launch import LaunchSpec, launch

    env = {"DS_ACCELERATOR": "cpu"} if kind == "cpu" else {}
    env["OMP_NUM_THREADS"] = str(task["threads_per_rank"])
    spec = LaunchSpec(module=WORKER, task=task, nproc=nproc, timeout_s=timeout_s, env=env, log=log)
    return launch(spec, on_step=lambda rank, step: say(f"{label}: {step}") if rank == 0 else None)


def parity(runs: dict[int, list[dict[str, Any]]], rtol: float = PARITY_RTOL) -> Parity:
    """Compare each stage's rank-0 loss curve with the lowest stage's (stage 0 when it ran)."""
    stages = sorted(runs)
    losses = {s: runs[s][0]["losses"] for s in stages}
    reference = losses[stages[0]]
    abs_diff = rel_diff = 0.0
    for stage in stages[1:]:
        for a, b in zip(reference, losses[stage], strict=True):
            abs_diff = max(abs_diff, abs(a - b))
            rel_diff = max(rel_diff, abs(a - b) / max(abs(a), 1e-12))
    finite = all(math.isfinite(x) for s in stages for x in losses[s])
    return Parity(
        stages=[
            StageRun(
                stage=s,
                losses=losses[s],
                step_time_s=median(aggregate.step_times(runs[s])),
                collectives=aggregate.collectives(runs[s][0]),
                buckets=aggregate.buckets(runs[s][0]),
            )
            for s in stages
        ],
        max_abs_diff=abs_diff,
        max_rel_diff=rel_diff,
        rtol=rtol,
        agree=finite and rel_diff <= rtol,
    )
