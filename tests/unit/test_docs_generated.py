"""The docs that restate data equal what scripts/gen_docs.py makes of that data: docs/rules.md from
`zerotune rule --all --json`, docs/accuracy.md's tables from data/evidence/ (whose published-suite headline
figures must equal data/published/recorded.json, the figures test_published holds the model to).
Rendering only: the evidence suites themselves are not re-run here."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_generated_docs_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, f"run `python scripts/gen_docs.py` and commit the docs:\n{done.stderr}"


def test_every_rule_has_a_section_in_the_rules_page() -> None:
    from zerotune.lint.registry import all_rules

    text = (REPO / "docs" / "rules.md").read_text()
    assert all(f"\n## {rule.code}\n" in text for rule in all_rules())
