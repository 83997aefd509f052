"""How far to trust a hardware profile's numbers: where each comes from (catalog datasheet, probe,
calibration, the user's own run) and the error the evidence suites measured for each kind of
profile, which predict, recommend and bench quote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from zerotune.schema.hardware import HardwareProfile

if TYPE_CHECKING:
    from zerotune.model.band import Band

PROBE_ONLY_ERROR_PCT = 20.0
"""Expected step-time error of a prediction from a probed but uncalibrated profile: the probe-only
MAPE of `scripts/evidence/accuracy.py` (17 held-out configs, 2 gloo ranks on this project's 2-core CPU testbed):
19.3%, 19.3%, 18.3%, 20.9%, 26.3%, 20.3%, 30.4% and 26.1% in the idle-machine runs of 2026-11-23
once the probe measured host memory rates, median 20.6% (docs/accuracy.md). The probe's microbenchmarks
miss DeepSpeed's per-step, per-hook and optimizer-step costs; `zerotune calibrate` measures them
(4.0-8.5% held-out)."""

CATALOG_ERROR_PCT = 31.3
"""Expected throughput error of a prediction from a catalog (datasheet) GPU profile: the throughput MAPE
of every published source predicted leave-one-source-out (scripts/evidence/loso.py, data/evidence/loso.json
"overall"; checked by tests/unit/test_published.py): 31.3% over the 177 timed of 221 runs since stage 3's
all-gather of the persistent parameters after each step was costed (2026-11-28, h-lora: 131 stage-3 runs
move by a median +0.07%); 31.4% since the tenth
round (2026-11-28, h-pub10) added SeanNaren/minGPT's two Lightning + DeepSpeed READMEs of one 8x A100 40GB
server (32.8% and 76.3%: 128-token steps whose fixed per-step cost and host CPU Adam the prior misses);
30.2% over the 168 timed of 212 runs since the ninth
round (2026-11-28, h-pub8) added xtuner's DeepSeek-V2 README, whose three runs the model misses by 283%
(their per-expert loop over 160 experts under ZeRO-3, docs/accuracy.md), xtuner's Mixtral README (26.3%),
FlagPerf's ChatGLM3 on A800 (12.4%) and BigScience's 52B GPT-2 on 64 V100s (19.0%); 25.7% over the 153 timed of 197 runs before (the 21
memory-only runs of tohtana/bench_deep_compile add no timing), as with tohtana/ds_verify_loss in the suite (its
three runs 29.5%) and over 151 before it. 25.2% over 167 runs
before DeepSpeed issue 4036, ColossalAI issue 4719 and the Open-Llama README joined the suite (2026-11-28). Each prediction also states its own category's band
(zerotune/model/band.py)."""


def job_kind(model: str, stage: int, offload_optimizer: str, offload_param: str, checkpointing: bool) -> str:
    """What sets a step's mix of costs (compute, communication, the optimizer on GPU or CPU, fixed costs):
    the model, the ZeRO stage, offload and activation checkpointing. A calibration on one run carries in
    full to jobs of its kind (other batch, sequence length, accumulation, buckets) and to another kind with
    its host costs at a weight (zerotune/model/carried.py; scripts/evidence/calibrate_from_log.py:
    ONE_RUN_SAME_JOB_ERROR_PCT against ONE_RUN_OTHER_JOB_ERROR_PCT in zerotune/calibrate/from_log.py). Offload only counts where DeepSpeed uses it (stage >= 1 for the
    optimizer, stage 3 for parameters)."""
    opt = offload_optimizer if stage >= 1 else "none"
    param = offload_param if stage == 3 else "none"
    return (
        f"{model}, stage {stage}, offload optimizer {opt}, offload param {param}, "
        f"checkpointing {'on' if checkpointing else 'off'}"
    )


def from_your_runs(profile: HardwareProfile, job: str | None = None) -> tuple[float, str] | None:
    """(expected throughput error in percent, how it was measured) when the profile's step-time numbers
    were fitted on the user's own runs (`calibrate --from-log`/`--measured`: each such value names its
    run), else None. With `job` (job_kind of the job predicted) a one-run calibration states the error of
    its regime: a job of a kind it ran, or another kind."""
    cal = profile.calibration
    if cal is None or cal.expected_error_pct is None or not any(v.source for v in cal.values):
        return None
    method = cal.expected_error_method or "calibrate --from-log"
    if job is not None and cal.jobs and cal.same_job_error_pct is not None and cal.other_job_error_pct is not None:
        evidence = "one-run calibrations of published sources, scripts/evidence/calibrate_from_log.py"
        if job in cal.jobs:
            return cal.same_job_error_pct, f"one run, this job of its kind: {evidence}"
        # say that this job takes the run's host costs at a weight, not in full (zerotune/model/carried.py)
        weighed = "" if cal.other_job_weight is None else f", its DeepSpeed host costs at weight {cal.other_job_weight:.2f}"
        return cal.other_job_error_pct, f"one run of another kind of job ({cal.jobs[0]}){weighed}: {evidence}"
    return cal.expected_error_pct, method


def reciprocal_band_pct(pct: float) -> float:
    """The band a +-`pct` band on step time allows on throughput, or one on throughput allows on step time
    (time and rate are reciprocals): a value p% under runs the other 1/(1 - p) - 1 over, p% over runs it
    1 - 1/(1 + p) under; the larger side is stated, so a band carried to the other metric stays true
    (6% of step time is 6.4% of throughput)."""
    p = min(pct, 99.0) / 100
    return (1 / (1 - p) - 1) * 100


def _self_measured(profile: HardwareProfile) -> tuple[float, str] | None:
    """(expected step-time error in percent, how it is known) of a profile measured on this machine: its
    calibration's self-check, else the probe-only figure; None for a catalog profile or a calibration
    made before the self-check existed. Both measure held-out step times."""
    if profile.calibration is not None:
        pct = profile.calibration.expected_error_pct
        return (pct, "the calibration's self-check") if pct is not None else None
    if profile.origin == "probe":
        return PROBE_ONLY_ERROR_PCT, "probe-only, scripts/evidence/accuracy.py"
    return None


def expected_error(profile: HardwareProfile, job: str | None = None) -> tuple[float, str] | None:
    """(expected throughput error in percent, how it is known) of predictions from this profile: the
    calibration's own (its self-check, or for one on the user's runs its stated error, for `job`'s
    kind where it is given), else the probe-only or catalog error of the evidence suites; None for a
    calibration made before the self-check existed. The self-check and the probe-only figure measure
    step time (held-out step times on this machine): they are stated as the throughput error their
    band allows (reciprocal_band_pct); the catalog and your-runs figures are throughput errors."""
    if (yours := from_your_runs(profile, job)) is not None:
        return yours[0], "calibrated on your run(s)"
    if (measured := _self_measured(profile)) is not None:
        return reciprocal_band_pct(measured[0]), measured[1]
    if profile.calibration is not None:  # calibrated before the self-check existed
        return None
    return CATALOG_ERROR_PCT, "catalog profile, leave-one-source-out: scripts/evidence/loso.py"


@dataclass(frozen=True)
class Quoted:
    """The expected error of one predicted job, as every command states it (predict's step table and
    closing line, recommend, bench): one number, from one place (`quoted_error`)."""

    throughput_pct: float | None
    line: str | None
    doc: dict[str, object] | None
    step_time_pct: float | None = None
    """The same band on step time (bench compares step times): the self-check's and probe's own figure,
    else the throughput band carried over (reciprocal_band_pct)."""


def quoted_error(profile: HardwareProfile, band: Band | None, job: str | None = None) -> Quoted:
    """The expected error of a job predicted from `profile` (a line, the --json `expected_error`, and the
    throughput percent). The published band of the job's category (zerotune/model/band.py) speaks for
    catalog numbers only: a profile whose step-time numbers were measured on this machine (a
    `zerotune calibrate` self-check, a probe) or on the user's own runs (`calibrate --from-log`, by the
    job's kind `job`) quotes that evidence's error instead, since its numbers are not the published
    runs'. The band's memory part stays, said as such: no calibration states a memory error."""
    yours = from_your_runs(profile, job)
    if yours is None and profile.calibration is None and profile.origin != "probe":
        if band is None or band.throughput is None:
            pct = CATALOG_ERROR_PCT
            line = f"expected error: throughput ±{pct:.0f}% (catalog profile, all published runs leave-one-source-out)"
            doc = {"throughput": pct / 100, "throughput_from": "catalog profile: loso.py overall"}
            return Quoted(pct, line, doc, reciprocal_band_pct(pct))
        return Quoted(band.throughput * 100, band.line(), band.as_dict(), reciprocal_band_pct(band.throughput * 100))
    if yours is not None:
        pct, method = yours
        step_pct = reciprocal_band_pct(pct)
        said = f"from this profile's calibration on your run(s) ({method})"
        whence = f"calibration on your run(s): {method}"
    else:
        measured = _self_measured(profile)
        if measured is None:  # a calibration made before the self-check existed: nothing to state
            return Quoted(None, None, None)
        step_pct, method = measured
        pct = reciprocal_band_pct(step_pct)
        said, whence = f"({method}: +-{step_pct:.1f}% step time)", method
    line = f"expected error: throughput ±{pct:.0f}% {said}, not the published band: its step-time numbers are not the published runs'"
    doc: dict[str, object] = {"throughput": pct / 100, "throughput_from": whence}
    if band is not None:
        doc |= {"category": band.category, "memory": band.memory, "published_throughput": band.throughput}
        if band.memory is not None:
            line += f"; peak memory ±{band.memory:.0%} (the published {band.category} band)"
    return Quoted(pct, line, doc, step_pct)


def provenance(profile: HardwareProfile) -> str:
    """One phrase: where the profile's numbers come from and the expected error band."""
    if profile.calibration is not None:
        band = profile.calibration.expected_error_pct
        checked = f", expected step-time error +-{band:.0f}% (its self-check)" if band is not None else ""
        return f"calibrated {profile.calibration.created[:10]}, {len(profile.calibration.values)} numbers fitted{checked}"
    if profile.origin == "probe":
        return (
            f"measured by probe {(profile.created or '')[:10]}, not calibrated: step times may be off by "
            f"~{PROBE_ONLY_ERROR_PCT:.0f}%; run `zerotune calibrate`"
        )
    return (
        "datasheet numbers and assumed efficiencies, not measured here: on published runs throughput was "
        f"off by ~{CATALOG_ERROR_PCT:.0f}%"
    )


