"""Round 10 (2026-11-28, h-logs5): forms `diagnose` missed on 25 fresh thread logs, each checked here on a
wording, number or source other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_failed_infiniband_work_completion_is_an_nccl_error() -> None:
    """NCCL's IB transport printing a work completion with an error status is a failed send/receive even when
    torch's NCCL error line is not in the excerpt (finetrainers#16: no failure at exit 0). Older NCCL prints it
    without the peer."""
    old = "node1:2001:2101 [3] NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 32, vendor err 129\n"
    report = diagnose(old.encode())
    assert report.diagnosis.cause == "nccl_error" and report.exit_code == 1
    assert report.fix is not None and "NCCL_IB" in report.fix.changes[0].key
    newer = "gpu7:88:99 [1] transport/net_ib.cc:1700 NCCL WARN NET/IB : Got completion from peer 10.1.2.3<5000> with status=5 opcode=0 len=0 vendor err 249 (Send)\n"
    assert diagnose(newer.encode()).diagnosis.cause == "nccl_error"
    # other NCCL warnings alone are not a failure (CUDA library lookup, printed by healthy runs too)
    benign = "host:1:1 [0] misc/cudawrap.cc:90 NCCL WARN Failed to find CUDA library in (null) (NCCL_CUDA_PATH=(null))\n"
    assert diagnose(benign.encode()).exit_code == 0


KILLS = (
    "[2024-05-01 10:00:01,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4001\n"
    "[2024-05-01 10:00:02,000] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=0'] "
    "exits with return code = -6\n"
)


def test_a_native_assertion_is_the_failure_not_the_oom_killer() -> None:
    """glibc's `file.cpp:N: ...: Assertion `...' failed.` is a C++ op aborting the rank (SIGABRT); the launcher's
    kills after it are not host OOM (DeepSpeed#4888, the aio op's completion check: read as host_oom). In
    DeepSpeed's aio sources it is an NVMe/async-I/O failure; elsewhere a failure no cause names."""
    aio = (
        "python3: /usr/lib/python3/dist-packages/deepspeed/ops/csrc/aio/py_lib/deepspeed_aio_thread.cpp:40: "
        "void deepspeed_aio_thread_t::run(): Assertion `ret == 0' failed.\n"
    )
    report = diagnose((aio + KILLS).encode())
    assert report.diagnosis.cause == "nvme_aio" and report.exit_code == 1 and report.fix is not None
    other = "python: /src/csrc/lion/cpu_lion_impl.cpp:88: void Step(): Assertion `_param_size > 0' failed.\n"
    report = diagnose((other + KILLS).encode())
    assert report.diagnosis.cause == "unclassified" and report.exit_code == 1
    # the launcher's kills alone stay the OOM killer's
    assert diagnose(KILLS.replace("= -6", "= -9").encode()).diagnosis.cause == "host_oom"


def test_a_size_the_parallel_layout_must_divide_is_a_rejected_setting() -> None:
    """DeepSpeed's and Megatron's divisibility assertions refuse a layout at start-up (BioNeMo#784's
    num_layers vs pipeline size, FAMBench PR 103's "4 is not divisible by 8": both unclassified); the fix is a
    size, not an install."""
    megatron = (
        "[rank3]: AssertionError: world size (12) is not divisible by tensor model parallel size (8) times "
        "pipeline model parallel size (1)\n"
    )
    report = diagnose(megatron.encode())
    assert report.diagnosis.cause == "config_rejected" and report.exit_code == 1
    assert report.fix is not None and "divide" in report.fix.text
    assert diagnose(b"AssertionError: 6 is not divisible by 4\n").diagnosis.cause == "config_rejected"
    # a divisibility remark that is no exception is not a refusal
    assert diagnose(b"INFO: hidden size 4096 is divisible by 64 heads\n").diagnosis.cause == "none"


def test_transformers_refusing_a_device_map_under_zero3_is_a_rejected_setting() -> None:
    """from_pretrained with a device_map or low_cpu_mem_usage under ZeRO-3 is refused (LLamaTuner#69:
    unclassified); the fix removes them (or aligns the versions when the script sets neither)."""
    line = (
        "[rank1]: ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a "
        "`device_map`.\n"
    )
    report = diagnose(line.encode())
    assert report.diagnosis.cause == "config_rejected" and report.exit_code == 1
    assert report.fix is not None and "device_map" in report.fix.changes[0].key


DEL_BLOCK = (
    "Exception ignored in: <function DeepSpeedCPUAdam.__del__ at 0x7f0000000000>\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/ops/adam/cpu_adam.py", line 102, in __del__\n'
    "    self.ds_opt_adam.destroy_adam(self.opt_id)\n"
    "AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'\n"
)


def test_the_cpu_adam_destructor_after_the_optimizers_own_refusal_is_not_a_missing_op() -> None:
    """DeepSpeedCPUAdam's __del__ fails on `ds_opt_adam` whenever its __init__ failed; when torch.optim refused the
    parameters first (DeepSpeed#5071: an empty parameter list, read as op_build) that refusal is the failure."""
    refusal = (
        "TypeError: params argument given to the optimizer should be an iterable of Tensors or dicts, "
        "but got torch.FloatTensor\n"
    )
    report = diagnose((refusal + DEL_BLOCK).encode())
    assert report.diagnosis.cause == "unclassified" and report.exit_code == 1
    # the destructor's error alone, or after the op failed to load, is still the op
    assert diagnose(DEL_BLOCK.encode()).diagnosis.cause == "op_build"
    load = "ImportError: /root/.cache/torch_extensions/py39_cu118/cpu_adam/cpu_adam.so: cannot open shared object file\n"
    assert diagnose((load + DEL_BLOCK).encode()).diagnosis.cause == "op_build"


def test_an_autotuner_log_that_ends_on_a_launched_experiment_is_a_hang() -> None:
    """DeepSpeed's autotuner launches each experiment afresh; a log whose last line starts one and never reports
    it done waits on it (DeepSpeed#4100: no failure at exit 0). A reported experiment is not a hang."""
    launch = (
        "[2024-02-01 09:00:00,000] [INFO] [scheduler.py:378:run_experiment] Launching exp_id = 3, "
        "exp_name = z2_gas1_tmbspg8, with resource = localhost:0,1, and ds_config = /tmp/at/z2/ds_config.json\n"
    )
    report = diagnose(launch.encode())
    assert report.diagnosis.cause == "hang" and report.exit_code == 1 and report.fix is not None
    done = (
        "[2024-02-01 09:04:00,000] [INFO] [scheduler.py:393:run_experiment] Done running exp_id = 3, "
        "exp_name = z2_gas1_tmbspg8, with resource = localhost:0,1\n"
    )
    assert diagnose((launch + done).encode()).diagnosis.cause == "none"


def test_a_cuda_device_side_assertion_alone_is_a_failure() -> None:
    """CUDA's device-side assert (a kernel's `Assertion `...` failed.`, e.g. an embedding index out of bounds) has
    the shape of glibc's; alone in a log it was no failure at exit 0."""
    line = (
        "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:365: operator(): block: [12,0,0], thread: [64,0,0] "
        "Assertion `idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"` failed.\n"
    )
    report = diagnose(line.encode())
    assert report.diagnosis.cause == "unclassified" and report.exit_code == 1
