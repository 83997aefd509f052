"""The block FLOP count, checked against Megatron-LM's formula, the catalog's parameter counts and
torch's own FLOP counter; the CPU shape scaling; a tiny real measurement."""

from __future__ import annotations

import pytest

from zerotune.catalog.models import load_model
from zerotune.probe.compute import CPU_MAX_HIDDEN, BlockShape, block_flops, shape_for


def test_megatron_formula_for_a_plain_block() -> None:
    """Narayanan et al. 2021: 72*b*s*h^2*(1 + s/(6h)) per layer (fwd+bwd, no recompute)."""
    b, s, h = 2, 2048, 4096
    shape = BlockShape(hidden=h, heads=32, kv_heads=32, ffn=4 * h, gated=False, batch=b, seq=s)
    assert block_flops(shape) == pytest.approx(72 * b * s * h**2 * (1 + s / (6 * h)))


def test_six_n_t_plus_attention_for_llama_7b() -> None:
    """Matmul part = 6 * (block weight params) * tokens, with params from the catalog's tensors."""
    model = load_model("llama-7b")
    shape = shape_for(model, on_gpu=True)
    matrices = sum(t for t in model.blocks[0].tensors if t > model.hidden_size)  # drop the norm vectors
    tokens = shape.batch * shape.seq
    attention = 12 * shape.batch * shape.seq**2 * shape.hidden
    assert block_flops(shape) == pytest.approx(6 * matrices * tokens + attention)


def test_torch_flop_counter_agrees() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from zerotune.probe.compute import block_step

    shape = BlockShape(hidden=128, heads=4, kv_heads=2, ffn=344, gated=True, batch=2, seq=32)
    step = block_step(torch, shape, torch.float32, torch.device("cpu"))
    with FlopCounterMode(display=False) as counter:
        step()
    # torch counts the matmuls (aten.mm); the CPU SDPA kernel is not counted, so add it back
    attention = 12 * shape.batch * shape.seq**2 * shape.hidden
    assert counter.get_total_flops() + attention == pytest.approx(block_flops(shape))


def test_cpu_shape_keeps_proportions_within_the_cap() -> None:
    model = load_model("llama-7b")
    small = shape_for(model, on_gpu=False)
    assert small.hidden <= CPU_MAX_HIDDEN
    assert small.head_dim == model.hidden_size // model.num_heads
    assert small.ffn / small.hidden == pytest.approx(model.ffn_size / model.hidden_size, rel=0.01)
    assert small.gated and small.heads % small.kv_heads == 0
    assert shape_for(None, on_gpu=False).hidden <= CPU_MAX_HIDDEN
    assert shape_for(model, on_gpu=True).hidden == 4096


def test_tiny_real_measurements() -> None:
    torch = pytest.importorskip("torch")
    from zerotune.probe import compute

    shape = BlockShape(hidden=64, heads=2, kv_heads=2, ffn=128, gated=False, batch=1, seq=16)
    block = compute.measure_block(torch, shape, torch.float32, torch.device("cpu"), budget_s=0.05)
    assert block["flops"] == pytest.approx(block_flops(shape) / block["seconds"])
    assert block["iters"] >= 3
    adam = compute.measure_cpu_adam(torch, params=100_000, budget_s=0.05)
    assert adam["params_per_s"] > 0 and adam["params"] == 100_000


def test_host_memory_rates_are_positive_and_above_the_mmap_threshold() -> None:
    """The buffer is above glibc's largest mmap threshold (so each fresh one is new pages), a warm
    copy moves bytes at a finite rate, and first touch is either measured or explicitly None."""
    torch = pytest.importorskip("torch")
    from zerotune.probe import compute

    assert compute.HOST_MEMORY_BYTES > compute.GLIBC_MMAP_THRESHOLD_MAX == 32 * 2**20
    rates = compute.measure_host_memory(torch, budget_s=0.1)
    assert rates["bytes"] == compute.HOST_MEMORY_BYTES
    assert 1e8 < rates["memory_Bps"] < 1e13  # 0.1 GB/s .. 10 TB/s: any real host
    assert rates["first_touch_Bps"] is None or 1e7 < rates["first_touch_Bps"] < 1e13


def test_device_memory_rate_is_a_copy_of_bytes_read_plus_written(monkeypatch) -> None:
    """The HBM figure counts a copy as bytes read plus bytes written, as the datasheets do: a fake clock
    where every copy takes 1 ms gives 2 x size / 1 ms. Run on the CPU device (the code does not branch
    on the device beyond its synchronize)."""
    torch = pytest.importorskip("torch")
    from zerotune.probe import compute

    assert compute.DEVICE_MEMORY_BYTES >= 20 * 50 * 2**20  # 20x an H100's 50 MB L2: the copy streams from HBM
    clock = iter(i * 1e-3 for i in range(10_000))
    monkeypatch.setattr(compute.time, "perf_counter", lambda: next(clock))
    rate = compute.measure_device_memory(torch, torch.device("cpu"), size_bytes=4 * 2**20, budget_s=0.0)
    assert rate == {"hbm_Bps": pytest.approx(2 * 4 * 2**20 / 1e-3), "bytes": 4 * 2**20}


def test_gpu_block_also_records_the_queued_rate(monkeypatch) -> None:
    """On a GPU the block is timed twice: synced after each call (the profile's rate) and
    QUEUED_CALLS calls back to back (recorded for the next GPU run to judge); on a CPU only once.
    A fake clock: every call of the block takes 2 ms, so both rates are block_flops / 2 ms."""
    from types import SimpleNamespace

    from zerotune.probe import compute

    now = [0.0]

    def step() -> None:
        now[0] += 0.002

    monkeypatch.setattr(compute, "block_step", lambda *a: step)
    monkeypatch.setattr(compute.time, "perf_counter", lambda: now[0])
    torch = SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda device: None))
    shape = BlockShape(hidden=256, heads=4, kv_heads=4, ffn=1024, gated=True, batch=1, seq=64)
    gpu = compute.measure_block(torch, shape, None, SimpleNamespace(type="cuda"), budget_s=0.05)
    assert gpu["seconds"] == pytest.approx(0.002)
    assert gpu["queued"]["calls"] == compute.QUEUED_CALLS
    assert gpu["queued"]["seconds"] == pytest.approx(0.002)
    assert gpu["queued"]["flops"] == pytest.approx(block_flops(shape) / 0.002)
    cpu = compute.measure_block(torch, shape, None, SimpleNamespace(type="cpu"), budget_s=0.05)
    assert "queued" not in cpu
