"""Timer signals: DeepSpeed's wall_clock_breakdown lines (`time (ms) | fwd: ... | step: ...`), its
throughput timer (CurrSamplesPerSec, MaxMemAllocated), HF Trainer's final metrics and tqdm bar,
and nvidia-smi's memory column. `diagnose` reads their means; `calibrate --from-log`
(zerotune.diagnose.measure) reads the per-step series kept in `Scan.series`.

Who prints each line, at DeepSpeed 0.19.8 / transformers 4.x:
- `time (ms) | fwd: 253.57 | bwd: 1015.28 | bwd_inner: ... | bwd_allreduce: ... | step: 263.33`:
  SynchronizedWallClockTimer.log (deepspeed/utils/timer.py), called by DeepSpeedEngine.step
  (deepspeed/runtime/engine.py) at each optimizer-step boundary with wall_clock_breakdown on; the
  global fwd/bwd/step timers sum the step's micro-steps and are reset after printing. Older releases
  print the long names (`forward: ... | backward_allreduce: ...`, tests/fixtures/logs/real/ds1436*).
  The engine logs its global timers together (engine_timers.global_timers), so a forward/backward
  line without `step` is another framework's: Megatron-LM's timers print
  `time (ms) | forward: 207.71 | backward: 3509.10 | optimizer: 38738.77 | batch generator: 4.65`
  (DeepSpeed issue 650) and are not read as DeepSpeed's step.
- `epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=...,
  MemAllocated=0.07GB, MaxMemAllocated=1.36GB`: ThroughputTimer.stop (deepspeed/utils/timer.py) every
  steps_per_print optimizer steps; CurrSamplesPerSec = train batch size / that step's elapsed time.
  Releases before 0.6 print `0/40, SamplesPerSec=83.48, MemAllocated=..` (DeepSpeed issue 1825).
- `{'train_runtime': 225.8, 'train_samples_per_second': 3.543, 'train_steps_per_second': 0.886, ...}`:
  transformers' Trainer.train (its `speed_metrics`, trainer_utils.py) once at the end, the values quoted
  (`'train_steps_per_second': '0.185'`) where the caller formats them as strings (LLaMA-Factory, ms-swift);
  then `Trainer.log_metrics` (trainer_pt_utils.py) prints the same figures one a line,
  `  train_steps_per_second   =      0.185`, the runtime as a timedelta (`_secs2timedelta`:
  `0:36:58.55`, `1 day, 2:03:04.56`); tqdm's bar `200/200 [03:45<00:00,  1.13s/it]` once per
  optimizer step.
- nvidia-smi's table: `|  40536MiB / 81920MiB |` per GPU (memory used / total).
- Megatron's iteration line (`_ITERATION`), next to DeepSpeed's lines in Megatron-DeepSpeed runs.

They come once per step per rank, so they are read in bulk per block (findall), not one by one. A number
is digits with an optional fraction: prose quoting a field (`SamplesPerSec=...`) is not a figure and
must not stop the scan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zerotune.diagnose.records import Fact, Scan
from zerotune.diagnose.signals.signal import Block, BlockSignal

_BREAKDOWN = re.compile(rb"time \(ms\) \|([^\n]*)")
_STEP = re.compile(
    rb"time \(ms\) \| (?:fwd|forward): (\d+(?:\.\d+)?) \| (?:bwd|backward): (\d+(?:\.\d+)?) \| (?:bwd_inner|backward_inner): (\d+(?:\.\d+)?)"
    rb" \| (?:bwd_allreduce|backward_allreduce): (\d+(?:\.\d+)?) \| step: (\d+(?:\.\d+)?)\s*$",
    re.M,
)
"""The engine's per-step timer line in its usual form: summed column-wise without a Python loop."""
_STEP_NAMES = ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step")
_BREAKDOWN_NAMES = {
    "forward": "fwd",
    "backward": "bwd",
    "backward_inner": "bwd_inner",
    "backward_allreduce": "bwd_allreduce",
}
_THROUGHPUT = (
    re.compile(rb"CurrSamplesPerSec=(\d+(?:\.\d+)?)"),  # DeepSpeed >= 0.6 timer line
    re.compile(rb"'train_samples_per_second': '?(\d+(?:\.\d+)?)"),  # HF Trainer's final metrics
)
_THROUGHPUT_OLD = re.compile(rb"SamplesPerSec=(\d+(?:\.\d+)?)")  # older DeepSpeed: no Curr/RunningAvg
_MAXMEM = re.compile(rb"MaxMemAllocated=(\d+(?:\.\d+)?)GB")
_TIMER_STEPS = re.compile(rb"micro_step=(\d+)/global_step=(\d+), RunningAvgSamplesPerSec=")
"""The throughput line's counters (ThroughputTimer.stop, deepspeed/utils/timer.py): micro_step counts every
stop() (each engine.step() call), global_step the accumulation boundaries; their ratio is how many
micro-steps the timer saw per optimizer step."""
SI = {b"": 1.0, b"K": 1e3, b"M": 1e6, b"G": 1e9, b"T": 1e12}
"""nanotron's human_format suffixes (nanotron/logging.py human_format: 3 significant digits, divided by 1000
per step unless told divide_by_1024, which its training log never is)."""


