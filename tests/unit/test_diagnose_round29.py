"""Round 29 (2026-11-28, h-diag29): forms `diagnose` missed on fresh thread logs, checked here on wordings other than
the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_not_implemented_raised_by_deepspeeds_runtime_is_a_rejected_option() -> None:
    """EleutherAI/gpt-neox#963: the pipeline engine's bare NotImplementedError for bf16 with a ZeRO stage (fixed by
    the config) was read as a traceback without its exception line. Here DeepSpeed 0.19.8's engine.py wording, with a
    message and behind rank prefixes: an option combination DeepSpeed does not implement is the config's fault."""
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/home/user/train.py", line 40, in <module>\n'
        "[rank0]:     engine, *_ = deepspeed.initialize(model=model, config=cfg)\n"
        '[rank0]:   File "/opt/conda/lib/python3.11/site-packages/deepspeed/runtime/engine.py", line 2021, in '
        "_do_optimizer_sanity_check\n"
        '[rank0]:     raise NotImplementedError(f"unsupported mix of {model_dtype=} and {grad_accum_dtype=}")\n'
        "[rank0]: NotImplementedError: unsupported mix of model_dtype=torch.bfloat16 and grad_accum_dtype=torch.float16\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "config_rejected"


def test_an_exception_raised_without_a_message_is_read_by_its_bare_name() -> None:
    """gpt-neox#963's traceback ends in `NotImplementedError` alone (Python prints the bare name of an exception raised
    without a message). Here another raise site of 0.19.8 that raises it bare (data_routing/basic_layer.py, an input
    order it does not support): the exception line is read, so the place names the cause."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/pretrain.py", line 88, in <module>\n'
        "    model = build(args)\n"
        '  File "/usr/lib/python3/dist-packages/deepspeed/runtime/data_pipeline/data_routing/basic_layer.py", line 58, '
        "in init_random_ltd\n"
        "    raise NotImplementedError\n"
        "NotImplementedError\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "config_rejected"
    assert any("NotImplementedError" in e.text for e in report.diagnosis.evidence)


def test_a_bare_not_implemented_from_the_script_itself_is_not_deepspeeds_refusal() -> None:
    """The same bare line raised in the training script's own method (an abstract method left unimplemented) is a
    failure, read by its exception, but not DeepSpeed rejecting an option."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/train.py", line 12, in <module>\n'
        "    trainer.fit()\n"
        '  File "/home/user/train.py", line 7, in fit\n'
        "    raise NotImplementedError\n"
        "NotImplementedError\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "unclassified"
    assert "'NotImplementedError'" in report.diagnosis.explanation
