"""A rank for tests/unit/test_calibrate_pool.py: zerotune/calibrate/pool_worker.py's loop with a run
that echoes its task (no torch), and fails on {"fail": true}."""

from __future__ import annotations

from typing import Any

from zerotune.calibrate.pool_worker import main


def echo(task: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    if task.get("fail"):
        raise RuntimeError(f"asked to fail on rank {rank}")
    return {"x": task["x"], "rank": rank, "world": world}


if __name__ == "__main__":
    main(echo)
