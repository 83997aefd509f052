"""`zerotune memory`: per-GPU memory of every ZeRO stage × offload option for one model and job."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from zerotune.cli.options import AdHocHidden, AdHocLayers, AdHocParams, CheckpointInCpu
from zerotune.errors import InputError

NAME = "memory"
HELP = "Per-GPU memory of every ZeRO stage and offload option (model states, buffers, activations)."


def _positive(flag: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise InputError(f"{flag} must be at least 1, got {value:g}", hint=f"pass a positive {flag}")


def command(
    model: Annotated[
        str | None, typer.Option(help="Catalog model name, profile .yaml or config.json.")
    ] = None,
    params: AdHocParams = None,
    layers: AdHocLayers = None,
    hidden: AdHocHidden = None,
    gpus: Annotated[
        int | None, typer.Option(help="GPUs per node (data-parallel ranks); default: the profile's.")
    ] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes; default: the profile's, else 1.")] = None,
    seq_len: Annotated[
        int | None,
        typer.Option(help="Tokens per sequence (default: 2048, or the model's positions when fewer)."),
    ] = None,
    micro_batch: Annotated[int, typer.Option(help="Sequences per GPU per forward.")] = 1,
    precision: Annotated[str, typer.Option(help="bf16, fp16 or fp32.")] = "bf16",
    optimizer: Annotated[
        str, typer.Option(help="adamw, adam, sgd (with momentum), lion or adagrad.")
    ] = "adamw",
    no_checkpointing: Annotated[
        bool, typer.Option("--no-checkpointing", help="Keep every block's activations (no recompute).")
    ] = False,
    checkpoint_in_cpu: CheckpointInCpu = False,
    profile: Annotated[
        str | None, typer.Option(help="Hardware profile (catalog name or file) for the GPU capacity.")
    ] = None,
    margin: Annotated[
        float, typer.Option(help="Memory safety margin on top of the predicted peak (recommend's default).")
    ] = 0.10,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON only, on stdout.")] = False,
) -> None:
    from zerotune.catalog.hardware import DEFAULT_PROFILE, default_profile, load_profile
    from zerotune.catalog.models import adhoc_model, default_seq_len, load_model, position_warning, shape_note
    from zerotune.model.activations import ASSUMPTIONS
    from zerotune.model.memory import compare_options
    from zerotune.render import console
    from zerotune.schema.workload import Workload
    from zerotune.search.rank import fit_verdict, host_rank_capacity
    from zerotune.units import fmt_bytes

    if not 0 <= margin < 1:
        raise InputError(f"--margin must be in [0, 1), got {margin:g}")

    for flag, value in (
        ("--gpus", gpus),
        ("--nodes", nodes),
        ("--seq-len", seq_len),
        ("--micro-batch", micro_batch),
    ):
        _positive(flag, value)
    if precision not in ("bf16", "fp16", "fp32"):
        raise InputError(f"--precision must be bf16, fp16 or fp32, got {precision!r}")
    if optimizer not in ("adamw", "adam", "sgd", "lion", "adagrad"):
        raise InputError(f"--optimizer must be adamw, adam, sgd, lion or adagrad, got {optimizer!r}")
    if model is None and params is None and layers is None and hidden is None:
        raise InputError("give --model, or an ad-hoc shape with --params", hint="e.g. --model llama-7b")
    if model is not None and (params is not None or layers is not None or hidden is not None):
        raise InputError("--model and --params/--layers/--hidden are exclusive", hint="choose one")
    spec = (
        load_model(model) if model is not None else adhoc_model(params=params, layers=layers, hidden=hidden)
    )

    notices: list[str] = []
    if model is None:
        notices.append(shape_note(spec))
    if seq_len is None:
        seq_len, note = default_seq_len(spec)
        if note:
            notices.append(note)
    if profile is None and gpus is None:
        hardware, _ = default_profile(notices)  # the rule predict and recommend use
    elif profile is None:
        hardware = load_profile(DEFAULT_PROFILE)
        notices.append(f"GPU capacity from the built-in profile {DEFAULT_PROFILE}; pass --profile for yours")
    else:
        hardware = load_profile(profile)
    host_ranks = hardware.intra_node.ranks if hardware.intra_node and hardware.intra_node.ranks else 1
    per_node = gpus if gpus is not None else (hardware.gpus_per_node or host_ranks)
    if not hardware.has_gpus:
        cap, how = host_rank_capacity(hardware, per_node)
        notices.append(
            f"profile {hardware.name!r} has no GPUs: each rank's memory is host RAM ({fmt_bytes(cap)}, {how})"
            if cap is not None else f"profile {hardware.name!r} has no GPUs and records no host RAM: fit cannot be judged"
        )
    node_count = nodes if nodes is not None else (hardware.nodes if profile is not None else 1)
    workload = Workload(
        seq_len=seq_len,
        micro_batch=micro_batch,
        precision=precision,
        optimizer=optimizer,
        activation_checkpointing=not no_checkpointing,
        checkpoint_in_cpu=checkpoint_in_cpu,
        gpus_per_node=per_node,
        nodes=node_count,
    )
    rows = compare_options(spec, workload, hardware=hardware, safety_margin=margin)
    verdicts = [fit_verdict(row.estimate, hardware, per_node, margin) for row in rows]
    err = console.err()
    for notice in notices:
        err.print(f"note: {notice}", markup=False)
    warning = position_warning(spec, seq_len)
    if warning:
        err.print(f"warning: {warning}", markup=False)

    capacity = hardware.gpu.memory_bytes if hardware.has_gpus and hardware.gpu else None
    if json_out:
        payload = _payload(spec, workload, hardware, capacity, rows, verdicts) | {"safety_margin": margin, "assumptions": [ASSUMPTIONS]}
        console.print_json(json.dumps(payload, indent=2))
        return
    from rich.markup import escape

    from zerotune.render.memory import memory_chart, memory_table
    from zerotune.units import fmt_count

    out = console.out()
    gpu = hardware.gpu.name if hardware.has_gpus and hardware.gpu else "no GPU"
    title = (
        f"{spec.name} ({fmt_count(spec.params)} params) on {node_count}×{per_node} "
        f"{'GPUs' if hardware.has_gpus else 'CPU ranks'} "
        f"[{hardware.name}: {gpu}, {fmt_bytes(capacity) if capacity else 'capacity n/a'}] · "
        f"seq {seq_len} × micro-batch {micro_batch}, {precision}, {optimizer}, "
        f"{'no ' if no_checkpointing else ''}activation checkpointing"
        + (", checkpoints in host memory" if checkpoint_in_cpu and not no_checkpointing else "")
    )
    out.print(memory_table(rows, title=escape(title), margin=margin, fits=verdicts))
    out.print(memory_chart(rows, capacity=capacity, width=max(20, min(60, out.width - 40))))
    seen: set[str] = {ASSUMPTIONS}
    out.print(f"note: {ASSUMPTIONS}", markup=False, style="dim")
    for row in rows:
        for note in row.estimate.notes:
            if note not in seen:
                seen.add(note)
                out.print(f"note: {note}", markup=False, style="dim")


def _payload(spec, workload, hardware, capacity, rows, verdicts) -> dict:
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
        "workload": workload.model_dump() | {"world_size": workload.world_size},
        "profile": hardware.name,
        "gpu_capacity_bytes": capacity,
        "rows": [
            {
                "stage": row.stage,
                "offload_optimizer": row.offload_optimizer,
                "offload_param": row.offload_param,
                "model_states_bytes_per_gpu": row.estimate.per_gpu.model_states,
                "total_bytes_per_gpu": row.estimate.per_gpu.total,
                "cpu_bytes": row.estimate.cpu_bytes_per_node,
                "nvme_bytes": row.estimate.nvme_bytes_per_node,
                "breakdown": asdict(row.estimate.per_gpu),
                "fits": fit,
                "headroom_bytes": row.estimate.headroom_bytes,
                "notes": list(row.estimate.notes),
            }
            for row, fit in zip(rows, verdicts, strict=True)
        ],
    }
