"""zerotune/calibrate/pool.py: one set of ranks runs every design run, in order, and a failing run
ends the pool with the rank's one-line cause and no process left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerotune.calibrate.pool import RankPool
from zerotune.errors import RunFailed

ROOT = Path(__file__).resolve().parents[2]
ECHO = "tests.unit.pool_echo"


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # the ranks run `python -m tests.unit.pool_echo`: the repository root must be on their path
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def _children() -> list[int]:
    try:
        text = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text()
    except OSError:
        return []
    return [int(pid) for pid in text.split()]


def test_the_same_ranks_run_every_job_in_order() -> None:
    with RankPool(2, "cpu", 60, worker=ECHO) as pool:
        first = pool.launcher({"x": 1}, 2, "cpu", 60, print, "run 1")
        second = pool.launcher({"x": 2}, 2, "cpu", 60, print, "run 2")
        assert pool.cpu_s >= 0
    assert [(r["x"], r["rank"], r["world"]) for r in first] == [(1, 0, 2), (1, 1, 2)]
    assert [r["x"] for r in second] == [2, 2] and "rank_cpu_s" not in second[0]
    assert _children() == []


def test_a_failing_run_raises_with_its_cause_and_leaves_no_rank() -> None:
    with pytest.raises(RunFailed) as caught, RankPool(2, "cpu", 60, worker=ECHO) as pool:
        pool.launcher({"x": 1}, 2, "cpu", 60, print, "run 1")
        pool.launcher({"fail": True}, 2, "cpu", 60, print, "run 2")
    assert "asked to fail" in caught.value.message
    assert _children() == []
