"""Failures no message names, diagnosed by where they happened (zerotune.diagnose.signals.frames): the
family of the deepest traceback frame (Python, rich and IPython formats, a traceback cut before its
exception line), else the exception type; NCCL WARN lines as a last candidate; a collective timeout is
not a hang. The logs here are written for the test, in forms the corpus does not hold."""

from __future__ import annotations

import pytest

from tests.unit.test_diagnose import diagnose
from zerotune.diagnose.signals.frames import frame_family

SITE = "/opt/env/lib/python3.11/site-packages"


def _stack(*frames: tuple[str, str], exception: str | None = None) -> bytes:
    lines = ["Traceback (most recent call last):"]
    for path, func in frames:
        lines += [f'  File "{path}", line 10, in {func}', "    call()"]
    if exception is not None:
        lines.append(exception)
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize(
    ("frame", "cause"),
    [
        (f'  File "{SITE}/deepspeed/runtime/swap_tensor/optimizer_utils.py", line 3, in swap_in', "nvme_aio"),
        (f"│ {SITE}/torch/utils/cpp_extension.py:2100 in _run_ninja_build   │", "op_build"),
        ("~/conda/lib/python3.9/site-packages/deepspeed/ops/op_builder/builder.py in load(self, verbose)", "op_build"),
        (f'  File "{SITE}/deepspeed/runtime/engine.py", line 3, in save_checkpoint', "checkpoint"),
        (f'  File "{SITE}/deepspeed/runtime/zero/partition_parameters.py", line 9, in _all_gather', "zero3_param"),
        (f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 9, in all_reduce', "nccl_error"),
        (f'  File "{SITE}/transformers/utils/versions.py", line 9, in _compare_versions', "version_mismatch"),
        # the launcher's frames are in every torchrun failure: no family
        (f'  File "{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 3, in wrapper', None),
        (f'  File "{SITE}/deepspeed/runtime/zero/stage3.py", line 9, in backward', None),
        ("/opt/env/lib/python3.11/site-packages/torch/utils/checkpoint.py:429: UserWarning: pass use_reentrant", None),
    ],
)
def test_frame_family(frame: str, cause: str | None) -> None:
    assert frame_family(frame) == cause


def test_a_cut_traceback_is_diagnosed_by_its_deepest_frame() -> None:
    log = _stack(
        ("train.py", "main"),
        (f"{SITE}/deepspeed/runtime/engine.py", "step"),
        (f"{SITE}/deepspeed/runtime/swap_tensor/partitioned_optimizer_swapper.py", "swap_in_optimizer_state"),
        (f"{SITE}/deepspeed/runtime/swap_tensor/utils.py", "swap_in_tensors"),
    )
    report = diagnose(log)
    assert report.diagnosis.cause == "nvme_aio" and report.exit_code == 1
    assert any("swap_tensor/utils.py" in e.text for e in report.diagnosis.evidence)
    assert report.fix is not None and report.fix.changes


def test_the_frame_before_the_first_exception_decides() -> None:
    # an NVMe swap fails; the second traceback (a rank torn down in a collective) is a consequence
    first = _stack(
        ("train.py", "main"),
        (f"{SITE}/deepspeed/runtime/engine.py", "step"),
        (f"{SITE}/deepspeed/runtime/swap_tensor/utils.py", "swap_out_tensors"),
        exception="RuntimeError: something the classifier has never seen",
    )
    second = _stack((f"{SITE}/torch/distributed/distributed_c10d.py", "barrier"), exception="RuntimeError: x")
    report = diagnose(first + second)
    assert report.diagnosis.cause == "nvme_aio"
    assert report.diagnosis.line == 6  # the frame; the exception below it is evidence too
    assert [e.line for e in report.diagnosis.evidence] == [6, 8]


def test_rich_and_notebook_tracebacks() -> None:
    rich = (
        f"│ {SITE}/deepspeed/runtime/config.py:912 in _do_error_check                    │\n"
        "╰──────────────────────────────────────────────────────────────────────────────╯\n"
        "AssertionError: a rule of this DeepSpeed release the classifier does not know\n"
    ).encode()
    assert diagnose(rich).diagnosis.cause == "config_rejected"
    notebook = (
        b"---------------------------------------------------------------------------\n"
        b"CalledProcessError                        Traceback (most recent call last)\n"
        b"~/env/lib/python3.8/site-packages/torch/utils/cpp_extension.py in _jit_compile(name, sources)\n"
        b"-> 1539                 env=env)\n"
    )
    assert diagnose(notebook).diagnosis.cause == "op_build"


def test_only_a_fallback_a_recognised_message_wins() -> None:
    log = _stack(
        (f"{SITE}/deepspeed/runtime/zero/partition_parameters.py", "_all_gather"),
        exception="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    )
    assert diagnose(log).diagnosis.cause == "gpu_oom"


def test_launcher_frames_alone_stay_unclassified() -> None:
    log = _stack(
        (f"{SITE}/torch/distributed/run.py", "main"),
        (f"{SITE}/torch/distributed/launcher/api.py", "launch_agent"),
        exception="torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ) + b"  exitcode  : 1 (pid: 4242)\n"
    report = diagnose(log)
    assert report.diagnosis.cause == "unclassified" and report.exit_code == 1


def test_exception_type_when_no_frame_has_a_family() -> None:
    log = _stack(("train.py", "<module>"), exception="ModuleNotFoundError: No module named 'flash_attn_2_cuda'")
    assert diagnose(log).diagnosis.cause == "version_mismatch"


def test_build_tool_failures_in_any_traceback_form() -> None:
    ninja = b"subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n"
    assert diagnose(ninja).diagnosis.cause == "op_build"
    linker = b"/usr/bin/ld: cannot find -lcurand: No such file or directory\n"
    assert diagnose(linker).diagnosis.cause == "op_build"


def test_nccl_warn_is_a_candidate_only_for_a_failed_run() -> None:
    warn = b"node7:311:402 [3] misc/ibvwrap.cc:120 NCCL WARN Call to ibv_reg_mr failed\n"
    quiet = diagnose(warn + b"{'loss': 1.2, 'epoch': 0.1}\n")
    assert quiet.diagnosis.cause == "none" and quiet.exit_code == 0
    failed = diagnose(warn + _stack(("train.py", "main"), exception="RuntimeError: unhandled system error"))
    assert failed.diagnosis.cause == "nccl_error" and failed.exit_code == 1
    assert failed.diagnosis.line == 1


def test_a_collective_timeout_is_not_a_hang() -> None:
    log = (
        b"Invalidate trace cache @ step 3: expected module 15, but got module 313\n"
        b"[E ProcessGroupNCCL.cpp:467] [Rank 2] Watchdog caught collective operation timeout: "
        b"WorkNCCL(SeqNum=77, OpType=_ALLGATHER_BASE, NumelIn=4096, NumelOut=32768, Timeout(ms)=600000) "
        b"ran for 600123 milliseconds before timing out.\n"
    )
    report = diagnose(log)
    assert report.diagnosis.cause == "nccl_timeout"
    # without the watchdog, the warning alone is no failure (ZeRO-3 runs on after it; round 12,
    # tests/unit/test_diagnose_round12.py)
    assert diagnose(log.split(b"\n")[0] + b"\n").exit_code == 0


def test_an_integration_counts_only_where_it_raises() -> None:
    # accelerate checks the DeepSpeed config in _prepare_deepspeed before deepspeed.initialize
    raised = _stack(
        ("train.py", "main"),
        (f"{SITE}/accelerate/accelerator.py", "prepare"),
        (f"{SITE}/accelerate/accelerator.py", "_prepare_deepspeed"),
        exception="ValueError: a check this accelerate release added",
    )
    assert diagnose(raised).diagnosis.cause == "config_rejected"
    # a failure deeper, under deepspeed.initialize, is not the integration's
    deeper = _stack(
        (f"{SITE}/accelerate/accelerator.py", "_prepare_deepspeed"),
        (f"{SITE}/deepspeed/runtime/engine.py", "__init__"),
        exception="ValueError: something in the engine",
    )
    assert diagnose(deeper).diagnosis.cause == "unclassified"


FINAL = b"{'train_runtime': 1000.0, 'train_samples_per_second': 8.0, 'train_steps_per_second': 1.0, 'epoch': 1.0}\n"
STEPS = b"{'loss': 2.1, 'learning_rate': 2e-05, 'epoch': 0.1}\n 10%|#  | 100/1000 [01:40<15:00,  1.00s/it]\n"


@pytest.mark.parametrize(
    "trace",
    [
        # a logger that could not connect, handled by the script (the exception type is in no family)
        _stack((f"{SITE}/wandb/sdk/wandb_init.py", "init"), exception="wandb.errors.CommError: timed out"),
        # frames of a known family without header or exception line (a warning's stack, a cut excerpt)
        f'  File "{SITE}/deepspeed/runtime/engine.py", line 3, in save_checkpoint\n    call()\n'.encode(),
    ],
)
def test_a_run_that_finished_after_a_traceback_did_not_fail_of_it(trace: bytes) -> None:
    """HF Trainer's final metrics after every traceback of the log: the run finished, the traceback was
    handled; the same traceback after them (a save that failed once training was done) is a failure."""
    report = diagnose(STEPS + trace + STEPS + FINAL)
    assert report.diagnosis.cause == "none" and report.exit_code == 0
    assert "did not stop it" in report.diagnosis.explanation
    after = diagnose(STEPS + FINAL + trace)
    assert after.diagnosis.cause != "none" and after.exit_code == 1
