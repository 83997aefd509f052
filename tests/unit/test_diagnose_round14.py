"""Round 14 (2026-11-28, h-logs9): forms `diagnose` missed on fresh thread logs, each checked here on a
wording other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_dtype_mismatch_is_not_placed_by_the_frame_it_was_raised_in() -> None:
    """A dtype mismatch names its failure (a precision mismatch), so the frame it was raised in says nothing
    of the cause. DeepSeek-MoE#35 (ZeRO-3's linear, read as zero3_param) and Firefly#127 (ZeRO-3's all-gather
    in distributed_c10d, read as nccl_error) were misplaced. Here aten's other wording, raised under DeepSpeed's
    loss scaler, whose frames place a failure in fp16 loss scaling."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2020, in backward\n'
        "    self.optimizer.backward(loss, retain_graph=retain_graph)\n"
        '  File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/fp16/loss_scaler.py", line 63, in backward\n'
        "    scaled_loss.backward(retain_graph=retain_graph)\n"
        "RuntimeError: expected scalar type BFloat16 but found Float\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "unclassified"
    # the scaler's update frame with a message no signal names is still placed (the fallback is unchanged);
    # its `backward` frame places nothing since round 17 (a pass-through every fp16 backward shows)
    other = log.replace("expected scalar type BFloat16 but found Float", "CUDA error: an illegal memory access")
    other = other.replace('line 63, in backward\n    scaled_loss.backward', 'line 184, in update_scale\n    raise Exception')
    assert diagnose(other.encode()).diagnosis.cause == "fp16_overflow"


def test_a_worker_exit_of_its_own_after_the_launcher_kills_is_not_host_oom() -> None:
    """Both launchers end the other workers first and report the failed worker's exit code after. DeepSpeed
    PR 8148's log (a CheckpointError without its exception line, elastic's SIGTERM, then "failed (exitcode: 1)")
    read as host OOM. Here DeepSpeed's launcher: its kills, then the worker's return code 1."""
    kills = (
        "[2024-05-02 10:11:12,001] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4121\n"
        "[2024-05-02 10:11:12,002] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4122\n"
    )
    own = kills + "[2024-05-02 10:11:14,310] [ERROR] [launch.py:321:sigkill_handler] ['python', 'train.py'] exits with return code = 1\n"
    assert diagnose(own.encode()).diagnosis.cause != "host_oom"
    # a worker that was SIGKILLed is still the OOM killer's
    killed = own.replace("return code = 1", "return code = -9")
    assert diagnose(killed.encode()).diagnosis.cause == "host_oom"


def test_a_parameter_emptied_during_the_checkpoint_recompute_is_zero3_param() -> None:
    """torch.utils.checkpoint's metadata check finding a tensor that came back empty (shape [0]) in the
    recompute: ZeRO-3 re-partitioned a frozen parameter while the recompute ran (transformers#47254, DeepSpeed
    PR 8148). Here the compact form of PR 8130's description, under a `[rank1]:` prefix."""
    log = (
        "[rank1]: torch.utils.checkpoint.CheckpointError: Recomputed values for the following tensors have "
        "different metadata than during the forward pass.\n"
        "[rank1]: tensor at position 7: saved {'shape': [2048]} vs recomputed {'shape': [0]}\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "zero3_param"
