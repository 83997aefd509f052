"""What a run's peak-memory counter reads of an estimate: torch's allocated and reserved peaks and
nvidia-smi count different things, so a measured figure is compared with the estimate as its counter
sees it (data/published/runs.yaml records each run's `memory_kind`)."""

from __future__ import annotations

from zerotune.model.memory import CUDA_CONTEXT_BYTES, FRAGMENTATION, MemoryEstimate

RESERVED_FRAGMENTATION = 0.15
"""Share of the peak reserved memory (torch.cuda.max_memory_reserved) that holds no live tensor:
the PyTorch caching allocator caches freed blocks by size and cannot merge blocks of different
segments, so tensors of changing sizes (recomputation, ZeRO's gathers and buckets, offload) leave
cached blocks too small for the next request. GMLake (Guo et al., ASPLOS 2024, arXiv 2401.08156),
on eight LLMs fine-tuned with DeepSpeed ZeRO, recomputation, offload and LoRA on A100-80GB, stitches
those blocks together and so lowers this share by 15 points on average (up to 33; 9.2 GB of memory on
average, up to 25 GB) against the caching allocator: that much of the caching allocator's reserved
memory held no tensor. So reserved ≈ allocated / (1 − 0.15), never above what the GPU has beyond the context: when
cudaMalloc fails the allocator frees its cached blocks and retries (PyTorch "CUDA semantics",
memory management; c10/cuda/CUDACachingAllocator.cpp `release_cached_blocks`)."""

COUNTER_KINDS = ("max_allocated", "max_reserved", "nvidia-smi")
"""The peak-memory counters a run reads, each with its own figure (counter_bytes)."""


def counter_bytes(estimate: MemoryEstimate, kind: str) -> int:
    """The estimate as the counter a run reads.

    `max_allocated` (torch.cuda.max_memory_allocated): the live bytes at the peak phase, neither the
    context nor cached free blocks. `max_reserved` (torch.cuda.max_memory_reserved): those bytes with
    the allocator's cached blocks (RESERVED_FRAGMENTATION), at most the GPU's memory beyond the
    context. `nvidia-smi` (the process's used memory; DeepSpeed's see_memory_usage prints the two
    torch counters, not this): reserved plus the context and NCCL buffers (CUDA_CONTEXT_BYTES).
    A calibrated slack (`gpu.memory_slack_bytes`) is added to every counter, as it was measured."""
    b = estimate.per_gpu
    top = estimate.peak_phase  # the live bytes there include the framework's own (cuBLAS workspaces)
    live = top.total if top is not None else b.model_states + b.comm_buffers + b.activations
    slack = b.total - live - CUDA_CONTEXT_BYTES - int(FRAGMENTATION * (b.activations + b.comm_buffers))
    if kind == "max_allocated":
        return live + slack
    reserved = int(live / (1 - RESERVED_FRAGMENTATION))
    if estimate.gpu_capacity_bytes:
        reserved = max(live, min(reserved, estimate.gpu_capacity_bytes - CUDA_CONTEXT_BYTES))
    if kind == "max_reserved":
        return reserved + slack
    return reserved + slack + CUDA_CONTEXT_BYTES
