"""Fit the hardware profile's numbers to real DeepSpeed steps (pure: stdlib + the step model).

Input: bench results (BenchResult as JSON dicts) of the designed runs (zerotune/calibrate/design.py)
and the probed profile. The step-time model (zerotune.model.step.predict_step) is the model being
fitted; every number is fitted from the records that isolate it, in this order:

1. **Compute FLOP/s by shape** (`compute.shape_points`, `compute.achieved_flops`): per run without
   ZeRO hooks inside the layers (stage 0, else 1), the blocks' and head's forward + backward FLOPs
   (zerotune/model/compute.py: backward = 2 x forward) over their measured per-layer times
   (bench's per-module marks with the collectives inside subtracted), one point per (tokens per
   micro-step, hidden size).
2. **Collectives** (alpha, busbw per op): least squares of t = alpha + S*factor/busbw
   (zerotune/collectives.py) over the median latency per message size of the synchronous per-bucket
   records (all-reduce and reduce-scatter buckets, the post-step all-gather; stage-3 gathers on CPU
   are asynchronous launches and the one-element grad-norm all-reduce measures rank skew: both
   left out).
3. **Optimizer step** (`overheads.optimizer_params_per_s`): the boundary `engine.step()` segment
   minus the synchronous collectives inside it, per local-partition parameter (the whole model at
   stage 0, 1/n at stage 1-3), on the ZeRO stage 1-3 runs: the starting value of step 4, which then
   re-fits it with the overheads (one rate serves every stage in the model, and stage 0 runs a
   plain torch step that is faster per parameter: the notes give both segment rates).
4. **Overheads** (`overheads.per_step_s`, `per_micro_step_s`, `per_module_hook_s`,
   `per_param_grad_hook_s`, and the optimizer's seconds per parameter): with 1-2 in place, the
   measured step times are fitted by non-negative least squares (relative errors, two Gauss-Newton
   passes) in these terms, whose columns are the model's own sensitivities (finite differences of
   predict_step), so the fit uses exactly the counts the model multiplies each term by. A term the
   model does not respond to on these runs is not fitted and is named in the notes.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from zerotune.collectives import Collective, busbw_factor, fit_alpha_beta
from zerotune.schema.hardware import (
    CalibratedValue,
    Calibration,
    CollectivePerf,
    HardwareProfile,
    ShapePoint,
)
from zerotune.schema.model import ModelSpec

Run = dict[str, Any]
Predictor = Callable[[Run, HardwareProfile], float]

OVERHEAD_TERMS: tuple[tuple[str, float], ...] = (
    ("per_step_s", 1e-3),
    ("per_micro_step_s", 1e-3),
    ("per_module_hook_s", 1e-4),
    ("per_param_grad_hook_s", 1e-5),
    (OPTIMIZER_TERM := "optimizer_s_per_param", 1e-9),
)
"""Terms fitted in step 4, with the step used for their finite difference (the model is linear in
them, so any small positive value gives the same column). The optimizer enters as seconds per
local parameter, 1 / `optimizer_params_per_s`, which is linear in the step time."""

_FAMILIES: dict[str, Collective] = {
    "all_reduce": "all_reduce",
    "reduce_scatter": "reduce_scatter",
    "all_gather": "all_gather",
}
_MIN_MESSAGE_BYTES = 64
"""Smaller messages (the one-element grad-norm all-reduce) time rank skew, not the link."""


@dataclass
class RunFit:
    name: str
    measured_s: float
    probe_s: float | None
    calibrated_s: float | None
    precision_pct: float | None = None

    @property
    def error_pct(self) -> float | None:
        return (
            None
            if self.calibrated_s is None
            else (self.calibrated_s - self.measured_s) / self.measured_s * 100
        )

    @property
    def probe_error_pct(self) -> float | None:
        return None if self.probe_s is None else (self.probe_s - self.measured_s) / self.measured_s * 100


@dataclass
class Fit:
    profile: HardwareProfile
    values: list[CalibratedValue]
    runs: list[RunFit]
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- the step model


def proxy_workload(run: Run) -> Any:
    """The Workload the bench run measured (its proxy, world and micro-steps)."""
    from zerotune.bench.result import Proxy
    from zerotune.bench.run import proxy_workload as of_proxy

    return of_proxy(Proxy.model_validate(run["proxy"]))


def predict_run(run: Run, profile: HardwareProfile) -> float:
    """predict_step's step time for the proxy, workload and config a bench run measured."""
    from zerotune.dsconfig.settings import resolve
    from zerotune.model.step import predict_step

    spec = _spec(run)
    return predict_step(spec, proxy_workload(run), resolve(run["config"]).zero, profile).step_time_s


