"""Tables and charts for `zerotune probe`: pure builders (data in, rich renderables or text out).

Bandwidth tables use nccl-tests' columns and units: size (B), count (elements), type, redop,
time (us), algbw and busbw (GB/s = 1e9 B/s), #wrong; footers give the fitted alpha-beta model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from zerotune.probe.checks import noisy_points, per_collective_busbw
from zerotune.probe.metrics import SweepRow, large_message_busbw
from zerotune.schema.hardware import CollectivePerf, DeviceInfo, HardwareProfile, Topology
from zerotune.units import GB, fmt_bytes, fmt_gib


def _na(value: object, fmt: str = "{}") -> str:
    return "n/a" if value is None else fmt.format(value)


def gpu_table(devices: Sequence[DeviceInfo]) -> Table:
    table = Table(title="GPUs (NVML)", title_justify="left")
    for name, justify in (
        ("#", "right"), ("name", "left"), ("memory", "right"), ("cc", "right"), ("PCIe now/max", "left"),
        ("NVLinks", "left"), ("NUMA", "right"), ("CPU affinity", "left"), ("power", "right"),
        ("ECC", "left"), ("MIG", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=name in ("name", "CPU affinity"))
    for d in devices:
        versions = sorted({link.version for link in d.nvlinks if link.version is not None})
        links = f"{len(d.nvlinks)} (enum {','.join(map(str, versions))})" if d.nvlinks else "none"
        pcie = f"gen{_na(d.pcie_gen_current)} x{_na(d.pcie_width_current)} / gen{_na(d.pcie_gen_max)} x{_na(d.pcie_width_max)}"
        table.add_row(
            str(d.index),
            d.name,
            fmt_gib(d.memory_total_bytes),
            _na(d.compute_capability),
            pcie,
            links,
            _na(d.numa_node),
            _na(d.cpu_affinity),
            _na(d.power_limit_w, "{:.0f} W"),
            _na(d.ecc_enabled),
            _na(d.mig_enabled),
        )
    return table


def topology_table(topology: Topology, devices: Sequence[DeviceInfo] = ()) -> Table:
    """nvidia-smi topo -m: one row and column per GPU, plus each GPU's CPU affinity and NUMA node."""
    table = Table(title="Topology (NV# = NVLinks, PIX/PXB = PCIe switch(es), PHB = host bridge, "
                  "NODE = same NUMA node, SYS = across sockets)", title_justify="left")  # fmt: skip
    table.add_column("")
    for i in range(len(topology.matrix)):
        table.add_column(f"GPU{i}", justify="center")
    if devices:
        table.add_column("CPU affinity")
        table.add_column("NUMA", justify="right")
    for i, row in enumerate(topology.matrix):
        extra = [_na(devices[i].cpu_affinity), _na(devices[i].numa_node)] if devices else []
        table.add_row(f"GPU{i}", *row, *extra)
    return table


def host_table(profile: HardwareProfile) -> Table:
    h, c = profile.host, profile.compute
    table = Table(title="Host and compute", title_justify="left", show_header=False, box=box.SIMPLE)
    table.add_column("what", no_wrap=True)
    table.add_column("value")
    rows = [
        ("CPU", f"{_na(h.cpu_model)} ({_na(h.cpu_cores)} cores)"),
        ("RAM total / available", f"{fmt_gib(h.ram_bytes)} / {fmt_gib(h.ram_available_bytes)}"),
        ("/dev/shm", fmt_gib(h.shm_bytes)),
        ("host->device pinned / pageable", f"{_gbps(h.h2d_pinned_Bps)} / {_gbps(h.h2d_pageable_Bps)}"),
        ("device->host pinned", _gbps(h.d2h_pinned_Bps)),
        ("disk write / read", f"{_gbps(h.nvme_write_Bps)} / {_gbps(h.nvme_read_Bps)}"),
        ("host memory copy (read+write) / first touch", f"{_gbps(h.memory_Bps)} / {_gbps(h.first_touch_Bps)}"),
        (
            "CPU optimizer step (ZeRO-shaped AdamW), whole node",
            _na(h.cpu_adam_params_per_s and h.cpu_adam_params_per_s / 1e6, "{:.0f} M params/s"),
        ),
    ]
    if profile.gpu is not None:
        measured = "HBM bandwidth measured" in (profile.gpu.source or "")
        rows.append(("GPU memory copy (read+write)",
                     f"{_gbps(profile.gpu.hbm_bandwidth_Bps)}{'' if measured else ' (datasheet)'}"))  # fmt: skip
    for dtype, flops in sorted(c.achieved_flops.items()):
        rows.append((f"block fwd+bwd {dtype}", f"{flops / 1e12:.3f} TFLOP/s"))
    if c.measured_shape:
        rows.append(("  measured on", c.measured_shape))
    rows.append(("compute slowdown under all_reduce", _na(c.overlap_slowdown, "{:.2f}x")))
    for what, value in rows:
        table.add_row(what, value)
    return table


def _gbps(value: float | None) -> str:
    return "n/a" if value is None else f"{value / GB:.2f} GB/s"


