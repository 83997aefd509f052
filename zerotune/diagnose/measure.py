"""What a training run measured, read from its log (one scan, the same as `diagnose`'s) or from a figure a
user copies off a dashboard (`--measured tokens_per_s=...,peak_memory=...`): the input of
`zerotune calibrate --from-log` (zerotune.calibrate.from_log).

Each figure keeps where it came from (`log:LINE and N more lines`, `--measured`), so the calibrated
profile can say which of its numbers come from which lines. Per-step figures are medians of the latest
steps the scan kept (zerotune.diagnose.records.SERIES_MAX): a median ignores the slow first steps
(allocator warm-up, compilation) and the odd step with a checkpoint save.

Step time, in order of trust:
1. Megatron's elapsed time per iteration (Megatron-DeepSpeed): the wall clock of whole iterations, where
   DeepSpeed's timers next to it cover only the engine's forward, backward and step (an ALCF run: 57.0 s
   of timers in 63.0 s iterations, tests/fixtures/logs/measure/real/alcf_megatron_ds_profiled_step_negative_timers.log)
   and its throughput timer runs from each forward (or batch fetch) to the step (runtime/engine.py:2946,
   3622 at 0.19.8: tput_timer.start / stop: 14.29-14.54 s per iteration against the 12.8 s its rate implies,
   alcf_polaris_megatron_ds_running_avg_iteration.log); the timers, when there, still split the step;
   the same line in seconds (BigScience's Megatron-DeepSpeed) and nanotron's `elapsed_time_per_iteration_ms`;
2. DeepSpeed's wall_clock_breakdown: fwd + bwd + step of one optimizer step (it sums the micro-steps);
   it also splits the step: the `step` timer is the optimizer, `bwd_allreduce` the gradient reduction
   left after the backward compute;
3. DeepSpeed's ThroughputTimer CurrSamplesPerSec (train batch / the step's elapsed time), or before 0.6
   its SamplesPerSec (the running mean since the timer's start step: deepspeed/utils/timer.py
   avg_samples_per_sec at 0.5);
4. tqdm's bar (HF Trainer: one iteration is one optimizer step): its elapsed clock over the iterations
   (_tqdm_step), its printed rate only when the clock gives nothing;
5. HF Trainer's final train_runtime / steps (includes start-up, evaluation and saving: the least exact).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field, replace

from zerotune.diagnose.records import LogLine, Scan
from zerotune.diagnose.signals.timers import OTHER_PEAKS, UNREAD
from zerotune.errors import InputError
from zerotune.model.counters import COUNTER_KINDS
from zerotune.units import GiB

WARMUP_STEPS = 1
"""Leading per-step values dropped when a series has more than 2 (the first step also allocates,
builds and warms caches); the median then does the rest."""
MEMORY_KINDS = COUNTER_KINDS


@dataclass(frozen=True)
class Figure:
    value: float
    source: str
    """`log:12 and 40 more lines`, `log:88`, `--measured`"""


@dataclass(frozen=True)
class Measured:
    """One run's measurements. Times in seconds per optimizer step, memory in bytes per GPU."""

    step_s: Figure | None = None
    samples_per_s: Figure | None = None
    """samples per second over the whole job (all ranks)"""
    tokens_per_s: Figure | None = None
    """tokens per second over the whole job"""
    compute_s: Figure | None = None
    """DeepSpeed's fwd + bwd_inner timers: forward and backward compute of one optimizer step"""
    optimizer_s: Figure | None = None
    """DeepSpeed's `step` timer: the optimizer step"""
    allreduce_s: Figure | None = None
    """DeepSpeed's `bwd_allreduce` timer: gradient reduction exposed after the backward compute"""
    peak_bytes: Figure | None = None
    peak_kind: str = "max_allocated"
    """which counter: max_allocated (torch.cuda.max_memory_allocated), max_reserved, nvidia-smi"""
    timer_micro_steps: Figure | None = None
    """micro-steps DeepSpeed's throughput timer saw per optimizer step (its line's micro_step / global_step)"""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def has_time(self) -> bool:
        return any(f is not None for f in (self.step_s, self.samples_per_s, self.tokens_per_s))

    def merged(self, other: Measured) -> Measured:
        """These figures with `other`'s where it has one (--measured over the log's); a step-time figure
        of `other` replaces all of this one's (Observation.step prefers step_s to the rates)."""
        updates = {k: v for k, v in vars(other).items() if v is not None and k not in ("notes", "peak_kind")}
        if other.has_time:
            updates = {"step_s": None, "samples_per_s": None, "tokens_per_s": None, "timer_micro_steps": None} | updates
        if other.peak_bytes is not None:
            updates["peak_kind"] = other.peak_kind
        return replace(self, **updates, notes=self.notes + other.notes)


