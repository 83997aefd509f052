"""What a scan of a log yields: its lines (LogLine, and `normalise`, which turns a raw line into
one) and the typed records the signals fill in (zerotune.diagnose.signals).

Lines are normalised before parsing: leading timestamps, torchrun's `[rankN]:` (and torch elastic's
older `[defaultN]:`), Ray's `(NAME pid=N, ip=A)`, a test harness's `stderr: `, pytest's `E   ` failure marker and
pdsh/deepspeed-launcher host prefixes (`gpu-q-13: `) are removed and the rank is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_EVENTS = 50
"""Per kind of signal: the first ones are kept as evidence, later ones are only counted."""
SERIES_MAX = 256
"""Per-step figures kept per series (the latest ones): a median over them ignores the warm-up steps of
a long log and holds the memory of a week-long one bounded."""

# ---- lines ------------------------------------------------------------------------------------------------------

_TIMESTAMP = re.compile(
    r"^\s*(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
    r"|\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\])\s*"
)
"""A leading timestamp: bare (`2024-06-12T22:49:08.2062484Z`, GitHub Actions; `2024-06-12 22:49:08,206`), or a CI
runner's bracketed ISO-8601 one (`[2024-10-23T03:04:17.778Z]`, DeepSpeed#6656's log). The bracketed form needs the
`T`: DeepSpeed's own logger starts its lines with `[2024-10-23 03:04:17,778]`, which the signals read whole."""
_RANK_PREFIX = re.compile(r"^\s*\[(?:rank|RANK)(\d+)\]:\s?")
_ROLE_PREFIX = re.compile(r"^\s*\[default\d+\]:\s?")
"""torch elastic's tee'd worker output, `[{role}{local_rank}]:` (TailLog's header,
torch/distributed/elastic/multiprocessing/tail_log.py; torchrun's role is "default"): the number is the
local rank, not the global one, so it is removed but not kept as the line's rank
(bigscience-workshop/Megatron-DeepSpeed#356)."""
_HOST_PREFIX = re.compile(r"^([A-Za-z0-9_][\w.-]*):\s(?=\S)")
_RAY_PREFIX = re.compile(r"^\((?:[\w.:-]+(?:, rank=\d+)?,? )?pid=\d+(?:, ip=[\w.:-]+)?\) ?")
"""Ray's prefix on a worker's output, `(NAME pid=N, ip=A)` (python/ray/_private/worker.py `print_worker_logs`: the
actor or task name, the pid, the node's ip when it is not the driver's; OpenRLHF#1001's `(TemporaryActor pid=6490)`),
and SkyPilot's `(worker1, rank=1, pid=N, ip=A)` on a multi-node job's lines."""
_HARNESS_PREFIX = re.compile(r"^(?:stdout|stderr): ")
"""transformers' and accelerate's test harness (testing_utils.py `_stream_subprocess`) relay a launched job's
output line by line as `print("stderr:", line)` (transformers#37300's ZeRO-3 test log)."""
_PYTEST_PREFIX = re.compile(r"^E {3,}(?=\S)")
"""pytest's failure report marks the lines of the error it caught with `E` and spaces (`E       RuntimeError:
...`, _pytest/_code/code.py's fail marker), so a traceback quoted from a failed test keeps its exception line
behind it (snowflakedb/ArcticTraining PR 265)."""


def normalise(raw: str) -> tuple[str, int | None]:
    """(text without timestamp/rank/host prefixes, rank from a `[rankN]:` prefix or None)."""
    text, rank = raw.rstrip("\r\n"), None
    for _ in range(4):
        before = text
        m = _TIMESTAMP.match(text) or _RAY_PREFIX.match(text) or _HARNESS_PREFIX.match(text)
        if m:
            text = text[m.end() :]
        m = _RANK_PREFIX.match(text)
        if m:
            rank = int(m.group(1)) if rank is None else rank
            text = text[m.end() :]
        m = _ROLE_PREFIX.match(text) or _PYTEST_PREFIX.match(text)
        if m:
            text = text[m.end() :]
        m = _HOST_PREFIX.match(text)
        if m and _is_host(m.group(1)):
            text = text[m.end() :]
        if text == before:
            break
    return text, rank


def _is_host(name: str) -> bool:
    """`gpu-q-13`, `node-a`, `10.0.0.7` are hosts; `RuntimeError`, `python`, `File` are not."""
    if name.endswith(("Error", "Exception", "Warning", "Exit")):
        return False
    return any(c.isdigit() or c in ".-" for c in name)


