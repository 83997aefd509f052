"""Round 25 (2026-11-28, h-diag25): forms `diagnose` missed on fresh thread logs of the commonest failures, checked
here on wordings other than the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_watchdog_timeout_line_cut_mid_message_is_a_timeout() -> None:
    """LlamaFactory#8261: a numbered paste whose last line, behind a progress bar, ends "Watchdog caught collective
    operati" read as no failure at exit 0. Here torch 1.x's watchdog format, cut elsewhere in the message: only
    torch's timeout message starts "Watchdog caught collective"."""
    log = (
        "  5%|▌         | 141/2724 [5:13:01<95:19:29, 132.86s/it]\n"
        "[E ProcessGroupNCCL.cpp:737] [Rank 3] Watchdog caught collective opera\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "nccl_timeout"


def test_a_traceback_cut_inside_an_import_failed_importing() -> None:
    """DeepSpeed#5603 (`ds_report`'s import of deepspeed cut inside deepspeed/__init__.py's body) and
    alignment-handbook#180 (trl's lazy import cut in the import system's frames) read as unclassified. Here a
    script's `import deepspeed` cut in the body of a module deepspeed imports, and transformers' lazy import cut in
    `importlib/__init__.py`; a traceback cut in an ordinary function is not an import."""
    module_body = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 4, in <module>\n'
        "    import deepspeed\n"
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/__init__.py", line 22, in <module>\n'
        "    from . import ops\n"
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/ops/__init__.py", line 6, in <module>\n'
        "    fr\n"
    )
    lazy = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/transformers/utils/import_utils.py", line 1535, in _get_module\n'
        '    return importlib.import_module("." + module_name, self.__name__)\n'
        '  File "/usr/lib/python3.10/importlib/__init__.py", line 126, in import_module\n'
        "    return _bootstrap._gcd_import(name[level:], package, level)\n"
    )
    for log in (module_body, lazy):
        assert diagnose(log.encode()).diagnosis.cause == "version_mismatch"
    ordinary = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 4, in <module>\n'
        "    main()\n"
        '  File "train.py", line 2, in main\n'
        "    trainer.train()\n"
    )
    assert diagnose(ordinary.encode()).diagnosis.cause != "version_mismatch"


def test_accelerates_deepspeed_plugin_refusing_the_config_is_a_rejected_config() -> None:
    """zjunlp/KnowLM#87: accelerate's DeepSpeedPlugin refusing a DeepSpeed config without `zero_optimization`, two
    ranks interleaved, read as unclassified. Here the same check's other refusal, an "auto" accumulation: the fix
    names the key."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.11/site-packages/accelerate/utils/dataclasses.py", line 1012, in __post_init__\n'
        "    raise ValueError(\"gradient_accumulation_steps cannot be set to 'auto' in the DeepSpeed config.\")\n"
        "ValueError: gradient_accumulation_steps cannot be set to 'auto' in the DeepSpeed config.\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "config_rejected"
    assert report.fix is not None and [c.key for c in report.fix.changes] == ["gradient_accumulation_steps"]
