"""Round 20 (2026-11-28, h-diag20): forms `diagnose` missed on fresh thread logs, checked here on wordings other
than the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_feature_one_zero_stage_provides_refused_at_another_is_a_config_rejection() -> None:
    """ChatGLM3#864: transformers' "ZeRO inference only makes sense with ZeRO Stage 3" (evaluation through DeepSpeed
    under a stage-2 config) read as unclassified. Here a framework's lower-case wording of the same family behind a
    rank prefix: the stage it names is the fix."""
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/opt/app/train.py", line 88, in <module>\n'
        "[rank0]: ValueError: Parameter offloading is only supported with ZeRO stage 3. Current stage: 2\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1
    assert report.diagnosis.cause == "config_rejected"
    assert report.fix is not None and report.fix.changes[0].key == "zero_optimization.stage"
    assert report.fix.changes[0].new == 3
    # a logger's warning that falls back is no refusal
    warn = "[WARNING] Muon optimizer is only compatible with DeepSpeed ZeRO-2, falling back\n{'loss': 1.2, 'epoch': 0.1}\n"
    assert diagnose(warn.encode()).diagnosis.cause == "none"


def test_accelerates_state_built_outside_an_accelerator_is_a_version_mismatch() -> None:
    """accelerate#3428: accelerate 1.4.0's refusal of an AcceleratorState built outside Accelerator() (the trainer
    of another release; downgrading accelerate fixed it) read as unclassified. Here a fork's library name behind a
    rank prefix in torch 2.x's form."""
    log = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/opt/conda/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", line 410, in __init__\n'
        "[rank1]: ValueError: Please make sure to properly initialize your accelerator via `accelerator = Accelerator()` "
        "before using any functionality from the `sapiens_accelerator` library.\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1
    assert report.diagnosis.cause == "version_mismatch"
    assert "Accelerator()" in report.diagnosis.explanation and report.fix is not None


def test_a_traceback_cut_right_after_an_import_statement_failed_importing() -> None:
    """LMFlow#913: a traceback cut after the frame `from transformers.deepspeed import HfDeepSpeedConfig` (the
    module transformers 4.46 removed; the exception line lost) read as unclassified. Here `import deepspeed` as a
    torch 2.x rank-prefixed frame: the cut import is the failure; with its exception line the message decides."""
    frames = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 12, in <module>\n'
        "[rank0]:     from mylib.engine import build\n"
        '[rank0]:   File "/work/mylib/engine.py", line 3, in <module>\n'
        "[rank0]:     import deepspeed\n"
    )
    report = diagnose(frames.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "version_mismatch"
    assert report.diagnosis.line == 4
    # the same frames with their exception line: the message, not the import, decides
    oom = frames + "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    assert diagnose(oom.encode()).diagnosis.cause == "gpu_oom"
    # a cut traceback whose last statement is a call, not an import, names no cause
    call = '  File "/work/train.py", line 40, in main\n    trainer.train()\n'
    assert diagnose(call.encode()).diagnosis.cause == "unclassified"
