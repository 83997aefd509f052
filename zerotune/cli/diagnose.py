"""`zerotune diagnose`: read a failed or slow run's log, name the cause, hand back a config that fits.

Exit 0: no failure found; 1: a failure (or a slow step) was diagnosed; 2: the log cannot be read
(missing, a folder or empty) or a flag is wrong. LOG may be `-` for stdin; the log is streamed, never loaded whole.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from zerotune.cli import options as o
from zerotune.errors import InputError
from zerotune.files import refuse_overwrite

NAME = "diagnose"
HELP = "Read a failed or slow DeepSpeed run's log: the cause, the numbers, and a corrected config."


class Format(str, Enum):
    text = "text"
    json = "json"
    github = "github"


def command(
    log: Annotated[
        str, typer.Argument(help="The log file (torchrun, deepspeed, HF Trainer, ...); '-' reads stdin.")
    ],
    launch: o.Launch = None,
    config: Annotated[
        str | None,
        typer.Option(help="The run's DeepSpeed config, if the log lacks its dump (default: the launch line's)."),
    ] = None,
    model: o.Model = None,
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
    out: Annotated[
        Path | None, typer.Option(help="Write the corrected DeepSpeed JSON here (+ OUT.reasons.md).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out and its sidecar.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the JSON report only, on stdout.")] = False,
    output_format: Annotated[
        Format, typer.Option("--format", help="text, json or github (workflow annotations).")
    ] = Format.text,
) -> None:
    from zerotune.diagnose.analyse import Options, analyse
    from zerotune.job import read_inputs
    from zerotune.render import console
    from zerotune.render.diagnose import github, text

    # the job options as predict reads them (zerotune.job.read_inputs): the log fills what they leave unsaid
    said = o.job_said(locals())
    inputs, launch_config, launched = read_inputs(said, launch, training_args)
    targets = [] if out is None else [out, Path(f"{out}.reasons.md")]
    refuse_overwrite(*targets, force=force)
    options = Options.of(inputs, config=config or launch_config, notes=tuple(launched))
    if log == "-":
        report, fixed = analyse(sys.stdin.buffer, "<stdin>", options)
    else:
        path = Path(log)
        if path.is_dir():
            raise InputError(f"cannot read {log}: it is a folder", hint="pass the log file")
        if path.is_file() and path.stat().st_size == 0:  # "no failure found" would be a verdict on nothing
            raise InputError(f"{log} is empty", hint="pass the run's output (the launcher's stdout and stderr)")
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise InputError(
                f"cannot read {log}: {exc.strerror or exc}", hint="pass a log file, or - for stdin"
            ) from None
        with handle:
            try:
                report, fixed = analyse(handle, log, options)
            except OSError as exc:
                raise InputError(f"cannot read {log}: {exc.strerror or exc}") from None

    if out is not None:
        if fixed is None or report.fix is None:
            console.err().print(f"note: no corrected config to write to {out}", markup=False)
        else:
            _write(report, fixed, out, force)
    fmt = Format.json if json_out else output_format
    if fmt is Format.json:
        console.print_json(report.model_dump_json(indent=2))
    elif fmt is Format.github:
        sys.stdout.write(github(report))
    else:
        rendered = text(report)
        if sys.stdout.isatty():
            console.out().print(rendered, soft_wrap=True)
        else:
            sys.stdout.write(rendered.plain)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _write(report, fixed: dict, out: Path, force: bool) -> None:
    """The corrected config (strict JSON) and its reasons sidecar, like `recommend --out`."""
    from zerotune.dsconfig import emit
    from zerotune.files import write_atomic

    fix = report.fix
    reasons = {c.key: c.reason for c in fix.changes}
    for path in emit.leaf_paths(fixed):
        if path not in reasons and not any(path.startswith(k + ".") for k in reasons):
            reasons[path] = "kept from the run's config"
        elif path not in reasons:
            parent = next(k for k in reasons if path.startswith(k + "."))
            reasons[path] = reasons[parent]
    summary = [report.diagnosis.title + ".", fix.text]
    if report.memory is not None:
        summary.append(report.memory.text)
    summary += [f"{c.key}: {c.old} → {c.new}: {c.reason}" for c in fix.changes if c.key.startswith("(")]
    write_atomic(out, emit.to_json(fixed), force=force)
    sidecar = Path(f"{out}.reasons.md")
    title = f"zerotune diagnose: corrected config for {report.log}"
    text = emit.reasons_markdown(fixed, reasons, title=title, summary=summary, config_name=out.name)
    write_atomic(
        sidecar,
        text.replace("(written by zerotune recommend)", "(written by zerotune diagnose)"),
        force=force,
    )
    fix.config_written, fix.reasons_written = str(out), str(sidecar)
