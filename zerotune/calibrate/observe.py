"""The runs `calibrate --from-log` fits: each log read once by diagnose's reader (the job:
zerotune.diagnose.analyse.read_job; the measurements: zerotune.diagnose.measure), the flags filling
what the log does not say, `--measured` adding a figure. Pure apart from reading the logs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from zerotune.calibrate.observation import Observation
from zerotune.diagnose import explain
from zerotune.diagnose.analyse import Options, hf_said, read_job
from zerotune.diagnose.measure import Measured, from_scan
from zerotune.diagnose.records import Scan
from zerotune.diagnose.scan import scan_stream
from zerotune.errors import InputError
from zerotune.schema.hardware import HardwareProfile


def _observation(label: str, scan: Scan, measured: Measured, options: Options, profile: HardwareProfile, notes: list[str]) -> Observation:
    job = read_job(scan, options, notes)
    device = (scan.bench_job or {}).get("device")
    if device is not None and (device == "cuda") != profile.has_gpus:
        where = "GPUs" if device == "cuda" else "CPU ranks (gloo)"
        raise InputError(
            f"{label}: this `zerotune bench` run ran on {where}, the profile {profile.name!r} describes "
            f"{'GPUs' if profile.has_gpus else 'a host without GPUs'}",
            hint="pass --profile with this machine's probe (`zerotune probe --out probe.yaml`)",
        )
    if job.config is None:
        raise InputError(f"{label}: no DeepSpeed config in the log", hint="pass the run's --config ds.json")
    if job.spec is None:
        raise InputError(f"{label}: the log names no model zerotune knows", hint="pass --model (catalog name or config.json)")
    job.hardware = profile
    explain.fill_hf(job, scan, hf_said(options), notes)
    try:
        workload = explain.workload_for(job.config, job)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{label}: the job read from it is not valid: {exc}"[:300]) from None
    measured = _timer_covers_the_step(label, measured, workload.grad_accum, notes)
    for what, source in (("world size", job.world_source), ("sequence length", job.seq_source),
                         ("activation checkpointing", job.checkpointing_source)):  # fmt: skip
        if source == "assumed":
            notes.append(f"{label}: {what} not in the log, assumed (pass it as an option if it differs)")
    said = [
        f"config ({job.config_source})",
        f"model {job.spec.name} ({job.spec_source})",
        f"world {job.world} ({job.world_source})",
        f"seq_len {job.seq_len} ({job.seq_source})",
        f"checkpointing {job.checkpointing} ({job.checkpointing_source})",
    ]
    return Observation(label, job.spec, workload, explain.resolved(job.config, job).zero, measured, said)


def _timer_covers_the_step(label: str, measured: Measured, accum: int, notes: list[str]) -> Measured:
    """DeepSpeed's CurrSamplesPerSec is the train batch over the time of the micro-steps its timer saw
    (ThroughputTimer.start in each forward, stop in each engine.step(): deepspeed/runtime/engine.py:2946,
    3622 at 0.19.8). A framework that accumulates by itself and calls engine.step() once per optimizer
    step (Megatron-DeepSpeed: `micro_step=3/global_step=3` with accumulation 8, 75 samples/s printed for
    a 16 s, 256-sample step, tests/fixtures/logs/measure/real/alcf_polaris_megatron_ds_ga8_timers.log) gets
    the batch over one micro-step's time: not a throughput. Such a figure is dropped, and a run left with no
    figure is refused."""
    seen = measured.timer_micro_steps
    if measured.step_s is not None or measured.samples_per_s is None or seen is None or round(seen.value) >= accum:
        return measured
    why = (
        f"{label}: DeepSpeed's throughput timer saw {seen.value:g} micro-step(s) per step ({seen.source}) of the "
        f"{accum} the step accumulates, so its CurrSamplesPerSec is not the step's rate"
    )
    measured = replace(measured, samples_per_s=None)
    if not measured.has_time and measured.peak_bytes is None:
        raise InputError(why, hint="turn on wall_clock_breakdown, or give --measured step_time_s=... from the framework's own log")
    notes.append(why + ": not used")
    return measured


def observations(
    logs: list[str], measured: Measured | None, options: Options, profile: HardwareProfile, notes: list[str]
) -> list[Observation]:
    """One Observation per log (the --measured figures replacing the log's own when there is one log),
    or one from --measured and the flags alone."""
    if measured is not None and len(logs) > 1:
        raise InputError("--measured with several --from-log: say which run the figure belongs to", hint="one log per --measured")
    out = []
    for path in logs:
        try:
            with Path(path).open("rb") as stream:
                scan = scan_stream(stream)
        except OSError as exc:
            raise InputError(f"--from-log {path}: cannot read it ({exc.strerror})") from None
        found = from_scan(scan)
        if measured is not None:
            found = found.merged(measured)
        if not found.has_time and found.peak_bytes is None:
            why = f" ({found.notes[0]})" if found.notes else ""
            raise InputError(
                f"{path}: no step time, throughput or memory peak in the log{why}",
                hint="turn on wall_clock_breakdown or steps_per_print, or give --measured tokens_per_s=...",
            )
        notes.extend(f"{path}: {n}" for n in found.notes)
        out.append(_observation(path, scan, found, options, profile, notes))
    if not logs and measured is not None:
        if options.config is None or options.model is None:
            raise InputError("--measured without --from-log needs the job", hint="pass --config ds.json and --model M")
        out.append(_observation("--measured", Scan(), measured, options, profile, notes))
    return out