def _median(scan: Scan, name: str) -> Figure | None:
    values = scan.series.get(name)
    if not values:
        return None
    kept = values[WARMUP_STEPS:] if len(values) > 2 else values
    lines = scan.series_lines.get(name)
    return Figure(statistics.median(kept), _where(lines, len(values)))


def _where(lines: list[LogLine] | None, count: int) -> str:
    if not lines:
        return "log"
    first, last = lines
    return f"log:{first.number}" + (f"-{last.number} ({count} steps, median)" if count > 1 else "")


def from_scan(scan: Scan) -> Measured:
    """The measurements a scanned log holds (None where it holds none)."""
    notes: list[str] = []
    step = optimizer = allreduce = compute = None
    fwd, bwd = _median(scan, "fwd"), _median(scan, "bwd")
    if fwd is not None and bwd is not None:
        optimizer = _median(scan, "step")
        total = fwd.value + bwd.value + (optimizer.value if optimizer else 0.0)
        step = Figure(total / 1000, f"{fwd.source}: wall_clock_breakdown fwd + bwd + step")
        if optimizer is not None:
            optimizer = Figure(optimizer.value / 1000, optimizer.source)
        inner = _median(scan, "bwd_inner")
        if inner is not None:
            compute = Figure((fwd.value + inner.value) / 1000, f"{fwd.source}: wall_clock_breakdown fwd + bwd_inner")
        reduce = _median(scan, "bwd_allreduce")
        allreduce = Figure(reduce.value / 1000, reduce.source) if reduce is not None else None
    iteration = _median(scan, "iteration_ms")
    if iteration is not None:  # the iteration's wall clock: the timers (kept above) split what they cover of it
        step = Figure(iteration.value / 1000, f"{iteration.source}: elapsed time per iteration (Megatron, NeoX, nanotron)")
    samples = _median(scan, "samples_per_s")
    if samples is not None:
        first = (scan.series_lines.get("samples_per_s") or [None])[0]
        old = first is not None and "CurrSamplesPerSec=" not in first.text
        field_read = "SamplesPerSec (running mean, DeepSpeed < 0.6)" if old else "CurrSamplesPerSec"
        samples = Figure(samples.value, f"{samples.source}: DeepSpeed {field_read}")
    if step is None and samples is None:
        step, why = _tqdm_step(scan)
        notes.extend([why] if why else [])
        mean = _hf_mean_step(scan)
        if step is not None and mean is not None and step.value > mean:
            notes.append(
                f"{step.source} gives {step.value:.3g} s per iteration, more than the run's mean step "
                f"({mean:.3g} s, HF's train_steps_per_second, evaluation and saving included): an evaluation or "
                "generation bar, not training's: not used"
            )
            step = None
    if scan.cache_flushes and (step is not None or samples is not None):
        count = f"{scan.cache_flush_count} " if scan.cache_flush_count else ""
        notes.append(
            f"log:{scan.cache_flushes[0].number} reports {count}PyTorch allocator cache flushes (ZeRO-3 under memory "
            "pressure): the measured steps include the allocator's free-and-retry stalls, which the fit puts into "
            "the profile's per-step overheads"
        )
    facts = scan.facts
    if step is None and samples is None:
        notes.extend(f"log:{facts[k].line.number}: {why}" for k, (_, why) in UNREAD.items() if k in facts)
        runtime, rate = facts.get("train_runtime_s"), facts.get("train_steps_per_s")
        if rate is not None and float(rate.value) > 0:  # type: ignore[arg-type]
            step = Figure(1.0 / float(rate.value), f"log:{rate.line.number}: HF train_steps_per_second")  # type: ignore[arg-type]
            notes.append("step time from HF's train_runtime: it includes start-up, evaluation and saving")
        elif runtime is not None:
            notes.append(f"log:{runtime.line.number} gives train_runtime but no step count: not used")
    return Measured(
        step_s=step,
        samples_per_s=samples,
        compute_s=compute,
        optimizer_s=optimizer,
        allreduce_s=allreduce,
        peak_bytes=_peak(scan)[0],
        peak_kind=_peak(scan)[1],
        timer_micro_steps=_fact_figure(scan, "timer_micro_per_step", "micro_step / global_step"),
        notes=tuple(notes),
    )