@dataclass(frozen=True)
class LogLine:
    number: int
    """1-based line number in the log"""
    text: str
    """the line without timestamp/rank/host prefixes (what the message says)"""
    rank: int | None = None


# ---- records ------------------------------------------------------------------------------------------------------


@dataclass
class Oom:
    line: LogLine
    tried: int | None = None
    capacity: int | None = None
    allocated: int | None = None
    free: int | None = None
    reserved: int | None = None
    gpu: int | None = None
    phase: str = "unknown"
    phase_line: LogLine | None = None
    """the frame or log line that decided the phase"""
    disguised: bool = False
    """cuBLAS could not create its handle (no memory left for its workspace): no allocator numbers"""


@dataclass
class CollectiveFailure:
    line: LogLine
    kind: str
    """timeout, error, desync, or warn (an `NCCL WARN` line: a candidate, not a failure by itself)"""
    op: str | None = None
    seq: int | None = None
    numel: int | None = None
    timeout_ms: int | None = None
    rank: int | None = None
    detail: str | None = None
    """for an error, what NCCL said failed when it says: shm (its /dev/shm segment), duplicate_gpu, cuda (a CUDA
    call NCCL made), peer_access (that call refused for GPUs without P2P); for
    a timeout, `either` when the line is torch's for an error or a timeout alike, `nccl_id` when the ranks
    timed out waiting for rank 0's NCCL communicator id (nccl.NCCL_ID_WAIT)"""


@dataclass
class FieldError:
    field: str
    message: str = ""
    value: str | None = None


@dataclass
class Rejection:
    line: LogLine
    kind: str
    """pydantic, hf_mismatch or assert"""
    model: str | None = None
    fields: list[FieldError] = field(default_factory=list)


@dataclass
class Kill:
    line: LogLine
    signal: int | None
    """9 for SIGKILL (exit code -9 / 137 / signal 9); None when the line names no signal"""


@dataclass
class MemoryReport:
    label: str
    line: LogLine
    ma_gb: float
    max_ma_gb: float
    ca_gb: float
    max_ca_gb: float


@dataclass
class Fact:
    value: object
    line: LogLine


@dataclass
class Event:
    """A failure line of one kind (which message it is, and a number it carries when it has one)."""

    line: LogLine
    kind: str
    value: float | str | None = None


