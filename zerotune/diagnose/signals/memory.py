"""Memory signals: GPU out-of-memory (with its numbers and the phase that allocated), torch's CPU
allocator refusing, the kernel's OOM killer and DeepSpeed's host-memory lines, `see_memory_usage`
reports, and NVMe offload's async I/O failing.

The OOM formats are those of PyTorch's CUDA caching allocator: the old "(GPU 0; X total
capacity; ...)" and 2.x "GPU 0 has a total capacity of X"; torch_npu's allocator prints the old form
with "NPU" for the device (Ascend: "NPU out of memory. Tried to allocate ... (NPU 3; ...)"), and CANN
reports a failed device allocation as error EL0004 "Failed to allocate memory" with the driver's
"out of memory"; tests/fixtures/logs holds real examples of each.
"""

from __future__ import annotations

import re

from zerotune.diagnose.records import MAX_EVENTS, Fact, LogLine, MemoryReport, Oom, Scan
from zerotune.diagnose.signals.process import EXCEPTION_LINE
from zerotune.diagnose.signals.signal import Hit, Signal

# ---- sizes -----------------------------------------------------------------------------------------------------

_SIZE = r"(\d+(?:\.\d+)?)\s?(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)"
_UNIT = {"bytes": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
_UNIT |= {"KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}  # PyTorch prints binary units


def size_bytes(number: str, unit: str) -> int:
    return int(round(float(number) * _UNIT[unit]))


def _size(pattern: str, text: str) -> int | None:
    m = re.search(pattern.replace("SIZE", _SIZE), text)
    return size_bytes(m.group(1), m.group(2)) if m else None


# ---- GPU out of memory -------------------------------------------------------------------------------------------

_PHASES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        (
            "checkpoint_save",
            r"save_checkpoint|save_model|save_16bit_model|consolidated_16bit_state_dict|[Ee]rror saving model"
            r"|_save_to_state_dict|save_pretrained|_save_zero_checkpoint",
        ),
        (
            "gradient_buckets",
            r"reduce_ipg_grads|reduce_and_partition_ipg_grads|avg_scatter_grads|allreduce_bucket|average_tensor"
            r"|reduce_independent_p_g_buckets|ipg_buffer|copy_grads_in_partition|allreduce_gradients"
            # stage_1_and_2.py backward allocates the IPG bucket as torch.empty(int(self.reduce_bucket_size))
            r"|torch\.empty\(int\(self\.reduce_bucket_size\)",
        ),
        (
            "param_gather",
            r"all_gather_params|all_gather_coalesced|partitioned_param_coordinator|fetch_sub_module"
            r"|pre_sub_module_forward|_all_gather_dtype|\ball_gather\b|_allgather_base"
            r"|_allgather_params",  # partition_parameters.py's gather of a list of ZeRO-3 parameters
        ),
        (
            "optimizer_states",
            r"_optimizer_step|initialize_optimizer_states|_setup_for_real_optimizer|optimizer\.step\("
            r"|_create_fp32_partitions|single_partition_of_fp32_groups|torch/optim/|unscale_and_clip_grads",
        ),
        (
            "init",
            r"_configure_zero_optimizer|DeepSpeedZeroOptimizer|_configure_optimizer|deepspeed\.initialize"
            r"|DeepSpeedEngine\(|zero\.Init|_partition_param|_convert_to_deepspeed_param|_broadcast_model"
            # the engine casting the whole module and moving it to its GPU before any partitioning (engine.py
            # `_configure_distributed_model` at 0.19.8: `_cast_module_mixed_precision`, then `self.module.to(self.device)`
            # unless zero.Init placed it): PrimeIntellect-ai/verifiers#106's 72B model
            r"|_configure_distributed_model"
            r"|from_pretrained|\bload_model\(|load_checkpoint_in_model|Trainer\(",
        ),
        ("activations_backward", r"backward|run_backward|autograd"),
        ("activations_forward", r"forward|attention|softmax|_call_impl|matmul|\bmlp\b"),
    )
)
"""OOM phase by the code on the traceback, most specific first: a parameter gather inside the
backward pass is a gather, an optimizer step inside `trainer.train` is the optimizer."""


def oom_phase(context: list[LogLine]) -> tuple[str, LogLine | None]:
    for name, pattern in _PHASES:
        for line in reversed(context):
            if pattern.search(line.text):
                return name, line
    return "unknown", None


