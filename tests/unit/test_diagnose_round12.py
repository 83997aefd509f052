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


def test_zero3_trace_cache_warnings_alone_are_no_hang() -> None:
    """ZeRO-3 prints "Invalidate trace cache" with print_rank_0 and runs on (partitioned_param_coordinator.py
    trace_prologue): three GRPO runs that train through it (VLM-R1#304, Visual-RFT#97, R1-V#131) read as hangs
    at exit 1. Here the other form of the warning (a module order that changed) between HF loss lines."""
    log = (
        "{'loss': 1.212, 'learning_rate': 2e-05, 'epoch': 0.1}\n"
        "Invalidate trace cache @ step 402: expected module 1207, but got module 1206\n"
        "Invalidate trace cache @ step 402: expected module 2010, but got module 2011\n"
        "{'loss': 1.198, 'learning_rate': 2e-05, 'epoch': 0.11}\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 0 and report.diagnosis.cause == "none"
    # once the job is stopped by hand, the warning says where the ranks wait: a hang
    stopped = log + "^C\n"
    assert diagnose(stopped.encode()).diagnosis.cause == "hang"


def test_the_terminals_ctrl_c_echo_is_an_interrupted_run() -> None:
    """The terminal echoes Ctrl-C as `^C` at the start of the line being written (accelerate#2724's
    `^C[date] ... Killing subprocess`). Here after a progress bar that stopped, glued to torchrun's warning."""
    log = (
        " 12%|#2        | 120/1000 [10:02<1:13:40,  5.02s/it]\n"
        "^CW1103 08:12:40.117000 1 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM\n"
    )
    assert diagnose(log.encode()).diagnosis.cause == "hang"


def test_a_build_tool_missing_from_the_machine_is_an_op_build() -> None:
    """subprocess's FileNotFoundError for a program the JIT op build runs: torch's compiler check runs `which`
    (MOSS#290, a container without it: read as unclassified). Here ninja missing, in a rank-prefixed line."""
    log = (
        '[rank0]:   File "/opt/conda/lib/python3.10/subprocess.py", line 1863, in _execute_child\n'
        "[rank0]:     raise child_exception_type(errno_num, err_msg, err_filename)\n"
        "[rank0]: FileNotFoundError: [Errno 2] No such file or directory: 'ninja'\n"
    )
    report = diagnose(log.encode())
    assert report.diagnosis.cause == "op_build" and report.exit_code == 1
    # a data file that is missing is not a build
    assert (
        diagnose(
            b"FileNotFoundError: [Errno 2] No such file or directory: 'data/train.json'\n"
        ).diagnosis.cause
        != "op_build"
    )