@dataclass
class Scan:
    """Everything one pass found. Lists hold at most MAX_EVENTS items; counts are exact. Each field
    below the line counts is filled by the signal of the same name (zerotune.diagnose.signals)."""

    lines: int = 0
    bytes: int = 0
    facts: dict[str, Fact] = field(default_factory=dict)
    ooms: list[Oom] = field(default_factory=list)
    oom_count: int = 0
    collectives: list[CollectiveFailure] = field(default_factory=list)
    fingerprints: dict[int, tuple[int, LogLine]] = field(default_factory=dict)
    rejections: list[Rejection] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    aio_errors: list[LogLine] = field(default_factory=list)
    swap_refusals: list[LogLine] = field(default_factory=list)
    """the file system refusing a write (permission denied, read-only): an NVMe swap folder when nvme_swap shows one"""
    nvme_swap: list[LogLine] = field(default_factory=list)
    """lines naming DeepSpeed's NVMe swap (its swapper classes, swap_tensor/ code, an nvme_path set)"""
    cpu_alloc_failures: list[tuple[LogLine, int | None]] = field(default_factory=list)
    """torch's CPU allocator refused an allocation (host RAM or an address-space limit): bytes asked"""
    version_errors: list[LogLine] = field(default_factory=list)
    offload_hints: list[LogLine] = field(default_factory=list)
    host_memory: list[LogLine] = field(default_factory=list)
    cache_flushes: list[LogLine] = field(default_factory=list)
    """ZeRO-3's warning of PyTorch allocator cache flushes since the last step (GPU memory pressure)"""
    cache_flush_count: int = 0
    """the flushes those warnings report, summed"""
    checkpoint_load: LogLine | None = None
    """the latest line where DeepSpeed's checkpoint engine began reading a checkpoint file"""
    memory_reports: list[MemoryReport] = field(default_factory=list)
    tracebacks: int = 0
    last_exception: LogLine | None = None
    exception_before_last: LogLine | None = None
    """the exception line before last_exception (what a destructor's error after it followed)"""
    exceptions: list[LogLine] = field(default_factory=list)
    """exception lines (`RuntimeError: ...`), the first ones"""
    exits: list[Event] = field(default_factory=list)
    """a process that ended badly: a non-zero exit code (value), ChildFailedError, a segfault"""
    fp16: list[Event] = field(default_factory=list)
    """loss-scale events: at_minimum, overflow (value: the scale it reduced to), nan_loss"""
    fp16_overflows: int = 0
    skipped_steps: tuple[int, int, LogLine] | None = None
    """DeepSpeed's latest `step=N, skipped=M` line (the engine's log_dist every steps_per_print): optimizer
    steps taken and those the fp16 loss scaler skipped, and the line"""
    checkpoint_errors: list[Event] = field(default_factory=list)
    zero3_errors: list[Event] = field(default_factory=list)
    build_errors: list[Event] = field(default_factory=list)
    """a DeepSpeed op that failed to build or load (value: the op's name when the line gives it)"""
    client_optimizer: list[LogLine] = field(default_factory=list)
    vendor_solutions: list[tuple[str, LogLine]] = field(default_factory=list)
    """Ascend CANN's structured errors (`EJ0001: ...`, `Possible Cause:`, `Solution: ...`): (code, the Solution line)"""
    old_compiler: tuple[str, LogLine] | None = None
    """torch.utils.cpp_extension's warning that the C++ compiler is older than GCC 5: (compiler, line)"""
    frame_causes: list[Event] = field(default_factory=list)
    """the cause family of traceback frames (value "frame"), of an exception raised in code of a family
    (value "raised") and of exception types (value "exception"),
    the first ones: where a failure no message names happened (signals.frames)"""
    last_frame: LogLine | None = None
    """the latest traceback frame line, of any code (the raise site when an exception line follows)"""
    last_frame_cause: Event | None = None
    """the latest frame of a family (a traceback cut before its exception line ends with it)"""
    last_frame_import: LogLine | None = None
    """the latest traceback frame inside an import: an import statement, the import system, or the body of the
    module the frame before imports (signals.frames)"""
    nccl_transport: list[LogLine] = field(default_factory=list)
    """NCCL found no InfiniBand device and runs its inter-node traffic over TCP sockets"""
    port_conflicts: list[Event] = field(default_factory=list)
    """the rendezvous store (or accelerate's launcher) finding the master port held by another process
    (value: the port, when the line names it)"""
    hangs: list[Event] = field(default_factory=list)
    """signs of a stuck job: interrupted by hand, a py-spy dump, a rendezvous/store barrier timeout"""
    init_line: LogLine | None = None
    """the latest start-up progress line (extensions loaded, process group initialised)"""
    progress_line: LogLine | None = None
    """the latest training-progress line (a step, a loss, a timer)"""
    ds_print: dict[str, tuple[str, LogLine]] = field(default_factory=dict)
    """DeepSpeedConfig.print and ds_report's `name ...... value` lines: name -> (value, line)"""
    model_config: dict | None = None
    model_config_line: LogLine | None = None
    bench_job: dict | None = None
    """the job a `zerotune bench` run printed (its proxy model, config, world size, sequence length)"""
    bench_job_line: LogLine | None = None
    breakdown: dict[str, list[float]] = field(default_factory=dict)
    """wall_clock_breakdown timer -> [sum ms, count] over the non-micro-step lines"""
    breakdown_line: LogLine | None = None
    samples_per_s: list[float] = field(default_factory=lambda: [0.0, 0.0])
    """[sum, count] of DeepSpeed's CurrSamplesPerSec / HF's train_samples_per_second"""
    throughput_line: LogLine | None = None
    series: dict[str, list[float]] = field(default_factory=dict)
    """the last SERIES_MAX values of each per-step figure (zerotune.diagnose.signals.timers): step
    timers (ms), CurrSamplesPerSec, tqdm's seconds per iteration; what calibrate --from-log reads"""
    series_lines: dict[str, list[LogLine]] = field(default_factory=dict)
    """for each series, its first and latest line"""
    config: dict | None = None
    config_line: LogLine | None = None
    config_error: str | None = None

    def breakdown_means(self) -> dict[str, float]:
        """Each wall_clock_breakdown timer's mean over the lines kept (ms)."""
        return {name: acc[0] / acc[1] for name, acc in self.breakdown.items() if acc[1]}

    def fact(self, name: str, value: object, line: LogLine) -> None:
        self.facts.setdefault(name, Fact(value, line))

    def extend_series(self, name: str, values: list[float], first: LogLine, last: LogLine) -> None:
        """Append a block's values of one per-step figure, keeping the latest SERIES_MAX."""
        held = self.series.setdefault(name, [])
        held.extend(values)
        del held[:-SERIES_MAX]
        lines = self.series_lines.setdefault(name, [first, last])
        lines[1] = last

    def add(self, items: list, item: object) -> None:
        if len(items) < MAX_EVENTS:
            items.append(item)
