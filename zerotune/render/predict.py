"""Renderers for `zerotune predict` (and recommend): memory and step breakdowns, ASCII timeline.

Pure functions: data in, a rich Table or plain text out. `timeline_text` is plain text so it
can go into a terminal, a sidecar explanation file or a test assertion alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

from zerotune.model.memory import MemoryEstimate
from zerotune.model.step import StepEstimate
from zerotune.render.memory import PARTS, peak_line
from zerotune.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    from zerotune.job import Job
    from zerotune.model.fit import Verdict

# one character per kind of work, on the row of the stream that runs it
_GLYPH = {
    "fwd": "F",
    "bwd": "B",
    "optimizer": "O",
    "offload": "P",
    "all_gather": "g",
    "reduce_scatter": "r",
    "all_reduce": "a",
    "all_to_all": "t",
    "broadcast": "b",
}
_LEGEND = (
    "F fwd  B bwd(+recompute)  O optimizer  P offload copy\n"
    "g all-gather  r reduce-scatter  a all-reduce  t all-to-all"
)
"""Two lines so the timeline stays within 80 columns."""


def memory_breakdown_table(memory: MemoryEstimate, *, title: str | None = None) -> Table:
    """Per-GPU bytes by kind, the total, and the fit against the profile's capacity."""
    table = Table(title=title, title_justify="left")
    table.add_column("per GPU", no_wrap=True)
    table.add_column("bytes", justify="right")
    table.add_column("share", justify="right")
    b = memory.per_gpu
    total = b.total or 1
    for field, _, _, name in PARTS:
        value = getattr(b, field)
        table.add_row(name, fmt_bytes(value), f"{value / total:.0%}")
    table.add_section()
    table.add_row("total", fmt_bytes(b.total), "")
    if memory.gpu_capacity_bytes:
        verdict = "fits" if memory.fits else "does NOT fit"
        table.add_row(f"capacity ({verdict})", fmt_bytes(memory.gpu_capacity_bytes), "")
    else:
        table.add_row("capacity", "n/a (no GPU in profile)", "")
    if memory.cpu_bytes_per_node:
        table.add_row("host RAM per node (offload)", fmt_bytes(memory.cpu_bytes_per_node), "")
    if memory.nvme_bytes_per_node:
        table.add_row("NVMe per node (offload)", fmt_bytes(memory.nvme_bytes_per_node), "")
    table.caption = peak_line(memory)
    table.caption_justify = "left"
    return table


def step_table(estimate: StepEstimate, *, title: str | None = None, expected: str = "") -> Table:
    """Where the step's time goes, and the throughput it gives; `expected`: the job's expected error,
    quoted next to tokens/s: the bands are throughput errors (|predicted tokens/s / measured - 1|,
    zerotune/model/band.py), which a step time would read asymmetrically (-50% throughput is +100% time)."""
    table = Table(title=title, title_justify="left")
    table.add_column("step", no_wrap=True)
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    step = estimate.step_time_s or 1.0
    for name, value in (
        ("compute (fwd+bwd, with contention)", estimate.compute_s),
        ("exposed communication", estimate.exposed_comm_s),
        ("optimizer", estimate.optimizer_s),
        ("exposed offload transfers", estimate.offload_s),
        # the profile's per-step and per-micro-step costs are in the step time: show them, so the rows add up
        ("fixed overheads (per step, micro-step)", estimate.overhead_s),
    ):
        table.add_row(name, fmt_seconds(value), f"{value / step:.0%}")
    table.add_row("communication stream busy (total)", fmt_seconds(estimate.comm_s), "", style="dim")
    table.add_section()
    table.add_row("step time", fmt_seconds(estimate.step_time_s), "")
    table.add_row("tokens/s (all ranks)", f"{estimate.tokens_per_s:,.0f}", expected)
    table.add_row("MFU", f"{estimate.mfu:.1%}" if estimate.mfu is not None else "n/a", "")
    table.add_row("bottleneck", estimate.bottleneck, "")
    return table