@dataclass(frozen=True)
class PeakLine:
    """A peak-memory figure another framework prints: its pattern (group 1 the number, group 2 an optional
    human_format suffix), the bytes of its printed unit, and which counter it is."""

    marker: bytes
    """a literal of the line: blocks without it are not searched (the scan reads every block)"""
    pattern: re.Pattern[bytes]
    unit: float
    kind: str
    what: str


OTHER_PEAKS = {
    "megatron_max_allocated_bytes": PeakLine(
        b"max allocated: ",
        re.compile(rb"memory \(MB\) \| allocated: [\d.]+ \| max allocated: (\d+(?:\.\d+)?)()"),
        2**20, "max_allocated", "Megatron's max allocated (MB = 2**20 bytes)",
    ),
    "llama_recipes_max_allocated_bytes": PeakLine(
        b"allocated was",
        re.compile(rb"Max CUDA memory allocated was (\d+)() GB", re.I),
        2**30, "max_allocated", "llama-recipes' max CUDA memory allocated (whole GiB, rounded down)",
    ),
    "mmengine_max_allocated_bytes": PeakLine(
        b"memory: ",
        re.compile(rb"\bdata_time: \d+(?:\.\d+)?\s+memory: (\d+)()\b"),
        2**20, "max_allocated", "mmengine's memory (max allocated, MiB)",
    ),
    "colossalai_max_allocated_bytes": PeakLine(
        b"max allocated ",
        re.compile(rb"GPU: allocated [\d.]+ MB,\s+max allocated (\d+(?:\.\d+)?)() MB"),
        2**20, "max_allocated", "ColossalAI's max allocated (MB = 2**20 bytes)",
    ),
    "habana_max_allocated_bytes": PeakLine(
        b"max_memory_allocated (GB)",
        re.compile(rb"['\"]max_memory_allocated \(GB\)['\"]: (\d+(?:\.\d+)?)()"),
        2**30, "max_allocated", "optimum-habana's max_memory_allocated (GB = 2**30 bytes)",
    ),
    "swift_max_reserved_bytes": PeakLine(
        b"'memory(GiB)'",
        re.compile(rb"'memory\(GiB\)': '?(\d+(?:\.\d+)?)()"),
        2**30, "max_reserved", "ms-swift memory(GiB) (max reserved)"
    ),
    "nanotron_max_reserved_bytes": PeakLine(
        b"cuda_max_memory_reserved: ",
        re.compile(rb"\| cuda_max_memory_reserved: (\d+(?:\.\d+)?)([KMGT]?)\b"),
        1.0, "max_reserved", "nanotron's cuda_max_memory_reserved (human_format, K/M/G by 1000)",
    ),
}
"""Peak memory as other frameworks print it, each read as bytes. torch.cuda.max_memory_allocated (or an
accelerator's own): Megatron-LM's report_memory (`[Rank 0] (after 10 iterations) memory (MB) | allocated:
... | max allocated: 14024.8`, divided by 1024 * 1024: MiB); llama-recipes' MemoryTrace (`Max CUDA memory
allocated was 47 GB`, byte2gb = int(x / 2**30): whole GiB, rounded down; the gauge is reset at each epoch's
start, so it is the training's peak); mmengine's LogProcessor (`Iter(train) [ 20/720] ... time: 2.8037
data_time: 0.0071  memory: 13969`: _get_max_memory, torch.cuda.max_memory_allocated // (1024 * 1024), printed
after time and data_time; XTuner's logs); ColossalAI's report_memory_usage (`GPU: allocated 544.23 MB, max
allocated 1228.89 MB`: colossalai/utils/memory.py, _bytes_to_MB divides by 1024 * 1024); optimum-habana's
GaudiTrainer metrics (`'max_memory_allocated (GB)': 73.99`: optimum/habana/utils.py get_hpu_memory_stats,
to_gb_rounded of the HPU allocator's MaxInUse, / 1024**3). torch.cuda.max_memory_reserved, compared as that
counter: ms-swift's logging dict (`'memory(GiB)': '39.34'`: swift/trainers/callback.py get_max_cuda_memory,
/ 1024**3, summed over its devices only when one process spans several, device_map model parallel: not a
DeepSpeed run); nanotron's training log (`cuda_max_memory_reserved: 547M`: nanotron/trainer.py logs
torch.cuda.max_memory_reserved() in human_format, SI)."""
_ITERATION = re.compile(rb"elapsed[ _]time[ _]per[ _]iteration(?: \((ms|s)\):|_(ms)(?:=|: )) *(\d+(?:\.\d+)?)(K?)")
"""Megatron-LM's training_log line (Megatron-DeepSpeed, GPT-NeoX alike): `elapsed time per iteration (ms):
14287.5`, the wall clock of the last log interval over its iterations (data loading included); ALCF's
Megatron-DeepSpeed logs it as `elapsed_time_per_iteration_ms=16030.6`; BigScience's Megatron-DeepSpeed
(training_log: `elapsed time per iteration (s): {:.2f}`, tests/fixtures/logs/measure/real/bigscience_tr11*)
and a patched Megatron-LM (real/jupiter*) in seconds; nanotron (nanotron/trainer.py LogItem
`elapsed_time_per_iteration_ms`, human_format) as `elapsed_time_per_iteration_ms: 41.2`, `1.23K` past 1000 ms."""