CONSTRUCTION_REPORTS = re.compile(
    r"initiali[sz]|creating fp(?:16|32) partitions|param group|DeepSpeed Engine: (?:Before|After)|bf16_ ?optimizer"
    r"|converting and partitioning params|Building Model",
    re.I,
)
"""see_memory_usage labels printed while the engine and its optimizer are built, before any step (DeepSpeed
0.19.8: runtime/engine.py:605-632 `DeepSpeed Engine: After args sanity test` / `Before|After configure
distributed model`; zero/stage3.py:212-773 `Stage 3 initialize beginning`, `Before|After creating
fp16|fp32 partitions`, `Before|After initializing optimizer states`, `After initializing ZeRO optimizer`;
zero/stage_1_and_2.py:456-741 `... param group {i} ...` and the same initializing labels;
bf16_optimizer.py:54-227 `begin|end bf16_optimizer`, `before|after initializing group {i}`;
zero/parameter_offload.py:160,234 `DeepSpeedZeRoOffload initialize [begin|end]`;
zero/partition_parameters.py:1235-1252 `... converting and partitioning params ...`), and Megatron's
`Before Building Model` (tests/fixtures/logs/measure/bigscience356*). see_memory_usage resets the peak
counter after each report (runtime/utils.py:848-849), so such a report's Max_MA is the peak of building
the engine (ZeRO-3 gathering whole weights before partitioning them: 55.83 GiB in DeepSpeed issue 2899),
not of a training step, which is what the memory model estimates: it is not read as the run's peak."""


HF_RATE_DECIMALS = 3
"""transformers rounds train_steps_per_second to 3 decimals (trainer_utils.speed_metrics `round(steps_per_second, 3)`)."""


def _hf_mean_step(scan: Scan) -> float | None:
    """The longest the run's mean step can be by HF's final train_steps_per_second (its rounding allowed):
    the whole run over its steps, so no training step takes longer."""
    rate = scan.facts.get("train_steps_per_s")
    low = float(rate.value) - 0.5 * 10**-HF_RATE_DECIMALS if rate is not None else 0.0  # type: ignore[arg-type]
    return 1.0 / low if low > 0 else None


def _fact_figure(scan: Scan, name: str, what: str) -> Figure | None:
    fact = scan.facts.get(name)
    return Figure(float(fact.value), f"log:{fact.line.number}: {what}") if fact is not None else None  # type: ignore[arg-type]


TQDM_WINDOW_S = 20.0
"""Seconds of tqdm's elapsed clock per measured window: the clock shows whole seconds, so a window this long
is within 5% (one second of rounding in 20)."""


def _tqdm_step(scan: Scan) -> tuple[Figure | None, str | None]:
    """Seconds per iteration from tqdm's bar: the median over windows of its elapsed clock (at least
    TQDM_WINDOW_S, from the first iteration's end on: the first one carries the start-up), each bar
    count taken where it first shows (a bar re-printed for a postfix or another line is no new
    iteration; a count that goes back is another bar). tqdm's printed rate is a moving average that
    still carries the slow first steps (PickScore issue 9: 23.44 then 12.13 s/it for 4-6 s steps) and
    lags a run that slows down (ms-swift issue 8096: 65-71 s/it while the steps took 73-74 s); it is read
    only when the clock gives no window (one bar, or bars within one second), and only when it comes from one
    bar: bars that start again (a count going back: finetrainers issue 111 posts two runs' bars, 72.77 and
    21.49 s/it, first read as their median, 47.13) are other loops or other runs, and which one trains the
    job is not in the log: refused, with the reason (the second element)."""
    counts, clock = scan.series.get("tqdm_n") or [], scan.series.get("tqdm_elapsed_s") or []
    windows: list[float] = []
    anchor: tuple[float, float] | None = None
    last = anchor
    restart = 0
    for i, (n, elapsed) in enumerate(zip(counts, clock, strict=False)):
        if last is not None and (n < last[0] or elapsed < last[1]):
            anchor = last = None  # another bar (evaluation, a new epoch's bar)
            restart = restart or i
        if n < 1 or (last is not None and n == last[0]):
            continue
        last = (n, elapsed)
        if anchor is None:
            anchor = last
        elif elapsed - anchor[1] >= TQDM_WINDOW_S:
            windows.append((elapsed - anchor[1]) / (n - anchor[0]))
            anchor = last
    if not windows and anchor is not None and last is not None and last[0] > anchor[0] and last[1] > anchor[1]:
        windows.append((last[1] - anchor[1]) / (last[0] - anchor[0]))  # one short window: better than the rate
    lines = scan.series_lines.get("tqdm_n")
    if windows and lines:
        return Figure(
            statistics.median(windows),
            f"log:{lines[0].number}-{lines[1].number}: tqdm's elapsed clock"
            + (f" ({len(windows)} windows, median)" if len(windows) > 1 else ""),
        ), None
    per_it = _median(scan, "s_per_it")
    if per_it is not None and restart:
        why = (
            f"tqdm's bars at {per_it.source.split(' ')[0]} start again ({counts[restart - 1]:g} then {counts[restart]:g} "
            "iterations): several loops or runs, and no bar's clock spans a window: their rates are not used"
        )
        return None, why
    return (Figure(per_it.value, f"{per_it.source}: tqdm s/it") if per_it is not None else None), None