def collectives_table(estimate: StepEstimate) -> Table:
    table = Table(title="collectives per optimizer step", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("op", no_wrap=True)
    table.add_column("phase")
    table.add_column("size", justify="right")
    table.add_column("calls", justify="right")
    table.add_column("time/call", justify="right")
    table.add_column("total", justify="right")
    for call in estimate.collectives:
        table.add_row(
            call.op,
            call.phase,
            fmt_bytes(call.bytes),
            str(call.count),
            fmt_seconds(call.seconds),
            fmt_seconds(call.total_s),
        )
    return table


def timeline_text(estimate: StepEstimate, width: int = 100, *, max_listed: int = 12) -> str:
    """An ASCII picture of the predicted timeline: one row per stream, `width` columns for the
    span of the recorded events (the last micro-step and the optimizer), then the first
    `max_listed` collectives with their start and end. Needs predict_step(..., detail=True)."""
    events = estimate.events
    if not events:
        return "(no timeline: predict with detail=True)"
    width = max(width, 20)
    t0 = min(e.start_s for e in events)
    t1 = max(e.end_s for e in events)
    span = (t1 - t0) or 1.0
    rows = {"compute": [" "] * width, "comm": [" "] * width, "host": [" "] * width}
    for e in events:
        row = rows["compute" if e.stream == "host" else e.stream]
        a = int((e.start_s - t0) / span * width)
        b = max(a + 1, int(round((e.end_s - t0) / span * width)))
        glyph = _GLYPH.get(e.kind, "#")
        for x in range(min(a, width - 1), min(b, width)):
            row[x] = glyph
    lines = [
        f"timeline 0 .. {fmt_seconds(span)} ({fmt_seconds(span / width)} per column)",
        "compute |" + "".join(rows["compute"]) + "|",
        "comm    |" + "".join(rows["comm"]) + "|",
        _LEGEND,
    ]
    comm = [e for e in events if e.stream == "comm"]
    for e in comm[:max_listed]:
        lines.append(f"  {fmt_seconds(e.start_s - t0):>10} - {fmt_seconds(e.end_s - t0):>10}  {e.label}")
    if len(comm) > max_listed:
        lines.append(f"  ... {len(comm) - max_listed} more collectives")
    return "\n".join(lines)


def verdict_lines(verdict: Verdict) -> list[str]:
    """The fit verdict in words: what failed, or what could not be checked (one line each)."""
    m = f"x (1 + {verdict.margin:.0%} margin)"
    lines = []
    if verdict.reason == "gpu":
        lines.append(
            f"does NOT fit: {fmt_bytes(verdict.rank_bytes)} per GPU {m} exceeds {fmt_bytes(verdict.rank_capacity_bytes)}"
        )
    elif verdict.reason == "rank":
        lines.append(
            f"does NOT fit: {fmt_bytes(verdict.rank_bytes)} per rank {m} exceeds "
            f"{fmt_bytes(verdict.rank_capacity_bytes)} ({verdict.rank_capacity})"
        )
    elif verdict.reason == "host":
        lines.append(
            f"does NOT fit: offload needs {fmt_bytes(verdict.host_bytes)} of host RAM per node {m} vs "
            f"{fmt_bytes(verdict.host_capacity_bytes)}"
        )
    elif not verdict.on_gpu and verdict.rank_capacity_bytes is not None:
        lines.append(
            f"a host without GPUs: rank memory is host RAM, {fmt_bytes(verdict.rank_capacity_bytes)} per rank "
            f"({verdict.rank_capacity})"
        )
    return lines + list(verdict.assumptions)


def header(job: Job) -> str:
    """Three short lines: readable at 80 columns, each fact whole on one line."""
    from zerotune.units import fmt_count

    spec, w, z = job.spec, job.workload, job.resolved.zero
    return (
        f"{spec.name} ({fmt_count(spec.params)} params) · {w.nodes}x{w.gpus_per_node} ranks on {job.hardware.name}\n"
        f"ZeRO stage {z.stage}, {w.precision}, overlap_comm {z.overlap_comm}, "
        f"reduce_bucket {fmt_count(z.reduce_bucket_size)}\n"
        f"seq {w.seq_len} x micro-batch {w.micro_batch} x accumulation {w.grad_accum} · "
        f"activation checkpointing {'on' if w.activation_checkpointing else 'off'}"
        + (", checkpoints in host memory" if w.activation_checkpointing and w.checkpoint_in_cpu else "")
        + (f" · LoRA r{w.lora_rank}" if w.lora_rank else "")
    )


def report(
    out: Console, job: Job, memory: MemoryEstimate, estimate: StepEstimate, verdict: Verdict, width: int | None,
    expected_pct: float | None = None,
) -> None:
    """`zerotune predict`'s text report; `expected_pct`: the job's expected step-time error
    (zerotune/catalog/trust.py quoted_error, whose line the command prints after the report)."""
    from rich.markup import escape

    out.print(escape(header(job)), soft_wrap=True)
    out.print(memory_breakdown_table(memory, title=f"memory per GPU, fits with a {verdict.margin:.0%} margin?"))
    if job.hardware.has_gpus:
        out.print(counters_line(memory), markup=False)
    for line in verdict_lines(verdict):
        out.print(line, markup=False, style="bold" if line.startswith("does NOT") else None)
    expected = f"+-{expected_pct:.0f}% expected" if expected_pct is not None else ""
    out.print(step_table(estimate, title="one optimizer step", expected=expected))
    if estimate.collectives:
        out.print(collectives_table(estimate))
    width = width or max(40, min(100, out.width - 12))
    out.print(timeline_text(estimate, width), markup=False, highlight=False, soft_wrap=True)
    for note in (*memory.notes, *estimate.notes):
        out.print(f"note: {note}", markup=False, style="dim")


def payload(job: Job, memory: MemoryEstimate, estimate: StepEstimate, verdict: Verdict) -> dict[str, Any]:
    """The --json document of predict (also what scripts read)."""
    from zerotune.model.step import step_summary

    b = memory.per_gpu
    return {
        "model": {"name": job.spec.name, "params": job.spec.params},
        "profile": job.hardware.name,
        "workload": job.workload.model_dump() | {"world_size": job.workload.world_size},
        "zero": job.resolved.zero.model_dump(mode="json"),
        **step_summary(estimate),
        "memory": {
            "per_gpu_bytes": b.total,
            "fits": verdict.fits,
            "fit": {"reason": verdict.reason, "assumptions": list(verdict.assumptions)},
            "safety_margin": verdict.margin,
            "gpu_capacity_bytes": memory.gpu_capacity_bytes,
            "headroom_bytes": verdict.headroom_bytes,
            "cpu_bytes_per_node": memory.cpu_bytes_per_node,
            "nvme_bytes_per_node": memory.nvme_bytes_per_node,
            "breakdown": b._asdict(),
            "peak_phase": _peak_phase(memory),
            "counters": counters(memory) if job.hardware.has_gpus else None,
            "timeline": {p.name: {t.label: t.nbytes for t in p.terms if t.nbytes} for p in memory.timeline},
        },
        "collectives": [
            {"op": c.op, "bytes": c.bytes, "count": c.count, "seconds_per_call": c.seconds,
             "total_s": c.total_s, "phase": c.phase}
            for c in estimate.collectives
        ],  # fmt: skip
        "events": [
            {"stream": e.stream, "label": e.label, "start_s": e.start_s, "end_s": e.end_s, "kind": e.kind}
            for e in estimate.events
        ],
        "notes": [*memory.notes, *estimate.notes],
    }


def counters(memory: MemoryEstimate) -> dict[str, int]:
    """The per-GPU peak as each counter reads it (zerotune.model.counters.counter_bytes): what to hold a
    measured torch.cuda.max_memory_allocated, max_memory_reserved or nvidia-smi figure against."""
    from zerotune.model.counters import COUNTER_KINDS, counter_bytes

    return {kind: counter_bytes(memory, kind) for kind in COUNTER_KINDS}


def counters_line(memory: MemoryEstimate) -> str:
    c = counters(memory)
    return (
        f"as a run reads it: max_memory_allocated {fmt_bytes(c['max_allocated'])}, "
        f"max_memory_reserved {fmt_bytes(c['max_reserved'])}, nvidia-smi {fmt_bytes(c['nvidia-smi'])}"
    )


def _peak_phase(memory: MemoryEstimate) -> dict[str, Any] | None:
    top = memory.peak_phase
    if top is None:
        return None
    return {"name": top.name, "live_bytes": {t.label: t.nbytes for t in top.terms if t.nbytes}}
