"""Round 12 (2026-11-28, h-logs7): forms `diagnose` missed on fresh thread logs, each checked here on a
wording other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_ray_worker_that_died_of_a_system_error_is_a_kill_from_outside() -> None:
    """Ray reports a dead actor or task worker with its WorkerExitType: SYSTEM_ERROR when the process died
    without its own Python error (OpenRLHF#187's actor message: read as no failure at exit 0). Here the
    raylet's task form; with no Python error it is a kill from outside (host memory)."""
    raylet = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
        "troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffffffffffffffff0e4c "
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error "
        "code 2. End of file.\n"
    )
    report = diagnose(raylet.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "host_oom" and report.fix is not None
    # Ray's memory monitor names the node's memory itself
    monitor = (
        b"(raylet) Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node "
        b"running low on memory.\n"
    )
    assert diagnose(monitor).diagnosis.cause == "host_oom"
    # an exception in the worker's own code is USER_ERROR: not a kill
    user = b"(raylet) Worker exit type: USER_ERROR Worker exit detail: the user code raised\n"
    assert diagnose(user).diagnosis.cause != "host_oom"
