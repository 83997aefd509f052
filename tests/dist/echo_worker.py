"""A rank for the launcher tests: reports steps, then succeeds, exits, crashes or hangs on demand."""

import os
import sys
import time

from zerotune.launch import report_step, worker_rank, worker_task, write_result


def main() -> None:
    rank, world = worker_rank()
    task = worker_task()
    if task.get("pid_dir"):
        with open(os.path.join(task["pid_dir"], f"rank{rank}.pid"), "w") as handle:
            handle.write(str(os.getpid()))
        # wait for every peer to be up, so the tests know all the pids they must see stopped
        deadline = time.monotonic() + 20
        while len(os.listdir(task["pid_dir"])) < world and time.monotonic() < deadline:
            time.sleep(0.05)
    print("noise on stdout that must not reach the parent's stdout")
    report_step("phase-a")
    fault = task.get("fault") or {}
    if fault.get("rank") == rank:
        report_step(fault["at"])
        if fault["kind"] == "exit":
            sys.exit(3)
        if fault["kind"] == "raise":
            raise RuntimeError("injected failure")
        if fault["kind"] == "hang":
            time.sleep(3600)
    time.sleep(task.get("sleep", 0))
    write_result({"rank": rank, "world": world, "port": os.environ["MASTER_PORT"], "echo": task.get("echo")})


if __name__ == "__main__":
    main()
