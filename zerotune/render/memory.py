"""Rich renderables for `zerotune memory`: the per-option table and a stacked bar chart.

Pure builders: they take estimates and return renderables; nothing is printed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from zerotune.model.memory import MemoryBreakdown, MemoryEstimate, OffloadRow
from zerotune.units import fmt_bytes, fmt_gib

if TYPE_CHECKING:
    from zerotune.job import Job

# breakdown field, column/legend label, colour, name in a breakdown table's rows
PARTS: tuple[tuple[str, str, str, str], ...] = (
    ("params", "Params", "cyan", "parameters"),
    ("gradients", "Grads", "green", "gradients"),
    ("optimizer_states", "Optim", "magenta", "optimizer states"),
    ("comm_buffers", "Buffers", "yellow", "communication buffers"),
    ("activations", "Activ", "blue", "activations"),
    ("overhead", "Other", "red", "framework overhead"),
)


def peak_line(memory: MemoryEstimate, *, limit: int = 4) -> str | None:
    """"peak set at <phase>: live <largest terms>" (zerotune.model.live_bytes): what to shrink first
    when a job runs out of memory."""
    top = memory.peak_phase
    if top is None:
        return None
    terms = sorted((t for t in top.terms if t.nbytes), key=lambda t: -t.nbytes)
    shown = ", ".join(f"{t.label} {fmt_bytes(t.nbytes)}" for t in terms[:limit])
    rest = sum(t.nbytes for t in terms[limit:])
    more = f", other {fmt_bytes(rest)}" if rest else ""
    return f"peak set at {top.name}: live {shown}{more}"


def option_label(row: OffloadRow) -> str:
    """`ZeRO-3 opt=cpu param=cpu`, shortened when nothing is offloaded."""
    parts = [f"ZeRO-{row.stage}"]
    if row.offload_optimizer != "none":
        parts.append(f"opt={row.offload_optimizer}")
    if row.offload_param != "none":
        parts.append(f"param={row.offload_param}")
    return " ".join(parts)


def _fits(value: bool | None) -> Text:
    if value is None:
        return Text("n/a", style="dim")
    return Text("yes", style="green") if value else Text("no", style="bold red")


def memory_table(
    rows: Sequence[OffloadRow],
    *,
    title: str | None = None,
    margin: float | None = None,
    fits: Sequence[bool | None] | None = None,
) -> Table:
    """One line per option: the per-GPU breakdown, host RAM and NVMe per node (GiB), fit.

    Readable at 80 columns: every numeric column is as wide as its longest cell (never cut to "…"),
    the option label wraps instead. `fits` overrides each row's verdict (recommend's rule, which also
    checks host RAM); `margin` is named in the Fits header."""
    table = Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        padding=0,
        show_edge=False,
        caption="GiB per GPU; Host (RAM) and NVMe per node. Buf = communication buffers, Act = activations, "
        "Other = CUDA context + allocator fragmentation."
        + (f" Fits: total x (1 + {margin:.0%} margin) within GPU memory and host RAM." if margin is not None else ""),
        caption_justify="left",
    )
    cells = []
    for i, row in enumerate(rows):
        est = row.estimate
        b = est.per_gpu
        numbers = [fmt_gib(getattr(b, field), unit=False) for field, _, _, _ in PARTS]
        numbers += [
            fmt_gib(b.total, unit=False),
            fmt_gib(est.cpu_bytes_per_node, unit=False),
            fmt_gib(est.nvme_bytes_per_node, unit=False),
        ]
        cells.append((option_label(row), numbers, _fits(fits[i] if fits is not None else est.fits)))
    short = {"Params": "Param", "Buffers": "Buf", "Activ": "Act"}  # 5 characters: 80 columns hold the table
    labels = [short.get(label, label) for _, label, _, _ in PARTS] + ["Total", "Host", "NVMe"]
    styles = [colour for _, _, colour, _ in PARTS] + ["bold", None, None]
    table.add_column("Option", overflow="fold", min_width=6)
    for j, (label, style) in enumerate(zip(labels, styles, strict=True)):
        width = max([len(label)] + [len(c[1][j]) for c in cells])
        table.add_column(label, justify="right", style=style, no_wrap=True, min_width=width)
    table.add_column("Fits", justify="center", no_wrap=True, min_width=4)
    for label, numbers, fit in cells:
        table.add_row(label, *numbers, fit)
    return table


def legend() -> Text:
    """One coloured `█ label` per breakdown part."""
    return Text("  ").join(
        Text(f"{glyph} {label}", style=colour) for (_, label, colour, _), glyph in zip(PARTS, _glyphs(), strict=True)
    )


_PLAIN_GLYPHS = ("█", "▓", "▒", "░", "=", "·")
"""One glyph per PARTS entry when stdout shows no colour (piped to a file or a CI log, NO_COLOR per
https://no-color.org, TERM=dumb): the bars and the legend stay readable without colour."""


def _glyphs() -> tuple[str, ...]:
    from zerotune.render.console import colour

    return ("█",) * len(PARTS) if colour() else _PLAIN_GLYPHS


def stacked_bar(b: MemoryBreakdown, scale: float, width: int, *, capacity_at: int | None = None) -> Text:
    """A bar of `b.total * scale` cells (at most `width`, then `▶`), one coloured run per part;
    a dim `|` at column `capacity_at` when the bar ends before it."""
    text = Text()
    used = 0.0
    drawn = 0
    for (field, _, colour, _), glyph in zip(PARTS, _glyphs(), strict=True):
        used += getattr(b, field) * scale
        cells = min(width, round(used)) - drawn
        if cells > 0:
            text.append(glyph * cells, style=colour)
            drawn += cells
    if used > width:
        text.append("▶", style="bold")
    if capacity_at is not None and capacity_at >= len(text.plain):
        text.append(" " * (capacity_at - len(text.plain)) + "|", style="dim")
    return text


def memory_chart(rows: Sequence[OffloadRow], *, capacity: int | None = None, width: int = 60) -> Group:
    """Stacked horizontal bars of the per-GPU breakdown on one scale; `|` marks the GPU capacity.

    With a capacity the scale ends at 1.25× it (longer bars are cut and end in `▶`), so the
    options near the limit stay readable next to a replicated stage 0.
    """
    longest = max(r.estimate.per_gpu.total for r in rows)
    full = min(longest, 1.25 * capacity) if capacity else longest
    scale = width / (full or 1)
    chart = Table.grid(padding=(0, 1))
    chart.add_column(no_wrap=True)
    chart.add_column(no_wrap=True)
    chart.add_column(justify="right", no_wrap=True)
    mark = round(capacity * scale) if capacity else None
    for row in rows:
        bar = stacked_bar(row.estimate.per_gpu, scale, width, capacity_at=mark)
        chart.add_row(option_label(row), bar, fmt_gib(row.estimate.per_gpu.total))
    parts: list = [legend(), chart]
    if capacity:
        parts.append(Text(f"| = GPU capacity {fmt_gib(capacity)}", style="dim"))
    return Group(*parts)


def report(out: Console, job: Job, rows: Sequence[OffloadRow], fits: Sequence[bool | None]) -> None:
    """`zerotune memory`'s text report: the table, the chart and the model's assumptions."""
    from rich.markup import escape

    from zerotune.model.activations import ASSUMPTIONS
    from zerotune.units import fmt_count

    spec, hw, w = job.spec, job.hardware, job.workload
    capacity = hw.gpu.memory_bytes if hw.has_gpus and hw.gpu else None
    gpu = hw.gpu.name if hw.has_gpus and hw.gpu else "no GPU"
    title = (
        f"{spec.name} ({fmt_count(spec.params)} params) on {w.nodes}×{w.gpus_per_node} "
        f"{'GPUs' if hw.has_gpus else 'CPU ranks'} "
        f"[{hw.name}: {gpu}, {fmt_bytes(capacity) if capacity else 'capacity n/a'}] · "
        f"seq {w.seq_len} × micro-batch {w.micro_batch}"
        + (f" × accumulation {w.grad_accum}" if w.grad_accum > 1 else "")
        + f", {w.precision}, {w.optimizer}, "
        f"{'' if w.activation_checkpointing else 'no '}activation checkpointing"
        + (", checkpoints in host memory" if w.checkpoint_in_cpu and w.activation_checkpointing else "")
        + (f", LoRA r{w.lora_rank}" if w.lora_rank else "")
    )
    out.print(memory_table(rows, title=escape(title), margin=job.margin, fits=list(fits)))
    out.print(memory_chart(rows, capacity=capacity, width=max(20, min(60, out.width - 40))))
    seen: set[str] = {ASSUMPTIONS}
    out.print(f"note: {ASSUMPTIONS}", markup=False, style="dim")
    for row in rows:
        line = peak_line(row.estimate)
        if line:
            out.print(f"{option_label(row)}: {line}", markup=False, style="dim")
        for note in row.estimate.notes:
            if note not in seen:
                seen.add(note)
                out.print(f"note: {note}", markup=False, style="dim")
