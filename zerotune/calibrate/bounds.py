"""Physical bounds of the numbers `zerotune calibrate` fits (pure). A fitted value outside its
bounds is not a better description of the machine but noise absorbed by the wrong term, so the fit
(zerotune/calibrate/fit.py) solves inside them and says when a value sits on one.

- optimizer (seconds per local parameter): the update has to move its bytes through memory, so it
  cannot take less than bytes touched per parameter / memory bandwidth (a per-rank bandwidth:
  `host.memory_Bps` is measured per rank with its peers measuring, a GPU's HBM is its own), and it
  cannot take more than the shortest measured step that contains it;
- every other overhead term: >= 0 (a cost), and its share of each run <= that run's measured step;
- collective latency alpha: DeepSpeed's bucket calls run the same backend op the probe timed, plus
  Python around it, so alpha >= ALPHA_FLOOR x the probed alpha; and alpha <= the fastest measured
  call of that op (every call pays it);
- collective bus bandwidth: on loopback gloo every byte passes through host memory at least once,
  so busbw <= the host's memory bandwidth; on a GPU link <= the link's nominal rate when known;
- achieved FLOP/s <= the GPU's datasheet peak for the precision (no ceiling known on a CPU host);
- host<->device copies <= the PCIe link's nominal rate per direction (generation x lanes);
- memory slack: the estimate's overhead term (CUDA context + allocator slack) cannot go below 0, and
  no GPU holds more than its capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zerotune.schema.hardware import HardwareProfile

ADAM_BYTES_PER_PARAM = {"fp32": 28, "bf16": 16, "fp16": 16}
"""Bytes an Adam update moves per parameter, at least. fp32: read parameter, gradient and both
moments, write parameter and both moments, 7 x 4 B (Kingma & Ba 2015, Algorithm 1; torch's
single-tensor `_single_tensor_adamw` updates them in place); DeepSpeed's ZeRO step also reads the
gradient for the norm and copies the partition back, so 28 B is a floor. 16-bit training: below
the smallest whole step of zerotune/model/optimizer.py `gpu_step_bytes` (FusedAdam on bf16 master
weights moves 14 B in the update alone, the step's other passes more than 2 B)."""

ALPHA_FLOOR = 0.5
"""Lowest fitted latency as a fraction of the probed one: a stated tolerance, not a measurement.
DeepSpeed's call cannot be faster than the bare backend op the probe timed on the same link, but the
probe's alpha is a least-squares intercept and noisy on a loaded host, so only a fitted alpha below
half of it is refused as noise in the intercept rather than a faster link."""


@dataclass(frozen=True)
class Bound:
    low: float
    high: float
    why_low: str
    why_high: str


def optimizer_floor(profile: HardwareProfile, dtype: str) -> tuple[float, str] | None:
    """(least seconds per local parameter, why) from the memory bandwidth the update runs on; None
    when the profile has no bandwidth for that device (then the rate is not fitted: no ceiling)."""
    per_param = ADAM_BYTES_PER_PARAM.get(dtype, min(ADAM_BYTES_PER_PARAM.values()))
    if profile.has_gpus:
        bw, what = (profile.gpu.hbm_bandwidth_Bps if profile.gpu else None), "HBM bandwidth"
    else:
        bw, what = profile.host.memory_Bps, "host memory bandwidth (per rank)"
    if not bw:
        return None
    return per_param / bw, f"{per_param} B/param / {what} {bw / 1e9:.3g} GB/s"


def term_ceiling(column: list[float]) -> float:
    """The largest value of a term whose relative column (d step / d term / measured step, one entry
    per run) keeps its share of every run at or below that run's measured step."""
    caps = [1.0 / c for c in column if c > 0]
    return min(caps) if caps else math.inf


def alpha_bound(probed_alpha: float | None, fastest_call_s: float) -> Bound:
    low = ALPHA_FLOOR * probed_alpha if probed_alpha else 0.0
    return Bound(
        low=min(low, fastest_call_s),
        high=fastest_call_s,
        why_low=f"{ALPHA_FLOOR:g} x the probed alpha" if probed_alpha else "0",
        why_high="the fastest measured call",
    )


def busbw_ceiling(profile: HardwareProfile, link_name: str) -> tuple[float, str]:
    link = getattr(profile, link_name)
    if link is not None and link.backend == "gloo" and profile.host.memory_Bps:
        return profile.host.memory_Bps, "host memory bandwidth (loopback gloo copies through memory)"
    if link is not None and link.nominal_Bps:
        return link.nominal_Bps, "the link's nominal rate"
    return math.inf, "none known"


def pcie_ceiling(profile: HardwareProfile) -> tuple[float, str]:
    """Highest host<->device copy rate a fit may reach: the link's nominal rate per direction, lanes x
    the generation's per-lane rate (zerotune/hw/nvml.py PCIE_LANE_Bps), where the profile states both."""
    from zerotune.hw.nvml import PCIE_LANE_Bps

    gen, width = profile.host.pcie_gen, profile.host.pcie_width
    lane = PCIE_LANE_Bps.get(gen or 0)
    if lane and width:
        return lane * width, f"PCIe gen{gen} x{width} nominal {lane * width / 1e9:.3g} GB/s"
    return math.inf, "none known"


def flops_ceiling(profile: HardwareProfile, precision: str) -> tuple[float, str]:
    """Highest achieved FLOP/s a fit may reach: the GPU's dense peak for the precision."""
    peak = profile.gpu.peak_flops(precision) if profile.gpu is not None else None
    if peak:
        return peak, f"the GPU's {precision} peak {peak / 1e12:.4g} TFLOP/s"
    return math.inf, "none known"
