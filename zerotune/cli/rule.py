"""`zerotune rule`: explain one validate rule, or list them all (ruff's `rule` command)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from zerotune.errors import InputError

NAME = "rule"
HELP = "Explain a validate rule (zerotune rule ZT101) or list all rules (--all)."


def command(
    code: Annotated[
        str | None, typer.Argument(help="Rule code or name, e.g. ZT101.", show_default=False)
    ] = None,
    all_rules: Annotated[bool, typer.Option("--all", help="List every rule.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON only, on stdout.")] = False,
) -> None:
    from zerotune.lint import registry
    from zerotune.render import console, diagnostics

    if all_rules or code is None:
        if code is not None:
            raise InputError("give a rule code or --all, not both")
        if not all_rules:
            raise InputError("give a rule code (e.g. ZT101) or --all")
        rules = registry.all_rules()
        if json_out:
            console.print_json(json.dumps([diagnostics.rule_json(r) for r in rules], indent=2))
        else:
            console.out().print(diagnostics.rule_table(rules))
        return
    rule = registry.get(code)
    if rule is None:
        raise InputError(f"unknown rule {code!r}", hint="list them with `zerotune rule --all`")
    if json_out:
        console.print_json(json.dumps(diagnostics.rule_json(rule), indent=2))
        return
    fix = f"Fix: {rule.fix_title} (safe, --fix)\n" if rule.fix_title else ""
    needs = f"Needs: {', '.join(sorted(rule.needs))}\n" if rule.needs else ""
    header = f"{rule.code} {rule.name} [{rule.severity.value}] ({rule.family()})\n{fix}{needs}\n"
    sys.stdout.write(header + rule.explanation() + "\n")
