"""Calibrate a hardware profile from runs the user already has: a training log, or a figure off a
dashboard (pure: the step and memory models, no torch).

Each observation is one run: its job (model, workload, ZeRO settings: read from the log by diagnose's
reader, zerotune.diagnose.analyse.read_job, or given with --config/--model) and what it measured
(zerotune.diagnose.measure). Only what the measurements identify is fitted; everything else stays the
profile's. In this order, each with the model's own predictions (zerotune.model.step.predict_step,
zerotune.model.memory.estimate_memory), so the fit uses exactly what the model multiplies:

1. **Achieved FLOP/s**, from the compute timers (fwd + bwd_inner of wall_clock_breakdown): every
   `compute` rate of the precision scaled by one factor until the predicted compute matches, at most
   the GPU's peak (bounds.flops_ceiling).
2. **Optimizer rate**, from DeepSpeed's `step` timer: under optimizer offload on a GPU box the node's
   CPU Adam rate (`host.cpu_adam_params_per_s`), else DeepSpeed's whole step per local parameter
   (`overheads.optimizer_params_per_s`), at most what memory bandwidth allows (bounds.optimizer_floor);
   the median over the runs.
3. **Exposed communication**, from the `bwd_allreduce` timer of multi-rank runs: one factor on the
   bus bandwidth of every collective of the link until the predicted exposed communication matches,
   within bounds.busbw_ceiling.
4. **Step scale** (`overheads.step_scale`): one factor on every predicted time for what is left of
   the measured step times (a throughput figure alone identifies nothing finer: on the published
   sources, putting it all on FLOP/s predicted a source's other runs worse than the profile did), and
   the **per-step overhead** where leave-one-out over 3+ runs of different tokens per step shows it.
5. **Memory slack** (`gpu.memory_slack_bytes`): the median gap between the runs' peak counters and
   the estimate's value of that counter (zerotune.model.memory.counter_bytes), where leave-one-out
   over 2+ runs shows it is the machine's and not one job's.

Before fitting, every run is compared with the profile: a step time outside the profile's stated
band (its calibration's expected error, else the probe-only or catalog error) is a finding (a slow
node, a wrong profile, a slow network); after a joint fit of several runs, a run the others do not
explain is one too.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone

from zerotune.calibrate.bounds import busbw_ceiling, flops_ceiling, optimizer_floor
from zerotune.calibrate.lsq import bounded_lsq
from zerotune.catalog.hardware import expected_error, with_counts
from zerotune.diagnose.measure import Figure, Measured
from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model.compute import achieved_flops
from zerotune.model.memory import counter_bytes, estimate_memory
from zerotune.model.offload import node_cpu_adam
from zerotune.model.step import StepEstimate, predict_step
from zerotune.schema.hardware import CalibratedValue, Calibration, HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload
from zerotune.units import GiB

ONE_RUN_ERROR_PCT = 25.0
"""Expected step-time error of a profile calibrated on one run, for the machine's other jobs: the mean
absolute throughput error of calibrating on one run of a published source and predicting its others,
25.0% over 554 pairs of 33 sources (scripts/evidence/calibrate_from_log.py, 2026-11-25; median 12.3%)."""
RANGE = 1024.0
"""How far a fitted factor (FLOP/s, bandwidth) may move from the profile's value either way: three
orders of magnitude, wider than any datasheet-to-measured gap; a fit at the edge says so."""
BISECTIONS = 30
"""Bisection steps of a factor over [1/RANGE, RANGE]: 2^-30 of that range in log space."""


@dataclass
class Observation:
    label: str
    """where the run comes from: the log's path, or --measured"""
    spec: ModelSpec
    workload: Workload
    zero: ZeroSettings
    measured: Measured
    job: list[str] = field(default_factory=list)
    """how its job was read: one `what: value (source)` per item"""

    @property
    def world(self) -> int:
        return self.workload.gpus_per_node * self.workload.nodes

    @property
    def samples_per_step(self) -> int:
        return self.workload.micro_batch * self.workload.grad_accum * self.world

    @property
    def tokens_per_step(self) -> int:
        return self.samples_per_step * self.workload.seq_len

    def step(self) -> Figure | None:
        """Measured seconds per optimizer step, from whichever figure the run gives."""
        m = self.measured
        if m.step_s is not None:
            return m.step_s
        if m.tokens_per_s is not None:
            return Figure(self.tokens_per_step / m.tokens_per_s.value, m.tokens_per_s.source + " (tokens/s)")
        if m.samples_per_s is not None:
            return Figure(self.samples_per_step / m.samples_per_s.value, m.samples_per_s.source)
        return None


