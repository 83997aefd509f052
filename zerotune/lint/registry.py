"""The single code → rule table (ruff's codes.rs): families, prefixes, selection by code or prefix.

Family modules are imported on first use only, so `zerotune rule` and `validate` start fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from functools import cache

from zerotune.lint.rule import Rule

# module name under zerotune.lint.rules → (code prefix, one-line description)
FAMILIES: dict[str, tuple[str, str]] = {
    "syntax": ("ZT0", "file syntax: what json/hjson can load, duplicates, placeholders"),
    "batch": ("ZT1", "batch arithmetic: train_batch_size = micro × GAS × world"),
    "stage": ("ZT2", "ZeRO stage applicability and ZeRO++ constraints"),
    "offload": ("ZT3", "optimizer and parameter offload"),
    "precision": ("ZT4", "fp16 / bf16 / data types"),
    "keys": ("ZT5", "unknown, misplaced, deprecated and removed keys"),
    "values": ("ZT6", "types, ranges and engine value checks"),
    "performance": ("ZT7", "communication and memory performance"),
    "hf": ("ZT8", 'Hugging Face "auto" values and saving'),
    "resources": ("ZT9", "model- and hardware-aware checks (--model, --profile)"),
}


@cache
def all_rules() -> tuple[type[Rule], ...]:
    rules: list[type[Rule]] = []
    for family in FAMILIES:
        module = importlib.import_module(f"zerotune.lint.rules.{family}")
        rules.extend(module.RULES)
    return tuple(sorted(rules, key=lambda r: r.code))


def get(code: str) -> type[Rule] | None:
    code = code.upper()
    for rule in all_rules():
        if rule.code == code or rule.name == code.lower():
            return rule
    return None


def _matches(rule: type[Rule], selectors: Iterable[str]) -> bool:
    return any(rule.code.startswith(s.upper()) or rule.name == s.lower() for s in selectors)


def unknown_selectors(selectors: Iterable[str]) -> list[str]:
    return [s for s in selectors if not any(_matches(r, [s]) for r in all_rules())]


def select(
    select: Iterable[str] | None = None, ignore: Iterable[str] | None = None
) -> tuple[type[Rule], ...]:
    """Rules matching any `select` prefix (all when None) and no `ignore` prefix."""
    chosen = [r for r in all_rules() if select is None or _matches(r, select)]
    return tuple(r for r in chosen if not (ignore and _matches(r, ignore)))
