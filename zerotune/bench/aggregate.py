"""Turn the ranks' raw records into the result's summaries (pure).

Rank records come from zerotune/bench/step_worker.py: per logged step, the ordered collective
calls ({op, bytes, latency_s, start_s, phase}) and the module marks (forward start/end and
backward start per module and micro-step; backward and optimizer-step brackets per micro-step),
all in seconds from the start of the step.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from zerotune.bench.result import Bucket, Collective, LayerTime, MemoryPhase, Phases, Segment, median

Interval = tuple[float, float]


def step_times(ranks: list[dict[str, Any]], key: str = "step_times_s") -> list[float]:
    """Per step, the slowest rank's time (a synchronous step ends when its last rank does)."""
    columns = zip(*(r[key] for r in ranks), strict=True)
    return [max(column) for column in columns]


def phases(rank0: dict[str, Any]) -> Phases:
    rows = rank0["timers_s"]
    return Phases(
        forward_s=median([r["fwd"] for r in rows]),
        backward_s=median([r["bwd"] for r in rows]),
        step_s=median([r["step"] for r in rows]),
    )


def op_family(op: str) -> str:
    """DeepSpeed's function name -> the collective: all_gather_into_tensor -> all_gather."""
    for suffix in ("_into_tensor", "_tensor", "_base", "_coalesced"):
        op = op.removesuffix(suffix)
    return op


def collectives(rank0: dict[str, Any]) -> list[Collective]:
    """Calls grouped by (phase, op, bytes), counted per optimizer step, in first-issue order."""
    world = int(rank0.get("world", 1))
    steps = rank0["logged_steps"]
    groups: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for step in steps:
        for call in step["comms"]:
            groups[(call["phase"], call["op"], call["bytes"])].append(call["latency_s"])
    out = []
    for (phase, op, size), latencies in groups.items():
        mean = sum(latencies) / len(latencies)
        count = len(latencies) / max(1, len(steps))
        whole = size * world if op_family(op) == "all_gather" else size
        out.append(
            Collective(
                op=op,
                bytes=size,
                size_bytes=whole,
                count=count,
                mean_latency_s=mean,
                total_s=count * mean,
                phase=phase,
            )
        )
    return out


def buckets(rank0: dict[str, Any]) -> list[Bucket]:
    """The last logged step's calls in issue order."""
    calls = rank0["logged_steps"][-1]["comms"] if rank0["logged_steps"] else []
    return [
        Bucket(
            index=i,
            op=c["op"],
            bytes=c["bytes"],
            phase=c["phase"],
            start_s=c["start_s"],
            latency_s=c["latency_s"],
        )
        for i, c in enumerate(calls)
    ]


def _comm_inside(interval: Interval, calls: list[Interval]) -> float:
    start, end = interval
    return sum(max(0.0, min(end, e) - max(start, s)) for s, e in calls)


def _module_intervals(step: dict[str, Any]) -> list[tuple[int, str, Interval]]:
    """(module index, phase, interval) for every module and micro-step of one logged step."""
    marks = step["marks"]
    out: list[tuple[int, str, Interval]] = []
    n = len(step["names"])
    for i in range(n):
        for start, end in zip(marks["fwd_start"][i], marks["fwd_end"][i], strict=False):
            out.append((i, "forward", (start, end)))
    for m, bwd_end in enumerate(marks["bwd_end"]):
        for i in range(n):
            starts = marks["bwd_start"][i]
            if m >= len(starts):
                continue
            # Backward of module i ends when the gradient reaches the module before it.
            earlier = [
                marks["bwd_start"][j][m] for j in range(i - 1, -1, -1) if m < len(marks["bwd_start"][j])
            ]
            end = earlier[0] if earlier else bwd_end
            out.append((i, "backward", (starts[m], end)))
    return out