_TQDM = re.compile(rb"\[[\d:]+<[\d:?]+, +(\d+(?:\.\d+)?)(s/it|it/s)")  # starts with a literal: a fast scan
"""tqdm's bar: `12/200 [00:30<07:50,  2.50s/it]` (or `it/s` when faster than one a second)."""
_TQDM_ELAPSED = re.compile(rb"(\d+)/\d+ \[(\d+(?::\d\d){1,2})<[\d:?]+, +\d+(?:\.\d+)?(?:s/it|it/s)")
"""tqdm's count and elapsed time, `5/3527 [04:17<63:50:18, 65.25s/it` (a bar with its rate: a bar
quoted in prose, `[00:05<00:05, ...s/it]`, is no figure): its rate is a smoothed one (an exponential moving
average, tqdm's smoothing=0.3), its elapsed time the wall clock since the bar started (tqdm
format_interval: [H:]MM:SS, whole seconds); zerotune.diagnose.measure reads steps from the elapsed time."""
_HF_FINAL = {
    name: re.compile(
        rb"['\"]" + key + rb"['\"]: ['\"]?(\d+(?:\.\d+)?)|(?:^|[\s\]:#>|])" + key + rb" +=[ \t]+" + value + rb"[ \t]*\r?$", re.M
    )
    for name, key, value in (
        ("train_runtime_s", rb"train_runtime", rb"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)"),
        ("train_steps_per_s", rb"train_steps_per_second", rb"(\d+(?:\.\d+)?)"),
        ("train_samples_per_s", rb"train_samples_per_second", rb"(\d+(?:\.\d+)?)"),
    )
}
"""HF's final figures in the metrics dict (a number, or a quoted one; JSON's double quotes as
train_results.json holds them) or in log_metrics' block (the runtime there as [D day(s), ]H:MM:SS.cc),
its lines behind a launcher's prefix (`[worker :0]   train_steps_per_second   =   0.007`) too."""


