"""`zerotune recommend`: the fastest ZeRO configuration that fits, explained, as a DeepSpeed JSON.

Parse, then zerotune.search.job (model, profile, request), zerotune.search.recommend (the search),
zerotune.search.outputs (the files: config, reasons, job record, accelerate YAML) and
zerotune.render.recommend (the report).
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Annotated

import typer

from zerotune.cli import options as o
from zerotune.errors import InputError
from zerotune.schema.job import SAFETY_MARGIN, JobInputs

NAME = "recommend"
HELP = "Search the ZeRO configuration space and write the best DeepSpeed config, with reasons."


def command(
    model: Annotated[str, typer.Option(help="Catalog model name or a Hugging Face config.json.")],
    profile: o.Profile = None,
    gpus: o.Gpus = None,
    nodes: o.Nodes = None,
    seq_len: o.SeqLen = None,
    global_batch_tokens: Annotated[
        int | None,
        typer.Option(
            help="Target tokens per optimizer step (default: 2^21 = 2,097,152 to pre-train; 64 sequences with --task finetune)."
        ),
    ] = None,
    task: Annotated[
        str,
        typer.Option(
            help="pretrain (Llama 2 recipe: 2^21 tokens per step, its AdamW values) or finetune (64 sequences per step, fine-tuning AdamW values)."
        ),
    ] = "pretrain",
    objective: Annotated[
        str,
        typer.Option(
            help="throughput, memory (least memory within 5% of the best) or cost ($ per 1B tokens; on a multi-node profile every node count is tried unless --nodes is given)."
        ),
    ] = "throughput",
    hourly_rate: Annotated[
        float | None,
        typer.Option(help="Cluster price in USD/hour for --objective cost (default: the profile's)."),
    ] = None,
    margin: o.Margin = SAFETY_MARGIN,
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
    out: Annotated[
        Path | None, typer.Option(help="Write the DeepSpeed JSON here (+ OUT.reasons.md and OUT.zerotune.yaml).")
    ] = None,
    hjson: Annotated[
        bool,
        typer.Option(
            "--hjson", help="Write reasons as comments inside OUT (DeepSpeed reads hjson; HF does not)."
        ),
    ] = False,
    hf: Annotated[bool, typer.Option("--hf", help='Leave HF Trainer-managed keys as "auto".')] = False,
    hf_keep_tuned: Annotated[
        bool,
        typer.Option(
            "--hf-keep-tuned",
            help="With --hf: keep the tuned bucket/prefetch/persistence values instead of HF's hidden-size formulas.",
        ),
    ] = False,
    accelerate_config: Annotated[
        Path | None, typer.Option(help="Also write an accelerate YAML that points at OUT.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    top: Annotated[int, typer.Option(help="Alternatives to list.")] = 5,
    measure: Annotated[
        int, typer.Option(help="Run zerotune bench on the top K and pick the best measured.")
    ] = 0,
    json_out: o.JsonOut = False,
) -> None:
    from zerotune.render import console
    from zerotune.render import recommend as render
    from zerotune.search.job import search_job
    from zerotune.search.outputs import Outputs, write_outputs
    from zerotune.search.recommend import recommend, to_json

    o.at_least(1, top=top)
    o.at_least(0, measure=measure)
    if hf_keep_tuned and not hf:
        raise InputError("--hf-keep-tuned only applies with --hf", hint="add --hf")
    outputs = Outputs(out, hjson, accelerate_config, force)
    outputs.check(hf)
    said = JobInputs(**o.workload_said(locals()))  # type: ignore[arg-type]
    said.check()
    job = search_job(
        model, profile=profile, gpus=gpus, nodes=nodes, seq_len=seq_len, global_batch_tokens=global_batch_tokens,
        task=task, objective=objective, hourly_rate=hourly_rate, margin=margin,
        workload_options=tuple(said.workload_options().items()),
    )  # fmt: skip
    err = console.err()
    for line in job.notices:
        err.print(line, style="dim", markup=False)
    for line in job.warnings:
        err.print(f"warning: {line}", markup=False)
    # The search and its explanations keep ~10^5 objects for the report (evaluations, estimates,
    # timelines), none in a reference cycle: reference counting frees them. Every cycle collection the
    # report's allocations trigger would walk them all again (~0.4 G instructions of the ~5.7 G
    # command), so the collector is paused for the search and then told to leave them out (freeze).
    gc.disable()
    with err.status(f"searching configurations of {job.spec.name} on {job.hardware.name}", spinner="dots"):
        rec = recommend(
            job.spec, job.hardware, job.request, top_k=max(top, measure), hf=hf, vary_nodes=nodes is None,
            hf_keep_tuned=hf_keep_tuned, config_name=str(out) if out is not None else "ds.json",
        )  # fmt: skip
    gc.freeze()
    gc.enable()
    measured = None
    if measure:
        from zerotune.search.measure import measure_top

        rec, measured = measure_top(rec, measure, say=lambda m: err.print(m, style="dim", markup=False))
    files = write_outputs(rec, outputs, model, job.profile_ref)
    from zerotune.catalog.trust import job_kind, quoted_error
    from zerotune.model.band import job_band

    c = rec.as_run.candidate
    band = job_band(job.spec, rec.result.workload.model_copy(update={"seq_len": job.request.seq_len}), c.offload_optimizer != "none" or c.offload_param != "none")  # fmt: skip
    kind = job_kind(job.spec.name, c.stage, c.offload_optimizer, c.offload_param, c.checkpointing)
    quoted = quoted_error(job.hardware, band, kind)
    if json_out:
        doc = to_json(rec, files=files, measured=measured)
        doc["expected_error"] = quoted.doc
        console.print_json(json.dumps(doc, indent=2))
    else:
        render.report(console.out(), rec, measured, files)
        if quoted.line:
            console.out().print(quoted.line, markup=False)
