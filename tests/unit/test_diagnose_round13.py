"""Round 13 (2026-11-28, h-logs8): forms `diagnose` missed on fresh thread logs, each checked here on a
wording other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_torch_elastic_child_failed_error_is_the_launcher_report_not_a_rank_error() -> None:
    """torch elastic raises ChildFailedError in the launcher process to report that a worker failed; the
    worker's own failure is in the summary under it. SimpleTuner#333's rank killed with SIGKILL (exitcode -9)
    read as unclassified, the launcher's exception taken for the rank failing first. Here `torchrun`'s form
    (torch/distributed/run.py), rank 3 killed, exit 137 in the shell's numbering."""
    log = (
        '  File "/opt/env/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 135, in __call__\n'
        "    return launch_agent(self._config, self._entrypoint, list(args))\n"
        '  File "/opt/env/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 268, in launch_agent\n'
        "    raise ChildFailedError(\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"  # torch prints the space
        "============================================================\n"
        "finetune.py FAILED\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2025-02-11_09:14:02\n"
        "  host      : node-1\n"
        "  rank      : 3 (local_rank: 3)\n"
        "  exitcode  : 137 (pid: 88121)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 88121\n"
        "============================================================\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "host_oom" and report.fix is not None
    # a rank's own error before the launcher's report still comes first: the kill is not the cause
    own = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices\n" + log
    )
    assert diagnose(own.encode()).diagnosis.cause != "host_oom"
