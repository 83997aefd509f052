"""Does a job fit: the one verdict every command gives (memory, predict, recommend, validate, diagnose).

A job fits when, with one safety margin on top of every predicted peak,
- each rank's memory fits its device: the GPU's memory, or on a host without GPUs its share of the
  host RAM (every gloo rank lives in host memory), and
- the offloaded states and pinned buffers of all ranks of a node fit the node's RAM.

What the profile does not record is not guessed: the verdict says which check it could not make
(`assumptions`) and `fits` is None when no check at all was possible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from zerotune.schema.job import SAFETY_MARGIN  # the job asks for it; the verdict applies it

if TYPE_CHECKING:
    from zerotune.model.memory import MemoryEstimate
    from zerotune.schema.hardware import HardwareProfile


Reason = Literal["gpu", "rank", "host"]


@dataclass(frozen=True)
class Verdict:
    fits: bool | None
    """False when a check failed; None when nothing could be checked (no GPU size, no host RAM)."""
    reason: Reason | None
    """Which check failed: "gpu" (GPU memory), "rank" (a CPU host's share of RAM per rank), "host"
    (offload buffers of a node over its RAM)."""
    margin: float
    on_gpu: bool
    """The rank's memory is a GPU's (else host RAM: a host without GPUs)."""
    rank_bytes: int
    """Predicted peak of one rank (GPU memory, or host memory on a host without GPUs)."""
    rank_capacity_bytes: int | None
    rank_capacity: str
    """What `rank_capacity_bytes` is, in words."""
    host_bytes: int
    """Offloaded states and pinned buffers of one node."""
    host_capacity_bytes: int | None
    assumptions: tuple[str, ...]
    """The checks that could not be made, in words a user can act on."""

    @property
    def headroom_bytes(self) -> int | None:
        """Capacity - peak x (1 + margin) of one rank: >= 0 exactly when the rank check passes."""
        if self.rank_capacity_bytes is None:
            return None
        return self.rank_capacity_bytes - padded(self.rank_bytes, self.margin)


def padded(nbytes: int, margin: float) -> int:
    """Bytes with the margin on top, rounded up (a fit is decided on whole bytes)."""
    return math.ceil(nbytes * (1 + margin))


def host_rank_capacity(hardware: HardwareProfile, ranks: int) -> tuple[int | None, str]:
    """On a host without GPUs each rank's memory is host RAM: one of `ranks` equal shares of the RAM
    available as the profile holds it (for this host's own probed profile the commands read it when they
run: catalog/hardware.py with_live_host_ram), else of the installed RAM. (None, why) without either."""
    host = hardware.host
    if host.ram_available_bytes:
        return host.ram_available_bytes // max(ranks, 1), f"available host RAM / {ranks} ranks"
    if host.ram_bytes:
        return host.ram_bytes // max(ranks, 1), f"host RAM / {ranks} ranks"
    return None, "the profile records no host RAM"


def fits(
    memory: MemoryEstimate, hardware: HardwareProfile, ranks_per_node: int, margin: float = SAFETY_MARGIN
) -> Verdict:
    """The verdict for one memory estimate of a job on `hardware` with `ranks_per_node` ranks a node."""
    assumptions: list[str] = []
    rank = memory.per_gpu.total
    cap, what = _rank_capacity(memory, hardware, ranks_per_node)
    if cap is None and hardware.has_gpus:
        assumptions.append(f"GPU memory NOT checked: profile {hardware.name!r} records no GPU memory size")
    elif cap is None:
        assumptions.append(f"rank memory NOT checked: profile {hardware.name!r} records no host RAM")
    host = memory.cpu_bytes_per_node
    ram = hardware.host.ram_bytes
    if host and not ram:
        assumptions.append(
            f"host RAM NOT checked: offload needs {host / 2**30:.1f} GiB per node and profile "
            f"{hardware.name!r} records no host RAM"
        )
    reason = _reason(rank, cap, host, ram, margin, hardware.has_gpus)
    checked = cap is not None or bool(ram and host)
    verdict = False if reason else (True if checked else None)
    return Verdict(verdict, reason, margin, hardware.has_gpus, rank, cap, what, host, ram or None, tuple(assumptions))


def rejects(memory: MemoryEstimate, hardware: HardwareProfile, ranks_per_node: int, margin: float) -> Reason | None:
    """`fits(...).reason` alone, without the verdict's words: the search judges thousands of estimates
    and reads only this."""
    cap = _rank_capacity(memory, hardware, ranks_per_node)[0]
    return _reason(memory.per_gpu.total, cap, memory.cpu_bytes_per_node, hardware.host.ram_bytes, margin, hardware.has_gpus)


def _reason(rank: int, cap: int | None, host: int, ram: int | None, margin: float, on_gpu: bool) -> Reason | None:
    """The check that fails, if any: the rank's memory first, then the node's host RAM."""
    if cap is not None and padded(rank, margin) > cap:
        return "gpu" if on_gpu else "rank"
    if ram and host and padded(host, margin) > ram:
        return "host"
    return None


def _rank_capacity(memory: MemoryEstimate, hardware: HardwareProfile, ranks_per_node: int) -> tuple[int | None, str]:
    """(bytes one rank may use, what they are): the GPU's memory, or on a host without GPUs its share of RAM."""
    if hardware.has_gpus:
        return memory.gpu_capacity_bytes, "GPU memory"
    return host_rank_capacity(hardware, ranks_per_node)
