"""Renderers of a recorded `zerotune bench` result (tests/fixtures/bench/result_stage2.json: the CPU
default proxy of llama-7b under ZeRO stage 2, 2 gloo ranks, 5e6-element buckets)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from zerotune.bench.result import BenchResult
from zerotune.render import bench as render

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "result_stage2.json"


@pytest.fixture
def result() -> BenchResult:
    return BenchResult.model_validate_json(FIXTURE.read_text())


def _text(renderable) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=140, color_system=None).print(renderable)
    return buffer.getvalue()


def test_the_recorded_result_round_trips_through_the_schema(result: BenchResult) -> None:
    again = BenchResult.model_validate(json.loads(result.model_dump_json()))
    assert again == result
    assert result.schema_version == 1 and result.stage == 2


def test_summary_collectives_and_layers_tables(result: BenchResult) -> None:
    summary = _text(render.summary_table(result))
    assert "llama-7b/2L/w0.25" in summary and "ZeRO stage 2" in summary and "median of" in summary
    comm = _text(render.collectives_table(result))
    for c in result.collectives:
        assert c.op in comm
    assert comm.count("backward") == sum(c.phase == "backward" for c in result.collectives)
    layers = _text(render.layers_table(result))
    assert all(layer.name in layers for layer in result.layers)


def test_timeline_has_two_equal_lanes_and_one_legend_line_per_call(result: BenchResult) -> None:
    lines = render.timeline(result, width=60).splitlines()
    compute = next(line for line in lines if line.startswith("compute |"))
    comm = next(line for line in lines if line.startswith("comm    |"))
    assert len(compute) == len(comm) == len("compute |") + 60 + 1
    assert set(compute[9:-1]) <= {"F", "B", "S", " "} and {"F", "B", "S"} <= set(compute)
    legend = [line for line in lines if line.startswith("  ")]
    assert len(legend) == len(result.buckets)
    # Every call is drawn, in issue order, left to right.
    drawn = [comm.index(line.split()[0]) for line in legend]
    assert drawn == sorted(drawn)
    # On a CPU the reductions block the training thread: no column is both compute and comm.
    assert all(a == " " or b == " " for a, b in zip(compute[9:-1], comm[9:-1], strict=True))


def test_parity_table_only_with_compare_stages(result: BenchResult) -> None:
    assert render.parity_table(result) is None


def test_prediction_table_puts_model_and_measurement_side_by_side(result: BenchResult) -> None:
    assert result.prediction is not None and result.prediction.collectives
    text = _text(render.prediction_table(result))
    assert "step time" in text and f"{result.prediction.error_pct:+.1f}%" in text
    # The stage-2 gradient reductions: the same calls and bytes measured and predicted.
    row = next(line for line in text.splitlines() if "backward all_reduce: calls" in line)
    measured = sum(c.count for c in result.collectives if c.phase == "backward")
    predicted = sum(p.count for p in result.prediction.collectives if p.phase == "backward")
    assert row.split("│")[2].strip() == f"{measured:g}" and row.split("│")[3].strip() == f"{predicted:g}"
    no_model = result.model_copy(update={"prediction": None})
    assert render.prediction_table(no_model) is None
