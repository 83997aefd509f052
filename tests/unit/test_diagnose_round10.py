"""Round 10 (2026-11-28, h-logs5): forms `diagnose` missed on 25 fresh thread logs, each checked here on a
wording, number or source other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_failed_infiniband_work_completion_is_an_nccl_error() -> None:
    """NCCL's IB transport printing a work completion with an error status is a failed send/receive even when
    torch's NCCL error line is not in the excerpt (finetrainers#16: no failure at exit 0). Older NCCL prints it
    without the peer."""
    old = "node1:2001:2101 [3] NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 32, vendor err 129\n"
    report = diagnose(old.encode())
    assert report.diagnosis.cause == "nccl_error" and report.exit_code == 1
    assert report.fix is not None and "NCCL_IB" in report.fix.changes[0].key
    newer = "gpu7:88:99 [1] transport/net_ib.cc:1700 NCCL WARN NET/IB : Got completion from peer 10.1.2.3<5000> with status=5 opcode=0 len=0 vendor err 249 (Send)\n"
    assert diagnose(newer.encode()).diagnosis.cause == "nccl_error"
    # other NCCL warnings alone are not a failure (CUDA library lookup, printed by healthy runs too)
    benign = "host:1:1 [0] misc/cudawrap.cc:90 NCCL WARN Failed to find CUDA library in (null) (NCCL_CUDA_PATH=(null))\n"
    assert diagnose(benign.encode()).exit_code == 0
