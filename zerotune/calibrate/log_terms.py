"""The terms a run's measurements identify, one fit each (zerotune/calibrate/from_log.py says the order and
why): achieved FLOP/s, the optimizer or CPU Adam rate, link bandwidth, the step scale and per-step overhead,
and memory slack; each within its physical bound (zerotune/calibrate/bounds.py)."""

from __future__ import annotations

import math
import statistics

from zerotune.calibrate.bounds import busbw_ceiling, optimizer_floor
from zerotune.calibrate.lsq import bounded_lsq
from zerotune.calibrate.observation import Observation, from_run, predict, sized
from zerotune.calibrate.shares import fit_shares
from zerotune.model.compute import achieved_flops
from zerotune.model.counters import counter_bytes
from zerotune.model.memory import estimate_memory
from zerotune.model.offload import node_cpu_adam
from zerotune.model.overheads import step_seconds, step_term
from zerotune.schema.hardware import CalibratedValue, HardwareProfile
from zerotune.units import GiB

RANGE = 1024.0
"""How far a fitted factor (FLOP/s, bandwidth) may move from the profile's value either way: three
orders of magnitude, wider than any datasheet-to-measured gap; a fit at the edge says so."""
BISECTIONS = 30
"""Bisection steps of a factor over [1/RANGE, RANGE]: 2^-30 of that range in log space."""



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


def with_per_step(profile: HardwareProfile, seconds: float, term: str = "per_step_s") -> HardwareProfile:
    return profile.model_copy(update={"overheads": profile.overheads.model_copy(update={term: seconds})})


def step_groups(runs: list[Observation]) -> dict[str, list[Observation]]:
    """The runs by the per-step term their step pays (overheads.step_term): one-rank runs measure
    `single_rank_per_step_s`, the others `per_step_s` (zerotune/model/overheads.py GLOBAL_PRIOR: the
    two differ by the ranks' synchronisation)."""
    out: dict[str, list[Observation]] = {}
    for o in runs:
        out.setdefault(step_term(o.world), []).append(o)
    return out


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


