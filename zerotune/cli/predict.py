"""`zerotune predict`: per-GPU memory and step time of one DeepSpeed config on a hardware profile.

The what-if tool: read the config as DeepSpeed would (hjson), resolve its ZeRO settings, then run
the memory model (zerotune.model.memory) and the step-time model (zerotune.model.step).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from zerotune.cli.options import AdHocHidden, AdHocLayers, AdHocParams, CheckpointInCpu
from zerotune.errors import InputError

NAME = "predict"
HELP = "Predict per-GPU memory and step time (breakdown, bottleneck, timeline) of a DeepSpeed config."


def batch_triple(
    train_batch: int | None, micro: int | None, accum: int | None, world: int
) -> tuple[int, int]:
    """(micro_batch, grad_accum) the way DeepSpeed infers them (DEEPSPEED_FACTS §3.1)."""
    if micro and accum:
        return micro, accum
    if train_batch and micro:
        return micro, max(train_batch // micro // world, 1)
    if train_batch and accum:
        return max(train_batch // world // accum, 1), accum
    if train_batch:
        return max(train_batch // world, 1), 1
    return micro or 1, accum or 1


def _world(
    hardware, world_size: int | None, gpus: int | None, nodes: int | None, recorded=None
) -> tuple[int, int]:
    """(ranks per node, nodes) from the flags, else the recorded workload, else the profile."""
    for flag, value in (("--world-size", world_size), ("--gpus", gpus), ("--nodes", nodes)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be at least 1, got {value}")
    if world_size is None and gpus is None and nodes is None and recorded is not None:
        return recorded.gpus_per_node, recorded.nodes
    if not hardware.has_gpus:  # a CPU host: gloo ranks on one node
        ranks = world_size or gpus or (hardware.intra_node.ranks if hardware.intra_node else None) or 2
        return ranks, 1
    per_node = gpus or hardware.gpus_per_node
    if world_size is not None:
        if world_size <= per_node and nodes in (None, 1):
            return world_size, 1
        if world_size % per_node:
            raise InputError(
                f"--world-size {world_size} is not a multiple of {per_node} GPUs per node",
                hint="pass --gpus/--nodes instead",
            )
        return per_node, world_size // per_node
    return per_node, nodes or hardware.nodes


def _recorded(config: str, notices: list[str]):
    """(record dict, Workload) read back from what `zerotune recommend` wrote next to `config`."""
    from pydantic import ValidationError

    from zerotune.dsconfig.emit import read_workload_record
    from zerotune.schema.workload import Workload

    found = read_workload_record(config)
    if found is None:
        return {}, None
    record, source = found
    try:
        workload = Workload.model_validate(record.get("workload") or {})
    except ValidationError:
        notices.append(f"ignored the workload record in {source}: it does not parse")
        return {}, None
    notices.append(f"workload from {source} (what recommend predicted; flags override it)")
    return record, workload


def command(
    config: Annotated[str, typer.Option(help="DeepSpeed config file (JSON or hjson).")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Catalog model name, profile .yaml or HF config.json (default: the one recommend recorded)."
        ),
    ] = None,
    params: AdHocParams = None,
    layers: AdHocLayers = None,
    hidden: AdHocHidden = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="Hardware profile: catalog name or file (default: the one recommend recorded, else the cached probe or dgx-h100)."
        ),
    ] = None,
    seq_len: Annotated[
        int | None,
        typer.Option(help="Tokens per sequence (default: recorded, else 2048 or the model's positions when fewer)."),
    ] = None,
    world_size: Annotated[
        int | None, typer.Option("--world-size", "--nproc", help="Data-parallel ranks in total.")
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs per node (default: the profile's).")] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes (default: the profile's).")] = None,
    micro_batch: Annotated[
        int | None, typer.Option(help="Sequences per GPU per forward (default: from the config, else 1).")
    ] = None,
    grad_accum: Annotated[
        int | None, typer.Option(help="Gradient accumulation steps (default: from the config, else 1).")
    ] = None,
    checkpointing: Annotated[
        bool | None,
        typer.Option(
            "--checkpointing/--no-checkpointing",
            help="Activation checkpointing (recompute) in the training script (default: recorded, else on).",
            show_default=False,
        ),
    ] = None,
    checkpoint_in_cpu: CheckpointInCpu = False,
    precision: Annotated[
        str | None,
        typer.Option(help='bf16, fp16 or fp32 for a config that leaves it "auto" (HF --bf16/--fp16).'),
    ] = None,
    hf: Annotated[
        bool,
        typer.Option("--hf", help='The config goes through HF Trainer: fill "auto" values as HF does.'),
    ] = False,
    width: Annotated[
        int | None, typer.Option(help="Timeline width in columns (default: fits the terminal, at most 100).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON only, on stdout.")] = False,
) -> None:
    from zerotune.catalog.hardware import load_profile, with_counts
    from zerotune.catalog.models import (
        adhoc_model,
        default_seq_len,
        load_model,
        position_warning,
        shape_note,
    )
    from zerotune.cli.recommend import default_profile
    from zerotune.dsconfig.emit import OPTIMIZER_PARAMS, auto_paths, fill_auto
    from zerotune.dsconfig.hf_auto import hf_hidden_size_values
    from zerotune.dsconfig.load import load_path, read_config
    from zerotune.dsconfig.settings import resolve
    from zerotune.model.compute import achieved_flops
    from zerotune.model.memory import estimate_memory
    from zerotune.model.step import predict_step
    from zerotune.render import console
    from zerotune.schema.workload import Workload
    from zerotune.search.rank import SAFETY_MARGIN, fit_verdict, host_rank_capacity, judge_fit
    from zerotune.units import fmt_gib

    for flag, value in (("--seq-len", seq_len), ("--micro-batch", micro_batch), ("--grad-accum", grad_accum)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be at least 1, got {value}")
    if precision is not None and precision not in ("bf16", "fp16", "fp32"):
        raise InputError(f"--precision must be bf16, fp16 or fp32, got {precision!r}")
    adhoc = params is not None or layers is not None or hidden is not None
    if model is not None and adhoc:
        raise InputError("--model and --params/--layers/--hidden are exclusive", hint="choose one")
    raw = read_config(config)
    notices: list[str] = []
    record, recorded = _recorded(config, notices)
    if adhoc:
        spec = adhoc_model(params=params, layers=layers, hidden=hidden)
        notices.append(shape_note(spec))
    elif model is not None or record.get("model"):
        spec = load_model(model or record["model"])
    else:
        raise InputError(
            "give --model (or an ad-hoc shape with --params)", hint="e.g. --model llama-7b"
        )
    if profile is not None:
        hardware = load_profile(profile)
    elif record.get("profile"):
        hardware = load_profile(record["profile"])
    else:
        hardware, _ = default_profile(notices)
    per_node, node_count = _world(hardware, world_size, gpus, nodes, recorded)
    if hardware.has_gpus and (per_node != hardware.gpus_per_node or node_count != hardware.nodes):
        hardware = with_counts(hardware, gpus_per_node=per_node, nodes=node_count)
    world = per_node * node_count
    seq = seq_len or (recorded.seq_len if recorded else None)
    if seq is None:
        seq, note = default_seq_len(spec)
        if note:
            notices.append(note)
    ckpt = checkpointing if checkpointing is not None else (recorded.activation_checkpointing if recorded else None)
    if ckpt is None:
        ckpt = True
        notices.append(
            "activation checkpointing assumed on (it is the training script's switch, not a config key): "
            "pass --no-checkpointing if the script does not enable it"
        )

    # "auto" values: HF Trainer fills them from TrainingArguments and the hidden size before DeepSpeed
    # sees the config (dsconfig/hf_auto.py); predict what will run, not DeepSpeed's defaults.
    auto = bool(auto_paths(raw))
    if auto:
        if not (hf or record.get("hf")):
            notices.append('the config has "auto" values (HF Trainer fills them): predicting as HF would')
        prec = precision or (recorded.precision if recorded else None)
        if prec is None:
            from zerotune.search.space import choose_precision

            prec = choose_precision(hardware)
            notices.append(f'precision "auto": assumed {prec} (HF --{prec}); pass --precision to change')
        mb = micro_batch or (recorded.micro_batch if recorded else 1)
        ga = grad_accum or (recorded.grad_accum if recorded else 1)
        values: dict[str, Any] = {
            "train_batch_size": mb * ga * world,
            "train_micro_batch_size_per_gpu": mb,
            "gradient_accumulation_steps": ga,
            "gradient_clipping": 1.0,
            "bf16.enabled": prec == "bf16",
            "fp16.enabled": prec == "fp16",
            **{f"optimizer.params.{k}": v for k, v in OPTIMIZER_PARAMS.items()},
        }
        for key, value in hf_hidden_size_values(spec).items():
            values[f"zero_optimization.{key}"] = value
        if record.get("hf_values") and micro_batch is None and grad_accum is None and precision is None:
            values.update(record["hf_values"])
        raw = fill_auto(raw, values)
    resolved = resolve(raw)
    if precision is not None and not auto and precision != resolved.precision:
        raise InputError(
            f"--precision {precision} but the config enables {resolved.precision}",
            hint='--precision only fills a config that leaves bf16/fp16 "auto"',
        )
    mb, ga = batch_triple(resolved.train_batch_size, resolved.micro_batch, resolved.grad_accum, world)
    if recorded and resolved.micro_batch is None and resolved.train_batch_size is None:
        mb, ga = recorded.micro_batch, recorded.grad_accum
    optimizer = (resolved.optimizer_type or "adamw").lower()
    base = recorded or Workload()
    workload = base.model_copy(
        update={
            "seq_len": seq,
            "micro_batch": micro_batch or mb,
            "grad_accum": grad_accum or ga,
            "precision": resolved.precision,
            "optimizer": optimizer if optimizer in ("adamw", "adam", "sgd", "lion", "adagrad") else "adamw",
            "activation_checkpointing": ckpt,
            "checkpoint_in_cpu": checkpoint_in_cpu or base.checkpoint_in_cpu,
            "gpus_per_node": per_node,
            "nodes": node_count,
        }
    )
    section = raw.get("activation_checkpointing")
    if isinstance(section, dict) and section.get("cpu_checkpointing") is True and not workload.checkpoint_in_cpu:
        notices.append(
            "the config sets activation_checkpointing.cpu_checkpointing, which applies only where the training "
            "code calls deepspeed.checkpointing.configure (Megatron-DeepSpeed, not HF Trainer): "
            "pass --checkpoint-in-cpu if yours does"
        )
    gpu = hardware.gpu if hardware.has_gpus else None
    if workload.precision == "bf16" and gpu is not None and gpu.bf16_supported is False:
        raise InputError(
            f"the config enables bf16 but {gpu.name} ({hardware.name}) has no bf16",
            hint='use fp16 ("fp16": {"enabled": true}) on this GPU, or a bf16 profile',
        )
    try:
        achieved_flops(hardware, workload.precision)
    except ValueError as exc:
        raise InputError(f"{exc}", hint="use a profile with that precision, or change the config") from None
    warning = position_warning(spec, seq)
    margin = float(record.get("safety_margin", SAFETY_MARGIN))
    memory = estimate_memory(spec, workload, resolved.zero, hardware=hardware, safety_margin=margin)
    estimate = predict_step(spec, workload, resolved.zero, hardware, detail=True)
    # stdin was consumed by read_config; a file is read again with positions for the rules
    rejected = _deepspeed_rejects(load_path(config), hf=auto or hf, world=world) if config != "-" else []
    reject = judge_fit(memory, hardware, per_node, margin)
    if not hardware.has_gpus:
        cap, why = host_rank_capacity(hardware, per_node)
        notices.append(
            f"a host without GPUs: rank memory is host RAM, {fmt_gib(cap)} per rank ({why})"
            if cap
            else f"a host without GPUs: rank memory is host RAM, NOT checked ({why})"
        )
    if reject == "rank":
        notices.append("does NOT fit: the ranks' memory exceeds the host RAM (x (1 + margin))")
    elif reject == "host":
        notices.append(
            f"does NOT fit: offload needs {fmt_gib(memory.cpu_bytes_per_node)} of host RAM per node "
            f"(x (1 + margin)) vs {fmt_gib(hardware.host.ram_bytes)}"
        )
    elif memory.cpu_bytes_per_node and hardware.has_gpus and not hardware.host.ram_bytes:
        notices.append(
            f"host RAM NOT checked ({hardware.name} records no host.ram_bytes): offload needs "
            f"{fmt_gib(memory.cpu_bytes_per_node)} per node"
        )

    err = console.err()
    for notice in notices:
        err.print(f"note: {notice}", markup=False)
    if warning:
        err.print(f"warning: {warning}", markup=False)
    for line in rejected:
        err.print(f"warning: DeepSpeed would reject this config: {line}", markup=False)
    if json_out:
        doc = payload(spec, hardware, workload, resolved, memory, estimate)
        doc["memory"]["safety_margin"] = margin
        doc["memory"]["fits"] = fit_verdict(memory, hardware, per_node, margin)  # recommend's rule
        doc["deepspeed_rejects"] = rejected
        console.print_json(json.dumps(doc, indent=2))
        return
    from rich.markup import escape

    from zerotune.render.predict import collectives_table, memory_breakdown_table, step_table, timeline_text
    from zerotune.units import fmt_count

    out = console.out()
    z = resolved.zero
    head = (  # three short lines: readable at 80 columns, each fact whole on one line
        f"{spec.name} ({fmt_count(spec.params)} params) · {node_count}x{per_node} ranks on {hardware.name}\n"
        f"ZeRO stage {z.stage}, {resolved.precision}, overlap_comm {z.overlap_comm}, "
        f"reduce_bucket {fmt_count(z.reduce_bucket_size)}\n"
        f"seq {seq} x micro-batch {workload.micro_batch} x accumulation {workload.grad_accum} · "
        f"activation checkpointing {'on' if ckpt else 'off'}"
        + (", checkpoints in host memory" if ckpt and workload.checkpoint_in_cpu else "")
    )
    out.print(escape(head), soft_wrap=True)
    out.print(memory_breakdown_table(memory, title=f"memory per GPU, fits with a {margin:.0%} margin?"))
    out.print(step_table(estimate, title="one optimizer step"))
    if estimate.collectives:
        out.print(collectives_table(estimate))
    width = width or max(40, min(100, out.width - 12))
    out.print(timeline_text(estimate, width), markup=False, highlight=False, soft_wrap=True)
    for note in (*memory.notes, *estimate.notes):
        out.print(f"note: {note}", markup=False, style="dim")


def _deepspeed_rejects(loaded, *, hf: bool, world: int) -> list[str]:
    """The validate rules' errors (what DeepSpeed or HF would reject at launch), one line each."""
    from zerotune.lint.context import LintOptions
    from zerotune.lint.diagnostic import Severity
    from zerotune.lint.runner import lint

    found = lint(loaded, LintOptions(hf=hf, world_size=world))
    return [
        f"{d.code} {d.message}" + (f" (line {d.line})" if d.line else "")
        for d in found
        if d.severity is Severity.ERROR
    ]


