"""`zerotune predict`: per-GPU memory and step time of one DeepSpeed config on a hardware profile.

The what-if tool: the job is read as every command reads it (zerotune.job.resolve_job), then the
memory model, the fit verdict (zerotune.model.fit) and the step-time model run on it.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from zerotune.cli import options as o

NAME = "predict"
HELP = "Predict per-GPU memory and step time (breakdown, bottleneck, timeline) of a DeepSpeed config."


def command(
    launch: o.Launch = None,
    config: Annotated[
        str | None,
        typer.Option(help="DeepSpeed config file (JSON, HJSON or YAML; - for stdin; default: the launch line's)."),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Catalog model name, model .yaml or HF config.json (default: recorded).")
    ] = None,
    params: o.AdHocParams = None,
    layers: o.AdHocLayers = None,
    hidden: o.AdHocHidden = None,
    profile: o.Profile = None,
    seq_len: o.SeqLen = None,
    world_size: o.WorldSize = None,
    gpus: o.Gpus = None,
    nodes: o.Nodes = None,
    gpu_memory: o.GpuMemory = None,
    micro_batch: o.MicroBatch = None,
    grad_accum: o.GradAccum = None,
    checkpointing: o.Checkpointing = None,
    checkpoint_in_cpu: o.CheckpointInCpu = False,
    precision: o.Precision = None,
    optimizer: o.Optimizer = None,
    hf: o.Hf = False,
    margin: o.Margin = None,
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
    training_args: o.TrainingArgs = None,
    width: Annotated[int | None, typer.Option(help="Timeline width in columns (default: the terminal's).")] = None,
    json_out: o.JsonOut = False,
) -> None:
    from zerotune.dsconfig.load import config_data, load_path
    from zerotune.errors import InputError
    from zerotune.files import is_readable_file
    from zerotune.job import check_step_inputs, read_inputs, resolve_job, sized_by_accelerate
    from zerotune.lint.runner import rejections
    from zerotune.model.step import predict_step
    from zerotune.render import console
    from zerotune.render import predict as render
    from zerotune.schema.record import read_record, record_path

    said = o.job_said(locals())
    inputs, launch_config, launched = read_inputs(said, launch, training_args)
    config = config or launch_config
    if config is None:
        raise InputError("give --config (or a launch line with --deepspeed ds.json after --)")
    if config != "-" and not is_readable_file(config):
        raise InputError(f"DeepSpeed config {config} not found", hint="check the path")
    record = read_record(config)
    loaded = load_path(config)  # once: a fifo, <(...) or stdin reads once
    if loaded.trainer_args is not None and not (launch or training_args):
        # a trainer's arguments file given as --config: its arguments are the job's, as --training-args reads
        # them; one HF TrainingArguments does not take (axolotl's `bf16: auto`) leaves them out, said
        arguments = loaded.trainer_args_path or config
        inline = None  # the arguments of a launcher file handing HF Trainer its `deepspeed` section
        if loaded.trainer_args_section is not None:
            arguments = f"{config} ({loaded.trainer_args_section[1:] or 'its top level'})"
            inline = loaded.trainer_args
        try:
            inputs, _, launched = read_inputs(said, None, arguments, inline)
        except InputError as exc:
            launched = [f"the training arguments in {arguments} are not read ({exc.message}): pass them as options"]
    inputs, sized = sized_by_accelerate(inputs, loaded.accelerate)
    launched = [*launched, *sized]
    raw = config_data(loaded)
    try:
        job = resolve_job(inputs, raw, record)
    except InputError as exc:
        if not sized:
            raise
        # a size the file gave that the profile cannot take (several machines on a one-node profile)
        raise InputError(f"{exc.message} ({sized[0]})", hint=exc.hint) from None
    job.notices[:0] = launched
    if record is not None:
        job.notices.insert(0, f"workload from {record_path(config)} (what recommend predicted; flags override it)")
    check_step_inputs(job)
    memory = job.memory()
    verdict = job.verdict(memory)
    estimate = predict_step(job.spec, job.workload, job.resolved.zero, job.hardware, detail=True)
    hf_filled = inputs.hf or job.config is not raw or bool(record and record.hf)
    rejected = rejections(loaded, hf=hf_filled, world=job.workload.world_size)

    err = console.err()
    for notice in job.notices:
        err.print(f"note: {notice}", markup=False)
    for line in [*job.warnings, *(f"DeepSpeed would reject this config: {r}" for r in rejected)]:
        err.print(f"warning: {line}", markup=False)
    from zerotune.catalog.trust import job_kind, quoted_error
    from zerotune.model.band import job_band

    z = job.resolved.zero
    band = job_band(job.spec, job.workload, z.offload_optimizer.device != "none" or z.offload_param.device != "none")
    kind = job_kind(
        job.spec.name, z.stage, z.offload_optimizer.device, z.offload_param.device, job.workload.activation_checkpointing
    )
    quoted = quoted_error(job.hardware, band, kind)
    if json_out:
        doc = render.payload(job, memory, estimate, verdict) | {"deepspeed_rejects": rejected}
        doc["expected_error"] = quoted.doc
        console.print_json(json.dumps(doc, indent=2))
    else:
        render.report(console.out(), job, memory, estimate, verdict, width, quoted.throughput_pct)
        if quoted.line:
            console.out().print(quoted.line, markup=False)
    if rejected:
        raise typer.Exit(1)