def _peak(scan: Scan) -> tuple[Figure | None, str]:
    """The highest allocated peak the log prints (ThroughputTimer's MaxMemAllocated, other frameworks' max
    allocated (zerotune.diagnose.signals.timers.OTHER_PEAKS), see_memory_usage's Max_MA of the steps, not of
    building the engine: CONSTRUCTION_REPORTS, nor an unlabelled report (its label line cut off) before the
    log's first per-step figure), else the highest reserved peak (ms-swift's, nanotron's), else nvidia-smi's
    highest used memory."""
    best: dict[str, Figure] = {}

    def offer(kind: str, value: float, source: str) -> None:
        if value > 0 and (kind not in best or value > best[kind].value):
            best[kind] = Figure(value, source)

    held = scan.facts.get("max_mem_allocated_gb")
    if held is not None:
        offer("max_allocated", float(held.value) * GiB, f"log:{held.line.number}: MaxMemAllocated")  # type: ignore[arg-type]
    for name, peak in OTHER_PEAKS.items():
        fact = scan.facts.get(name)
        if fact is not None:
            offer(peak.kind, float(fact.value), f"log:{fact.line.number}: {peak.what}")  # type: ignore[arg-type]
    firsts = [lines[0].number for lines in scan.series_lines.values() if lines]
    first_step = min(firsts) if firsts else None
    for report in scan.memory_reports:
        unlabelled_before_steps = not report.label and (first_step is None or report.line.number < first_step)
        if CONSTRUCTION_REPORTS.search(report.label) or unlabelled_before_steps:
            continue  # building the engine, or a report whose label the log cut before any step: not a step's peak
        offer("max_allocated", report.max_ma_gb * GiB, f"log:{report.line.number}: see_memory_usage Max_MA")
    for kind in ("max_allocated", "max_reserved"):
        if kind in best:
            return best[kind], kind
    smi = scan.facts.get("nvidia_smi_used_mib")
    if smi is not None:
        return Figure(int(smi.value) * 2**20, f"log:{smi.line.number}: nvidia-smi"), "nvidia-smi"  # type: ignore[call-overload]
    return None, "max_allocated"


_UNITS = {"": 1.0, "b": 1.0, "kib": 2**10, "mib": 2**20, "gib": 2**30, "gb": 1e9, "mb": 1e6, "tib": 2**40}
_NUMBER = re.compile(r"^\s*((?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_measured(text: str) -> Measured:
    """`tokens_per_s=12000,peak_memory=61.2GiB,memory_kind=max_allocated` (also samples_per_s,
    step_time_s) -> Measured; an InputError naming the bad part otherwise."""
    fields: dict[str, object] = {}
    kind = "max_allocated"
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise InputError(f"--measured: {part!r} is not key=value", hint="e.g. tokens_per_s=12000,peak_memory=61GiB")
        if key == "memory_kind":
            if raw.strip() not in MEMORY_KINDS:
                raise InputError(f"--measured: memory_kind {raw!r} is not one of {', '.join(MEMORY_KINDS)}")
            kind = raw.strip()
            continue
        m = _NUMBER.match(raw)
        if m is None:
            raise InputError(f"--measured: {key}={raw!r} is not a number")
        value = float(m.group(1))
        unit = m.group(2).lower()
        if key == "peak_memory":
            if unit not in _UNITS:
                raise InputError(f"--measured: unit {m.group(2)!r} of peak_memory unknown", hint="use GiB, MiB or bytes")
            fields["peak_bytes"] = Figure(value * _UNITS[unit], "--measured")
        elif key in ("tokens_per_s", "samples_per_s", "step_time_s"):
            if value <= 0:
                raise InputError(f"--measured: {key} must be positive, got {raw}")
            fields["step_s" if key == "step_time_s" else key] = Figure(value, "--measured")
        else:
            raise InputError(
                f"--measured: unknown figure {key!r}",
                hint="tokens_per_s, samples_per_s, step_time_s, peak_memory, memory_kind",
            )
    if not fields:
        raise InputError("--measured gives no figure", hint="e.g. tokens_per_s=12000")
    return Measured(**fields, peak_kind=kind)  # type: ignore[arg-type]