def _hf_value(m: re.Match[bytes]) -> float:
    """The figure of one _HF_FINAL match: the dict's number, or the block's (a runtime in seconds)."""
    groups = [g for g in m.groups()]
    if groups[0] is not None:
        return float(groups[0])
    rest = groups[1:]
    if len(rest) == 1:
        return float(rest[0])
    days, hours, minutes, seconds = rest
    return ((int(days or 0) * 24 + int(hours)) * 60 + int(minutes)) * 60 + float(seconds)
_SMI = re.compile(rb"(\d+)MiB +/ +(\d+)MiB")
"""nvidia-smi's Memory-Usage column."""


def _series(block: Block, s: Scan, name: str, marker: bytes, values: list[float], at: tuple[int, int] | None = None) -> None:
    """Push one block's values of a per-step figure, with the lines of the first and the last line
    holding `marker` (a literal of that line: found by find/rfind, not a second regex pass), or at the
    offsets `at` of the first and last match where prose may quote the marker (`CurrSamplesPerSec=...`)."""
    if values:
        data = block.data
        first, last = at if at is not None else (data.find(marker), data.rfind(marker))
        s.extend_series(name, values, block.line_at(max(first, 0)), block.line_at(max(last, 0)))


def _disturbed(values: dict[str, float]) -> bool:
    """A step line that measured nothing: a negative timer, or fwd, bwd and step all 0. DeepSpeed's flops
    profiler reads and stops the engine's timers at its profile step, and the line printed then holds
    such values (an ALCF Megatron-DeepSpeed run: `fwd: 0.00 | bwd: 0.00 | bwd_inner: -298701.19 | ... |
    step: 0.00`, tests/fixtures/logs/measure/real/alcf_megatron_ds_profiled_step_negative_timers.log)."""
    if any(v < 0 for v in values.values()):
        return True
    main = [values[k] for k in ("fwd", "bwd", "step") if k in values]
    return len(main) == 3 and not any(main)


def _add(s: Scan, name: str, total: float, count: int) -> None:
    acc = s.breakdown.setdefault(name, [0.0, 0.0])
    acc[0] += total
    acc[1] += count


def _breakdown(block: Block, s: Scan) -> None:
    """Timer means: the usual step lines column-wise, any other layout (fewer or more timers, the
    long names) parsed line by line; micro-step lines repeat the step line's numbers and are skipped."""
    data = block.data
    rows = [r for r in _STEP.findall(data) if not _disturbed({"fwd": float(r[0]), "bwd": float(r[1]), "step": float(r[4])})]
    if rows:
        for name, column in zip(_STEP_NAMES, zip(*rows, strict=True), strict=True):
            values = list(map(float, column))
            _add(s, name, sum(values), len(values))
            _series(block, s, name, b"| step: ", values)  # the step line alone has " | step: "
        if s.breakdown_line is None:
            s.breakdown_line = block.line_at(_STEP.search(data).start())
    timer_lines = data.count(b"time (ms) |")
    micro_lines = data.count(b"| fwd_microstep:") + data.count(b"| forward_microstep:")
    others = _BREAKDOWN.finditer(data) if timer_lines > len(rows) + micro_lines else iter(())
    for m in others:
        payload = m.group(1)
        if b"microstep" in payload or _STEP.match(data, m.start()):
            continue
        values = {}
        for part in payload.split(b"|"):
            name, sep, value = part.partition(b":")
            if not sep:
                continue
            try:
                key = name.strip().decode("ascii", "replace")
                values[_BREAKDOWN_NAMES.get(key, key)] = float(value)
            except ValueError:
                continue
        if ("fwd" in values or "bwd" in values) and "step" not in values:
            continue  # not DeepSpeed's step line (below): e.g. Megatron's `forward | backward | optimizer`
        if _disturbed(values):
            continue
        for name, value in values.items():
            _add(s, name, value, 1)
            _series(block, s, name, m.group(0)[:40], [value])
        if s.breakdown_line is None and "fwd" in values:
            s.breakdown_line = block.line_at(m.start())


