"""The CPU-host memory terms of the step model (zerotune/model/host_memory.py, buckets.py): bucket
copies at the probed host memory bandwidth, and first touch of the buffers DeepSpeed allocates anew,
only above glibc's mmap threshold; a GPU profile's predictions do not change."""

from __future__ import annotations

import pytest

from tests.conftest import cpu_probe_profile
from zerotune.catalog.hardware import load_profile
from zerotune.catalog.models import derive, load_model
from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model.comm import fill_buckets
from zerotune.model.host_memory import GLIBC_MMAP_THRESHOLD_MAX, fresh_write_s
from zerotune.model.setup import prepare
from zerotune.model.step import predict_step
from zerotune.schema.workload import Workload

MEM, TOUCH = 8e9, 2e9


@pytest.fixture(scope="module")
def small():
    return derive(load_model("llama-7b"), num_layers=2)


def _cpu(memory=None, touch=None):
    cpu = cpu_probe_profile()
    return cpu.model_copy(update={"host": cpu.host.model_copy(update={"memory_Bps": memory, "first_touch_Bps": touch})})


def _wl(**kw) -> Workload:
    return Workload(**({"seq_len": 128, "micro_batch": 1, "precision": "fp32", "gpus_per_node": 2} | kw))


def _step(model, zero, hw, **kw) -> float:
    return predict_step(model, _wl(**kw), zero, hw).step_time_s


def test_threshold_is_glibcs_and_only_written_pages_count() -> None:
    assert GLIBC_MMAP_THRESHOLD_MAX == 32 * 2**20  # mallopt(3): 4 MiB * sizeof(long) on 64-bit
    assert fresh_write_s(GLIBC_MMAP_THRESHOLD_MAX, GLIBC_MMAP_THRESHOLD_MAX, TOUCH) == 0.0  # heap, reused
    assert fresh_write_s(GLIBC_MMAP_THRESHOLD_MAX + 1, 1e6, TOUCH) == pytest.approx(1e6 / TOUCH)
    assert fresh_write_s(4e8, 1e9, TOUCH) == pytest.approx(4e8 / TOUCH)  # never more than the buffer
    assert fresh_write_s(4e8, 4e8, None) == 0.0


def test_gpu_predictions_ignore_host_rates(small) -> None:
    """A GPU host's caching allocator reuses memory and its copies run on HBM: setting the host
    rates on a GPU profile changes nothing."""
    dgx = load_profile("dgx-h100")
    with_rates = dgx.model_copy(update={"host": dgx.host.model_copy(update={"memory_Bps": 1e9, "first_touch_Bps": 1e8})})
    load = Workload(seq_len=2048, micro_batch=1, grad_accum=2, precision="bf16", gpus_per_node=8)
    for zero in (ZeroSettings(stage=s, reduce_bucket_size=rb, overlap_comm=ov)
                 for s in (0, 1, 2, 3) for rb in (100_000, 50_000_000) for ov in (False, True)):  # fmt: skip
        assert predict_step(small, load, zero, with_rates).step_time_s == predict_step(small, load, zero, dgx).step_time_s


def test_bucket_copies_run_at_host_memory_bandwidth(small) -> None:
    """Stage 2 with reduce_scatter: 6 passes of every gradient byte per reducing backward (below
    the mmap threshold, so no first touch): the step grows by exactly that over memory_Bps."""
    zero = ZeroSettings(stage=2, reduce_bucket_size=100_000)
    params = prepare(small).params
    grown = _step(small, zero, _cpu(memory=MEM)) - _step(small, zero, _cpu())
    assert grown == pytest.approx(6 * params * 4 / MEM, rel=1e-9)
    # without reduce_scatter only the copy into the bucket: 2 passes
    plain = ZeroSettings(stage=2, reduce_bucket_size=100_000, reduce_scatter=False)
    grown = _step(small, plain, _cpu(memory=MEM)) - _step(small, plain, _cpu())
    assert grown == pytest.approx(2 * params * 4 / MEM, rel=1e-9)


def test_first_touch_of_stage2_buffers_follows_their_sizes(small) -> None:
    """Small buckets: grads_in_partition (the rank's partition, above the threshold) and the
    flattened oversized embedding gradient are fresh. Large buckets: also the staging buffer up to
    its largest bucket, and each flattened bucket above the threshold. Counted here from the bucket sizes DeepSpeed's filling gives.
    The step adds three partition-sized buffers (the flattened gradients and torch AdamW's two
    temporaries: test_step_buffers_are_fresh_above_the_threshold)."""
    params = prepare(small).params
    partition = params // 2 * 4
    assert partition > GLIBC_MMAP_THRESHOLD_MAX
    for rb in (100_000, 50_000_000):
        zero = ZeroSettings(stage=2, reduce_bucket_size=rb)
        grown = _step(small, zero, _cpu(touch=TOUCH)) - _step(small, zero, _cpu())
        sizes = [b.numel * 4 for b in fill_buckets(prepare(small).backward_tensors, rb)]
        # oversized gradients (the embedding here) bypass the staging buffer
        staging = max(b for b in sizes if b <= rb * 4) if rb * 4 > GLIBC_MMAP_THRESHOLD_MAX else 0
        flattened = sum(b for b in sizes if b > GLIBC_MMAP_THRESHOLD_MAX)
        assert grown == pytest.approx((partition + staging + flattened + 3 * partition) / TOUCH, rel=1e-9)


