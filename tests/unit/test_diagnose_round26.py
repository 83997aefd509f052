"""Round 26 (2026-11-28, h-diag25): forms `diagnose` missed on fresh thread logs, checked here on wordings other than
the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_deepspeed_initialize_refusing_its_config_sources() -> None:
    """EleutherAI/gpt-neox#1043: deepspeed.initialize refusing a config given both in args and in its call (a check
    DeepSpeed 0.9.0 added: a script written before it, as gpt-neox#885) read as unclassified. Here the same check
    behind a rank prefix, and its refusal of no config at all, a plain config error whose fix gives one."""
    twice = (
        "[rank0]: AssertionError: Not sure how to proceed, we were given deepspeed configs in the deepspeed arguments "
        "and deepspeed.initialize() function call\n"
    )
    report = diagnose(twice.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "version_mismatch"
    log = (
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/__init__.py", line 191, in initialize\n'
        '    assert config is not None, "DeepSpeed requires --deepspeed_config to specify configuration file"\n'
        "AssertionError: DeepSpeed requires --deepspeed_config to specify configuration file\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "config_rejected"
    assert report.fix is not None and [c.old for c in report.fix.changes] == ["none given"]


def test_pdsh_reporting_a_nodes_command_failed_is_a_failed_run() -> None:
    """DeepSpeed#5709: the autotuner's pdsh refused by ssh to localhost (`ssh exited with exit code 255`) read as no
    failure at exit 0. Here DeepSpeed's multi-node launch, a node's training command ending 1 under pdsh."""
    log = (
        "[2024-03-02 10:11:12,000] [INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w node-0,node-1 export "
        "NCCL_DEBUG=WARN; cd /work; python -u -m deepspeed.launcher.launch --node_rank=%n train.py\n"
        "pdsh@node-0: node-1: ssh exited with exit code 1\n"
    )
    assert diagnose(log.encode()).exit_code == 1
