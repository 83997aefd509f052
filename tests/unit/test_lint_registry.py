"""Registry invariants (ruff's check_docs_formatted equivalent) and the `zerotune rule` command."""

from __future__ import annotations

import json
import re

from zerotune.lint import registry
from zerotune.lint.rule import SECTIONS


def test_at_least_40_rules_with_unique_codes_and_names() -> None:
    rules = registry.all_rules()
    assert len(rules) >= 40
    assert len({r.code for r in rules}) == len(rules)
    assert len({r.name for r in rules}) == len(rules)


def test_codes_match_their_family_prefix_and_names_are_kebab_case() -> None:
    for rule in registry.all_rules():
        prefix = registry.FAMILIES[rule.family()][0]
        assert re.fullmatch(r"ZT\d{3}", rule.code), rule.code
        assert rule.code.startswith(prefix), (rule.code, rule.family())
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name), rule.name


def test_every_explanation_has_the_fixed_sections_in_order() -> None:
    for rule in registry.all_rules():
        text = rule.explanation()
        positions = [text.find(f"## {section}") for section in SECTIONS]
        assert all(p > 0 for p in positions), (rule.code, positions)
        assert positions == sorted(positions), rule.code
        assert rule.summary() and not rule.summary().startswith("#"), rule.code


def test_messages_format_without_missing_fields_being_silently_dropped() -> None:
    for rule in registry.all_rules():
        fields = set(re.findall(r"{(\w+)", rule.message))
        assert "pointer" not in fields, rule.code  # reserved: emit() takes the pointer itself


def test_select_and_ignore_by_prefix() -> None:
    stage = registry.select(["ZT2"])
    assert stage and all(r.code.startswith("ZT2") for r in stage)
    assert "ZT201" not in [r.code for r in registry.select(["ZT2"], ["ZT201"])]
    assert [r.code for r in registry.select(["batch-size-mismatch"])] == ["ZT101"]
    assert registry.unknown_selectors(["ZT2", "ZZ9", "nope"]) == ["ZZ9", "nope"]


def test_rule_command_prints_the_explanation(cli) -> None:
    res = cli("rule", "ZT101")
    assert res.code == 0
    assert "batch-size-mismatch" in res.stdout and "## Why is this bad?" in res.stdout


def test_rule_all_lists_every_rule(cli) -> None:
    res = cli("rule", "--all", "--json")
    assert res.code == 0
    listed = json.loads(res.stdout)
    assert [r["code"] for r in listed] == [r.code for r in registry.all_rules()]
    table = cli("rule", "--all")
    assert table.code == 0 and "ZT101" in table.stdout and "ZT904" in table.stdout


def test_rule_unknown_code_is_a_usage_error(cli) -> None:
    res = cli("rule", "ZT999")
    assert res.code == 2 and "unknown rule" in res.stderr and "Traceback" not in res.stderr
