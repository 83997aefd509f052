"""First touch of freshly allocated host memory: what DeepSpeed's per-step buffers cost on a CPU host.

DeepSpeed allocates its large reduction buffers anew every micro-step or step (DeepSpeed 0.19.8,
runtime/zero/stage_1_and_2.py and runtime/engine.py):

- `setup_buckets`: `torch.empty(reduce_bucket_size)` for the contiguous gradient bucket (a second
  one with `overlap_comm`), at the first gradient hook of every backward; `_release_ipg_buffers`
  drops them at the end of it;
- `copy_grads_in_partition` (stage 1/2, contiguous gradients): `grads_in_partition`, the rank's partition,
  re-created after every `_release_ipg_buffers`;
- `allreduce_bucket` (stage 1/2, and the engine's stage-0 `buffered_allreduce_fallback`): `flatten`
  of each bucket is a new tensor; stage 3's coalesced reduce-scatter flattens its input likewise.
- the optimizer step (stage 1-3): the partition's gradients flattened into a new tensor, and a torch
  optimizer's temporaries of each tensor it steps (zerotune/model/optimizer.py `fresh_step_buffers`).

On a GPU the caching allocator hands the same memory back (free). On a CPU host torch's allocator
calls glibc malloc (c10 `alloc_cpu`), which serves a request above its mmap threshold with a fresh
mmap and unmaps it on free; the threshold adapts but never exceeds 32 MiB on 64-bit (mallopt(3),
M_MMAP_THRESHOLD). So every page written in such a buffer faults and is zeroed by the kernel: a cost
per byte written, on the training thread, that the probe measures as `host.first_touch_Bps`. Below
the threshold the heap reuses freed memory and the term is left out.
"""

from __future__ import annotations

from zerotune.units import MiB

GLIBC_MMAP_THRESHOLD_MAX = 32 * MiB
"""glibc's largest mmap threshold on 64-bit: DEFAULT_MMAP_THRESHOLD_MAX = 4 MiB * sizeof(long)
(mallopt(3), M_MMAP_THRESHOLD). A larger malloc is always a fresh mapping."""


def fresh_write_s(buffer_bytes: float, written_bytes: float, first_touch_Bps: float | None) -> float:
    """Seconds of page faults and zeroing for a buffer of `buffer_bytes` allocated anew, of which
    `written_bytes` are written: only a buffer above the mmap threshold is fresh pages, and only its
    written pages fault. 0 on a GPU (first_touch_Bps None there) or without a probed rate."""
    if not first_touch_Bps or buffer_bytes <= GLIBC_MMAP_THRESHOLD_MAX:
        return 0.0
    return min(written_bytes, buffer_bytes) / first_touch_Bps
