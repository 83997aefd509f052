"""Round 28 (2026-11-28, h-diag28): forms `diagnose` missed on fresh thread logs, checked here on wordings other than
the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_trainer_skipping_the_step_for_a_non_finite_forward_loss_is_a_failed_run() -> None:
    """THUDM/SwissArmyTransformer#161: SAT's 'Skipping backward and optimizer step for nan or inf in forwarding
    metrics/loss!' (one line, the maintainer's answer bf16) read as no failure at exit 0. Here the wording of SAT's
    later trainers ('... in forwarding loss at rank N!') between fp16 step lines: the loss is not finite, exit 1."""
    log = (
        "[2024-05-02 10:00:00,000] [INFO] [config.py:1000:print]   fp16_enabled ................. True\n"
        " iteration      120/   10000 | elapsed time per iteration (ms): 812.3 | learning rate 1.000E-05 |\n"
        "Skipping backward and optimizer step for nan or inf in forwarding loss at rank 3!\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "fp16_overflow"


def test_the_loss_scale_a_skipped_step_reduces_to_is_the_new_scale_not_the_attempted_one() -> None:
    """JyChen9811/FaithDiff#34: DeepSpeed's loss scaler driven to 1 ('Attempted loss scale: 2, reducing to 1', behind
    a progress bar) was read as 'the scale down to 2': the scale recorded was the attempted one. Here two plain lines
    of deepspeed/runtime/fp16/loss_scaler.py's wording ending at 1, the floor: the scale is exhausted."""
    log = (
        "[2024-06-01 10:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
        "step. Attempted loss scale: 4, reducing to 2\n"
        "[2024-06-01 10:00:02,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
        "step. Attempted loss scale: 2, reducing to 1\n"
    )
    report = diagnose(log.encode())
    assert report.diagnosis.cause == "fp16_overflow"
    assert "driven down to 1" in report.diagnosis.explanation