def from_run(obs: Observation, figure: Figure) -> str:
    """Where a figure comes from: the run's label and its lines (--measured says itself)."""
    return figure.source if obs.label == "--measured" else f"{obs.label} {figure.source}"


@dataclass
class Row:
    label: str
    measured_step_s: float | None
    before_step_s: float | None
    after_step_s: float | None = None
    measured_peak: float | None = None
    before_peak: float | None = None
    after_peak: float | None = None
    peak_kind: str = "max_allocated"


@dataclass
class LogFit:
    profile: HardwareProfile
    values: list[CalibratedValue]
    rows: list[Row]
    findings: list[str]
    notes: list[str]


def sized(profile: HardwareProfile, workload: Workload) -> HardwareProfile:
    """The profile at the run's GPU counts (a host without GPUs runs its ranks as it is)."""
    if not profile.has_gpus:
        return profile
    if profile.gpus_per_node == workload.gpus_per_node and profile.nodes == workload.nodes:
        return profile
    return with_counts(profile, gpus_per_node=workload.gpus_per_node, nodes=workload.nodes)


def predict(obs: Observation, profile: HardwareProfile) -> StepEstimate:
    return predict_step(obs.spec, obs.workload, obs.zero, sized(profile, obs.workload))


def predict_peak(obs: Observation, profile: HardwareProfile) -> int:
    memory = estimate_memory(obs.spec, obs.workload, obs.zero, hardware=sized(profile, obs.workload))
    return counter_bytes(memory, obs.measured.peak_kind)


# ---- the numbers a fit moves --------------------------------------------------------------------------------------


def with_flops(profile: HardwareProfile, precision: str, factor: float) -> HardwareProfile:
    """Every achieved FLOP/s of `precision` times `factor`; a profile that had none gets the rate the
    model used (peak x MFU) times `factor`."""
    compute = profile.compute
    points = compute.shape_points.get(precision)
    achieved = dict(compute.achieved_flops)
    update: dict = {}
    if points:
        update["shape_points"] = {
            **compute.shape_points,
            precision: [p.model_copy(update={"flops": p.flops * factor}) for p in points],
        }
    if precision in achieved or not points:
        achieved[precision] = (achieved.get(precision) or achieved_flops(profile, precision)[0]) * factor
        update["achieved_flops"] = achieved
    return profile.model_copy(update={"compute": compute.model_copy(update=update)})


def top_flops(profile: HardwareProfile, precision: str) -> float:
    points = profile.compute.shape_points.get(precision) or []
    rates = [p.flops for p in points] + [achieved_flops(profile, precision)[0]]
    return max(rates)


def with_per_step(profile: HardwareProfile, seconds: float) -> HardwareProfile:
    return profile.model_copy(update={"overheads": profile.overheads.model_copy(update={"per_step_s": seconds})})


def with_busbw(profile: HardwareProfile, link_name: str, factor: float) -> HardwareProfile:
    link = getattr(profile, link_name)
    collectives = {
        op: perf.model_copy(
            update={
                "busbw_Bps": perf.busbw_Bps * factor if perf.busbw_Bps else perf.busbw_Bps,
                "curve": [(size, bw * factor) for size, bw in perf.curve],
            }
        )
        for op, perf in link.collectives.items()
    }
    return profile.model_copy(update={link_name: link.model_copy(update={"collectives": collectives})})


# ---- the fit ------------------------------------------------------------------------------------------------------


def _pct(a: float, b: float) -> float:
    return (a / b - 1) * 100


def _band(profile: HardwareProfile) -> tuple[float, str] | None:
    return expected_error(profile)


