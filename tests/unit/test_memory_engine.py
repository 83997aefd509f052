"""The memory timeline against the real DeepSpeed 0.19.8 engine: live bytes per phase that
scripts/evidence/memory_engine.py measured on 2 gloo ranks (data/evidence/memory_engine.json), re-predicted
without DeepSpeed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("memory_engine", REPO / "scripts" / "evidence" / "memory_engine.py")
memory_engine = importlib.util.module_from_spec(_spec)
sys.modules["memory_engine"] = memory_engine
_spec.loader.exec_module(memory_engine)

DATA = json.loads(memory_engine.DATA.read_text())
ROWS = memory_engine.compare(DATA)


def test_recorded_with_the_pinned_deepspeed_and_a_model_of_100m_parameters() -> None:
    assert DATA["deepspeed"] == "0.19.8"
    assert DATA["recorded"] and DATA["torch"]
    recorded = memory_engine.ModelSpec.model_validate(DATA["model"])
    assert recorded.params == memory_engine.proxy_spec().params >= 100_000_000
    assert len(DATA["rows"]) >= 10
    assert {r["config"]["zero_optimization"]["stage"] for r in DATA["rows"]} == {0, 1, 2, 3}
    assert any("bf16" in r["config"] for r in DATA["rows"])


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['row']}-{r['phase']}")
def test_every_phase_within_acceptance_or_its_recorded_miss(row: dict) -> None:
    """Issue 23's acceptance: within 5% (the known misses within their recorded error + 1 point), and
    never more than 10% over, offload rows included (their host side is a timeline too)."""
    limit = memory_engine.KNOWN_MISSES.get((row["row"], row["phase"]), memory_engine.LIMIT_PCT)
    assert abs(row["error_pct"]) <= limit, row
    assert row["error_pct"] <= memory_engine.OVER_LIMIT_PCT, row