def sweep_table(op: str, rows: Sequence[SweepRow], perf: CollectivePerf | None = None) -> Table:
    """One collective's sweep in nccl-tests' layout; the caption holds the fit and large-message busbw."""
    table = Table(title=op, title_justify="left", box=None, pad_edge=False)
    # two-line headers with the units underneath, as nccl-tests prints them; fits 80 columns
    for name in ("size\n(B)", "count\n(elements)", "type", "redop", "time\n(us)", "spread\n(%)",
                 "algbw\n(GB/s)", "busbw\n(GB/s)", "#wrong"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("type", "redop") else "right", no_wrap=True)
    for r in rows:
        table.add_row(
            str(r.size_bytes), str(r.count), r.dtype, r.redop, f"{r.time_us:.1f}", f"{r.spread_pct:.0f}",
            f"{r.algbw_GBps:.3f}", f"{r.busbw_GBps:.3f}", str(r.wrong),
        )  # fmt: skip
    if perf is not None and rows:
        fit_bw = "inf" if perf.busbw_Bps is None else f"{perf.busbw_Bps / GB:.3f}"
        table.caption = (
            f"fit t = alpha + S*factor/busbw: alpha = {(perf.alpha_s or 0) * 1e6:.1f} us, busbw = {fit_bw} GB/s; "
            f"large-message busbw {large_message_busbw(rows):.3f} GB/s"
        )
        table.caption_justify = "left"
    return table


def bandwidth_chart(op: str, rows: Sequence[SweepRow], width: int = 48) -> str:
    """busbw against message size as horizontal ASCII bars, one line per size."""
    if not rows:
        return f"{op}: no data"
    top = max(r.busbw_GBps for r in rows) or 1.0
    lines = [f"{op} busbw (GB/s) vs size"]
    for r in rows:
        bar = "#" * max(0, round(r.busbw_GBps / top * width))
        lines.append(f"{fmt_bytes(r.size_bytes):>10} |{bar:<{width}}| {r.busbw_GBps:.3f}")
    return "\n".join(lines)


def payload(outcome: Any) -> dict[str, Any]:
    """The `zerotune probe --json` document."""
    from dataclasses import asdict

    links = {"intra_node": outcome.intra}
    if outcome.inter is not None:
        links["inter_node"] = outcome.inter
    return {
        "schema_version": 1,
        "profile": outcome.profile.model_dump(mode="json"),
        "sweeps": {
            where: {
                "ranks": s.ranks,
                "backend": s.backend,
                "avg_busbw_GBps": s.avg_busbw_GBps,
                "large_message_busbw_GBps": per_collective_busbw(s),
                "noisy": noisy_points(s),
                "wrong": s.wrong,
                "rows": {op: [asdict(r) for r in rows] for op, rows in s.rows.items()},
            }
            for where, s in links.items()
        },
        "notes": outcome.notes,
    }


def report(outcome: Any, out: Any) -> None:
    """The whole `zerotune probe` report on `out` (a rich Console)."""
    from zerotune import __version__

    profile = outcome.profile
    intra = outcome.intra
    first = intra.rows[next(iter(intra.rows))]
    out.print(
        f"# zerotune probe {__version__}: {intra.ranks} {intra.backend} ranks, {first[0].dtype}, "
        f"sizes {first[0].size_bytes}..{first[-1].size_bytes} B"
    )
    if profile.devices:
        out.print(gpu_table(profile.devices))
    if profile.topology is not None:
        out.print(topology_table(profile.topology, profile.devices))
    out.print(host_table(profile))
    for title, sweep, link in (
        ("intra-node", intra, profile.intra_node),
        ("inter-node", outcome.inter, profile.inter_node),
    ):
        if sweep is None or link is None:
            continue
        out.print(f"\n[bold]{title}[/]: {link.kind}, {sweep.ranks} {sweep.backend} ranks")
        for op, rows in sweep.rows.items():
            out.print(sweep_table(op, rows, link.collectives.get(op)))
            out.print(bandwidth_chart(op, rows), markup=False)
        wrong = "OK" if sweep.wrong == 0 else "FAILED"
        out.print(f"# Out of bounds values : {sweep.wrong} {wrong}")
        for op, value in per_collective_busbw(sweep).items():
            out.print(f"# {op:<15} Avg bus bandwidth (large messages) : {value:.3f} GB/s", markup=False)
        for line in noisy_points(sweep):
            out.print(f"warning: {line}", markup=False)
    for note in outcome.notes:
        out.print(f"note: {note}", markup=False)


def notice(console: Any) -> Any:
    """Print a probe notice; its text (paths, driver messages) is not Rich markup."""
    from rich.markup import escape

    return lambda message: console.print(f"[yellow]note:[/] {escape(message)}")


def run_with_progress(options: Any, run_probe: Any, err: Any) -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from zerotune.probe.runner import STEPS

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,  # a finished or failed bar leaves an empty line in logs
    ) as progress:
        bar = progress.add_task("probe: start-up", total=len(STEPS) - 1)

        def on_step(rank: int, step: str) -> None:
            phase = step.split()[0]  # "all_gather 4096 B" -> all_gather
            if rank == 0 and phase in STEPS:
                progress.update(bar, completed=STEPS.index(phase), description=f"probe: {step}")

        return run_probe(options, notice=notice(progress.console), on_step=on_step)