_SPECS: dict[int, tuple[dict[str, Any], ModelSpec]] = {}


def _spec(run: Run) -> ModelSpec:
    """One ModelSpec object per run's model dict (the step model caches per-model work by object
    identity); the dict is kept referenced so its id() is not reused while cached."""
    data = run["proxy"]["model"]
    hit = _SPECS.get(id(data))
    if hit is not None and hit[0] is data:
        return hit[1]
    if len(_SPECS) > 256:
        _SPECS.clear()
    spec = ModelSpec.model_validate(data)
    _SPECS[id(data)] = (data, spec)
    return spec


def _stage(run: Run) -> int:
    zero = run["config"].get("zero_optimization") or {}
    return int(zero.get("stage", 0))


def _measured(run: Run) -> float:
    # the step as run (proxy.grad_accum micro-steps), never a model-scaled full step
    return float(run["step_time_s"])


# --------------------------------------------------------------------------- 1. compute


def _run_flops(run: Run) -> float | None:
    """Blocks' and head's training FLOPs over their measured time, one micro-step."""
    from zerotune.model.compute import layer_flops

    spec = _spec(run)
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
    clean = [r for r in runs if _stage(r) == 0] or [r for r in runs if _stage(r) <= 1]
    if not clean:
        clean = runs
        notes.append("no stage-0/1 run: FLOP/s fitted from layers that include ZeRO hook time")
    groups: dict[tuple[int, int], list[float]] = {}
    dtype = runs[0]["proxy"]["dtype"]
    for run in clean:
        rate = _run_flops(run)
        if rate is None:
            continue
        shape = (run["proxy"]["micro_batch"] * run["proxy"]["seq_len"], _spec(run).hidden_size)
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
        params = _spec(run).params
        local = params / int(run["nproc"]) if _stage(run) >= 1 else params
        out.append((float(local), max(end - start - comm, 1e-9)))
    return out


# --------------------------------------------------------------------------- 4. overheads


_FREE = 1e30
"""optimizer_params_per_s standing for a zero per-parameter cost (null would mean "unknown")."""


def _with_overheads(profile: HardwareProfile, values: dict[str, float]) -> HardwareProfile:
    values = dict(values)
    if OPTIMIZER_TERM in values:
        per_param = values.pop(OPTIMIZER_TERM)
        values["optimizer_params_per_s"] = 1.0 / per_param if per_param > 0 else _FREE
    return profile.model_copy(update={"overheads": profile.overheads.model_copy(update=values)})


def _solve(rows: list[list[float]], ys: list[float]) -> list[float] | None:
    """Least squares by the normal equations (Gaussian elimination); None when singular."""
    k = len(rows[0]) if rows else 0
    if k == 0:
        return []
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        scale = max(abs(a[i][i]) for i in range(k)) or 1.0
        if abs(a[pivot][col]) <= 1e-12 * scale:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        b[col], b[pivot] = b[pivot], b[col]
        for r in range(k):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
                b[r] -= f * b[col]
    return [b[i] / a[i][i] for i in range(k)]


def nnls(columns: list[list[float]], ys: list[float]) -> list[float]:
    """Non-negative least squares for a handful of unknowns: the best feasible subset solution.
    Columns are scaled to unit norm first (the unknowns differ by 10 orders of magnitude)."""
    norms = [math.sqrt(sum(c * c for c in col)) or 1.0 for col in columns]
    scaled = [[c / norm for c in col] for col, norm in zip(columns, norms, strict=True)]
    return [v / norm for v, norm in zip(_nnls(scaled, ys), norms, strict=True)]