def layers(rank0: dict[str, Any]) -> list[LayerTime]:
    """Per module, the median compute time per micro-batch with collectives subtracted."""
    steps = rank0["logged_steps"]
    if not steps:
        return []
    names = steps[0]["names"]
    times: dict[tuple[int, str], list[float]] = defaultdict(list)
    for step in steps:
        calls = [(c["start_s"], c["start_s"] + c["latency_s"]) for c in step["comms"]]
        for index, phase, (start, end) in _module_intervals(step):
            times[(index, phase)].append(max(0.0, end - start - _comm_inside((start, end), calls)))
    return [
        LayerTime(
            name=name, forward_s=median(times[(i, "forward")]), backward_s=median(times[(i, "backward")])
        )
        for i, name in enumerate(names)
    ]


def timeline(rank0: dict[str, Any]) -> list[Segment]:
    """Compute intervals of the last logged step: modules' forward and backward, optimizer step."""
    if not rank0["logged_steps"]:
        return []
    step = rank0["logged_steps"][-1]
    names = step["names"]
    segments = [
        Segment(label=names[i], phase=phase, start_s=start, end_s=end)  # type: ignore[arg-type]
        for i, phase, (start, end) in _module_intervals(step)
    ]
    marks = step["marks"]
    for start, end in zip(marks["step_start"], marks["step_end"], strict=False):
        segments.append(Segment(label="optimizer", phase="step", start_s=start, end_s=end))
    return sorted(segments, key=lambda s: s.start_s)


MEMORY_PHASES = ("init", "forward", "backward", "step")


def memory_phases(ranks: list[dict[str, Any]]) -> list[MemoryPhase] | None:
    """The ranks' per-interval live bytes (zerotune.bench.live_memory) folded per phase: the largest
    peak over every micro-step of every step, and the live bytes at the end of the phase where that
    peak was (init: after `deepspeed.initialize`; step: after the last step, the steady state); the
    largest over the ranks (ranks differ where their partitions are reduced at different times, and
    an OOM is decided on the fullest one)."""
    per_rank = [_memory_phases(rank.get("memory_phases")) for rank in ranks]
    if not per_rank or any(p is None for p in per_rank):
        return None
    out = []
    for rows in zip(*per_rank, strict=True):
        out.append(
            MemoryPhase(
                phase=rows[0].phase,
                measured_peak_bytes=max(r.measured_peak_bytes for r in rows),
                measured_end_bytes=max(r.measured_end_bytes for r in rows),
            )
        )
    return out


def _memory_phases(rows: list[dict[str, Any]] | None) -> list[MemoryPhase] | None:
    if not rows:
        return None
    out = []
    for phase in MEMORY_PHASES:
        mine = [r for r in rows if r["phase"].split(":")[-1] == phase]
        if not mine:
            continue
        top = max(mine, key=lambda r: r["peak"])
        end = mine[-1]["end"] if phase == "step" else top["end"]
        out.append(MemoryPhase(phase=phase, measured_peak_bytes=top["peak"], measured_end_bytes=end))
    return out


def host_memory(ranks: list[dict[str, Any]]) -> dict[str, float | None] | None:
    """The ranks' host memory rates (measured concurrently): the median over the ranks of each, None
    where any rank measured none (as zerotune/probe/profile.py merge_compute)."""
    found = [r.get("host_memory") for r in ranks]
    if not found or any(not f for f in found):
        return None
    out: dict[str, float | None] = {}
    for key in ("memory_Bps", "first_touch_Bps"):
        values = [f.get(key) for f in found]
        out[key] = None if any(v is None for v in values) else statistics.median(values)
    return out


def pace(ranks: list[dict[str, Any]]) -> list[float] | None:
    """The speed reference read before and after the steps (zerotune/bench/step_worker.py _Pace): the
    slowest rank's reading at each end (the ranks read it at once, as a step's ranks run), None where
    any rank read none."""
    found = [r.get("pace_s") for r in ranks]
    if not found or any(not f for f in found):
        return None
    return [max(values) for values in zip(*found, strict=True)]
