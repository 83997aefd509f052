"""bench/aggregate.py and bench/run.parity on hand-made rank records with known answers."""

from __future__ import annotations

import pytest

from zerotune.bench import aggregate
from zerotune.bench.run import parity


def _rank0() -> dict:
    # Three modules; forward 0-0.4 s, backward 0.45-1.0 s (head, then layers.0, then embed), step 1.0-1.2 s.
    step = {
        "names": ["embed", "layers.0", "lm_head"],
        "marks": {
            "fwd_start": [[0.0], [0.1], [0.3]],
            "fwd_end": [[0.1], [0.3], [0.4]],
            "bwd_start": [[0.9], [0.6], [0.5]],
            "bwd_begin": [0.45],
            "bwd_end": [1.0],
            "step_start": [1.0],
            "step_end": [1.2],
        },
        "comms": [
            {"op": "all_reduce", "bytes": 400, "latency_s": 0.1, "start_s": 0.7, "phase": "backward"},
            {"op": "all_reduce", "bytes": 4, "latency_s": 0.01, "start_s": 1.0, "phase": "step"},
            {
                "op": "all_gather_into_tensor",
                "bytes": 800,
                "latency_s": 0.05,
                "start_s": 1.1,
                "phase": "step",
            },
        ],
    }
    extra = {**step["comms"][0], "start_s": 0.82, "latency_s": 0.05}
    second = {**step, "comms": [*step["comms"], extra]}
    return {
        "world": 2,
        "timers_s": [{"fwd": 0.1, "bwd": 0.2, "step": 0.3}, {"fwd": 0.3, "bwd": 0.4, "step": 0.5}],
        "logged_steps": [step, second],
        "step_times_s": [1.0, 2.0],
        "logged_step_times_s": [1.5, 1.5],
        "losses": [2.0, 1.0],
    }


def test_module_times_subtract_the_collectives_inside_their_interval() -> None:
    layers = {layer.name: layer for layer in aggregate.layers(_rank0())}
    assert layers["embed"].forward_s == pytest.approx(0.1)
    assert layers["embed"].backward_s == pytest.approx(0.1)  # its mark (0.9) to the end of backward
    assert layers["layers.0"].forward_s == pytest.approx(0.2)
    # 0.6-0.9 s holds 0.1 s of reductions in the first step, 0.15 s in the second: median 0.175.
    assert layers["layers.0"].backward_s == pytest.approx(0.175)
    assert layers["lm_head"].backward_s == pytest.approx(0.1)


def test_collectives_are_grouped_and_counted_per_step() -> None:
    rows = {(c.phase, c.op, c.bytes): c for c in aggregate.collectives(_rank0())}
    reduce = rows[("backward", "all_reduce", 400)]
    assert reduce.count == 1.5  # three calls over two logged steps
    assert reduce.mean_latency_s == pytest.approx((0.1 + 0.1 + 0.05) / 3)
    assert reduce.total_s == pytest.approx(0.125)
    gather = rows[("step", "all_gather_into_tensor", 800)]
    assert gather.count == 1
    # nccl-tests' S: an all-gather's logged message is one rank's shard of the array.
    assert (gather.size_bytes, reduce.size_bytes) == (1600, 400)


def test_buckets_timeline_phases_and_step_times() -> None:
    rank0 = _rank0()
    buckets = aggregate.buckets(rank0)
    assert [b.index for b in buckets] == [0, 1, 2, 3] and buckets[-1].latency_s == 0.05
    segments = aggregate.timeline(rank0)
    assert [s.start_s for s in segments] == sorted(s.start_s for s in segments)
    assert segments[-1].label == "optimizer" and segments[-1].end_s == 1.2
    assert aggregate.phases(rank0).model_dump() == pytest.approx(
        {"forward_s": 0.2, "backward_s": 0.3, "step_s": 0.4}
    )
    other = {**rank0, "step_times_s": [1.5, 1.0]}
    assert aggregate.step_times([rank0, other]) == [1.5, 2.0]  # the slowest rank, step by step


def test_parity_flags_a_difference_beyond_the_tolerance() -> None:
    def runs(*curves: list[float]) -> dict:
        return {stage: [{**_rank0(), "losses": curve}] for stage, curve in enumerate(curves)}

    same = parity(runs([2.0, 1.0], [2.0, 1.0 + 1e-7], [2.0, 1.0]))
    assert same.agree and same.max_abs_diff == pytest.approx(1e-7)
    assert [run.stage for run in same.stages] == [0, 1, 2]
    assert same.stages[1].buckets and same.stages[1].step_time_s == 1.5
    differ = parity(runs([2.0, 1.0], [2.0, 1.01]))
    assert not differ.agree and differ.max_rel_diff == pytest.approx(0.01)
    assert not parity(runs([2.0, 1.0], [2.0, float("nan")])).agree