def number_source(profile: HardwareProfile, path: str) -> str:
    """'from your run (LOG)', 'calibrated', 'measured' or 'assumed' for one dotted profile path (e.g.
    compute.achieved_flops.fp32): a value `calibrate --from-log` measured on the user's own run names it."""
    if profile.calibration is not None:
        for v in profile.calibration.values:
            if v.path == path or v.path.startswith(path + " ") or v.path.startswith(path + "["):
                return f"from your run ({v.source})" if v.source else "calibrated"
    return "measured" if profile.origin == "probe" else "assumed"


def inputs_provenance(profile: HardwareProfile, precision: str) -> str:
    """One line: each kind of number the step model reads, and whether it is measured (probe),
    calibrated (real DeepSpeed steps) or assumed (catalog, defaults)."""
    link = "inter_node" if profile.nodes > 1 and profile.inter_node is not None else "intra_node"
    perf = getattr(profile, link)
    ops = sorted(perf.collectives) if perf is not None else []
    parts = [
        ("FLOP/s " + precision, number_source(profile, f"compute.achieved_flops.{precision}")
         if profile.compute.achieved_flops.get(precision) or profile.compute.shape_points.get(precision)
         else "assumed"),
        ("collectives", _worst([number_source(profile, f"{link}.collectives.{op}.busbw_Bps") for op in ops])
         if ops else "assumed"),
        ("optimizer step", number_source(profile, "overheads.optimizer_params_per_s")
         if profile.overheads.optimizer_params_per_s else _cpu_adam_source(profile)),
        ("DeepSpeed overheads", _overheads_source(profile)),
    ]  # fmt: skip
    scale = profile.overheads.step_scale
    for what, path in (
        ("step time scale", "overheads.step_scale"),
        ("per-step overhead", "overheads.per_step_s"),
        ("one-rank per-step overhead", "overheads.single_rank_per_step_s"),
    ):
        said = number_source(profile, path)
        if path == "overheads.step_scale" and (scale is None or abs(scale - 1) < 1e-3):
            continue  # the run's terms explain it: no factor on every time
        if said.startswith("from your run"):
            parts.append((what, said))
    if profile.gpu is not None and profile.gpu.memory_slack_bytes is not None:
        parts.append(("GPU memory slack", number_source(profile, "gpu.memory_slack_bytes")))
    return "numbers: " + ", ".join(f"{what} {how}" for what, how in parts)