def _samples_per_s(block: Block, s: Scan) -> None:
    data = block.data
    patterns = [p for p in _THROUGHPUT if p.search(data)]
    if not patterns and b"SamplesPerSec=" in data:
        patterns = [_THROUGHPUT_OLD]  # "CurrSamplesPerSec=" holds "SamplesPerSec=": the old form only alone
    for pattern in patterns:
        found = list(pattern.finditer(data))
        values = [m.group(1) for m in found]
        s.samples_per_s[0] += sum(map(float, values))
        s.samples_per_s[1] += len(values)
        if pattern is not _THROUGHPUT[1] and found:  # HF's final figure is a fact of its own (_hf_final)
            at = (found[0].start(), found[-1].start())
            _series(block, s, "samples_per_s", b"SamplesPerSec=", list(map(float, values)), at)
        if s.throughput_line is None and values:
            s.throughput_line = block.line_at(pattern.search(data).start())
    counters = list(_TIMER_STEPS.finditer(data)) if b"global_step=" in data else []
    if counters:
        last = counters[-1]
        s.facts["timer_micro_per_step"] = Fact(int(last.group(1)) / max(int(last.group(2)), 1), block.line_at(last.start()))


def _iteration(block: Block, s: Scan) -> None:
    """Megatron's wall-clock time per iteration (one iteration is one optimizer step), in ms."""
    if b"per_iteration" in block.data or b"per iteration" in block.data:
        found = list(_ITERATION.finditer(block.data))
        if found:
            at = (found[0].start(), found[-1].start())
            ms = [float(m.group(3)) * (1000.0 if m.group(1) == b"s" else 1.0) * SI[m.group(4)] for m in found]
            _series(block, s, "iteration_ms", b"", ms, at)


def _max_mem(block: Block, s: Scan) -> None:
    """The highest MaxMemAllocated of the log, on the line that printed it."""
    peaks = _MAXMEM.findall(block.data)
    if peaks:
        peak = max(map(float, peaks))
        held = s.facts.get("max_mem_allocated_gb")
        if held is None or peak > float(held.value):  # type: ignore[arg-type]
            at = block.data.find(b"MaxMemAllocated=" + next(t for t in peaks if float(t) == peak))
            s.facts["max_mem_allocated_gb"] = Fact(peak, block.line_at(max(at, 0)))


def _seconds(clock: bytes) -> float:
    """`04:17` or `63:50:18` -> seconds."""
    total = 0
    for part in clock.split(b":"):
        total = total * 60 + int(part)
    return float(total)


def _other_peaks(block: Block, s: Scan) -> None:
    """The highest of each framework's own peak figure (OTHER_PEAKS), in bytes, on its line."""
    for name, peak in OTHER_PEAKS.items():
        if peak.marker not in block.data:
            continue
        found = [(float(m.group(1)) * peak.unit * SI[m.group(2)], m.start()) for m in peak.pattern.finditer(block.data)]
        if found:
            top, at = max(found)
            held = s.facts.get(name)
            if held is None or top > float(held.value):  # type: ignore[arg-type]
                s.facts[name] = Fact(top, block.line_at(at))