def parse_oom(text: str) -> dict[str, int | None]:
    """Numbers of a CUDA caching-allocator OOM message (old and torch>=2.1 wording; torch_npu's names
    the device "NPU")."""
    gpu = re.search(r"\((?:GPU|NPU) (\d+);|GPU (\d+) has a total capac", text)
    return {
        "tried": _size(r"Tried to allocate SIZE", text),
        # torch 2.1 printed "total capacty" (sic): match the stem
        "capacity": _size(r"SIZE total capac\w*", text) or _size(r"total capac\w* of SIZE", text),
        "allocated": _size(r"SIZE already\s+allocated", text)
        or _size(r"Of the allocated memory SIZE is allocated by PyTorch", text),
        "free": _size(r"; SIZE free", text) or _size(r"of which SIZE is free", text),
        "reserved": _size(r"SIZE reserved in total by PyTorch", text)
        or _size(r"SIZE is reserved by PyTorch but unallocated", text),
        "gpu": int(gpu.group(1) or gpu.group(2)) if gpu else None,
    }


CUBLAS_INIT = (
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "ail to create cublas handle",
    "ailed to create cublas handle",
)
"""cuBLAS failing to create its handle at the first GEMM: the handle's workspace could not be
allocated because the GPU was full (an OOM that does not say so; see DeepSpeed PR #3695 and
https://discuss.pytorch.org/t/cuda-error-cublas-status-not-initialized-when-calling-cublascreate-handle/125450)."""


ASCEND_ALLOC_FAILED = b"EL0004"
"""CANN's error code for a device memory allocation that failed ("EL0004: ... Failed to allocate memory.
Possible Cause: Available memory is insufficient.", LlamaFactory#5322): an NPU out of memory. The code
opens the line like a host prefix (`EL0004: `), which normalising removes, so it is read off the raw line."""


def _ascend_alloc_failed(hit: Hit) -> bool:
    return ASCEND_ALLOC_FAILED in hit.data[hit.start : hit.end] and hit.says("Failed to allocate memory")


NCCL_ALLOC_FAILED = ("Failed to CUDA calloc", "Failed to CUDA malloc")
"""NCCL's warning when its own device buffer cannot be allocated (`Failed to CUDA calloc 8388608 bytes`, also
`calloc async`), printed under `ncclUnhandledCudaError` at a barrier or collective: the GPU is full, not the
network (torchtitan PR 660: an 8 MiB barrier buffer after the first step; the NCCL buffers NCCL allocates
lazily outside torch's caching allocator)."""


def _gpu_oom(hit: Hit) -> None:
    line, s = hit.line, hit.scan
    if hit.says("NODE_OUT_OF_MEMORY"):
        return  # Ray's WorkerExitType for a worker its host-memory monitor killed (process.py): not a device
    if not _ascend_alloc_failed(hit) and not hit.says(
        "out of memory",
        "OutOfMemoryError",
        "OUT_OF_MEMORY",
        "cudaErrorMemoryAllocation",
        "CUBLAS_STATUS_ALLOC_FAILED",
        *NCCL_ALLOC_FAILED,
        *CUBLAS_INIT,
    ):
        return
    s.oom_count += 1
    if len(s.ooms) >= MAX_EVENTS:
        return
    numbers = parse_oom(hit.wrapped(2048))
    phase, where = oom_phase([*hit.before(line.rank), line])
    if phase == "unknown" and line.rank is not None:
        # interleaved ranks: the traceback may have been printed under another rank's prefix
        phase, where = oom_phase([*hit.before(None), line])
    if phase == "unknown":
        # HF/accelerate and multi-rank logs often print the message before the traceback
        phase, where = oom_phase(hit.after(EXCEPTION_LINE.match))
    s.ooms.append(Oom(line, phase=phase, phase_line=where, disguised=hit.says(*CUBLAS_INIT), **numbers))


def primary_oom(scan: Scan) -> Oom | None:
    """The OOM with the most numbers (the allocator's full message), earliest first."""
    if not scan.ooms:
        return None
    return max(
        scan.ooms,
        key=lambda o: (sum(v is not None for v in (o.tried, o.capacity, o.allocated)), -o.line.number),
    )


# ---- memory pressure ------------------------------------------------------------------------------------------

_FLUSHES = re.compile(r"(\d+) pytorch allocator cache flushes since last step")


