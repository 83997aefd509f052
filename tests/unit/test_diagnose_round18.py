"""Round 18 (2026-11-28, h-diag18): a form `diagnose` missed on fresh thread logs, checked here on a wording
other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_timed_out_wait_for_rank_0s_nccl_id_is_a_collective_timeout() -> None:
    """torch's ProcessGroupNCCL makes a rank's first collective wait in the c10d store for the NCCL id rank 0
    publishes when it reaches that collective; Finetune-ChatGLM2-6B#13's `store->get('0') got error: Socket
    Timeout` (rank 0 still tokenising) read as a start-up hang. Here torch 2.x's wording: a DistBackendError
    behind a rank prefix, the store's `wait timeout after Nms`, a two-part key. A timeout waiting on a rank,
    with the fix for long rank-0 work, and no hang beside it."""
    log = (
        "[rank5]: torch.distributed.DistBackendError: [5] is setting up NCCL communicator and retrieving "
        "ncclUniqueId from [0] via c10d key-value store by key '0:1', but store->get('0:1') got error: wait "
        "timeout after 1800000ms, keys: /default_pg/0//cuda//0:1. This may indicate a possible application "
        "crash on rank 0 or a network set up issue.\n"
    )
    report = diagnose(log.encode())
    d = report.diagnosis
    assert report.exit_code == 1
    assert d.cause == "nccl_timeout" and d.collective is not None and d.collective.ranks == [5]
    assert "hang" not in d.also_seen
    assert report.fix is not None and any("timeout" in c.key for c in report.fix.changes)
    # older torch's spelling ("retreiving"), no rank in the text
    old = "RuntimeError: [2] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout\n"
    assert diagnose(old.encode()).diagnosis.cause == "nccl_timeout"
    # rank 0's store gone (the connection reset, not a timeout) is no wait for a late rank 0
    reset = log.replace("wait timeout after 1800000ms", "Connection reset by peer")
    assert diagnose(reset.encode()).diagnosis.cause != "nccl_timeout"
    # a store that start-up could not reach at all is still a start-up hang (DeepSpeed#6754's form)
    store = "[E socket.cpp:957] [c10d] The client socket has timed out after 600s while trying to connect to (10.0.0.2, 29500).\ntorch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients joined.\n"
    assert diagnose(store.encode()).diagnosis.cause == "hang"