def contradictions(observations: list[Observation], profile: HardwareProfile) -> list[str]:
    """Runs whose step time the profile misses by more than its stated band, with what that suggests."""
    band = _band(profile)
    if band is None:
        return []
    out = []
    for obs in observations:
        measured = obs.step()
        if measured is None:
            continue
        est = predict(obs, profile)
        err = _pct(est.step_time_s, measured.value)
        if abs(err) <= band[0]:
            continue
        if err > 0:
            why = "the run is faster than the profile describes: the profile is not this machine's (a faster GPU or link)"
        else:
            why = (
                "the run is slower than the profile describes: a slow node (thermal throttling, another job), a "
                "wrong profile, or a slow network (a degraded NIC, NCCL falling back to TCP)"
            )
            reduce = obs.measured.allreduce_s
            if reduce is not None and est.exposed_comm_s < reduce.value / (1 + band[0] / 100):
                why += (
                    f"; its exposed all-reduce {reduce.value * 1000:.0f} ms against {est.exposed_comm_s * 1000:.0f} ms "
                    "predicted points at the network"
                )
        out.append(
            f"{obs.label}: measured step {measured.value:.3g} s ({measured.source}), the profile predicts "
            f"{est.step_time_s:.3g} s ({err:+.0f}%, outside its +-{band[0]:.0f}% band, {band[1]}): {why}"
        )
    return out