def _nnls(columns: list[list[float]], ys: list[float]) -> list[float]:
    k = len(columns)
    best: tuple[float, list[float]] = (sum(y * y for y in ys), [0.0] * k)
    for size in range(1, k + 1):
        for subset in itertools.combinations(range(k), size):
            rows = [[columns[j][i] for j in subset] for i in range(len(ys))]
            x = _solve(rows, ys)
            if x is None or any(v < 0 for v in x):
                continue
            sse = sum(
                (y - sum(c * v for c, v in zip(row, x, strict=True))) ** 2
                for row, y in zip(rows, ys, strict=True)
            )
            if sse < best[0] - 1e-18:
                full = [0.0] * k
                for j, v in zip(subset, x, strict=True):
                    full[j] = v
                best = (sse, full)
    return best[1]


def fit_overheads(
    runs: list[Run],
    profile: HardwareProfile,
    predictor: Predictor,
    notes: list[str],
    start: dict[str, float] | None = None,
) -> tuple[dict[str, float], float]:
    """The overhead terms (see the module doc) and the relative RMS residual of the step times.
    `start` holds values to begin from and to keep for a term the fit cannot identify (the
    optimizer's per-parameter cost from its segment records); the others begin at 0."""
    measured = [_measured(r) for r in runs]
    zero = {name: 0.0 for name, _ in OVERHEAD_TERMS}
    zero.update(start or {})
    solution = dict(zero)
    for _ in range(2):  # Gauss-Newton: a second pass corrects any non-linearity (overlap)
        here = _with_overheads(profile, solution)
        base = [predictor(r, here) for r in runs]
        columns, names = [], []
        for name, delta in OVERHEAD_TERMS:
            bumped = _with_overheads(profile, {**solution, name: solution[name] + delta})
            col = [
                (predictor(r, bumped) - b) / delta / m for r, b, m in zip(runs, base, measured, strict=True)
            ]
            if max(abs(c) for c in col) * delta < 1e-9:
                continue
            columns.append(col)
            names.append(name)
        ys = [(m - b) / m for m, b in zip(measured, base, strict=True)]
        current = [solution[n] for n in names]
        # solve for the new values directly: y + col . current = col . new
        target = [y + sum(c[i] * v for c, v in zip(columns, current, strict=True)) for i, y in enumerate(ys)]
        new = nnls(columns, target) if columns else []
        solution = {**zero, **dict(zip(names, new, strict=True))}
    missing = [name for name, _ in OVERHEAD_TERMS if name not in names]
    if missing:
        notes.append(
            "not fitted (the step model does not respond to them on these runs): " + ", ".join(missing)
        )
    final = _with_overheads(profile, solution)
    errors = [(predictor(r, final) - m) / m for r, m in zip(runs, measured, strict=True)]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0
    return {k: v for k, v in solution.items() if k in names}, rms


# --------------------------------------------------------------------------- the whole fit


