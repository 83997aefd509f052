"""Collective causes: ranks out of step (desync), the NCCL watchdog's timeout, NCCL errors (and its
WARN lines as a last candidate), inter-node traffic over TCP sockets."""

from __future__ import annotations

from zerotune.diagnose.causes.evidence import evidence
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import (
    CollectiveInfo,
    Diagnosis,
)
from zerotune.diagnose.signals import nccl


def nccl_desync(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    ds = nccl.desync(scan)
    desync_lines = [c.line for c in scan.collectives if c.kind == "desync"]
    split = nccl.split_collective(scan)
    if split is not None:
        seq, calls = split
        ranks = sorted({c.rank for c in calls if c.rank is not None})
        shown = "; ".join(
            f"rank {c.rank if c.rank is not None else '?'}: {c.op or '?'} of {c.numel:,} elements"
            if c.numel is not None
            else f"rank {c.rank if c.rank is not None else '?'}: {c.op or '?'}"
            for c in sorted(calls, key=lambda c: (c.rank is None, c.rank or 0))[:8]
        )
        return Diagnosis(
            cause="nccl_desync",
            title="Ranks in different collectives",
            explanation=(
                f"At collective #{seq} the ranks were not in the same call ({shown}): each waits for a "
                "partner that is in another collective, until the watchdog fires. The ranks took different "
                "code paths; under ZeRO-3 the usual one is a mixture-of-experts layer whose experts are "
                "gathered only on the ranks whose tokens were routed to them."
            ),
            evidence=evidence([c.line for c in calls]),
            collective=CollectiveInfo(kind="desync", seq=seq, ranks=ranks),
            line=min(c.line.number for c in calls),
        )
    skewed = nccl.skewed_collectives(scan)
    if skewed is not None and not (ds or desync_lines):
        order = sorted(skewed, key=lambda c: (c.seq or 0, c.rank if c.rank is not None else -1))
        ranks = sorted({c.rank for c in skewed if c.rank is not None})
        seqs = sorted({c.seq for c in skewed if c.seq is not None})
        shown = "; ".join(
            f"rank {c.rank if c.rank is not None else '?'} at #{c.seq}: {c.numel:,} elements" for c in order[:6]
        )
        return Diagnosis(
            cause="nccl_desync",
            title="Ranks at different collectives when the watchdog fired",
            explanation=(
                f"The ranks timed out in {skewed[0].op} calls of different sizes at different sequence numbers "
                f"(#{seqs[0]} to #{seqs[-1]}; {shown}). A collective finishes on all its ranks together, so ranks "
                "running the same calls wait in the same one: these issued different sequences of collectives. "
                "The ranks took different code paths, e.g. a batch without an image skipping a vision tower, or "
                "a mixture-of-experts layer gathering only its routed experts."
            ),
            evidence=evidence([c.line for c in order]),
            collective=CollectiveInfo(kind="desync", seq=seqs[0], ranks=ranks),
            line=min(c.line.number for c in skewed),
        )
    if not (ds or desync_lines):
        return None
    ranks = (
        ds[0]
        if ds
        else sorted({c.rank for c in scan.collectives if c.kind == "desync" and c.rank is not None})
    )
    return Diagnosis(
        cause="nccl_desync",
        title="Ranks out of step in their collectives",
        explanation=(
            f"Rank(s) {', '.join(map(str, ranks)) or '?'} issued fewer collectives than the others: the "
            "ranks took different code paths (data-dependent control flow, MoE routing, a rank that "
            "skipped a step or crashed), so the others wait forever."
        ),
        evidence=evidence((ds[1] if ds else []) + desync_lines),
        collective=CollectiveInfo(kind="desync", ranks=ranks),
        line=min(line.number for line in (ds[1] if ds else []) + desync_lines),
    )


def nccl_timeout(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    timeouts = [c for c in scan.collectives if c.kind == "timeout"]
    if any(c.kind == "error" for c in scan.collectives):
        timeouts = [c for c in timeouts if c.detail != "either"]  # torch's line for both: the error failed
    if not timeouts:
        return None
    c = next((t for t in timeouts if t.op), timeouts[0])
    ranks = sorted({t.rank for t in timeouts if t.rank is not None})
    size = f", {c.numel:,} elements" if c.numel else ""
    if c.detail == "nccl_id":
        return Diagnosis(
            cause="nccl_timeout",
            title="NCCL set-up timed out waiting for rank 0",
            explanation=(
                f"Rank(s) {', '.join(map(str, ranks)) or '?'} waited in their first NCCL collective for rank 0 "
                "to publish the communicator id through the c10d store, and the wait timed out: rank 0 had not "
                "reached that collective. Look at what rank 0 did meanwhile (rank-0-only work such as "
                "tokenising the dataset under main_process_first, loading or saving, or a failure on rank 0); "
                "raise the timeout only if that work is legitimately long."
            ),
            evidence=evidence([t.line for t in timeouts]),
            collective=CollectiveInfo(kind="timeout", ranks=ranks),
            line=min(t.line.number for t in timeouts),
        )
    return Diagnosis(
        cause="nccl_timeout",
        title=f"NCCL {c.op or 'collective'} timed out",
        explanation=(
            f"The NCCL watchdog stopped collective #{c.seq or '?'} ({c.op or 'unknown op'}{size}) after "
            f"{(c.timeout_ms or 0) / 1000:g} s on rank(s) {', '.join(map(str, ranks)) or '?'}. The "
            "ranks that time out are waiting for one that did not arrive: look for the slowest or "
            "failed rank (an OOM, a hang in data loading or in rank-0-only code such as saving or "
            "evaluation); raise the timeout only if that work is legitimately long."
        ),
        evidence=evidence([t.line for t in timeouts]),
        collective=CollectiveInfo(
            kind="timeout", op=c.op, seq=c.seq, numel=c.numel, timeout_ms=c.timeout_ms, ranks=ranks
        ),
        line=min(t.line.number for t in timeouts),
    )


def nccl_error(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    errors = [c for c in scan.collectives if c.kind == "error"]
    if not errors:
        return None
    details = {e.detail for e in errors}
    explanation = (
        "NCCL's CUDA call was refused because these GPUs cannot access each other's memory (no peer-to-peer "
        "access: error 217); NCCL's P2P transport needs it."
        if "peer_access" in details
        else "A CUDA call NCCL made failed (its `Cuda failure` line names the CUDA error); run with "
        "NCCL_DEBUG=INFO for the transport it was setting up."
        if "cuda" in details
        else "A collective failed with an NCCL error; run with NCCL_DEBUG=INFO for the transport."
    )
    return Diagnosis(
        cause="nccl_error",
        title="NCCL error",
        explanation=explanation,
        evidence=evidence([e.line for e in errors]),
        collective=CollectiveInfo(kind="error", ranks=sorted({e.rank for e in errors if e.rank is not None})),
        line=min(e.line.number for e in errors),
    )


def nccl_warned(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """A failed run nothing else explains, with NCCL WARN lines: what NCCL reported is the lead."""
    warns = [c for c in scan.collectives if c.kind == "warn"]
    if not warns or not (scan.exceptions or scan.tracebacks or scan.exits or scan.kills):
        return None
    return Diagnosis(
        cause="nccl_error",
        title="NCCL warned before the run failed",
        explanation=(
            "The run failed without a message zerotune recognises, and NCCL printed warnings (NCCL WARN) "
            "first: what NCCL reports there (a CUDA call, a transport, shared memory) is the likely cause."
        ),
        evidence=evidence([w.line for w in warns] + scan.exceptions[:1]),
        collective=CollectiveInfo(kind="error", ranks=sorted({w.rank for w in warns if w.rank is not None})),
        line=warns[0].line.number,
    )


def socket_transport(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    """NCCL's sockets carry traffic between nodes only: on a run the log shows on one node (the launcher's
    nnodes=1, torchrun's --nnodes 1) its GPUs talk over P2P/shared memory and the line is harmless."""
    nodes = scan.facts.get("nodes")
    if not scan.nccl_transport or (nodes is not None and nodes.value == 1):
        return None
    return Diagnosis(
        cause="slow",
        title="NCCL runs over TCP sockets",
        explanation=(
            "NCCL found no InfiniBand/RoCE device and uses TCP sockets for the traffic between nodes: "
            "a multi-node run is then limited by the Ethernet link and scales poorly."
        ),
        evidence=evidence(scan.nccl_transport),
        line=scan.nccl_transport[0].number,
    )