def _fit_optimizer(
    observations: list[Observation], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    offload_rates: list[float] = []
    step_rates: list[float] = []
    sources: list[str] = []
    for obs in observations:
        timer = obs.measured.optimizer_s
        if timer is None or timer.value <= 0:
            continue
        est = predict(obs, profile)
        spent = timer.value - est.offload_s  # the blocking copies are in the timer too
        if spent <= 0.1 * timer.value:
            notes.append(f"{obs.label}: the step timer is mostly offload transfers: optimizer rate not fitted")
            continue
        offload = obs.zero.offload_optimizer.device != "none" and obs.zero.stage >= 1
        if offload and profile.has_gpus:
            node_rate = node_cpu_adam(profile)[0]
            offload_rates.append(node_rate * est.optimizer_s / spent)
        else:
            part = obs.spec.params / obs.world if obs.zero.stage >= 1 else obs.spec.params
            step_rates.append(part / spent)
        sources.append(from_run(obs, timer))
    source = "; ".join(sources)
    if offload_rates:
        rate = statistics.median(offload_rates)
        values.append(
            CalibratedValue(
                path="host.cpu_adam_params_per_s", probed=profile.host.cpu_adam_params_per_s, calibrated=rate, source=source
            )
        )
        profile = profile.model_copy(update={"host": profile.host.model_copy(update={"cpu_adam_params_per_s": rate})})
    if step_rates:
        rate = statistics.median(step_rates)
        precision = observations[0].workload.precision
        floor = optimizer_floor(profile, "fp32" if not profile.has_gpus else precision)
        note = None
        if floor is not None and rate > 1 / floor[0]:
            rate, note = 1 / floor[0], f"on its ceiling: {floor[1]}"
        values.append(
            CalibratedValue(
                path="overheads.optimizer_params_per_s",
                probed=profile.overheads.optimizer_params_per_s,
                calibrated=rate,
                note=note,
                source=source,
            )
        )
        profile = profile.model_copy(
            update={"overheads": profile.overheads.model_copy(update={"optimizer_params_per_s": rate})}
        )
    return profile


def _fit_comm(
    observations: list[Observation], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    runs = [o for o in observations if o.measured.allreduce_s is not None and o.world > 1]
    if not runs:
        return profile
    link_name = "inter_node" if any(o.workload.nodes > 1 for o in runs) else "intra_node"
    link = getattr(profile, link_name)
    if link is None or not any(p.busbw_Bps for p in link.collectives.values()):
        notes.append(f"the profile has no {link_name} bandwidth: exposed communication not fitted")
        return profile
    top = max(p.busbw_Bps or 0.0 for p in link.collectives.values())
    ceiling, why = busbw_ceiling(profile, link_name)

    def miss(factor: float) -> float:  # > 0: predicted more exposed communication than measured
        trial = with_busbw(profile, link_name, factor)
        return sum(predict(o, trial).exposed_comm_s - o.measured.allreduce_s.value for o in runs)  # type: ignore[union-attr]

    low, high = -math.log(RANGE), min(math.log(RANGE), math.log(ceiling / top) if math.isfinite(ceiling) else math.log(RANGE))
    if miss(math.exp(high)) > 0:
        factor, note = math.exp(high), f"on its ceiling: {why}"
    elif miss(math.exp(low)) < 0:
        notes.append(
            "the measured bwd_allreduce is above what any bandwidth predicts (it holds waits the model counts "
            "elsewhere): bandwidth not fitted"
        )
        return profile
    else:
        for _ in range(BISECTIONS):
            mid = (low + high) / 2
            low, high = (mid, high) if miss(math.exp(mid)) > 0 else (low, mid)
        factor, note = math.exp((low + high) / 2), None
    source = "; ".join(from_run(o, o.measured.allreduce_s) for o in runs)  # type: ignore[union-attr]
    for op, perf in link.collectives.items():
        if perf.busbw_Bps:
            values.append(
                CalibratedValue(
                    path=f"{link_name}.collectives.{op}.busbw_Bps",
                    probed=perf.busbw_Bps,
                    calibrated=perf.busbw_Bps * factor,
                    note=note,
                    source=source,
                )
            )
    return with_busbw(profile, link_name, factor)


def _fit_compute(
    observations: list[Observation], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """Achieved FLOP/s from the runs' compute timers (fwd + bwd_inner: the forward and backward
    compute, without the reduction waited for after it): one factor on every rate of the precision."""
    runs = [o for o in observations if o.measured.compute_s is not None]
    if not runs:
        return profile
    precision = runs[0].workload.precision
    runs = [o for o in runs if o.workload.precision == precision]
    ceiling, why = flops_ceiling(profile, precision)
    top = top_flops(profile, precision)

    def miss(log_factor: float) -> float:  # mean relative error of the compute time; falls as FLOP/s rises
        trial = with_flops(profile, precision, math.exp(log_factor))
        return statistics.fmean(predict(o, trial).compute_s / o.measured.compute_s.value - 1 for o in runs)  # type: ignore[union-attr]

    low, high = -math.log(RANGE), math.log(ceiling / top) if math.isfinite(ceiling) else math.log(RANGE)
    note = "every FLOP/s of the precision scaled by one factor"
    if miss(high) > 0:
        log_k, note = high, f"on its ceiling: {why}"
    elif miss(low) < 0:
        log_k, note = low, f"on its floor: 1/{RANGE:g} of the profile's"
    else:
        for _ in range(BISECTIONS):
            mid = (low + high) / 2
            low, high = (mid, high) if miss(mid) > 0 else (low, mid)
        log_k = (low + high) / 2
    values.append(
        CalibratedValue(
            path=f"compute.achieved_flops.{precision}",
            probed=top,
            calibrated=top * math.exp(log_k),
            note=note,
            source="; ".join(from_run(o, o.measured.compute_s) for o in runs),  # type: ignore[union-attr]
        )
    )
    return with_flops(profile, precision, math.exp(log_k))


def _solve_scale(here: list[float], measured: list[float], base_step: float, free_step: bool) -> tuple[float, float]:
    """(scale, per-step seconds) minimising the relative errors of t_i = scale (T_i + dc)."""
    columns = [[t / m for t, m in zip(here, measured, strict=True)]]
    low, high = [1 / RANGE], [RANGE]
    if free_step:
        columns.append([1 / m for m in measured])
        low.append(-base_step / RANGE)  # d = scale x dc >= -base_step x scale, with scale >= 1/RANGE
        high.append(min(measured))
    found, _ = bounded_lsq(columns, [1.0] * len(here), low, high)
    return found[0], max(0.0, base_step + found[1] / found[0]) if free_step else base_step


def _fit_scale(
    observations: list[Observation], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """What is left of the measured step times: one factor on every predicted time
    (`overheads.step_scale`) and the per-step overhead, t_i = s (T_i + dc): least squares of the
    relative errors, s within [1/RANGE, RANGE], the per-step cost >= 0. The per-step term is fitted
    only when the runs differ in tokens per optimizer step and it predicts each of 3 or more runs from
    the others better than the scale alone (leave-one-out): from two runs it extrapolates wildly."""
    runs = [o for o in observations if o.step() is not None]
    if not runs:
        return profile
    measured = [o.step().value for o in runs]  # type: ignore[union-attr]
    s0 = profile.overheads.step_scale or 1.0
    plain = profile.model_copy(update={"overheads": profile.overheads.model_copy(update={"step_scale": None})})
    here = [predict(o, plain).step_time_s for o in runs]
    base_step = profile.overheads.per_step_s or 0.0
    free_step = len(runs) >= 3 and len({o.tokens_per_step for o in runs}) >= 2
    if free_step:
        def loo(free: bool) -> float:
            errs = []
            for i in range(len(runs)):
                keep = [j for j in range(len(runs)) if j != i]
                scale, step = _solve_scale([here[j] for j in keep], [measured[j] for j in keep], base_step, free)
                errs.append(abs(scale * (here[i] + step - base_step) / measured[i] - 1))
            return statistics.fmean(errs)

        free_step = loo(True) < loo(False)
        if not free_step:
            notes.append("per-step overhead kept: fitting it does not predict the runs from each other better")
    scale, per_step = _solve_scale(here, measured, base_step, free_step)
    source = "; ".join(from_run(o, o.step()) for o in runs)  # type: ignore[union-attr]
    fitted = plain
    if free_step:
        values.append(
            CalibratedValue(
                path="overheads.per_step_s",
                probed=profile.overheads.per_step_s,
                calibrated=per_step,
                note="on its floor: a cost cannot be negative" if per_step == 0.0 else None,
                source=source,
            )
        )
        fitted = with_per_step(plain, per_step)
    values.append(
        CalibratedValue(
            path="overheads.step_scale",
            probed=s0,
            calibrated=scale,
            note="every predicted time x this: the step time the runs measured that no single term identifies",
            source=source,
        )
    )
    return fitted.model_copy(update={"overheads": fitted.overheads.model_copy(update={"step_scale": scale})})


def _gaps(runs: list[Observation], profile: HardwareProfile) -> tuple[list[float], list[float], list[float]]:
    """Per run: measured peak - the estimate's counter (with the profile's slack), the estimate's
    overhead term without that slack, and the measured peak."""
    old = (profile.gpu.memory_slack_bytes or 0) if profile.gpu is not None else 0
    gaps, floors, peaks = [], [], []
    for o in runs:
        memory = estimate_memory(o.spec, o.workload, o.zero, hardware=sized(profile, o.workload))
        peak = o.measured.peak_bytes.value  # type: ignore[union-attr]
        gaps.append(peak - counter_bytes(memory, o.measured.peak_kind))
        floors.append(memory.per_gpu.overhead - old)
        peaks.append(peak)
    return gaps, floors, peaks


def _fit_memory(
    observations: list[Observation], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """GPU memory slack, only where the runs show it is the machine's and not one job's: from two runs
    on, the median gap is applied when it predicts each run from the others better than the profile
    does (leave-one-out). One run cannot tell the two apart: on the published sources one run's gap
    made the other runs' memory worse (scripts/evidence/calibrate_from_log.py), so it is only reported."""
    runs = [o for o in observations if o.measured.peak_bytes is not None]
    if not runs:
        return profile
    if profile.gpu is None:
        notes.append("the profile has no GPU: the runs' memory peaks are not fitted")
        return profile
    gaps, floors, peaks = _gaps(runs, profile)
    if len(runs) < 2:
        notes.append(
            f"{runs[0].label}: its peak is {gaps[0] / GiB:+.2f} GiB off the estimate; not applied to other jobs: one run "
            "cannot tell this machine's memory slack from its own job's (give two or more logs)"
        )
        return profile
    without = statistics.fmean(abs(g) / p for g, p in zip(gaps, peaks, strict=True))
    loo = statistics.fmean(
        abs(g - statistics.median(gaps[:i] + gaps[i + 1 :])) / p for i, (g, p) in enumerate(zip(gaps, peaks, strict=True))
    )
    if loo >= without:
        notes.append(
            f"memory slack not fitted: the runs' gaps ({', '.join(f'{g / GiB:+.2f}' for g in gaps)} GiB) do not predict each "
            f"other (leave-one-out {loo:.1%} vs {without:.1%} without)"
        )
        return profile
    old = profile.gpu.memory_slack_bytes or 0
    slack = old + statistics.median(gaps)
    note = f"leave-one-out over the runs: {without:.1%} -> {loo:.1%}"
    if slack < -min(floors):
        slack, note = -min(floors), "on its floor: the estimate's CUDA context and allocator slack cannot go below 0"
    capacity = profile.gpu.memory_bytes
    if capacity and slack > capacity:
        slack, note = capacity, "on its ceiling: the GPU's capacity"
    values.append(
        CalibratedValue(
            path="gpu.memory_slack_bytes",
            probed=profile.gpu.memory_slack_bytes,
            calibrated=slack,
            note=note,
            source="; ".join(from_run(o, o.measured.peak_bytes) for o in runs),  # type: ignore[union-attr]
        )
    )
    return profile.model_copy(update={"gpu": profile.gpu.model_copy(update={"memory_slack_bytes": int(slack)})})


def fit_runs(observations: list[Observation], profile: HardwareProfile) -> tuple[HardwareProfile, list[CalibratedValue], list[str]]:
    """The profile with what the runs identify fitted (no findings, no provenance: fit_logs adds them)."""
    values: list[CalibratedValue] = []
    notes: list[str] = []
    fitted = _fit_compute(observations, profile, values, notes)
    fitted = _fit_optimizer(observations, fitted, values, notes)
    fitted = _fit_comm(observations, fitted, values, notes)
    fitted = _fit_scale(observations, fitted, values, notes)
    fitted = _fit_memory(observations, fitted, values, notes)
    return fitted, values, notes


def leave_one_out(observations: list[Observation], profile: HardwareProfile) -> list[float]:
    """Absolute step-time errors (%) of each run predicted from a fit on the others."""
    errors = []
    for i, held in enumerate(observations):
        measured = held.step()
        if measured is None:
            continue
        rest = observations[:i] + observations[i + 1 :]
        fitted, _, _ = fit_runs(rest, profile)
        errors.append(abs(_pct(predict(held, fitted).step_time_s, measured.value)))
    return errors


def fit_logs(observations: list[Observation], profile: HardwareProfile, *, version: str | None = None) -> LogFit:
    """Fit, say what moved and where it came from, and what contradicts the profile."""
    findings = contradictions(observations, profile)
    fitted, values, notes = fit_runs(observations, profile)
    rows = []
    for o in observations:
        measured = o.step()
        row = Row(
            label=o.label,
            measured_step_s=measured.value if measured else None,
            before_step_s=predict(o, profile).step_time_s,
            after_step_s=predict(o, fitted).step_time_s,
            peak_kind=o.measured.peak_kind,
        )
        if o.measured.peak_bytes is not None:
            row.measured_peak = o.measured.peak_bytes.value
            row.before_peak, row.after_peak = predict_peak(o, profile), predict_peak(o, fitted)
        rows.append(row)
    band = _band(profile)
    timed = [r for r in rows if r.measured_step_s and r.after_step_s]
    if len(timed) >= 2 and band is not None:
        for r in timed:
            err = _pct(r.after_step_s, r.measured_step_s)  # type: ignore[arg-type]
            if abs(err) > band[0]:
                findings.append(
                    f"{r.label}: after fitting all runs together it is still {err:+.0f}% off: it disagrees with the "
                    "other runs of this machine (a slow node, or a job that differs from what the log says)"
                )
    loo = leave_one_out(observations, profile) if len(timed) >= 2 else []
    if loo:
        expected = statistics.fmean(loo)
        method = f"leave-one-out over the {len(loo)} runs given (mean absolute step-time error)"
    else:
        expected = ONE_RUN_ERROR_PCT
        method = "one run: the error of one-run calibrations on other jobs of the machine (scripts/evidence/calibrate_from_log.py)"
    lines = [_run_line(o) for o in observations]
    previous = profile.calibration
    moved = {v.path for v in values}
    kept = [v for v in previous.values if v.path not in moved] if previous else []
    calibration = Calibration(
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        zerotune_version=version,
        runs=(previous.runs if previous else []) + lines,
        values=kept + values,
        notes=(previous.notes if previous else []) + notes,
        expected_error_pct=expected,
        expected_error_method=method,
    )
    fitted = fitted.model_copy(update={"calibration": calibration})
    return LogFit(profile=fitted, values=values, rows=rows, findings=findings, notes=notes)


def _run_line(o: Observation) -> str:
    w, m = o.workload, o.measured
    step = o.step()
    parts = [
        f"{o.label}: {o.spec.name}, stage {o.zero.stage}, micro {w.micro_batch} x accum {w.grad_accum} x {o.world} "
        f"ranks, seq {w.seq_len}, {w.precision}"
    ]
    if step is not None:
        parts.append(f"step {step.value:.4g} s ({step.source})")
    if m.peak_bytes is not None:
        parts.append(f"peak {m.peak_bytes.value / GiB:.2f} GiB {m.peak_kind} ({m.peak_bytes.source})")
    return "; ".join(parts)
