"""Round 15 (2026-11-28, h-logs10): forms `diagnose` missed on fresh thread logs, each checked here on a
wording other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_nccl_failing_to_allocate_its_device_buffer_is_a_gpu_oom() -> None:
    """NCCL's own allocation failing (`Failed to CUDA calloc N bytes`) under ncclUnhandledCudaError is a full GPU,
    not a network fault: torchtitan PR 660's barrier read as nccl_error. Here the `calloc async` wording, under
    rank prefixes, in an all_gather_object."""
    log = (
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/opt/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2950, in all_gather_object\n'
        "[rank3]:     all_gather(object_size_list, local_size, group=group)\n"
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "[rank3]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "[rank3]: Last error:\n"
        "[rank3]: Failed to CUDA calloc async 6291456 bytes\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "gpu_oom"
    # NCCL's other unhandled CUDA errors stay NCCL errors
    other = log.replace("Failed to CUDA calloc async 6291456 bytes", "Cuda failure 'initialization error'")
    assert diagnose(other.encode()).diagnosis.cause == "nccl_error"


_NVME_DUMP = (
    "[2024-03-01 09:00:01,100] [INFO] [config.py:1000:print]   zero_config .................. stage=3 "
    "offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='nvme', nvme_path=PosixPath('/local_nvme'), "
    "buffer_count=4, pin_memory=True)\n"
)
_REFUSED = (
    "Traceback (most recent call last):\n"
    '  File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1505, in _configure_zero_optimizer\n'
    "    optimizer = DeepSpeedZeroOptimizer_Stage3(\n"
    '  File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 310, in __init__\n'
    "    self._configure_tensor_swapping(offload_optimizer_config, aio_config)\n"
    "OSError: [Errno 30] Read-only file system: '/local_nvme/zero_stage_3'\n"
)


def test_a_refused_write_with_nvme_offload_set_is_the_nvme_folder() -> None:
    """With DeepSpeed's NVMe swap in the log, the file system refusing a write is the swap folder under nvme_path:
    transformers#16616's PermissionError on '/mnt/nvme0' was placed by its zero.Init frame (zero3_param). Here a
    read-only nvme_path, shown by the config dump, raised while ZeRO-3 sets up optimizer swapping."""
    report = diagnose((_NVME_DUMP + _REFUSED).encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "nvme_aio"
    assert "writ" in report.diagnosis.explanation
    assert report.fix is not None and report.fix.changes[0].key.endswith("nvme_path")
    # offload to the CPU (the dump's nvme_path unset): a refused write says nothing of NVMe
    cpu = _NVME_DUMP.replace("device='nvme', nvme_path=PosixPath('/local_nvme')", "device='cpu', nvme_path=None")
    assert diagnose((cpu + _REFUSED).encode()).diagnosis.cause != "nvme_aio"
