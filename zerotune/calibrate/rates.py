"""The measured rates a calibration fits (pure): compute FLOP/s by shape, collective alpha and busbw,
the optimizer step's segment rate and host memory rates, each from the design-run records that
isolate it (zerotune/calibrate/fit.py, steps 1-3 of its module doc)."""

from __future__ import annotations

import math
import statistics

from zerotune.calibrate.stepmodel import Run, spec_of, stage_of
from zerotune.collectives import Collective, busbw_factor, fit_alpha_beta
from zerotune.schema.hardware import CalibratedValue, CollectivePerf, HardwareProfile, ShapePoint

_FAMILIES: dict[str, Collective] = {
    "all_reduce": "all_reduce",
    "reduce_scatter": "reduce_scatter",
    "all_gather": "all_gather",
}
_MIN_MESSAGE_BYTES = 64
"""Smaller messages (the one-element grad-norm all-reduce) time rank skew, not the link."""


# --------------------------------------------------------------------------- 1. compute


def _run_flops(run: Run) -> float | None:
    """Blocks' and head's training FLOPs over their measured time, one micro-step."""
    from zerotune.model.compute import layer_flops

    spec = spec_of(run)
    proxy = run["proxy"]
    tokens, seq = proxy["micro_batch"] * proxy["seq_len"], proxy["seq_len"]
    by_name = {layer.name: layer for layer in spec.layers}
    flops = seconds = 0.0
    for timed in run.get("layers", []):
        layer = by_name.get(timed["name"])
        if layer is None or layer.kind not in ("block", "decoder_block", "encoder_block", "head"):
            continue
        flops += 3 * layer_flops(spec, layer).forward_flops(tokens, seq)
        seconds += timed["forward_s"] + timed["backward_s"]
    return flops / seconds if flops > 0 and seconds > 0 else None


def fit_compute(
    runs: list[Run], notes: list[str]
) -> tuple[str, list[ShapePoint], dict[tuple[int, int], float | None]]:
    """(dtype, shape points, relative spread per point) from the runs without hooks in the layers."""
    clean = [r for r in runs if stage_of(r) == 0] or [r for r in runs if stage_of(r) <= 1]
    if not clean:
        clean = runs
        notes.append("no stage-0/1 run: FLOP/s fitted from layers that include ZeRO hook time")
    groups: dict[tuple[int, int], list[float]] = {}
    dtype = runs[0]["proxy"]["dtype"]
    for run in clean:
        rate = _run_flops(run)
        if rate is None:
            continue
        shape = (run["proxy"]["micro_batch"] * run["proxy"]["seq_len"], spec_of(run).hidden_size)
        groups.setdefault(shape, []).append(rate)
    source = "calibrated by zerotune calibrate from per-layer DeepSpeed step records"
    points = [
        ShapePoint(tokens=t, hidden=h, flops=statistics.median(v), source=source)
        for (t, h), v in sorted(groups.items())
    ]
    spread = {  # None: one run at that shape, no spread to report
        k: (max(v) - min(v)) / statistics.median(v) if len(v) > 1 else None for k, v in groups.items()
    }
    return dtype, points, spread


# --------------------------------------------------------------------------- 2. collectives


def collective_samples(runs: list[Run]) -> dict[Collective, list[tuple[float, float]]]:
    """op -> (nccl-tests S, median seconds) over the synchronous per-bucket records."""
    from zerotune.bench.aggregate import op_family

    samples: dict[tuple[Collective, int], list[float]] = {}
    for run in runs:
        n = int(run["nproc"])
        for call in run.get("buckets", []):
            op = _FAMILIES.get(op_family(call["op"]))
            if op is None:
                continue
            if op == "all_gather" and call["phase"] != "step":
                continue  # stage-3 gathers are async_op launches (bench result notes)
            size = int(call["bytes"]) * (n if op == "all_gather" else 1)
            if size <= _MIN_MESSAGE_BYTES:
                continue
            samples.setdefault((op, size), []).append(float(call["latency_s"]))
    out: dict[Collective, list[tuple[float, float]]] = {}
    for (op, size), latencies in sorted(samples.items()):
        out.setdefault(op, []).append((float(size), statistics.median(latencies)))
    return out


def _alpha_beta_residual(
    op: Collective, n: int, pts: list[tuple[float, float]], alpha: float, bw: float
) -> float:
    errors = [(alpha + s * busbw_factor(op, n) / bw - t) / t for s, t in pts if t > 0]
    return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0


def bounded_alpha_beta(
    op: Collective,
    n: int,
    pts: list[tuple[float, float]],
    alpha_low: float,
    alpha_high: float,
    bw_high: float,
) -> tuple[float, float] | None:
    """(alpha, busbw) of t = alpha + S*factor/busbw with alpha in [alpha_low, alpha_high] and busbw
    <= bw_high, least squares in relative error; None when time does not grow with size."""
    alpha, bw = fit_alpha_beta(op, n, pts)
    if not math.isfinite(bw):
        return None
    if alpha_low <= alpha <= alpha_high and bw <= bw_high:
        return alpha, bw
    alpha = min(max(alpha, alpha_low), alpha_high)
    f = busbw_factor(op, n)
    # 1/busbw by least squares of the relative error with alpha fixed: weights 1/t^2
    num = sum((t - alpha) * s * f / t**2 for s, t in pts)
    den = sum((s * f) ** 2 / t**2 for s, t in pts)
    if num <= 0 or den <= 0:
        return None
    return alpha, min(den / num, bw_high)


# --------------------------------------------------------------------------- 3. optimizer