def payload(spec, hardware, workload, resolved, memory, estimate) -> dict[str, Any]:
    """The --json document (also what scripts read)."""
    from dataclasses import asdict

    from zerotune.model.step import step_summary

    b = memory.per_gpu
    return {
        "model": {"name": spec.name, "params": spec.params},
        "profile": hardware.name,
        "workload": workload.model_dump() | {"world_size": workload.world_size},
        "zero": resolved.zero.model_dump(mode="json"),
        **step_summary(estimate),
        "memory": {
            "per_gpu_bytes": b.total,
            "fits": memory.fits,
            "gpu_capacity_bytes": memory.gpu_capacity_bytes,
            "headroom_bytes": memory.headroom_bytes,
            "cpu_bytes_per_node": memory.cpu_bytes_per_node,
            "nvme_bytes_per_node": memory.nvme_bytes_per_node,
            "breakdown": asdict(b),
        },
        "collectives": [
            {
                "op": c.op,
                "bytes": c.bytes,
                "count": c.count,
                "seconds_per_call": c.seconds,
                "total_s": c.total_s,
                "phase": c.phase,
            }
            for c in estimate.collectives
        ],
        "events": [
            {"stream": e.stream, "label": e.label, "start_s": e.start_s, "end_s": e.end_s, "kind": e.kind}
            for e in estimate.events
        ],
        "notes": [*memory.notes, *estimate.notes],
    }
