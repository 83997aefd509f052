"""Fit the hardware profile's numbers to real DeepSpeed steps (pure: stdlib + the step model).

Input: bench results (BenchResult as JSON dicts) of the designed runs (zerotune/calibrate/design.py)
and the probed profile. The step-time model (zerotune.model.step.predict_step) is the model being
fitted; every number is fitted from the records that isolate it, in this order:

1. **Compute FLOP/s by shape** (`compute.shape_points`, `compute.achieved_flops`): per run without
   ZeRO hooks inside the layers (stage 0, else 1), the blocks' and head's forward + backward FLOPs
   (zerotune/model/compute.py: backward = 2 x forward) over their measured per-layer times
   (bench's per-module marks with the collectives inside subtracted), one point per (tokens per
   micro-step, hidden size).
   **Host memory** (`host.memory_Bps`, `host.first_touch_Bps`): the median of the rates every rank
   measured inside the design runs, after its steps.
2. **Collectives** (alpha, busbw per op): least squares of t = alpha + S*factor/busbw
   (zerotune/collectives.py) over the median latency per message size of the synchronous per-bucket
   records (all-reduce and reduce-scatter buckets, the post-step all-gather; stage-3 gathers on CPU
   are asynchronous launches and the one-element grad-norm all-reduce measures rank skew: both
   left out), within the bounds of zerotune/calibrate/bounds.py; the probe's numbers stay when the
   fit describes the calls no better than they do.
3. **Optimizer step** (`overheads.optimizer_params_per_s`): the boundary `engine.step()` segment
   minus the synchronous collectives inside it, per local-partition parameter (the whole model at
   stage 0, 1/n at stage 1-3), on the ZeRO stage 1-3 runs: the starting value of step 4, which then
   re-fits it with the overheads (one rate serves every stage in the model, and stage 0 runs a
   plain torch step that is faster per parameter: the notes give both segment rates).
4. **Overheads** (`overheads.per_step_s`, `per_micro_step_s`, `per_module_hook_s`,
   `per_param_grad_hook_s`, and the optimizer's seconds per parameter): with 1-2 in place, the
   measured step times are fitted by bounded least squares (relative errors, two Gauss-Newton
   passes; each term inside its physical bounds, zerotune/calibrate/bounds.py) in these terms, whose
   columns are the model's own sensitivities (finite differences of predict_step), so the fit uses
   exactly the counts the model multiplies each term by. A term leaves its measured or sourced value
   only when the runs identify it (fit_overheads: a chi-square test of the residual it removes);
   one the model does not respond to on these runs is not fitted. The notes name both. The runs are
   multi-rank (calibration needs 2+), so `per_step_s` is theirs; fitted, it clears the published
   one-rank prior (`single_rank_per_step_s`) unless this machine measured that one too
   (zerotune/model/overheads.py with_measured_pair).

Then the self-check (zerotune/calibrate/crossval.py, check.py): leave-one-out over the design configs, which
gives the profile's `calibration.expected_error_pct` and decides whether it may be cached.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone

from zerotune.calibrate.check import SelfCheck
from zerotune.calibrate.crossval import leave_one_out
from zerotune.calibrate.overheads import OPTIMIZER_TERM, OverheadFit, fit_overheads, priors, with_overheads
from zerotune.calibrate.rates import collective_rates, compute_rates, host_memory, optimizer_samples
from zerotune.calibrate.stepmodel import Predictor, Run, measured_s, predict_run, stage_of
from zerotune.model.overheads import with_measured_pair
from zerotune.schema.hardware import CalibratedValue, Calibration, HardwareProfile

__all__ = ["Fit", "RunFit", "fit", "predict_run"]


@dataclass
class RunFit:
    name: str
    measured_s: float
    probe_s: float | None
    calibrated_s: float | None
    precision_pct: float | None = None
    held_out_pct: float | None = None
    """The self-check's error for this run's config when the fit did not see it, percent."""
    foreign_cores: float | None = None
    """Cores other processes kept busy while it ran (zerotune/calibrate/load.py)."""

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
    check: SelfCheck | None = None


# --------------------------------------------------------------------------- the whole fit


def fit(
    runs: list[Run],
    base: HardwareProfile,
    *,
    names: list[str] | None = None,
    predictor: Predictor = predict_run,
    now: str | None = None,
    self_check: bool = True,
) -> Fit:
    """The calibrated profile: `base` with every number the runs identify replaced (module doc)."""
    if not runs:
        raise ValueError("no runs to calibrate from")
    notes: list[str] = []
    values: list[CalibratedValue] = []
    profile = base.model_copy(deep=True)

    profile = compute_rates(runs, profile, values, notes)

    profile = host_memory(runs, profile, values, notes)
    profile = collective_rates(runs, profile, values, notes)

    # the optimizer's own records give its prior (its measured value); the step-time fit then decides
    # it jointly with the overheads (a ZeRO optimizer step costs more per parameter than stage 0's
    # plain torch step, and one rate has to serve both), inside its physical bounds
    n = int(runs[0]["nproc"])
    samples = optimizer_samples([r for r in runs if stage_of(r) >= 1]) or optimizer_samples(runs)
    plain = optimizer_samples([r for r in runs if stage_of(r) == 0])
    segment_rate = statistics.median(x / y for x, y in samples) if samples else None
    if segment_rate:
        words = f"optimizer segments: ZeRO stage 1-3 step {segment_rate / 1e6:.1f} M params/s"
        if plain:
            words += f", stage 0 (plain torch step) {statistics.median(x / y for x, y in plain) / 1e6:.1f} M params/s"
        notes.append(words)
    start, bounds = priors(base, profile, runs[0]["proxy"]["dtype"], segment_rate, notes)

    probe_pred = [_safe(predictor, r, base) for r in runs]
    rates = profile
    status: dict[str, str] = {}
    terms: OverheadFit | None = None
    try:
        terms = fit_overheads(runs, rates, predictor, notes, start=start, bounds=bounds)
        status, rms = terms.status, terms.rms
        # a term the runs do not identify keeps its measured or sourced value; one with none stays unset
        fitted = terms.used(start)
    except ValueError as exc:  # the model cannot predict these runs on this profile
        fitted, rms = {}, None
        notes.append(f"overheads not fitted: the step model failed on the runs ({exc})")
    profile = with_overheads(rates, fitted)
    # a per-step cost measured here replaces the published one-rank prior too (overheads.with_prior's rule)
    measured = {n for n, how in status.items() if how.startswith("fitted")}
    measured |= {v.path.removeprefix("overheads.") for v in (base.calibration.values if base.calibration else [])}
    profile = profile.model_copy(update={"overheads": with_measured_pair(profile.overheads, measured)})
    node_adam = base.host.cpu_adam_params_per_s  # the node's rate, shared by the runs' n ranks
    probed_opt = base.overheads.optimizer_params_per_s or (node_adam / n if node_adam else None)
    for name, how in status.items():
        path = "overheads.optimizer_params_per_s" if name == OPTIMIZER_TERM else f"overheads.{name}"
        if how.startswith("fitted"):
            probed = probed_opt if name == OPTIMIZER_TERM else getattr(base.overheads, name)
            value = profile.overheads.optimizer_params_per_s if name == OPTIMIZER_TERM else fitted[name]
            if value is not None:
                note = None if how == "fitted" else how.removeprefix("fitted, ")
                if note and name == OPTIMIZER_TERM:  # bounds on seconds per parameter, said as a rate
                    note = note.replace("on its lower bound", "at its fastest physical rate").replace(
                        "on its upper bound", "at its slowest possible rate"
                    )
                values.append(
                    CalibratedValue(path=path, probed=probed, calibrated=value, residual=rms, note=note)
                )
        else:
            notes.append(f"{path}: {how}")
    source = "calibrated by zerotune calibrate (step-time residuals of DeepSpeed runs, bounded least squares)"
    profile = profile.model_copy(
        update={"overheads": profile.overheads.model_copy(update={"source": source, "origin": "calibrate"})}
    )

    rows = []
    labels = names or [f"run {i + 1}" for i in range(len(runs))]
    for label, run, probe_s in zip(labels, runs, probe_pred, strict=True):
        rows.append(
            RunFit(
                name=label,
                measured_s=measured_s(run),
                probe_s=probe_s,
                calibrated_s=_safe(predictor, run, profile),
                precision_pct=run.get("step_time_precision_pct"),
                foreign_cores=(run.get("load") or {}).get("foreign_cores"),
            )
        )
    check = None
    if self_check and terms is not None:
        check = leave_one_out(runs, labels, rates, predictor, start, bounds, probe_pred, terms)
        for row in rows:
            row.held_out_pct = check.held_out_pct.get(row.name)
    first = runs[0]
    calibration = Calibration(
        created=now or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        zerotune_version=first.get("zerotune_version"),
        deepspeed_version=first.get("deepspeed_version"),
        torch_version=first.get("torch_version"),
        runs=[run_line(label, run) for label, run in zip(labels, runs, strict=True)],
        values=values,
        notes=notes,
        expected_error_pct=check.expected_error_pct if check else None,
        expected_error_method=check.method() if check else None,
    )
    profile = profile.model_copy(update={"calibration": calibration})
    return Fit(profile=profile, values=values, runs=rows, notes=notes, check=check)


def _safe(predictor: Predictor, run: Run, profile: HardwareProfile) -> float | None:
    try:
        return predictor(run, profile)
    except Exception:  # the probe profile may lack a number the model needs: no baseline then
        return None


def run_line(label: str, run: Run) -> str:
    proxy, zero = run["proxy"], run["config"].get("zero_optimization") or {}
    load = run.get("load") or {}
    busy = (
        f" (load average {load['loadavg_1m']:.1f}, {load['foreign_cores']:.2f} cores busy with other processes)"
        if load.get("foreign_cores") is not None and load.get("loadavg_1m") is not None
        else ""
    )
    pace = run.get("pace_s")
    if pace:  # the speed reference beside the steps (check.py PACE_SPIKE)
        busy += f" (pace {' / '.join(f'{p * 1e3:.2f}' for p in pace)} ms)"
    return (
        f"{label}: stage {zero.get('stage', 0)}, reduce bucket {zero.get('reduce_bucket_size', 'default')}, "
        f"overlap {zero.get('overlap_comm', False)}, mb {proxy['micro_batch']}, seq {proxy['seq_len']}, "
        f"GA {proxy['grad_accum']}, {proxy['layers']} layers, hidden {proxy['model']['hidden_size']}, "
        f"{run['nproc']} {run.get('backend', '')} ranks: {measured_s(run):.4g} s{busy}"
    )