def _cache_flush(hit: Hit) -> None:
    """ZeRO-3's step (runtime/zero/stage3.py at 0.19.8) warns when the allocator's `num_alloc_retries` grew
    since the last step: a cudaMalloc failed, the allocator freed its cached blocks (synchronising the
    device) and retried. DeepSpeed's own words: "detrimental to performance". A line cut to the warning's
    tail (LLaVA-NeXT#247) still names it."""
    if not hit.says("allocator cache flushes since last step", "flush their caches at the same time"):
        return
    if hit.scan.cache_flushes and hit.scan.cache_flushes[-1].number == hit.line.number:
        return
    hit.scan.add(hit.scan.cache_flushes, hit.line)
    m = _FLUSHES.search(hit.line.text)
    hit.scan.cache_flush_count += int(m.group(1)) if m else 0


# ---- host memory --------------------------------------------------------------------------------------------------


def _kernel_oom_killer(hit: Hit) -> None:
    if hit.says("oom-kill", "Killed process", "oom_reaper"):
        hit.scan.add(hit.scan.host_memory, hit.line)


def _host_memory_report(hit: Hit) -> None:
    """DeepSpeed's see_memory_usage: "CPU Virtual Memory:  used = 45.72 GB, percent = 6.1%"."""
    if "CPU Virtual Memory" not in hit.line.text:
        return
    hit.scan.add(hit.scan.host_memory, hit.line)
    m = re.search(r"used = (\d+(?:\.\d+)?) GB, percent = (\d+(?:\.\d+)?)%", hit.line.text)
    if m:
        hit.scan.facts["host_memory_used_percent"] = Fact(float(m.group(2)), hit.line)


_CHECKPOINT_LOAD = re.compile(r"\[Torch\] (?:Begin Load|Loading) checkpoint from")
"""DeepSpeed beginning to read a checkpoint file: its torch checkpoint engine (runtime/checkpoint_engine/
torch_checkpoint_engine.py: "Begin Load checkpoint from" at 0.19.8, "Loading checkpoint from" before)."""


def _checkpoint_load(hit: Hit) -> None:
    if _CHECKPOINT_LOAD.search(hit.line.text):
        hit.scan.checkpoint_load = hit.line


def loading_checkpoint_at(scan: Scan, line: int) -> LogLine | None:
    """The checkpoint load under way at `line`: DeepSpeed began reading a checkpoint before it and no
    training step came between (each rank reads its own optimizer-state file into host RAM, fp32 master
    weights and moments, before moving it to the GPU: DeepSpeed#3938)."""
    load = scan.checkpoint_load
    if load is None or load.number > line:
        return None
    if scan.progress_line is not None and load.number < scan.progress_line.number < line:
        return None
    return load


def _cpu_alloc(hit: Hit) -> None:
    text = hit.line.text
    if "DefaultCPUAllocator" in text and hit.says("can't allocate", "not enough memory"):
        asked = re.search(r"allocate (\d+) bytes", text)
        hit.scan.add(hit.scan.cpu_alloc_failures, (hit.line, int(asked.group(1)) if asked else None))
    elif (
        re.search(r"^(?:\w+\.)*MemoryError\b|std::bad_alloc", text.strip())
        or "instance of 'std::bad_alloc'" in text
    ):
        # Python's MemoryError and C++'s std::bad_alloc: a host allocation refused
        hit.scan.add(hit.scan.cpu_alloc_failures, (hit.line, None))


_MA = re.compile(r"MA (\d+(?:\.\d+)?) GB\s+Max_MA (\d+(?:\.\d+)?) GB\s+CA (\d+(?:\.\d+)?) GB\s+Max_CA (\d+(?:\.\d+)?) GB")


def _memory_report(hit: Hit) -> None:
    """see_memory_usage's GPU line; its label is on the line before (the logger's line, or the bare
    line before a bare `MA ...` where the logger prints without its prefix). The latest ones are kept."""
    m = _MA.search(hit.line.text)
    if not m:
        return
    prev = hit.previous_text()
    if "see_memory_usage]" in prev:
        label = prev.split("see_memory_usage]", 1)[1].strip()
    else:
        label = prev.strip() if hit.line.text.lstrip().startswith("MA ") else ""
    reports = hit.scan.memory_reports
    if len(reports) >= MAX_EVENTS:
        reports.pop(0)
    reports.append(MemoryReport(label, hit.line, *(float(g) for g in m.groups())))


# ---- NVMe offload ---------------------------------------------------------------------------------------------------


