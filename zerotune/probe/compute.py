"""Compute microbenchmarks run inside a probe rank: a transformer block's fwd+bwd, host<->device
copies, device memory bandwidth, CPU Adam, and a matmul loop for the compute/communication overlap test.

The FLOP count and the shape choice are pure; the measurements take the `torch` module as their
first argument (the worker imports it), so importing this module never imports torch.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from zerotune.model.compute import dense_block_flops
from zerotune.model.host_memory import GLIBC_MMAP_THRESHOLD_MAX
from zerotune.units import MiB


@dataclass(frozen=True)
class BlockShape:
    """One transformer block at a model's shapes, run on `batch` x `seq` tokens."""

    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    gated: bool
    batch: int
    seq: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def matrix_params(self) -> int:
        """Weights of block_step's matrices: QKV h x (h + 2·kv_dim), output h x h, MLP 2 or 3 of h x f."""
        h, kv_dim = self.hidden, self.kv_heads * self.head_dim
        return h * (h + 2 * kv_dim) + h * h + (3 if self.gated else 2) * h * self.ffn

    def describe(self) -> str:
        mlp = "gated" if self.gated else "plain"
        return (
            f"block h={self.hidden} heads={self.heads}/{self.kv_heads} ffn={self.ffn} ({mlp}) "
            f"batch={self.batch} seq={self.seq}"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Llama-2-7B's block (hidden 4096, 32 heads, SwiGLU 11008; arXiv:2307.09288) at 2k tokens on a GPU,
# and a small block on a CPU so that the fp32 measurement takes a second or two.
GPU_DEFAULT = BlockShape(hidden=4096, heads=32, kv_heads=32, ffn=11008, gated=True, batch=1, seq=2048)
CPU_DEFAULT = BlockShape(hidden=512, heads=8, kv_heads=8, ffn=1376, gated=True, batch=1, seq=256)
CPU_MAX_HIDDEN = 1024


def shape_for(model: Any | None, on_gpu: bool) -> BlockShape:
    """The block to time: the model's own on a GPU; on a CPU the model's proportions scaled down
    to at most CPU_MAX_HIDDEN so fp32 stays within seconds. `model` is a ModelSpec or None."""
    if model is None:
        return GPU_DEFAULT if on_gpu else CPU_DEFAULT
    heads, kv_heads, hidden, ffn = model.num_heads, model.num_kv_heads, model.hidden_size, model.ffn_size
    if on_gpu:
        seq = min(model.max_seq_len or 2048, 4096)
        return BlockShape(hidden, heads, kv_heads, ffn, model.gated_mlp, batch=1, seq=seq)
    scale = max(1, -(-hidden // CPU_MAX_HIDDEN))
    heads_small = max(1, heads // scale)
    kv_small = max(1, min(heads_small, kv_heads // scale or 1))
    head_dim = hidden // heads
    hidden_small = heads_small * head_dim
    while hidden_small > CPU_MAX_HIDDEN and heads_small > 1:
        heads_small //= 2
        kv_small = max(1, min(kv_small, heads_small))
        hidden_small = heads_small * head_dim
    while heads_small % kv_small:
        kv_small -= 1
    ffn_small = max(1, ffn * hidden_small // hidden)
    return BlockShape(hidden_small, heads_small, kv_small, ffn_small, model.gated_mlp, batch=1, seq=256)


def block_flops(shape: BlockShape) -> float:
    """FLOPs of one block's forward + backward pass, counted by zerotune.model.compute (full
    attention, not causal-halved, as the usual MFU accounting does). With kv_dim = h and a plain 4h
    MLP this is Megatron-LM's 72*b*s*h^2*(1 + s/(6h)) per layer (Narayanan et al. 2021,
    arXiv:2104.04473 §5.1)."""
    flops = dense_block_flops(shape.matrix_params, shape.heads, shape.head_dim)
    return flops.training_flops(shape.batch * shape.seq, shape.seq)


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(
    torch: Any, device: Any, fn: Any, warmup: int, budget_s: float, max_iters: int = 50
) -> list[float]:
    """Seconds per call: `warmup` untimed calls, then calls until `budget_s` or `max_iters` (>= 3)."""
    for _ in range(warmup):
        fn()
    _sync(torch, device)
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < 3 or (len(times) < max_iters and time.perf_counter() < deadline):
        start = time.perf_counter()
        fn()
        _sync(torch, device)
        times.append(time.perf_counter() - start)
    return times


def block_step(torch: Any, shape: BlockShape, dtype: Any, device: Any) -> Any:
    """A callable running one block's forward and backward (pre-norm attention + MLP, residuals)."""
    f = torch.nn.functional
    h, kv_dim, hd = shape.hidden, shape.kv_heads * shape.head_dim, shape.head_dim
    gen = torch.Generator(device="cpu").manual_seed(0)

    def weight(*dims: int) -> Any:
        w = torch.randn(*dims, generator=gen) * dims[0] ** -0.5
        return w.to(device=device, dtype=dtype).requires_grad_(True)

    w_qkv, w_o = weight(h, h + 2 * kv_dim), weight(h, h)
    w_up = weight(h, shape.ffn * (2 if shape.gated else 1))
    w_down = weight(shape.ffn, h)
    x = torch.randn(shape.batch, shape.seq, h, generator=gen).to(device=device, dtype=dtype)
    x.requires_grad_(True)

    def step() -> None:
        b, s = shape.batch, shape.seq
        a = f.layer_norm(x, (h,))
        q, k, v = (a @ w_qkv).split([h, kv_dim, kv_dim], dim=-1)
        q = q.view(b, s, shape.heads, hd).transpose(1, 2)
        k = k.view(b, s, shape.kv_heads, hd).transpose(1, 2)
        v = v.view(b, s, shape.kv_heads, hd).transpose(1, 2)
        if shape.kv_heads != shape.heads:
            k = k.repeat_interleave(shape.heads // shape.kv_heads, dim=1)
            v = v.repeat_interleave(shape.heads // shape.kv_heads, dim=1)
        o = f.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        y = x + o @ w_o
        m = f.layer_norm(y, (h,)) @ w_up
        if shape.gated:
            gate, up = m.chunk(2, dim=-1)
            m = f.silu(gate) * up
        else:
            m = f.gelu(m)
        out = y + m @ w_down
        out.float().sum().backward()
        for t in (x, w_qkv, w_o, w_up, w_down):
            t.grad = None

    return step


QUEUED_CALLS = 8
"""GPU: block calls enqueued back to back before one synchronize, for the queued rate (measure_block)."""


def measure_block(torch: Any, shape: BlockShape, dtype: Any, device: Any, budget_s: float) -> dict[str, Any]:
    """Achieved FLOP/s of one block's fwd+bwd (median iteration, a synchronize after each).

    On a GPU also the queued rate: QUEUED_CALLS calls back to back, one synchronize at the end, so the
    host enqueues while the device runs (as in a whole model's pass, zerotune/model/overheads.py
    pass_seconds) and the host's launch and sync latency drop out. Recorded next to the synced rate,
    not used: on the first GPU run (data/gpu/2026-11-28-NVIDIA-H200) the synced rate (305 TFLOP/s on
    TinyLlama's block) predicted the bench's fwd+bwd timers 26% slow; the next GPU run says which rate
    the step model should take."""
    step = block_step(torch, shape, dtype, device)
    times = _timed(torch, device, step, warmup=1, budget_s=budget_s, max_iters=20)
    median = statistics.median(times)
    out = {"flops": block_flops(shape) / median, "seconds": median, "iters": len(times)}
    if device.type == "cuda":

        def queued() -> None:
            for _ in range(QUEUED_CALLS):
                step()

        batches = _timed(torch, device, queued, warmup=0, budget_s=0.0, max_iters=3)
        per_call = statistics.median(batches) / QUEUED_CALLS
        out["queued"] = {"flops": block_flops(shape) / per_call, "seconds": per_call, "calls": QUEUED_CALLS}
    return out


def measure_copies(
    torch: Any, device: Any, size_bytes: int = 256 * MiB, budget_s: float = 2.0
) -> dict[str, float]:
    """Host<->device copy bandwidth (B/s): pinned h2d and d2h, pageable h2d."""
    numel = size_bytes // 4
    gpu = torch.empty(numel, dtype=torch.float32, device=device)
    pinned = torch.empty(numel, dtype=torch.float32, pin_memory=True)
    pageable = torch.empty(numel, dtype=torch.float32)
    result = {}
    for key, fn in (
        ("h2d_pinned_Bps", lambda: gpu.copy_(pinned, non_blocking=True)),
        ("d2h_pinned_Bps", lambda: pinned.copy_(gpu, non_blocking=True)),
        ("h2d_pageable_Bps", lambda: gpu.copy_(pageable)),
    ):
        times = _timed(torch, device, fn, warmup=1, budget_s=budget_s / 3, max_iters=10)
        result[key] = size_bytes / statistics.median(times)
    return result


DEVICE_MEMORY_BYTES = 1024 * MiB
"""The device-memory benchmark's buffer: 1 GiB, 20x an H100's 50 MB L2 (NVIDIA H100 Tensor Core GPU
Architecture whitepaper), so each copy streams through HBM."""


def measure_device_memory(
    torch: Any, device: Any, size_bytes: int = DEVICE_MEMORY_BYTES, budget_s: float = 1.0
) -> dict[str, float]:
    """The GPU's achieved memory bandwidth (B/s): a copy between two warm device buffers, bytes read
    plus bytes written per second, the unit of the datasheet's HBM figure. The model prices the
    optimizer step's passes and eager attention's score traffic at this rate
    (zerotune/model/optimizer.py gpu_step, compute.py): a copy kernel reaches less than the
    datasheet's peak, and the datasheet figure overstated the H200 run's step
    (data/gpu/2026-11-28-NVIDIA-H200: DeepSpeed's step timers imply 3.3-4.1 TB/s against 4.8)."""
    numel = size_bytes // 4
    src = torch.ones(numel, dtype=torch.float32, device=device)
    dst = torch.empty(numel, dtype=torch.float32, device=device)
    times = _timed(torch, device, lambda: dst.copy_(src), warmup=2, budget_s=budget_s, max_iters=20)
    return {"hbm_Bps": 2 * size_bytes / statistics.median(times), "bytes": size_bytes}


HOST_MEMORY_BYTES = 2 * GLIBC_MMAP_THRESHOLD_MAX
"""The host-memory benchmark's buffer: above glibc's mmap threshold (zerotune/model/host_memory.py:
each fresh one is new pages), and past the caches."""


def measure_host_memory(
    torch: Any, size_bytes: int = HOST_MEMORY_BYTES, budget_s: float = 1.0
) -> dict[str, float]:
    """Host memory rates of this process, with its torch threads (B/s):

    - `memory_Bps`: a copy between two warm buffers, bytes read plus bytes written per second (the
      unit of a GPU's HBM bandwidth, so buffer copies are priced the same way on either);
    - `first_touch_Bps`: the extra cost of writing a fresh allocation above the mmap threshold
      (each page faults and the kernel zeroes it), bytes per second of that extra: size / (time to
      allocate and fill a new buffer - time to fill a warm one)."""
    numel = size_bytes // 4
    src = torch.ones(numel)
    dst = torch.zeros(numel)
    cpu = torch.device("cpu")
    share = budget_s / 3
    copy = statistics.median(_timed(torch, cpu, lambda: dst.copy_(src), 1, share, max_iters=10))
    warm = statistics.median(_timed(torch, cpu, lambda: dst.fill_(1.0), 1, share, max_iters=10))

    def fresh() -> None:
        torch.empty(numel).fill_(1.0)  # freed on return: the next call maps new pages

    cold = statistics.median(_timed(torch, cpu, fresh, 1, share, max_iters=10))
    extra = cold - warm
    return {
        "memory_Bps": 2 * size_bytes / copy,
        # a host where fresh pages cost nothing measurable reports no rate rather than infinity
        "first_touch_Bps": size_bytes / extra if extra > 0.02 * warm else None,
        "bytes": size_bytes,
    }


PACE_SHAPE = (CPU_DEFAULT.seq, CPU_DEFAULT.hidden, CPU_DEFAULT.ffn)
"""(m, k, n) of the pace matmul: the CPU proxy block's up-projection (256 tokens x 512 -> 1376), the
kind of product a design run's steps spend their time in, ~3.7 ms per call on one thread of the testbed."""
PACE_CALLS = 9
"""Calls timed per pace reading; the median of nine is not moved by a few disturbed calls."""


def measure_pace(torch: Any, calls: int = PACE_CALLS) -> float:
    """Median seconds of one fixed fp32 matmul on this process's torch threads (PACE_SHAPE): a speed
    reference timed next to a run's steps, so a run measured while the machine ran slower than usual
    (a shared VM's neighbours, a load spike) can be told from a slow configuration."""
    m, k, n = PACE_SHAPE
    a, b = torch.randn(m, k), torch.randn(k, n)
    return statistics.median(_timed(torch, torch.device("cpu"), lambda: a @ b, 1, 60.0, max_iters=calls))


def measure_cpu_adam(torch: Any, params: int = 8_000_000, budget_s: float = 2.0) -> dict[str, Any]:
    """Parameters per second of a ZeRO optimizer step on the host, shaped as DeepSpeed runs it: one
    flat fp32 partition (larger than the caches, so memory-bound like a real partition), the global
    grad-norm pass and the clipping multiply (stage_1_and_2.py `scaled_global_norm`,
    `unscale_and_clip_grads`), torch AdamW on the flat tensor (its default single-tensor path on CPU
    tensors), and the copy of the updated partition back into the model's flat buffer.

    It calls torch.optim.adamw.adamw, the function AdamW.step() runs, because constructing an
    Optimizer imports torch._dynamo (seconds). DeepSpeedCPUAdam (SIMD C++, arXiv:2101.06840 §4.1),
    which ZeRO-Offload uses on GPU hosts, is several times faster: there this is a floor."""
    from torch.optim.adamw import adamw

    weights = torch.zeros(params)
    grads = torch.full_like(weights, 1e-3)
    exp_avg, exp_avg_sq, model_copy = (torch.zeros_like(weights) for _ in range(3))
    steps = [torch.tensor(0.0)]

    def step() -> None:
        grads.mul_(1.0 / max(1.0, float(grads.norm(2))))
        adamw([weights], [grads], [exp_avg], [exp_avg_sq], [], steps, foreach=False, amsgrad=False,
              beta1=0.9, beta2=0.999, lr=1e-4, weight_decay=0.01, eps=1e-8, maximize=False)  # fmt: skip
        model_copy.copy_(weights)

    times = _timed(torch, torch.device("cpu"), step, warmup=1, budget_s=budget_s, max_iters=10)
    return {"params_per_s": params / statistics.median(times), "params": params}


def matmul_loop(torch: Any, device: Any, dtype: Any, dim: int, iters: int) -> float:
    """Seconds for `iters` dim x dim matmuls, waiting only for this stream (not a NCCL stream)."""
    a = torch.randn(dim, dim, device=device).to(dtype)
    b = torch.randn(dim, dim, device=device).to(dtype)
    a @ b  # warm the kernels
    _sync(torch, device)
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()
    return time.perf_counter() - start
