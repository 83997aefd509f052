"""Round 17 (2026-11-28, h-logs12): forms `diagnose` missed on fresh thread logs, each checked here on a
wording other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_the_loss_scalers_backward_frame_is_no_overflow() -> None:
    """The fp16 loss scaler's `backward` only scales the loss and calls torch's backward, so every fp16 ZeRO
    backward passes it; DeepSpeed#4505's bare ZeRO-3 bucket assert below it read as fp16_overflow. Here a
    ZeRO-2 gradient-reduction assert (stage_1_and_2.py) under it, with a message and rank prefixes."""
    log = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2011, in backward\n'
        "[rank1]:     self.optimizer.backward(loss, retain_graph=retain_graph)\n"
        '[rank1]:   File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 2080, in backward\n'
        "[rank1]:     self.loss_scaler.backward(loss.float(), retain_graph=retain_graph)\n"
        '[rank1]:   File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/fp16/loss_scaler.py", line 63, in backward\n'
        "[rank1]:     scaled_loss.backward(retain_graph=retain_graph)\n"
        '[rank1]:   File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 940, in reduce_ready_partitions_and_remove_grads\n'
        "[rank1]:     self.reduce_independent_p_g_buckets_and_remove_grads(param, i)\n"
        "[rank1]: AssertionError: The parameter 12 has already been reduced.\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause != "fp16_overflow"
    # the scaler's own update at the minimum scale still places a cut traceback in fp16 loss scaling
    update = (
        '  File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/fp16/loss_scaler.py", line 184, in update_scale\n'
        "    raise Exception(\n"
    )
    assert diagnose(update.encode()).diagnosis.cause == "fp16_overflow"


def test_a_bare_exception_name_is_the_tracebacks_exception_line() -> None:
    """Python prints an exception raised without a message as its bare name (a bare `assert` gives
    `AssertionError` alone); DeepSpeed#4505's was not read as the exception, so the report said the traceback
    had lost it. Here a rank-prefixed ZeRO-3 epilogue assert: the report names the exception, and a prose line
    that is only the word `Error` is still no exception."""
    log = (
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/opt/env/lib/python3.11/site-packages/deepspeed/runtime/zero/stage3.py", line 1290, in independent_gradient_partition_epilogue\n'
        "[rank3]:     assert not self.params_already_reduced[i]\n"
        "[rank3]: AssertionError\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1
    assert "'AssertionError'" in report.diagnosis.explanation
    assert "not its exception line" not in report.diagnosis.explanation
    prose = log.replace("[rank3]: AssertionError\n", "Error\n")
    assert "not its exception line" in diagnose(prose.encode()).diagnosis.explanation
