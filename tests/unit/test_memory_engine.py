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


def test_stage3_traced_forward_starts_with_the_whole_model_in_flight() -> None:
    """At the start of step 2's forward every coalesced all-gather has been issued (the prefetch is
    capped only by max_live_parameters): flat buffers of the whole model plus the bucket being copied
    out, and on gloo two running collectives' output temporaries. On the recorded s3 row that phase
    sets the measured forward peak (~2 models above the steady state), which the end of forward
    (one gathered model plus activations) does not reach."""
    from zerotune.model.live_bytes import BLAS_WORKSPACES
    from zerotune.model.memory import estimate_memory

    spec = memory_engine.ModelSpec.model_validate(DATA["model"])
    row = next(r for r in DATA["rows"] if r["name"] == "s3")
    zero = memory_engine.resolve(row["engine_config"]).zero

    def forward(z, gloo: bool) -> dict[str, int]:
        # NCCL ranks are CUDA ranks: their cuBLAS workspaces are not a gloo difference
        est = estimate_memory(spec, memory_engine.workload(row), z, torch_optimizer=True, gloo=gloo)
        return {p.name: p.total - p.terms_named(BLAS_WORKSPACES) for p in est.timeline if p.group == "forward"}

    on_gloo, on_nccl = forward(zero, True), forward(zero, False)
    first = "start of forward (all-gathers in flight)"
    assert on_gloo[first] > on_gloo["end of forward (gathered)"]
    assert on_gloo[first] - on_nccl[first] == 2 * zero.prefetch_bucket_size * 4
    measured = memory_engine.measured_phases(row)["forward"]
    assert abs(on_gloo[first] - measured) / measured < 0.06
    # the in-flight buffers are capped by max_live_parameters, and gone with allgather_sequential
    capped = forward(zero.model_copy(update={"max_live_parameters": 60_000_000}), True)
    assert capped[first] < on_gloo[first]
    assert first not in forward(zero.model_copy(update={"allgather_sequential": True}), True)
