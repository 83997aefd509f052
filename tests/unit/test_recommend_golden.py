"""Golden outputs of `zerotune recommend`: the emitted config (key order included) and the reason for
every key are what tests/golden/recommend_*.json recorded before the knob table (issue 19) replaced
the per-module knob lists. The search's wall time is left out (it varies run to run); so is the
reasons' key order (a JSON object), which moved with the table's emission order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerotune.catalog.hardware import load_profile
from zerotune.catalog.models import load_model
from zerotune.search.rank import SearchRequest
from zerotune.search.recommend import recommend, to_json

GOLDEN = Path(__file__).parent.parent / "golden"
CASES = sorted(GOLDEN.glob("recommend_*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_recommend_matches_golden(path: Path) -> None:
    golden = json.loads(path.read_text())
    model, profile = path.stem.removeprefix("recommend_").split("_")[:2]
    asked = golden["request"]
    request = SearchRequest(
        seq_len=asked["seq_len"],
        global_batch_tokens=asked["global_batch_tokens"],
        objective=asked["objective"],
        task=asked["task"],
    )
    doc = to_json(recommend(load_model(model), load_profile(profile), request, hf=asked["hf"]))
    assert json.dumps(doc["config"]) == json.dumps(golden["config"])
    assert doc["reasons"] == golden["reasons"]
    assert [s for s in doc["summary"] if not s.startswith("search:")] == golden["summary"]
    assert doc["binding_constraint"] == golden["binding_constraint"]
