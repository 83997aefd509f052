"""The CPU phase recorder (zerotune.bench.live_memory) against tensors of known size and lifetime,
freed on the recording thread, on a Python thread and on gloo's worker threads."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from zerotune.bench.live_memory import PhaseRecorder

torch = pytest.importorskip("torch")

MB = 1_000_000
BLOCK = 25 * MB  # bytes of a (25 MB / 4)-element fp32 tensor


def _phases(body: Callable[[], None]) -> tuple[int, dict[str, int]]:
    """Live bytes when `body` starts, and the row of the phase it runs in."""
    recorder = PhaseRecorder(cuda=False)
    recorder.start()
    recorder.mark("idle")
    recorder.mark("body")
    body()
    recorder.mark("after")
    recorder.mark("end")
    rows = {row["phase"]: row for row in recorder.phases()}
    return rows["idle"]["end"], rows["body"]


def _free_on_a_thread(box: list) -> None:
    thread = threading.Thread(target=box.clear)  # the last reference dies on this thread
    thread.start()
    thread.join()


def test_the_profiler_alone_misses_a_free_on_another_thread() -> None:
    """Why the recorder does not pair the profiler's records: this free leaves none."""
    from torch._C._profiler import _EventType

    box: list = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        box.append(torch.empty(BLOCK // 4))
        _free_on_a_thread(box)
    sizes = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.typed[0] == _EventType.Allocation:
            sizes.append(event.typed[1].alloc_size)
    assert BLOCK in sizes and -BLOCK not in sizes


def test_a_block_freed_on_another_thread_is_no_longer_live() -> None:
    box: list = []

    def body() -> None:
        box.append(torch.empty(BLOCK // 4))
        _free_on_a_thread(box)

    start, row = _phases(body)
    assert row["peak"] - start == BLOCK
    assert row["end"] == start


def test_gloo_collectives_leave_nothing_behind() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    part = torch.ones(BLOCK // 4)

    def body() -> None:
        for _ in range(20):  # gloo's worker threads free some of these outputs (module doc)
            out = torch.empty(BLOCK // 4)
            dist.all_gather_into_tensor(out, part)
            del out
        threading.Event().wait(0.5)  # let the workers drop their last references

    try:
        start, row = _phases(body)
    finally:
        dist.destroy_process_group()
    assert row["peak"] - start >= BLOCK
    assert row["end"] == start  # pairing records by address left 150-500 MB here, different every run
