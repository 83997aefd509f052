"""Turn what the probe read and measured into a HardwareProfile (origin "probe"). Pure: no torch,
no NVML; the inputs are the NVML report, the host facts, the optional disk result and the ranks'
JSON results, so tests build profiles from recorded results.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from zerotune import __version__
from zerotune.collectives import Collective
from zerotune.hw.disk import DiskResult
from zerotune.hw.host import HostFacts
from zerotune.hw.nvml import GpuReport
from zerotune.probe.metrics import SWEPT, SweepRow, average_large_busbw, collective_perf, make_row
from zerotune.schema.hardware import ComputeSpec, GpuSpec, HardwareProfile, HostSpec, LinkClass


def source_text(date: str) -> str:
    return f"measured by zerotune probe {__version__} on {date}"


@dataclass(frozen=True)
class LinkSweep:
    """One link class's sweep, merged over its ranks."""

    ranks: int
    backend: str
    rows: dict[Collective, list[SweepRow]]
    reduce_scatter_impl: str

    @property
    def wrong(self) -> int:
        return sum(r.wrong for rows in self.rows.values() for r in rows)

    @property
    def avg_busbw_GBps(self) -> float:
        return average_large_busbw(self.rows)


def merge_sweep(results: Sequence[dict[str, Any]], dtype: str) -> LinkSweep:
    """Rows per collective from every rank's `sweep` result: per-iteration slowest rank, summed
    #wrong (a wrong element on any rank is wrong)."""
    n = len(results)
    rows: dict[Collective, list[SweepRow]] = {}
    for op in SWEPT:
        per_rank = [r["sweep"][op] for r in results]
        rows[op] = [
            make_row(
                op,
                per_rank[0][i]["count"],
                dtype,
                n,
                [ranks[i]["times"] for ranks in per_rank],
                sum(ranks[i]["wrong"] for ranks in per_rank),
            )
            for i in range(len(per_rank[0]))
        ]
    return LinkSweep(n, results[0]["backend"], rows, results[0].get("reduce_scatter_impl", "reduce_scatter"))


