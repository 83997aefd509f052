"""Whether a memory estimate fits: GPU memory, a CPU host's RAM share per rank, host RAM for offload.
One rule for recommend and predict."""

from __future__ import annotations

from typing import Any

from zerotune.schema.hardware import HardwareProfile

SAFETY_MARGIN = 0.10
"""A candidate fits when predicted peak x (1 + margin) <= GPU memory: the margin covers
allocator fragmentation spikes and model error (the memory model's own overhead term is
already inside the prediction)."""

def host_rank_capacity(hardware: HardwareProfile, ranks: int) -> tuple[int | None, str]:
    """On a host without GPUs every rank's memory *is* host RAM: the bytes one of `ranks` ranks may
    use (the RAM that was free when the host was probed, else the installed RAM, shared evenly) and
    a phrase saying which. (None, why) when the profile records neither."""
    host = hardware.host
    if host.ram_available_bytes:
        return host.ram_available_bytes // max(ranks, 1), f"available host RAM / {ranks} ranks"
    if host.ram_bytes:
        return host.ram_bytes // max(ranks, 1), f"host RAM / {ranks} ranks"
    return None, "the profile records no host RAM"


def judge_fit(memory: Any, hardware: HardwareProfile, ranks_per_node: int, margin: float) -> str | None:
    """Why a memory estimate does not fit, or None when it fits: "gpu" (GPU memory x (1 + margin)),
    "rank" (a CPU host: rank memory x (1 + margin) over its share of host RAM) or "host" (offload
    buffers x (1 + margin) over the node's RAM). One rule for recommend and predict."""
    if memory.fits is False:
        return "gpu"
    if not hardware.has_gpus:
        cap, _ = host_rank_capacity(hardware, ranks_per_node)
        if cap is not None and memory.per_gpu.total * (1 + margin) > cap:
            return "rank"
    ram = hardware.host.ram_bytes
    if ram and memory.cpu_bytes_per_node * (1 + margin) > ram:
        return "host"
    return None


def fit_verdict(memory: Any, hardware: HardwareProfile, ranks_per_node: int, margin: float) -> bool | None:
    """judge_fit as a yes/no, or None when there is nothing to judge against (no GPU memory size, or
    a host without GPUs whose profile records no RAM)."""
    if judge_fit(memory, hardware, ranks_per_node, margin) is not None:
        return False
    if hardware.has_gpus:
        return memory.fits
    return None if host_rank_capacity(hardware, ranks_per_node)[0] is None else True