def _hf_final(block: Block, s: Scan) -> None:
    """HF Trainer's end-of-training metrics (the latest), tqdm's per-step seconds, nvidia-smi's peak."""
    data = block.data
    if b"train_" in data:
        for name, pattern in _HF_FINAL.items():
            found = list(pattern.finditer(data))
            if found:
                s.facts[name] = Fact(_hf_value(found[-1]), block.line_at(found[-1].start()))
    if b"s/it" in data or b"it/s" in data:
        found = list(_TQDM.finditer(data))
        steps = [float(m.group(1)) if m.group(2) == b"s/it" else 1.0 / float(m.group(1)) for m in found if float(m.group(1)) > 0]
        if steps:
            s.extend_series("s_per_it", steps, block.line_at(found[0].start()), block.line_at(found[-1].start()))
        counts = list(_TQDM_ELAPSED.finditer(data))
        if counts:
            first, last = block.line_at(counts[0].start()), block.line_at(counts[-1].start())
            s.extend_series("tqdm_n", [float(m.group(1)) for m in counts], first, last)
            s.extend_series("tqdm_elapsed_s", [_seconds(m.group(2)) for m in counts], first, last)
    if b"MiB /" in data:
        for m in _SMI.finditer(data):
            used, total = int(m.group(1)), int(m.group(2))
            held = s.facts.get("nvidia_smi_used_mib")
            if total and used <= total and (held is None or used > int(held.value)):  # type: ignore[call-overload]
                s.facts["nvidia_smi_used_mib"] = Fact(used, block.line_at(m.start()))
                s.facts["nvidia_smi_total_mib"] = Fact(total, block.line_at(m.start()))


_PROGRESS = (
    b"time (ms) |",
    b"SamplesPerSec=",
    b"'loss': ",
    b"] step=",
    b"'train_runtime'",
    b"it/s]",
    b"s/it]",
    b"it/s,",
    b"s/it,",
    b"allocator cache flushes since last step",
)
"""Lines a training loop prints as it goes (timers, throughput, HF loss dicts, step lines, tqdm with or
without a postfix after its rate: `1019.75s/it, loss=7.13]`, ZeRO-3's per-step cache-flush warning)."""


def _last(data: bytes, pattern: bytes) -> int:
    """The last occurrence of `pattern`, skipping tqdm's unknown rate (`?it/s`): a bar printed before
    its first iteration ended shows no progress."""
    at = data.rfind(pattern)
    while at > 0 and pattern.startswith(b"it/s") and data[at - 1 : at] == b"?":
        at = data.rfind(pattern, 0, at)
    return at


def _progress(block: Block, s: Scan) -> None:
    """The last line in the log that shows training progress."""
    at = max(_last(block.data, p) for p in _PROGRESS)
    if at >= 0:
        s.progress_line = block.line_at(at)


UNREAD = {
    "flops_profiler_summary": (
        b"iter latency:",
        "the flops profiler's summary times one profiled step, its forward under the profiler's module hooks that "
        "synchronize the device before and after every module (deepspeed/profiling/flops_profiler/profiler.py:116-124 "
        "at 0.19.8), and its samples/second counts micro-batch x world size (profiler.py:398): not a training step",
    ),
    "mmengine_iteration_time": (
        b"data_time: ",
        "mmengine's `time` is one dataloader iteration, a micro-batch when the optimizer accumulates (XTuner's "
        "accumulative_counts; mmengine OptimWrapper steps every accumulative_counts iterations): not an optimizer step",
    ),
    "comms_logger_summary": (
        b"busbw_avg (Gbps)",
        "deepspeed.comm.log_summary's table totals synchronized collectives over the whole run (engine building "
        "included): no step time",
    ),
    "micro_step_timers": (
        b"_microstep: ",
        "DeepSpeed's per-micro-step timers without the step's line (wall_clock_breakdown prints the step line at "
        "each optimizer step): a micro-step is not the optimizer step",
    ),
}
"""Lines that carry times a step is not made of, each with why, so that a log holding only them is refused
with its reason instead of a bare "nothing found" (zerotune.diagnose.measure adds the reason when it reads no
step time)."""


def _unread(block: Block, s: Scan) -> None:
    """The first line of each UNREAD kind."""
    for name, (marker, _) in UNREAD.items():
        at = block.data.find(marker) if name not in s.facts else -1
        if at >= 0:
            s.facts[name] = Fact(True, block.line_at(at))


SIGNALS = (
    BlockSignal("progress_line", _progress),
    BlockSignal("breakdown", _breakdown),
    BlockSignal("samples_per_s", _samples_per_s),
    BlockSignal("series", _iteration),
    BlockSignal("facts", _max_mem),
    BlockSignal("facts", _other_peaks),
    BlockSignal("facts", _hf_final),
    BlockSignal("facts", _unread),
)