def fit_optimizer(
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


def fit_comm(
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
    ceiling, why = busbw_ceiling(profile, link_name)
    # the factor may lift the fastest collective to the ceiling, no further; one probed above it (a
    # probe artefact: all_to_all through loopback at 7x the host's memory bandwidth, seen 2026-11-27)
    # must not hold every other collective below what the timer measured
    rates = [p.busbw_Bps for p in link.collectives.values() if p.busbw_Bps]
    top = max([r for r in rates if r <= ceiling] or rates)

    def miss(factor: float) -> float:  # > 0: predicted more exposed communication than measured
        trial = with_busbw(profile, link_name, factor)
        return sum(predict(o, trial).exposed_comm_s - o.measured.allreduce_s.value for o in runs)  # type: ignore[union-attr]

    low, high = -math.log(RANGE), min(math.log(RANGE), max(0.0, math.log(ceiling / top)) if math.isfinite(ceiling) else math.log(RANGE))
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


def fit_compute(
    observations: list[Observation], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """Achieved FLOP/s, and the host work that runs with the kernels, from the runs' compute timers
    (fwd + bwd_inner: the forward and backward, without the reduction waited for after it): their miss
    shared among FLOP/s (one factor on every rate of the precision, at most the GPU's peak) and the
    launch and hook costs by their shares of the timed compute (zerotune/calibrate/shares.py). A
    kernel-bound run moves FLOP/s; a launch-bound one (a GPU block costs the larger of its kernels and
    its launches) moves the launch cost, which FLOP/s up to the peak could not make up."""
    runs = [o for o in observations if o.measured.compute_s is not None]
    if not runs:
        return profile
    precision = runs[0].workload.precision
    runs = [o for o in runs if o.workload.precision == precision]
    return fit_shares(runs, profile, {v.path for v in values}, values, quantity="compute")


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


def fit_timed_overhead(
    observations: list[Observation], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """The fixed per-step overhead of runs whose wall_clock_breakdown timers were fitted term by term.
    Their step is fwd + bwd + step, and bwd is bwd_inner + bwd_allreduce, so once compute, optimizer
    and all-reduce match their timers the timers hold nothing else: the profile's fixed costs
    (the per-step and per-micro-step costs, the global prior where it has no measurement) are already
    inside them. What the measured step leaves of the predicted one goes to the per-step cost the runs
    pay (`step_groups`: `single_rank_per_step_s` from one-rank runs, `per_step_s` from the others; the
    median over the runs, at least 0), not to one factor on every time: a factor would scale the fitted
    compute, optimizer and all-reduce away from their own timers, and carry the double-counted cost
    to jobs of other sizes in proportion to their work."""
    runs = [o for o in observations if o.step() is not None]
    if not runs or any(o.measured.compute_s is None for o in runs):
        return profile
    plain = profile.model_copy(update={"overheads": profile.overheads.model_copy(update={"step_scale": None})})
    fitted = profile
    for term, group in step_groups(runs).items():
        left = statistics.median(o.step().value - predict(o, plain).step_time_s for o in group)  # type: ignore[union-attr]
        base = step_seconds(profile.overheads, group[0].world)[1] or 0.0
        per_step = max(0.0, base + left)
        values.append(
            CalibratedValue(
                path=f"overheads.{term}",
                probed=getattr(profile.overheads, term),
                calibrated=per_step,
                note="what the timers leave of the measured step after compute, optimizer and all-reduce"
                + ("; on its floor: a cost cannot be negative" if per_step == 0.0 else ""),
                source="; ".join(from_run(o, o.step()) for o in group),  # type: ignore[arg-type]
            )
        )
        fitted = with_per_step(fitted, per_step, term)
    return fitted


def fit_scale(
    observations: list[Observation], profile: HardwareProfile, values: list[CalibratedValue], notes: list[str]
) -> HardwareProfile:
    """What is left of the measured step times. The step time of a run without compute timers is first
    shared among the terms the run exercises, in proportion to their shares of its step
    (zerotune/calibrate/shares.py: the least change of the profile that explains it; a stage-2 run
    leaves the stage-3 hooks where they were). What the terms cannot take (every one on its bound), and
    what the timers leave, is one factor on every predicted time (`overheads.step_scale`) and the
    per-step overhead, t_i = s (T_i + dc): least squares of the relative errors, s within [1/RANGE,
    RANGE], the per-step cost >= 0. The per-step term is fitted only when the runs differ in tokens per
    optimizer step and it predicts each of 3 or more runs from the others better than the scale alone
    (leave-one-out): from two runs it extrapolates wildly."""
    runs = [o for o in observations if o.step() is not None]
    if not runs:
        return profile
    untimed = [o for o in runs if o.measured.compute_s is None]
    if untimed:
        profile = fit_shares(untimed, profile, {v.path for v in values}, values)
    measured = [o.step().value for o in runs]  # type: ignore[union-attr]
    s0 = profile.overheads.step_scale or 1.0
    plain = profile.model_copy(update={"overheads": profile.overheads.model_copy(update={"step_scale": None})})
    here = [predict(o, plain).step_time_s for o in runs]
    groups = step_groups(runs)
    term = next(iter(groups))  # the per-step term the runs pay, when they all pay one (else it stays)
    base_step = step_seconds(profile.overheads, runs[0].world)[1] or 0.0
    free_step = (
        len(runs) >= 3
        and len(groups) == 1
        and len({o.tokens_per_step for o in runs}) >= 2
        and not any(v.path == f"overheads.{term}" for v in values)  # the timers gave it
    )
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
                path=f"overheads.{term}",
                probed=getattr(profile.overheads, term),
                calibrated=per_step,
                note="on its floor: a cost cannot be negative" if per_step == 0.0 else None,
                source=source,
            )
        )
        fitted = with_per_step(plain, per_step, term)
    values.append(
        CalibratedValue(
            path="overheads.step_scale",
            probed=s0,
            calibrated=scale,
            note="every predicted time x this: what the runs measured that the terms do not explain (1: nothing)",
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


SAME_PEAK = 0.01
"""Two runs whose estimates hold the same live bytes at every phase of the step, and the same peak of
the counter they read, to this share are costed as the same memory job: what differs between them
(gradient accumulation at stage 3, a knob that allocates nothing) the model says holds nothing at any
phase (1%: below any published figure's rounding)."""


def memory_contradictions(runs: list[Observation], profile: HardwareProfile) -> list[str]:
    """One line per contradicting pair (contradicting_pairs)."""
    return [line for _, _, line in contradicting_pairs(runs, profile)]


def contradicting_pairs(runs: list[Observation], profile: HardwareProfile) -> list[tuple[Observation, Observation, str]]:
    """Pairs of runs of one machine that cannot both be right about their job: the estimate costs them
    alike (the same live bytes at every phase, the same counter peak), so any miss of the model is the
    same for both (the same phases, the same terms; two jobs that only peak alike, as checkpointing on
    and off both peaking in the optimizer step, are not costed alike), yet their measured peaks differ
    by more than the job's published memory band (zerotune/model/band.py: how far the model misses
    whole jobs, 80% of published runs). One of them ran another job than its
    config says (another micro-batch, checkpointing off, a different attention kernel) or read another
    counter: no memory term of the machine can be fitted to both."""
    from zerotune.model.band import job_band

    out = []
    rows = []
    for o in runs:
        if o.measured.peak_bytes is None:
            continue
        memory = estimate_memory(o.spec, o.workload, o.zero, hardware=sized(profile, o.workload))
        phases = [p.total for p in memory.timeline]
        rows.append((o, counter_bytes(memory, o.measured.peak_kind), o.measured.peak_bytes.value, phases))

    def alike(x: float, y: float) -> bool:
        return abs(x - y) <= SAME_PEAK * max(x, y, 1)

    for i, (a, pa, ma, ta) in enumerate(rows):
        for b, pb, mb, tb in rows[i + 1 :]:
            same = len(ta) == len(tb) and all(alike(x, y) for x, y in zip(ta, tb, strict=True))
            if a.measured.peak_kind != b.measured.peak_kind or not alike(pa, pb) or not same:
                continue
            offload = a.zero.offload_optimizer.device != "none" or a.zero.offload_param.device != "none"
            band = job_band(a.spec, a.workload, offload)
            if band is None or band.memory is None or abs(max(ma, mb) / min(ma, mb) - 1) <= band.memory:
                continue
            out.append((a, b,
                f"{a.label} and {b.label}: the estimate gives both {pa / GiB:.1f} GiB {a.measured.peak_kind}, they "
                f"measured {ma / GiB:.1f} and {mb / GiB:.1f} GiB ({abs(max(ma, mb) / min(ma, mb) - 1):.0%} apart, more "
                f"than the {band.memory:.0%} memory band): they contradict each other (one ran another job than its "
                "config says, or read another counter), so no memory slack is fitted to them"
            ))  # fmt: skip
    return out


def fit_memory(
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
    left_out = {id(o) for a, b, _ in contradicting_pairs(runs, profile) for o in (a, b)}
    if left_out and len(runs) >= 2:
        notes.append(
            f"{len(left_out)} runs left out of the memory slack: they contradict each other (findings)"
        )
        runs = [o for o in runs if id(o) not in left_out]
        if not runs:
            return profile
    gaps, floors, peaks = _gaps(runs, profile)
    if len(runs) < 2:
        why = (
            "max_allocated counts live tensors only (no CUDA context, no allocator cache), so its gap is this "
            "job's tensors, not the machine's"
            if runs[0].measured.peak_kind == "max_allocated"
            else "one run cannot tell this machine's memory slack from its own job's"
        )
        notes.append(
            f"{runs[0].label}: its peak is {gaps[0] / GiB:+.2f} GiB off the estimate; not applied to other jobs from "
            f"one run: {why} (give two or more logs)"
        )
        return profile
    if memory_contradictions(runs, profile):
        notes.append("memory slack not fitted: runs the estimate costs alike measured different peaks (findings)")
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


