"""`zerotune validate`: lint DeepSpeed configs before launch (people and CI)."""

from __future__ import annotations

import glob
import os
import sys
from enum import Enum
from typing import Annotated

import typer

from zerotune.errors import InputError

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


def expand(paths: list[str]) -> list[str]:
    """Paths as given, globs expanded (sorted); "-" is stdin. A glob that matches nothing is an input error."""
    out: list[str] = []
    for path in paths:
        if path != "-" and any(c in path for c in "*?[") and not os.path.exists(path):
            matches = sorted(glob.glob(path, recursive=True))
            if not matches:
                raise InputError(f"no file matches {path!r}")
            out.extend(matches)
        else:
            out.append(path)
    return out


def command(
    files: Annotated[
        list[str], typer.Argument(help="Config files or globs; '-' reads stdin.", show_default=False)
    ],
    output_format: Annotated[
        Format, typer.Option("--format", help="text, json, github or sarif.")
    ] = Format.text,
    select: Annotated[
        list[str] | None, typer.Option(help="Only these codes or prefixes (ZT2, ZT101,…).")
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
    gpus: Annotated[
        int | None, typer.Option(help="GPUs per node (with --gpu-memory, instead of --profile).")
    ] = None,
    gpu_memory: Annotated[
        float | None, typer.Option(help="GPU memory in GiB (instead of --profile).")
    ] = None,
    seq_len: Annotated[
        int, typer.Option(help="Tokens per sequence, for the activation memory of the memory rules.")
    ] = 2048,
) -> None:
    from zerotune.dsconfig.load import load_path
    from zerotune.lint import registry
    from zerotune.lint.context import LintOptions
    from zerotune.lint.runner import apply_fixes, lint
    from zerotune.render import console, diagnostics

    for flag, value in (
        ("--world-size", world_size),
        ("--gpus", gpus),
        ("--gpu-memory", gpu_memory),
        ("--seq-len", seq_len),
    ):
        if value is not None and not value > 0:
            raise InputError(f"{flag} must be positive, got {value:g}")
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
    )
    reports = []
    for path in paths:
        loaded = load_path(path)
        found = lint(loaded, options, rules)
        fixed = 0
        if fix and any(d.fix for d in found):
            from zerotune.dsconfig.load import load_text
            from zerotune.files import write_atomic

            new_text, fixed = apply_fixes(loaded, found)
            if fixed:
                write_atomic(path, new_text, force=True)
                found = lint(load_text(new_text, loaded.path), options, rules)
        reports.append(diagnostics.FileReport(loaded.path, tuple(found), fixed))

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
    s = diagnostics.summary(reports)
    failed = s["errors"] > 0 or (strict and s["warnings"] > 0)
    if failed and not exit_zero:
        raise typer.Exit(1)
