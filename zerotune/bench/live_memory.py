"""Measured live bytes per phase of a bench rank (runs inside the rank; torch imported lazily).

A rank marks the phase boundaries of every micro-step (`mark("forward")`, `mark("backward")`,
`mark("step")`, `mark("end")`); each phase is the interval from its mark to the next, and for each
we keep the peak of the live bytes inside it and the live bytes at its end.

- CUDA: `torch.cuda.memory_allocated` at each mark, and `max_memory_allocated` since the previous
  mark (`reset_peak_memory_stats` at each mark).
- CPU: the CPU allocator reports every allocation and free to the profiler when
  `torch.profiler.profile(profile_memory=True)` runs (c10 `ProfiledCPUMemoryReporter`), but only on
  threads that carry the profiler's thread-local state: a block freed on another thread leaves no
  record. gloo frees blocks on its worker threads: a collective's work object holds its input and
  output tensors, and the worker drops its reference only after the work completed and woke the caller (torch
  torch/csrc/distributed/c10d/ProcessGroupGloo.cpp `ProcessGroupGloo::runLoop`: `execute(work)`,
  then `workInProgress_[workerIndex].reset()`), so whichever side lets
  go last frees the block (a race: 20-30% of the frees of a gloo all-gather loop went unrecorded,
  a different share every run). Pairing records by address therefore counted such blocks as live
  until their address was handed out again. Instead we switch on c10's
  `FLAGS_caffe2_report_cpu_memory_usage` (libc10.so, set through ctypes): the reporter then keeps
  its process-wide byte count on every thread, and each record carries that count
  (`total_allocated`), so the live bytes at any record include every free, whichever thread made
  it (and every allocation, e.g. gloo's temporaries on its workers). Blocks allocated before the
  flag is set are never counted (their frees find no size): hence recording starts before the
  model is built. Each mark allocates and frees a one-element probe first, so the count is read at
  the mark too; the marks are zero-length `record_function` ranges on the same clock. Attributing
  memory to enclosing ops (the profiler's table view) counts a block once per enclosing op, so the
  raw records are used. tests/unit/test_live_memory.py checks the recorder against known tensors
  freed on another thread and by gloo.

The live bytes are the rank's own tensors (parameters, gradients, optimizer states, buffers,
activations): what a GPU's caching allocator would call "allocated".
"""

from __future__ import annotations

import time
from typing import Any

MARK_PREFIX = "zerotune_mark::"
SETTLE_S = 0.05
"""CPU: each mark first sleeps this long, so that gloo's workers drop the collectives the engine
has finished with before the next phase begins (module doc); otherwise a block the engine is done
with counts into the next phase whenever a loaded host is slow to run the worker (seen once:
82 MB in one run's forward of s2-ga2 and not in the next). 4 marks per micro-step."""


class PhaseRecorder:
    """Collects per-phase peak/end live bytes; `start()` before the model is built."""

    def __init__(self, cuda: bool) -> None:
        import torch

        self._torch, self._cuda = torch, cuda
        self._profile: Any = None
        self._marks: list[tuple[str, int, int]] = []  # (label, live at mark, peak since last) on CUDA
        self._labels: list[str] = []
        self._flag: Any = None
        self._flag_was = False

    def start(self) -> None:
        torch = self._torch
        if self._cuda:
            torch.cuda.reset_peak_memory_stats()
            return
        self._flag = _report_flag(torch)
        self._flag_was, self._flag.value = bool(self._flag.value), True
        self._profile = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
        )
        self._profile.__enter__()

    def mark(self, label: str) -> None:
        torch = self._torch
        self._labels.append(label)
        if self._cuda:
            torch.cuda.synchronize()
            self._marks.append((label, torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()))
            torch.cuda.reset_peak_memory_stats()
            return
        time.sleep(SETTLE_S)
        probe = torch.empty(1)  # a record here reads the process-wide count at the mark (module doc)
        del probe
        with torch.profiler.record_function(MARK_PREFIX + label):
            pass

    def phases(self) -> list[dict[str, Any]]:
        """One row per interval between marks: {"phase": label of its start, "peak": …, "end": …}."""
        if self._cuda:
            rows = []
            for (label, _, _), (_, live, peak) in zip(self._marks, self._marks[1:], strict=False):
                rows.append({"phase": label, "peak": int(peak), "end": int(live)})
            return rows
        self._profile.__exit__(None, None, None)
        self._flag.value = self._flag_was
        return replay(self._profile)


def _report_flag(torch: Any) -> Any:
    """c10's `FLAGS_caffe2_report_cpu_memory_usage` (c10/core/CPUAllocator.cpp), as a ctypes bool."""
    import ctypes
    import os

    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
    return ctypes.c_bool.in_dll(lib, "FLAGS_caffe2_report_cpu_memory_usage")


def replay(profile: Any) -> list[dict[str, Any]]:
    """The phases of a finished CPU profile: its allocation records and marks in time order, the
    live bytes at each record being the reporter's process-wide count (module doc)."""
    from torch._C._profiler import _EventType

    events: list[tuple[int, int, Any]] = []  # (time, order, label | live bytes)
    stack = list(profile.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.typed[0] == _EventType.Allocation:
            fields = event.typed[1]
            if fields.device.type == "cpu":
                events.append((event.start_time_ns, 1, int(fields.total_allocated)))
        elif event.name.startswith(MARK_PREFIX):
            events.append((event.start_time_ns, 0, event.name[len(MARK_PREFIX) :]))
    events.sort(key=lambda e: (e[0], e[1]))
    live = 0
    rows: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for _, kind, key in events:
        if kind == 0:
            if current is not None:
                current["end"] = live
                rows.append(current)
            current = {"phase": key, "peak": live, "end": live}
            continue
        live = key
        if current is not None and live > current["peak"]:
            current["peak"] = live
    return rows
