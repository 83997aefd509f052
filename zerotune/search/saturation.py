"""Where a bucket saturates the link: the bounding link of a data-parallel collective, busbw at a
message size, and the smallest message reaching BUSBW_TARGET of the peak. The grids
(search/grids.py) and the reasons (search/knob_reasons.py) are anchored on these numbers.

Peak is the profile curve's maximum or the alpha-beta pair's busbw; at a size S the alpha-beta model
gives busbw_eff = S*f / (alpha + S*f/B) (collectives.py).
"""

from __future__ import annotations

from zerotune.collectives import busbw_factor, interpolate_busbw
from zerotune.schema.hardware import CollectivePerf, HardwareProfile, LinkClass

BUSBW_TARGET = 0.9
"""A bucket should reach this share of the link's peak bus bandwidth: under the alpha-beta model its
latency is then a tenth of its time. ASSUMED: it only adds one anchor point to the bucket grids
(dsconfig/knobs.py); the step model prices every grid value, so the pick does not rest on it."""


def collective_link(hardware: HardwareProfile) -> LinkClass | None:
    """The link a data-parallel collective is bounded by: inter-node when there are several nodes."""
    if hardware.nodes > 1 and hardware.inter_node is not None:
        return hardware.inter_node
    return hardware.intra_node


def _bounding_perf(hardware: HardwareProfile, op: str) -> tuple[CollectivePerf, float] | None:
    """`op`'s numbers on the bounding link (all_reduce's when it lacks them) and its busbw factor."""
    link = collective_link(hardware)
    if link is None:
        return None
    perf = link.collectives.get(op) or link.collectives.get("all_reduce")
    if perf is None:
        return None
    n = max(2, link.ranks or hardware.world_size or 2)
    return perf, busbw_factor(op if op in ("all_gather", "reduce_scatter", "all_reduce") else "all_reduce", n)


def busbw_at(hardware: HardwareProfile, op: str, size_bytes: float) -> tuple[float, float] | None:
    """(busbw at `size_bytes`, peak busbw) in B/s for `op` on the bounding link, or None.

    Peak is the curve's maximum or the alpha-beta pair's busbw; at a size S the alpha-beta
    model gives busbw_eff = S*f / (alpha + S*f/B) (collectives.py).
    """
    found = _bounding_perf(hardware, op)
    if found is None:
        return None
    perf, f = found
    if perf.curve:
        peak = max(bw for _, bw in perf.curve)
        return interpolate_busbw(perf.curve, size_bytes), peak
    if perf.busbw_Bps is None:
        return None
    alpha = perf.alpha_s or 0.0
    t = alpha + size_bytes * f / perf.busbw_Bps
    return size_bytes * f / t, perf.busbw_Bps


def saturating_bytes(hardware: HardwareProfile, op: str, target: float = BUSBW_TARGET) -> float | None:
    """Smallest message (bytes, total array) reaching `target` x peak busbw, or None if unknown.

    Curve: the first measured/interpolated size where busbw >= target*peak (searched on a
    log grid of 2**(k/4) bytes from 1 KiB). Alpha-beta: S*f >= target/(1-target) * alpha * B.
    """
    found = _bounding_perf(hardware, op)
    if found is None:
        return None
    perf, f = found
    if perf.curve:
        peak = max(bw for _, bw in perf.curve)
        size = 2.0**10
        while size < 2.0**36:
            if interpolate_busbw(perf.curve, size) >= target * peak:
                return size
            size *= 2**0.25
        return max(s for s, _ in perf.curve)
    if perf.busbw_Bps is None or not perf.alpha_s:
        return None
    return target / (1 - target) * perf.alpha_s * perf.busbw_Bps / f