_UNSET_SWAPPER = re.compile(r"'NoneType' object has no attribute '(?:swap_folder|\w*swap\w*|\w*swapper\w*)'")
"""An NVMe offload path that reached swap code whose swapper DeepSpeed never built: parameters on
NVMe with the optimizer on CPU (DeepSpeed issue 4998, fixed by PR 6963) or parameter NVMe offload in
old releases (issue 1534)."""


def unset_swapper(line: LogLine) -> bool:
    return _UNSET_SWAPPER.search(line.text) is not None


def _aio(hit: Hit) -> None:
    """DeepSpeed's async_io op not built or loaded, a swap file read back short, or a failure inside the op's
    own sources (`csrc/aio/`: its handle, threads and completion checks, DeepSpeed#4888)."""
    text = hit.line.text
    if (hit.says("async_io", "aio_handle", "nbytes != file bytes", "libaio", "csrc/aio/")) and (
        re.search(r"Error|Assertion|failed|Unable to|nbytes != file bytes", text)
    ):
        hit.scan.add(hit.scan.aio_errors, hit.line)
    elif unset_swapper(hit.line):
        hit.scan.add(hit.scan.aio_errors, hit.line)


_FS_REFUSAL = re.compile(r"PermissionError|\[Errno 13\] Permission denied|\[Errno 30\] Read-only file system")
_NVME_PATH_SET = re.compile(r"nvme_path=PosixPath\(")


def _swap_refusal(hit: Hit) -> None:
    """The file system refusing a write (EACCES, EROFS): with DeepSpeed's NVMe swap in the log, the swap folder
    under nvme_path, which the swappers create at start-up (swap_tensor/, transformers#16616: '/mnt/nvme0')."""
    if _FS_REFUSAL.search(hit.line.text):
        hit.scan.add(hit.scan.swap_refusals, hit.line)


def _nvme_swap(hit: Hit) -> None:
    """A line naming DeepSpeed's NVMe swap: a swapper class (AsyncPartitionedParameterSwapper,
    PartitionedOptimizerSwapper...) or an nvme_path that is set (the config print shows `nvme_path=None` when
    offload goes to the CPU). Frames in swap_tensor/ need no line here: the frame fallback places them."""
    if hit.says("Swapper") or _NVME_PATH_SET.search(hit.line.text):
        hit.scan.add(hit.scan.nvme_swap, hit.line)


SIGNALS = (
    Signal(
        "ooms",
        (
            rb"CUDA",
            rb"OutOfMemory",
            rb"CUBLAS_STATUS_",
            rb"Fail to create cublas",
            rb"Failed to create cublas",
            # NCCL's own line for a failed CUDA call, alone after "Last error:" (`Cuda failure 2 'out of
            # memory'`, 2 = cudaErrorMemoryAllocation): its allocation found the GPU full (peft#1703)
            rb"Cuda failure",
            rb"EL0004",  # CANN (Ascend NPU): a device allocation failed
        ),
        (_gpu_oom,),
    ),
    Signal(
        "aio_errors",
        (rb"Unable to JIT load", rb"Assertion", rb"!= file bytes", rb"NoneType' object has no attribute"),
        (_aio,),
    ),
    Signal("swap_refusals", (rb"PermissionError", rb"Permission denied", rb"Read-only file system"), (_swap_refusal,)),
    # DeepSpeed's config print shows a set path as `nvme_path=PosixPath('/nvme')` (DeepSpeed#3376): the trigger
    # starts at the rarer capital of that repr
    Signal("nvme_swap", (rb"Swapper", rb"PosixPath\("), (_nvme_swap,)),
    Signal(
        "cpu_alloc_failures", (rb"DefaultCPUAllocator", rb"MemoryError", rb"bad_alloc"), (_cpu_alloc,)
    ),
    Signal("host_memory", (rb"Kill", rb"CPU Virtual Memory"), (_kernel_oom_killer, _host_memory_report)),
    Signal(
        "checkpoint_load",
        (rb"Load checkpoint from", rb"Loading checkpoint from"),
        (_checkpoint_load,),
    ),
    Signal("memory_reports", (rb"Max_MA ",), (_memory_report,)),
    Signal(
        "cache_flushes",
        # the warning's only capitals are in its last sentence; its tail alone keeps `() calls in ...`
        (rb"If you are unable to make the cache flushes", rb"\(\) calls in your training loop to ensure that all ranks flush"),
        (_cache_flush,),
    ),
)
