"""`zerotune memory`: per-GPU memory of every ZeRO stage × offload option for one model and job."""

from __future__ import annotations

import json

from zerotune.cli import options as o
from zerotune.schema.job import SAFETY_MARGIN, JobInputs

NAME = "memory"
HELP = "Per-GPU memory of every ZeRO stage and offload option (model states, buffers, activations)."


def command(
    model: o.Model = None,
    params: o.AdHocParams = None,
    layers: o.AdHocLayers = None,
    hidden: o.AdHocHidden = None,
    profile: o.Profile = None,
    gpus: o.Gpus = None,
    nodes: o.Nodes = None,
    world_size: o.WorldSize = None,
    gpu_memory: o.GpuMemory = None,
    seq_len: o.SeqLen = None,
    micro_batch: o.MicroBatch = None,
    grad_accum: o.GradAccum = None,
    precision: o.Precision = None,
    optimizer: o.Optimizer = None,
    checkpointing: o.Checkpointing = None,
    checkpoint_in_cpu: o.CheckpointInCpu = False,
    attention: o.Attention = None,
    liger: o.Liger = None,
    cross_entropy: o.CrossEntropy = None,
    swiglu: o.Swiglu = None,
    rmsnorm: o.Rmsnorm = None,
    rotary: o.Rotary = None,
    packing: o.Packing = None,
    activation_offloading: o.ActivationOffloading = None,
    zero_init: o.ZeroInit = None,
    moe_impl: o.MoeImpl = None,
    logits_held: o.LogitsHeld = None,
    omp_threads: o.OmpThreads = None,
    autocast: o.Autocast = None,
    deepspeed_version: o.DeepspeedVersion = None,
    lora_rank: o.LoraRank = None,
    lora_targets: o.LoraTargets = None,
    margin: o.Margin = SAFETY_MARGIN,
    json_out: o.JsonOut = False,
) -> None:
    from zerotune.job import resolve_job
    from zerotune.model.activations import ASSUMPTIONS
    from zerotune.model.memory import compare_options
    from zerotune.render import console
    from zerotune.units import fmt_bytes

    inputs = JobInputs(
        model=model, params=params, layers=layers, hidden=hidden, profile=profile, gpus=gpus, nodes=nodes,
        world_size=world_size, gpu_memory=gpu_memory, seq_len=seq_len, micro_batch=micro_batch, grad_accum=grad_accum,
        precision=precision, optimizer=optimizer, checkpointing=checkpointing,
        checkpoint_in_cpu=checkpoint_in_cpu, margin=margin,
        **o.workload_said(locals()),
    )  # fmt: skip
    job = resolve_job(inputs)
    rows = compare_options(job.spec, job.workload, hardware=job.hardware, safety_margin=job.margin)
    verdicts = [job.verdict(row.estimate) for row in rows]
    if not verdicts[0].on_gpu and verdicts[0].rank_capacity_bytes is not None:
        job.notices.append(
            f"profile {job.hardware.name!r} has no GPUs: each rank's memory is host RAM "
            f"({fmt_bytes(verdicts[0].rank_capacity_bytes)}, {verdicts[0].rank_capacity})"
        )
    err = console.err()
    for notice in job.notices + sorted({a for v in verdicts for a in v.assumptions}):
        err.print(f"note: {notice}", markup=False)
    for warning in job.warnings:
        err.print(f"warning: {warning}", markup=False)
    if json_out:
        doc = _payload(job, rows, verdicts) | {"safety_margin": job.margin, "assumptions": [ASSUMPTIONS]}
        console.print_json(json.dumps(doc, indent=2))
        return
    from zerotune.render.memory import report

    report(console.out(), job, rows, [v.fits for v in verdicts])


def _payload(job, rows, verdicts) -> dict:
    spec, hardware = job.spec, job.hardware
    return {
        "model": {
            "name": spec.name,
            "params": spec.params,
            "layers": spec.num_layers,
            "hidden": spec.hidden_size,
            "heads": spec.num_heads,
            "kv_heads": spec.num_kv_heads,
            "vocab": spec.vocab_size,
            "largest_layer_params": spec.largest_layer,
        },
        "workload": job.workload.model_dump() | {"world_size": job.workload.world_size},
        "profile": hardware.name,
        "gpu_capacity_bytes": hardware.gpu.memory_bytes if hardware.has_gpus and hardware.gpu else None,
        "rows": [
            {
                "stage": row.stage,
                "offload_optimizer": row.offload_optimizer,
                "offload_param": row.offload_param,
                "model_states_bytes_per_gpu": row.estimate.per_gpu.model_states,
                "total_bytes_per_gpu": row.estimate.per_gpu.total,
                "cpu_bytes": row.estimate.cpu_bytes_per_node,
                "nvme_bytes": row.estimate.nvme_bytes_per_node,
                "breakdown": row.estimate.per_gpu._asdict(),
                "fits": verdict.fits,
                "fit": {"reason": verdict.reason, "assumptions": list(verdict.assumptions)},
                "headroom_bytes": verdict.headroom_bytes,
                "notes": list(row.estimate.notes),
            }
            for row, verdict in zip(rows, verdicts, strict=True)
        ],
    }
