"""Round 27 (2026-11-28, h-diag27): forms `diagnose` missed on fresh thread logs, checked here on wordings other than
the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_ranks_waiting_in_the_store_based_barrier_are_a_start_up_hang() -> None:
    """s-JoL/Open-Llama#47: torch's store-based barrier lines (7 of 8 ranks joined, rank 0 held in wandb's start) read
    as no failure at exit 0. Here torch 2.1+'s wording (`num_workers_joined=`) through Python's logging after
    DeepSpeed's process-group start: still a hang at start-up, exit 1."""
    log = (
        "[2024-02-01 10:00:00,000] [INFO] [comm.py:637:init_distributed] cdb=None\n"
        "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group for "
        "rank: 3, key: store_based_barrier_key:1 (world_size=4, num_workers_joined=3, timeout=0:30:00)\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "hang"