def _cpu_adam_source(profile: HardwareProfile) -> str:
    return number_source(profile, "host.cpu_adam_params_per_s") if profile.host.cpu_adam_params_per_s else "assumed"


def _overheads_source(profile: HardwareProfile) -> str:
    """Calibrated (fitted on this host's DeepSpeed steps), fitted on published runs (a catalog profile's
    `overheads.origin`), or not modelled; a partial set names how many of the terms it has."""
    terms = profile.overheads.model_dump(exclude={"source", "origin", "step_scale"})
    known = sum(value is not None for value in terms.values())
    if known == 0:
        return "not modelled (uncalibrated)"
    if profile.calibration is not None:  # moved by the user's own run (calibrate --from-log/--measured)
        yours = [v for v in profile.calibration.values if v.source and v.path.removeprefix("overheads.") in terms]
        if yours:
            return f"from your run ({', '.join(dict.fromkeys(v.path.removeprefix('overheads.') for v in yours))}: {yours[0].source})"
    design = profile.calibration is not None and any(not v.source for v in profile.calibration.values)
    how = "calibrated" if design else (
        "fitted on published runs" if profile.overheads.origin == "published" else "assumed")
    return how if known == len(terms) else f"{how} ({known} of {len(terms)} terms)"


def _worst(sources: list[str]) -> str:
    for kind in ("assumed", "measured", "calibrated"):
        if kind in sources:
            return kind if len(set(sources)) == 1 else f"partly {kind}"
    return "assumed"