def optimizer_samples(runs: list[Run]) -> list[tuple[float, float]]:
    """(local partition params, seconds of the boundary optimizer step without its collectives)."""
    out = []
    for run in runs:
        segments = [s for s in run.get("timeline", []) if s["label"] == "optimizer"]
        if not segments:
            continue
        seg = max(segments, key=lambda s: s["end_s"] - s["start_s"])
        start, end = seg["start_s"], seg["end_s"]
        comm = sum(
            b["latency_s"]
            for b in run.get("buckets", [])
            if b["phase"] == "step" and start <= b["start_s"] <= end
        )
        params = spec_of(run).params
        local = params / int(run["nproc"]) if stage_of(run) >= 1 else params
        out.append((float(local), max(end - start - comm, 1e-9)))
    return out


def host_memory(
    runs: list[Run], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """The host memory rates measured inside the design runs (every rank, after its steps, its peers
    measuring too: as the probe does) replace the probe's: the median over the runs."""
    found = [r["host_memory"] for r in runs if r.get("host_memory")]
    if not found:
        return profile
    update: dict[str, float] = {}
    for key in ("memory_Bps", "first_touch_Bps"):
        seen = [m[key] for m in found if m.get(key)]
        if len(seen) * 2 <= len(found):  # most runs measured none (a host where fresh pages cost nothing)
            continue
        median = statistics.median(seen)
        update[key] = median
        values.append(CalibratedValue(
            path=f"host.{key}", probed=getattr(profile.host, key), calibrated=median,
            residual=(max(seen) - min(seen)) / median if len(seen) > 1 else None,
            note=f"measured inside {len(seen)} design runs (median)",
        ))  # fmt: skip
    notes.append(f"host memory rates measured inside {len(found)} design runs, not taken from the probe")
    return profile.model_copy(update={"host": profile.host.model_copy(update=update)})


def collective_rates(
    runs: list[Run], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """Alpha and busbw per op from DeepSpeed's own synchronous calls, within their bounds; the probe's
    numbers stay when the calls do not pin them (one size, no growth with size) or describe them no
    better than the probe's numbers do."""
    from zerotune.calibrate.bounds import alpha_bound, busbw_ceiling

    n = int(runs[0]["nproc"])
    link_name = "inter_node" if profile.nodes > 1 and profile.inter_node is not None else "intra_node"
    link = getattr(profile, link_name)
    if link is None:
        return profile
    collectives = dict(link.collectives)
    bw_high, bw_why = busbw_ceiling(profile, link_name)
    for op, pts in collective_samples(runs).items():
        if len({s for s, _ in pts}) < 2:
            notes.append(f"{op}: one message size only in the runs, probe numbers kept")
            continue
        old = link.collectives.get(op)
        bound = alpha_bound(old.alpha_s if old else None, min(t for _, t in pts))
        found = bounded_alpha_beta(op, n, pts, bound.low, bound.high, bw_high)
        if found is None:
            notes.append(f"{op}: time does not grow with size in the runs, probe numbers kept")
            continue
        alpha, bw = found
        residual = _alpha_beta_residual(op, n, pts, alpha, bw)
        if old is not None and old.alpha_s is not None and old.busbw_Bps:
            before = _alpha_beta_residual(op, n, pts, old.alpha_s, old.busbw_Bps)
            if residual >= before:
                notes.append(
                    f"{op}: not identified: the fit describes DeepSpeed's calls no better than the probe "
                    f"({residual:.0%} vs {before:.0%} residual), probe numbers kept"
                )
                continue
        side = (
            "lower"
            if alpha <= bound.low * (1 + 1e-9)
            else "upper"
            if alpha >= bound.high * (1 - 1e-9)
            else None
        )
        alpha_note = (
            f"on its {side} bound ({bound.why_low if side == 'lower' else bound.why_high})" if side else None
        )
        bw_note = f"on its upper bound ({bw_why})" if bw >= bw_high * (1 - 1e-9) else None
        collectives[op] = CollectivePerf(
            alpha_s=alpha,
            busbw_Bps=bw,
            source=f"calibrated by zerotune calibrate: {len(pts)} message sizes of DeepSpeed's own calls",
        )
        values.append(CalibratedValue(path=f"{link_name}.collectives.{op}.alpha_s",
                                      probed=old.alpha_s if old else None, calibrated=alpha, residual=residual,
                                      note=alpha_note))  # fmt: skip
        values.append(CalibratedValue(path=f"{link_name}.collectives.{op}.busbw_Bps",
                                      probed=old.busbw_Bps if old else None, calibrated=bw, residual=residual,
                                      note=bw_note))  # fmt: skip
    return profile.model_copy(update={link_name: link.model_copy(update={"collectives": collectives})})


def compute_rates(
    runs: list[Run], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """The FLOP/s by shape the hook-free runs measured replace the probe's (fit_compute)."""
    base = profile
    dtype, points, spread = fit_compute(runs, notes)
    if points:
        probed = base.compute.achieved_flops.get(dtype)
        headline = points[0].flops
        compute = profile.compute.model_copy(
            update={
                "achieved_flops": {**profile.compute.achieved_flops, dtype: headline},
                "shape_points": {**profile.compute.shape_points, dtype: points},
                "measured_shape": f"{points[0].tokens} tokens x hidden {points[0].hidden} (calibrated)",
            }
        )
        profile = profile.model_copy(update={"compute": compute})
        values.append(
            CalibratedValue(
                path=f"compute.achieved_flops.{dtype}",
                probed=probed,
                calibrated=headline,
                residual=spread[(points[0].tokens, points[0].hidden)],
            )
        )
        for i, p in enumerate(points):
            values.append(
                CalibratedValue(
                    path=f"compute.shape_points.{dtype}[{i}] ({p.tokens} tok, h{p.hidden})",
                    probed=probed,
                    calibrated=p.flops,
                    residual=spread[(p.tokens, p.hidden)],
                )
            )
    return profile