def merge_compute(results: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The compute result for the profile: rank 0's when it measured alone (a GPU host); when every
    rank measured at once (a CPU host, each rank with its share of the cores), the median over the
    ranks of the block FLOP/s, the CPU-Adam rate and the host memory rates, i.e. what one rank gets while its peers compute."""
    per_rank = [r["compute"] for r in results if r.get("compute")]
    if not per_rank:
        return None
    first = per_rank[0]
    if len(per_rank) == 1 and "concurrent_ranks" not in first:
        return first
    n = first.get("concurrent_ranks", len(per_rank))
    merged = {**first, "shape": f"{first['shape']}, per rank with {n} ranks computing concurrently"}
    if "block" in first:
        merged["block"] = {
            **first["block"],
            "flops": statistics.median(c["block"]["flops"] for c in per_rank),
            "seconds": statistics.median(c["block"]["seconds"] for c in per_rank),
            "per_rank_flops": [c["block"]["flops"] for c in per_rank],
        }
    if "adam" in first:
        merged["adam"] = {
            **first["adam"],
            "params_per_s": statistics.median(c["adam"]["params_per_s"] for c in per_rank),
            "per_rank_params_per_s": [c["adam"]["params_per_s"] for c in per_rank],
        }
    if all(c.get("host_memory") for c in per_rank):
        merged["host_memory"] = {
            key: _median_or_none([c["host_memory"].get(key) for c in per_rank])
            for key in ("memory_Bps", "first_touch_Bps")
        }
    return merged


def _median_or_none(values: list[float | None]) -> float | None:
    """The median of the ranks' rates; None when any rank measured none."""
    return None if any(v is None for v in values) else statistics.median(values)  # type: ignore[type-var]


@dataclass
class ProbeOutcome:
    profile: HardwareProfile
    intra: LinkSweep
    inter: LinkSweep | None = None
    gpus: GpuReport | None = None
    disk: DiskResult | None = None
    notes: list[str] = field(default_factory=list)


def build_profile(
    *,
    name: str,
    date: str,
    dtype: str,
    host: HostFacts,
    intra: LinkSweep,
    compute: dict[str, Any] | None,
    overlap: dict[str, Any] | None,
    gpus: GpuReport | None = None,
    disk: DiskResult | None = None,
    inter: LinkSweep | None = None,
    nodes: int = 1,
    notes: Sequence[str] = (),
    datasheet: GpuSpec | None = None,
) -> HardwareProfile:
    """`datasheet`: the catalog's GpuSpec for the same GPU name, whose cited peaks the probe cannot
    measure; without one those stay null. HBM bandwidth is the probe's own copy when it ran (a GPU
    host), else the datasheet's."""
    source = source_text(date)
    first = gpus.devices[0] if gpus else None
    gpu = None
    if first is not None:
        cc = first.compute_capability
        peaks = datasheet.model_dump(include={"peak_bf16_flops", "peak_fp16_flops", "peak_fp32_flops",
                                              "hbm_bandwidth_Bps"}) if datasheet else {}  # fmt: skip
        hbm = ((compute or {}).get("device_memory") or {}).get("hbm_Bps")
        if hbm:  # measured beats the datasheet's peak (zerotune/probe/compute.py measure_device_memory)
            peaks["hbm_bandwidth_Bps"] = hbm
        gpu = GpuSpec(
            name=first.name,
            memory_bytes=first.memory_total_bytes,
            compute_capability=cc,
            bf16_supported=None if cc is None else float(cc) >= 8.0,
            source=f"NVML, driver {gpus.driver_version}"
            + (f"; peaks from the catalog: {datasheet.source}" if datasheet else "")
            + ("; HBM bandwidth measured by the probe (a 1 GiB device copy)" if hbm else ""),
            **peaks,
        )
    copies = (compute or {}).get("copies", {})
    adam = (compute or {}).get("adam")
    memory = (compute or {}).get("host_memory") or {}
    host_spec = HostSpec(
        cpu_model=host.cpu_model,
        cpu_cores=host.cpu_cores,
        ram_bytes=host.ram_bytes,
        ram_available_bytes=host.ram_available_bytes,
        shm_bytes=host.shm_bytes,
        pcie_gen=first.pcie_gen_max if first else None,
        pcie_width=first.pcie_width_max if first else None,
        h2d_pinned_Bps=copies.get("h2d_pinned_Bps"),
        d2h_pinned_Bps=copies.get("d2h_pinned_Bps"),
        h2d_pageable_Bps=copies.get("h2d_pageable_Bps"),
        nvme_read_Bps=disk.read_Bps if disk else None,
        nvme_write_Bps=disk.write_Bps if disk else None,
        cpu_adam_params_per_s=_host_adam_rate(compute) if adam else None,
        memory_Bps=memory.get("memory_Bps"),
        first_touch_Bps=memory.get("first_touch_Bps"),
        source=source + _concurrency(compute),
    )
    block = (compute or {}).get("block")
    peak = gpu.peak_flops(block["dtype"]) if gpu and block else None
    compute_spec = ComputeSpec(
        achieved_flops={block["dtype"]: block["flops"]} if block else {},
        # the measured fraction of the datasheet peak stands in for the dtypes not measured
        mfu_assumption=block["flops"] / peak if peak and block else None,
        overlap_slowdown=max(1.0, overlap["slowdown"]) if overlap else None,
        measured_shape=(compute or {}).get("shape"),
        source=source + _concurrency(compute),
    )
    return HardwareProfile(
        name=name,
        description=(
            f"{intra.ranks} x {first.name} ({intra.backend})"
            if first
            else f"CPU host, {intra.ranks} gloo ranks"
        ),
        origin="probe",
        created=date,
        nodes=nodes,
        gpus_per_node=len(gpus.devices) if gpus else 0,
        gpu=gpu,
        host=host_spec,
        intra_node=_link(intra, gpus, source),
        inter_node=_link(inter, None, source, between_nodes=True) if inter else None,
        compute=compute_spec,
        devices=list(gpus.devices) if gpus else [],
        topology=gpus.topology if gpus else None,
        driver_version=gpus.driver_version if gpus else None,
        cuda_driver_version=gpus.cuda_driver_version if gpus else None,
        notes=list(notes),
    )


def _host_adam_rate(compute: dict[str, Any]) -> float:
    """The node's CPU-Adam rate: rank 0 alone (a GPU host) used every core; concurrent CPU ranks each
    had their share, so the node does the median rank's rate times the ranks."""
    return compute["adam"]["params_per_s"] * compute.get("concurrent_ranks", 1)


def _concurrency(compute: dict[str, Any] | None) -> str:
    n = (compute or {}).get("concurrent_ranks")
    return f"; compute per rank (median), {n} ranks computing concurrently" if n else ""


def _link(sweep: LinkSweep, gpus: GpuReport | None, source: str, between_nodes: bool = False) -> LinkClass:
    """Between nodes the fabric (InfiniBand, RoCE, Ethernet) is not visible to NVML: "network"."""
    if between_nodes:
        kind = "tcp-gloo" if sweep.backend == "gloo" else "network"
    elif sweep.backend == "gloo":
        kind = "loopback-gloo"
    else:
        kind = gpus.link_kind if gpus else "pcie"
    where = f"{source}; {sweep.ranks} {sweep.backend} ranks"
    perf = {op: collective_perf(op, sweep.ranks, rows, where) for op, rows in sweep.rows.items() if rows}
    if sweep.reduce_scatter_impl != "reduce_scatter_single" and "reduce_scatter" in perf:
        perf["reduce_scatter"].source = f"{where}; reduce_scatter emulated: {sweep.reduce_scatter_impl}"
    return LinkClass(
        kind=kind,
        backend="nccl" if sweep.backend == "nccl" else "gloo",
        ranks=sweep.ranks,
        nominal_Bps=gpus.nominal_Bps if gpus else None,
        p2p=gpus.p2p if gpus else None,
        collectives=perf,
        source=where,
    )
