"""Every rule's data fixture (tests/fixtures/lint/ZTnnn.yaml, sqlfluff style): `fail` cases must raise the rule,
`pass` cases must not, `fix` cases must rewrite to the expected JSON. Configs are given as YAML mappings
(dumped to JSON) or as raw `text`; `yaml: true` reads the case as a .yaml file (accelerate configs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from zerotune.dsconfig.load import load_bytes, load_text
from zerotune.lint import registry
from zerotune.lint.context import LintOptions
from zerotune.lint.runner import apply_fixes, lint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lint"


def _cases() -> list:
    out = []
    for path in sorted(FIXTURES.glob("ZT*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for i, case in enumerate(doc["cases"]):
            out.append(pytest.param(doc["rule"], case, id=f"{doc['rule']}-{i}-{case.get('name', '')}"))
    return out


def _run(code: str, case: dict, key: str) -> tuple[list, object]:
    raw = case[key]
    if case.get("yaml"):
        text = raw if isinstance(raw, str) else yaml.safe_dump(raw)
        loaded = load_bytes(text.encode(), "case.yaml")
    else:
        text = raw if isinstance(raw, str) else json.dumps(raw, indent=2)
        loaded = load_text(text, "case.json")
    options = LintOptions(**case.get("options", {}))
    return lint(loaded, options), loaded


def test_every_rule_has_a_fixture_with_both_kinds_of_case() -> None:
    for rule in registry.all_rules():
        path = FIXTURES / f"{rule.code}.yaml"
        assert path.is_file(), f"missing fixture {path.name}"
        cases = yaml.safe_load(path.read_text())["cases"]
        runner_only = rule.code == "ZT000"  # raised by the runner on a crash: test_lint_robust.py
        assert runner_only or any("fail" in c for c in cases), f"{rule.code}: no failing case"
        assert any("pass" in c for c in cases), f"{rule.code}: no passing case"


@pytest.mark.parametrize(("code", "case"), _cases())
def test_fixture_case(code: str, case: dict) -> None:
    assert registry.get(code) is not None
    if "fail" in case:
        found, loaded = _run(code, case, "fail")
        hits = [d for d in found if d.code == code]
        assert all(registry.get(d.code).fix_title for d in found if d.fix), (
            "a fix from a rule without fix_title"
        )
        assert hits, f"{code} not raised; got {[d.code for d in found]}"
        if "pointer" in case:
            assert case["pointer"] in [d.pointer for d in hits]
        if "line" in case:
            assert case["line"] in [d.line for d in hits]
        if "fix" in case:
            text, applied = apply_fixes(loaded, found)
            assert applied >= 1
            assert json.loads(text) == case["fix"]
            assert not [
                d for d in lint(load_text(text), LintOptions(**case.get("options", {}))) if d.code == code
            ]
    if "pass" in case:
        found, _ = _run(code, case, "pass")
        assert code not in [d.code for d in found], [d.message for d in found if d.code == code]