def _step_touch(model, zero, **kw) -> float:
    """Seconds of the step's own fresh buffers in the detailed timeline (0 when it has none)."""
    est = predict_step(model, _wl(**kw), zero, _cpu(touch=TOUCH), detail=True)
    return sum(e.end_s - e.start_s for e in est.events if e.label == "first touch of the step's fresh buffers")


def test_step_buffers_are_fresh_above_the_threshold(small) -> None:
    """The optimizer step's fresh buffers (zerotune/model/optimizer.py fresh_step_buffers): at stage
    1-3 the flattened gradient partition and torch AdamW's two temporaries of it (three fp32 buffers
    of the partition), first-touched only above glibc's mmap threshold; stage 0 steps each parameter
    tensor on its own (two temporaries each); none under optimizer offload."""
    tensors = prepare(small).backward_tensors
    part = prepare(small).params // 2
    assert part * 4 > GLIBC_MMAP_THRESHOLD_MAX
    for stage in (1, 2):
        assert _step_touch(small, ZeroSettings(stage=stage)) == pytest.approx(3 * part * 4 / TOUCH, rel=1e-9)
    stage0 = sum(2 * 4 * n for n in tensors if 4 * n > GLIBC_MMAP_THRESHOLD_MAX)
    assert stage0 > 0  # llama-7b's embedding and MLP matrices are above it, its norms below
    assert _step_touch(small, ZeroSettings(stage=0)) == pytest.approx(stage0 / TOUCH, rel=1e-9)
    # stage 3: one flat partition per sub-group, cut where its partition elements reach sub_group_size
    sub = 100_000_000
    groups, size = [], 0
    for n in reversed(tensors):
        size += -(-n // 2)
        if size >= sub:
            groups.append(size)
            size = 0
    groups.append(size)
    assert len(groups) > 2
    expected = sum(3 * 4 * g for g in groups if 4 * g > GLIBC_MMAP_THRESHOLD_MAX) / TOUCH
    assert _step_touch(small, ZeroSettings(stage=3, sub_group_size=sub)) == pytest.approx(expected, rel=1e-9)
    assert _step_touch(small, ZeroSettings(stage=2, offload_optimizer={"device": "cpu"})) == 0.0


def test_step_buffers_below_the_threshold_are_reused() -> None:
    """The llama-7b proxy at width x0.125 (the CPU testbed's): 2 layers keep the rank's partition
    below 32 MiB (the heap reuses it: nothing), 6 layers put it above (three fresh buffers)."""
    proxy = load_model("llama-7b")
    for layers in (2, 6):
        model = derive(proxy, num_layers=layers, width_scale=0.125, vocab_size=4000)
        part = prepare(model).params // 2 * 4
        touch = _step_touch(model, ZeroSettings(stage=2))
        assert touch == (pytest.approx(3 * part / TOUCH, rel=1e-9) if part > GLIBC_MMAP_THRESHOLD_MAX else 0.0)
        assert (part > GLIBC_MMAP_THRESHOLD_MAX) == (layers == 6)


def test_stage1_pays_first_touch_only_at_the_boundary(small) -> None:
    """Stage 1 writes its buffers only in the reducing (boundary) backward: a second micro-step adds
    the same with or without the first-touch rate."""
    zero = ZeroSettings(stage=1, reduce_bucket_size=50_000_000)
    hw = _cpu(touch=TOUCH)
    extra_with = _step(small, zero, hw, grad_accum=2) - _step(small, zero, hw, grad_accum=1)
    extra_without = _step(small, zero, _cpu(), grad_accum=2) - _step(small, zero, _cpu(), grad_accum=1)
    assert extra_with == pytest.approx(extra_without, rel=1e-9)
    assert _step(small, zero, hw) > _step(small, zero, _cpu())


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("overlap", [False, True])
def test_fast_path_equals_detailed_path_with_host_rates(small, stage, overlap) -> None:
    zero = ZeroSettings(stage=stage, reduce_bucket_size=50_000_000, overlap_comm=overlap)
    hw = _cpu(memory=MEM, touch=TOUCH)
    load = _wl(grad_accum=2)
    fast = predict_step(small, load, zero, hw).step_time_s
    detailed = predict_step(small, load, zero, hw, detail=True).step_time_s
    assert fast == pytest.approx(detailed, rel=1e-9)