def fit(
    runs: list[Run],
    base: HardwareProfile,
    *,
    names: list[str] | None = None,
    predictor: Predictor = predict_run,
    now: str | None = None,
) -> Fit:
    """The calibrated profile: `base` with every number the runs identify replaced (module doc)."""
    if not runs:
        raise ValueError("no runs to calibrate from")
    notes: list[str] = []
    values: list[CalibratedValue] = []
    profile = base.model_copy(deep=True)

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

    n = int(runs[0]["nproc"])
    link_name = "inter_node" if profile.nodes > 1 and profile.inter_node is not None else "intra_node"
    link = getattr(profile, link_name)
    if link is not None:
        collectives = dict(link.collectives)
        for op, pts in collective_samples(runs).items():
            if len({s for s, _ in pts}) < 2:
                notes.append(f"{op}: one message size only in the runs, probe numbers kept")
                continue
            alpha, bw = fit_alpha_beta(op, n, pts)
            if not math.isfinite(bw):
                notes.append(f"{op}: time does not grow with size in the runs, probe numbers kept")
                continue
            old = link.collectives.get(op)
            residual = _alpha_beta_residual(op, n, pts, alpha, bw)
            collectives[op] = CollectivePerf(
                alpha_s=alpha,
                busbw_Bps=bw,
                source=f"calibrated by zerotune calibrate: {len(pts)} message sizes of DeepSpeed's own calls",
            )
            values.append(
                CalibratedValue(
                    path=f"{link_name}.collectives.{op}.alpha_s",
                    probed=old.alpha_s if old else None,
                    calibrated=alpha,
                    residual=residual,
                )
            )
            values.append(
                CalibratedValue(
                    path=f"{link_name}.collectives.{op}.busbw_Bps",
                    probed=old.busbw_Bps if old else None,
                    calibrated=bw,
                    residual=residual,
                )
            )
        profile = profile.model_copy(update={link_name: link.model_copy(update={"collectives": collectives})})

    # the optimizer's own records give its starting value; the step-time fit then decides it
    # jointly with the overheads (a ZeRO optimizer step costs more per parameter than stage 0's
    # plain torch step, and one rate has to serve both)
    samples = optimizer_samples([r for r in runs if _stage(r) >= 1]) or optimizer_samples(runs)
    plain = optimizer_samples([r for r in runs if _stage(r) == 0])
    segment_rate = statistics.median(x / y for x, y in samples) if samples else None
    if segment_rate:
        words = f"optimizer segments: ZeRO stage 1-3 step {segment_rate / 1e6:.1f} M params/s"
        if plain:
            words += f", stage 0 (plain torch step) {statistics.median(x / y for x, y in plain) / 1e6:.1f} M params/s"
        notes.append(words)
        profile = _with_overheads(profile, {"optimizer_params_per_s": segment_rate})

    probe_pred = [_safe(predictor, r, base) for r in runs]
    start = {OPTIMIZER_TERM: 1.0 / segment_rate} if segment_rate else {}
    try:
        fitted, rms = fit_overheads(runs, profile, predictor, notes, start=start)
    except ValueError as exc:  # the model cannot predict these runs on this profile
        fitted, rms = {}, None
        notes.append(f"overheads not fitted: the step model failed on the runs ({exc})")
    profile = _with_overheads(profile, fitted)
    node_adam = base.host.cpu_adam_params_per_s  # the node's rate, shared by the runs' n ranks
    probed_opt = base.overheads.optimizer_params_per_s or (node_adam / n if node_adam else None)
    if OPTIMIZER_TERM in fitted or segment_rate:
        rate = profile.overheads.optimizer_params_per_s
        values.append(
            CalibratedValue(
                path="overheads.optimizer_params_per_s", probed=probed_opt, calibrated=rate, residual=rms
            )
        )
    for name, value in fitted.items():
        if name == OPTIMIZER_TERM:
            continue
        values.append(
            CalibratedValue(
                path=f"overheads.{name}", probed=getattr(base.overheads, name), calibrated=value, residual=rms
            )
        )
    source = (
        "calibrated by zerotune calibrate (step-time residuals of DeepSpeed runs, non-negative least squares)"
    )
    profile = profile.model_copy(
        update={"overheads": profile.overheads.model_copy(update={"source": source, "origin": "calibrate"})}
    )

    rows = []
    labels = names or [f"run {i + 1}" for i in range(len(runs))]
    for label, run, probe_s in zip(labels, runs, probe_pred, strict=True):
        rows.append(
            RunFit(
                name=label,
                measured_s=_measured(run),
                probe_s=probe_s,
                calibrated_s=_safe(predictor, run, profile),
                precision_pct=run.get("step_time_precision_pct"),
            )
        )
    first = runs[0]
    calibration = Calibration(
        created=now or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        zerotune_version=first.get("zerotune_version"),
        deepspeed_version=first.get("deepspeed_version"),
        torch_version=first.get("torch_version"),
        runs=[run_line(label, run) for label, run in zip(labels, runs, strict=True)],
        values=values,
        notes=notes,
    )
    profile = profile.model_copy(update={"calibration": calibration})
    return Fit(profile=profile, values=values, runs=rows, notes=notes)


def _safe(predictor: Predictor, run: Run, profile: HardwareProfile) -> float | None:
    try:
        return predictor(run, profile)
    except Exception:  # the probe profile may lack a number the model needs: no baseline then
        return None


def run_line(label: str, run: Run) -> str:
    proxy, zero = run["proxy"], run["config"].get("zero_optimization") or {}
    return (
        f"{label}: stage {zero.get('stage', 0)}, reduce bucket {zero.get('reduce_bucket_size', 'default')}, "
        f"overlap {zero.get('overlap_comm', False)}, mb {proxy['micro_batch']}, seq {proxy['seq_len']}, "
        f"GA {proxy['grad_accum']}, {proxy['layers']} layers, hidden {proxy['model']['hidden_size']}, "
        f"{run['nproc']} {run.get('backend', '')} ranks: {_measured(run):.4g} s"
    )
