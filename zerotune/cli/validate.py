"""`zerotune validate`: lint DeepSpeed configs before launch (people and CI)."""

from __future__ import annotations

import sys
from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from zerotune.cli import options as o
from zerotune.errors import InputError

if TYPE_CHECKING:
    pass

NAME = "validate"
HELP = "Check DeepSpeed configs for mistakes DeepSpeed rejects or silently ignores. Exit 1 on errors."


class Format(str, Enum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def command(
    ctx: typer.Context,
    files: Annotated[
        list[str], typer.Argument(help="Config files or globs; '-' reads stdin.", show_default=False)
    ],
    output_format: Annotated[
        Format, typer.Option("--format", help="text, json, github or sarif.")
    ] = Format.text,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    select: Annotated[
        list[str] | None, typer.Option(help="Only these codes or prefixes (e.g. ZT2, ZT101).")
    ] = None,
    ignore: Annotated[list[str] | None, typer.Option(help="Skip these codes or prefixes.")] = None,
    hf: Annotated[
        bool, typer.Option("--hf", help='The config goes through HF Trainer/accelerate (fills "auto").')
    ] = False,
    world_size: Annotated[
        int | None, typer.Option(help="Data-parallel world size for batch and ZeRO++ checks.")
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 on warnings too.")] = False,
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Exit 0 even when errors are found.")
    ] = False,
    fix: Annotated[
        bool, typer.Option("--fix", help="Apply safe fixes (deprecated → current key) in place.")
    ] = False,
    model: Annotated[
        str | None, typer.Option(help="Model (catalog name or file): enables memory and bucket rules.")
    ] = None,
    profile: Annotated[str | None, typer.Option(help="Hardware profile (catalog name or file).")] = None,
    gpus: o.Gpus = None,
    gpu_memory: o.GpuMemory = None,
    seq_len: o.SeqLen = None,
    checkpointing: o.Checkpointing = None,
    checkpoint_in_cpu: o.CheckpointInCpu = False,
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
) -> None:
    from zerotune.lint import registry
    from zerotune.lint.context import LintOptions
    from zerotune.lint.files import check_file, expand, skipped_rules
    from zerotune.lint.rules.resources import check_job_options
    from zerotune.render import console, diagnostics

    for flag, value in (
        ("--world-size", world_size),
        ("--gpus", gpus),
        ("--gpu-memory", gpu_memory),
        ("--seq-len", seq_len),
    ):
        if value is not None and not value > 0:
            raise InputError(f"{flag} must be positive, got {value:g}")
    from zerotune.schema.job import JobInputs

    said = o.workload_said(locals())
    JobInputs(**said).check()  # type: ignore[arg-type]
    selected, ignored = _split(select), _split(ignore)
    bad = registry.unknown_selectors((selected or []) + (ignored or []))
    if bad:
        raise InputError(
            f"unknown rule code or prefix: {', '.join(bad)}", hint="list them with `zerotune rule --all`"
        )
    paths = expand(files)
    if fix and "-" in paths:
        raise InputError("--fix cannot rewrite stdin", hint="pass a file path")
    rules = registry.select(selected, ignored)
    options = LintOptions(
        hf=hf,
        world_size=world_size,
        model=model,
        profile=profile,
        gpus=gpus,
        gpu_memory_gib=gpu_memory,
        seq_len=seq_len,
        checkpointing=checkpointing,
        checkpoint_in_cpu=checkpoint_in_cpu,
        margin=margin,
        workload=tuple(said.items()),
        verbose=bool(ctx.find_root().params.get("verbose")),
    )
    check_job_options(options)  # options that make no job are one usage error, not a finding per file
    named = set(files)  # paths given literally; the others came from a glob or a folder walk
    reports = [check_file(path, options, rules, fix, path in named) for path in paths]
    if as_json:
        output_format = Format.json
    if output_format is Format.json:
        console.print_json(diagnostics.to_json(reports))
    elif output_format is Format.sarif:
        console.print_json(diagnostics.sarif(reports, rules))
    elif output_format is Format.github:
        sys.stdout.write(diagnostics.github(reports))
    else:
        rendered = diagnostics.text(reports)
        if sys.stdout.isatty():
            console.out().print(rendered, soft_wrap=True)
        else:  # no colour to add: skip rich's segment rendering (keeps a 100-file CI run fast)
            sys.stdout.write(rendered.plain + "\n")
    skipped = skipped_rules(rules, options)
    if skipped:  # said, not silent; on stderr so --format json/sarif stay machine-readable
        sys.stderr.write(f"note: {skipped}\n")
    s = diagnostics.summary(reports)
    failed = s["errors"] > 0 or (strict and s["warnings"] > 0)
    if failed and not exit_zero:
        raise typer.Exit(1)
