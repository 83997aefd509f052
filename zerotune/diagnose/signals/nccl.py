"""NCCL signals: collectives that timed out or failed (torch's ProcessGroupNCCL watchdog), ranks out
of step (TORCH_DISTRIBUTED_DEBUG=DETAIL's CollectiveFingerPrint lines and its "Detected mismatch
between collectives"). NCCL's own `NCCL WARN` lines (what its transport or a CUDA call reported) are
kept as a candidate: diagnose names them only for a failed run nothing else explains."""

from __future__ import annotations

import re

from zerotune.diagnose.records import CollectiveFailure, LogLine, Scan
from zerotune.diagnose.signals.signal import Hit, Signal

_NCCL_WORK = re.compile(
    r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)(?:, Numel\w*=(\d+), Numel\w*=(\d+))?, Timeout\(ms\)=(\d+)\)"
)
_RANK_IN_TEXT = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|\brank[ =:](\d+)\b", re.I)
_FINGERPRINT = re.compile(r"Rank (\d+)\] Running collective: CollectiveFingerPrint\(SequenceNumber=(\d+)")


EITHER = ("Exception (either an error or timeout)", "Some NCCL operations have failed or timed out")
"""torch's ProcessGroupNCCL lines for a collective that failed or timed out alike: read as a timeout
unless the log shows an NCCL error (then that error is what failed: an InfiniBand completion error,
DeepSpeed#2931)."""

_IB_COMPLETION = re.compile(r"NET/IB ?: Got completion (?:from peer \S+ )?with (?:status=|error )(\d+)")
"""NCCL's InfiniBand transport (net_ib.cc) printing a work completion that came back with a non-success status
(12: transport retry count exceeded, 5: flushed): the send/receive failed and NCCL returns an error from the
proxy (ncclRemoteError/ncclSystemError), whether or not torch's NCCL error line made it into the log
(finetrainers#16: only these WARN lines; DeepSpeed#2931: with the error). Older NCCL prints "Got completion
with error 12, opcode 1, ..." without the peer."""

NCCL_ID_WAIT = re.compile(
    r"(?:\[(\d+)\] )?is setting up NCCL communicator and retr(?:ie|ei)ving ncclUniqueId from \[\d+\]"
    r".*got error: .*(?:[Tt]imeout|timed out)"
)
"""torch's ProcessGroupNCCL::broadcastUniqueNCCLID timing out: a rank's first collective on a communicator
waits in the c10d store for the NCCL id that rank 0 publishes when it reaches the same collective, up to the
process group's timeout (`Socket Timeout`, `wait timeout after 1800000ms`; older torch spells it
"retreiving"). Rank 0 did not arrive in time, as in the watchdog's timeout of a collective, seen before the
communicator exists: newer torch reports the same wait as the watchdog's timeout of that first collective
(rank 0 tokenising for 30 min: LlamaFactory#2424's ALLREDUCE SeqNum=2, Finetune-ChatGLM2-6B#13's
store->get). Other errors there (`Connection reset by peer`, `Broken pipe`) say rank 0's store went away."""

_SYSTEM_ERROR = re.compile(r"unhandled system error|ncclSystemError")
"""NCCL's ncclSystemError: a system call NCCL made failed ("socket, malloc, munmap", newer NCCL "or external
library call failed or device error"); NCCL_DEBUG=WARN names the call. Its shared-memory transport maps
segments in /dev/shm, which a Docker container gets at 64 MB unless started with --ipc=host or --shm-size:
HRNet/DEKR#18 and LianjiaTech/BELLE#136, each fixed by --ipc=host."""

CUDA_FAILURE = re.compile(r"Cuda failure (?:(\d+) )?'([^']+)'")
"""NCCL's own line for a CUDA call that failed (NCCL src/include/checks.h: CUDACHECK and CUCHECK print `Cuda failure
'%s'` / `Cuda failure %d '%s'` and return ncclUnhandledCudaError; torch repeats it after "Last error:"). The call is
NCCL's, so the failure is NCCL's transport or setup, except when the GPU had no memory left for NCCL's buffers (error 2,
`out of memory`: a GPU OOM, signals.memory). 217 is cudaErrorPeerAccessUnsupported (CUDA runtime driver_types.h: "P2P
access is not supported across the given devices"): NCCL's P2P transport between GPUs without peer access (L4/L40S, PCIe
cards across NUMA nodes: SkyRL PR 108, NeMo-RL#1683, where NCCL_P2P_DISABLE alone did not help and the PR also disables
the SHM transport)."""

_WATCHDOG = ("collective operation timeout", "Watchdog caught collective")
"""The watchdog's timeout without its WorkNCCL: torch's WorkNCCL::checkTimeout (ProcessGroupNCCL.cpp) builds the only
message that starts "Watchdog caught collective" ("... operation timeout: <work> ran for N milliseconds"), so its
first words say a collective timed out where a paste or a progress bar's line cut the rest (LlamaFactory#8261's
numbered paste ends "Watchdog caught collective operati")."""

MAX_WARNINGS = 5
"""NCCL WARN lines kept (a few show what failed; they must not crowd timeouts out of the bounded list)."""


def _failure(hit: Hit) -> None:
    """The watchdog's WorkNCCL line (op, sequence number, size, timeout), its per-rank line, or an
    NCCL error; the rank from the text, else from the line's prefix."""
    text = hit.line.text
    if not hit.says("NCCL", "nccl", "Exception (either", "DistNetworkError", "Duplicate GPU detected", "Cuda failure"):
        return
    s = hit.scan
    m = _NCCL_WORK.search(text)
    rank_m = _RANK_IN_TEXT.search(text)
    rank = int(rank_m.group(1) or rank_m.group(2)) if rank_m else hit.line.rank
    if m:
        kind = "timeout" if ("timeout" in text.lower() or "timed out" in text) else "error"
        failure = CollectiveFailure(
            hit.line,
            kind,
            op=m.group(2),
            seq=int(m.group(1)),
            numel=int(m.group(3)) if m.group(3) else None,
            timeout_ms=int(m.group(5)),
            rank=rank,
        )
        s.add(s.collectives, failure)
    elif (w := NCCL_ID_WAIT.search(text)) is not None:
        waiting = int(w.group(1)) if w.group(1) else rank
        s.add(s.collectives, CollectiveFailure(hit.line, "timeout", rank=waiting, detail="nccl_id"))
    elif (t := re.search(r"Timeout at NCCL work: (\d+)", text)) is not None:
        s.add(s.collectives, CollectiveFailure(hit.line, "timeout", seq=int(t.group(1)), rank=rank))
    elif hit.says(*_WATCHDOG):
        s.add(s.collectives, CollectiveFailure(hit.line, "timeout", rank=rank))
    elif hit.says(*EITHER):
        s.add(s.collectives, CollectiveFailure(hit.line, "timeout", rank=rank, detail="either"))
    elif (cuda := CUDA_FAILURE.search(text)) is not None and "out of memory" not in cuda.group(2):
        detail = "peer_access" if "peer access" in cuda.group(2) else "cuda"
        s.add(s.collectives, CollectiveFailure(hit.line, "error", rank=rank, detail=detail))
    elif (
        (shm := re.search(r"NCCL WARN .*(?:posix_fallocate|shared memory segment)", text))
        or (ib := _IB_COMPLETION.search(text))
        or re.search(
            r"NCCL error|nccl\w+Error|NCCL communicator was aborted|DistNetworkError|Duplicate GPU detected", text
        )
    ):
        detail = (
            "shm"
            if shm
            else "ib_completion"
            if ib
            else "duplicate_gpu"
            if "Duplicate GPU detected" in text
            else "system"
            if _SYSTEM_ERROR.search(text)
            else None
        )
        s.add(s.collectives, CollectiveFailure(hit.line, "error", rank=rank, detail=detail))
    elif "NCCL WARN" in text and sum(c.kind == "warn" for c in s.collectives) < MAX_WARNINGS:
        s.add(s.collectives, CollectiveFailure(hit.line, "warn", rank=rank))


def _transport(hit: Hit) -> None:
    """NCCL INFO saying it found no InfiniBand device and uses TCP sockets between nodes. NCCL initialises its
    network transports in order and keeps the first with a device (IB, then sockets): `NET/Socket : Using
    [0]eth0...` is printed by the socket transport's init (net_socket.cc), so it is there only when sockets
    carry the inter-node traffic (AReaL#639: that line alone, 4-5x slower collectives)."""
    if hit.says("NET/IB : No device found", "Using network Socket", "NET/Socket : Using"):
        hit.scan.add(hit.scan.nccl_transport, hit.line)


ZERO3_RANK_CHECK = re.compile(r"disagreement (?:on list (?:length|contents) )?between rank(\d+) and rank(\d+)")
"""ZeRO-3's check that every rank fetches the same parameters in the same order (deepspeed/runtime/zero/utils.py
assert_ints_same_as_other_ranks over the ds_ids its parameter coordinator, zero.Init and the stage-3 reduce bucket
record; partitioned_param_coordinator.py, partition_parameters.py, stage3.py): rank 0 broadcasts its list and a rank
whose list differs raises. Since DeepSpeed PR 7525 (0.17.6) it says "Detected a disagreement on list length" or "... on
list contents"; before, "disagreement between rank0 and rankN: rank0: [...], rankN: [...]" (LlamaFactory#4428's
DeepSeek-V2-Lite, DeepSpeed#1960 under Lightning). Either way the ranks ran different modules (MoE routing, a branch
taken on some ranks): their collectives are out of step."""


def _mismatch(hit: Hit) -> None:
    """TORCH_DISTRIBUTED_DEBUG's collective mismatch, and ZeRO-3's cross-rank check of the parameters each rank fetches
    (ZERO3_RANK_CHECK)."""
    text = hit.line.text
    if "mismatch between collectives" in text:
        hit.scan.add(hit.scan.collectives, CollectiveFailure(hit.line, "desync", rank=hit.line.rank))
    elif (m := ZERO3_RANK_CHECK.search(text)) is not None:
        hit.scan.add(hit.scan.collectives, CollectiveFailure(hit.line, "desync", rank=int(m.group(2))))


def _fingerprint(hit: Hit) -> None:
    """The latest collective sequence number each rank printed."""
    m = _FINGERPRINT.search(hit.line.text)
    if m:
        rank, seq = int(m.group(1)), int(m.group(2))
        if seq >= hit.scan.fingerprints.get(rank, (-1, hit.line))[0]:
            hit.scan.fingerprints[rank] = (seq, hit.line)


def desync(scan: Scan) -> tuple[list[int], list[LogLine]] | None:
    """Ranks whose last collective sequence number trails the others (TORCH_DISTRIBUTED_DEBUG)."""
    fps: dict[int, tuple[int, LogLine]] = scan.fingerprints
    if len(fps) < 2:
        return None
    top = max(seq for seq, _ in fps.values())
    behind = sorted(rank for rank, (seq, _) in fps.items() if seq < top)
    if not behind:
        return None
    return behind, [line for _, line in fps.values()]


def split_collective(scan: Scan) -> tuple[int, list[CollectiveFailure]] | None:
    """Ranks that timed out at the same sequence number in different collectives (another op or
    another element count): they were not in the same call, so none could complete (typical of MoE
    layers under ZeRO-3, where each rank gathers the experts its tokens were routed to)."""
    by_seq: dict[int, list[CollectiveFailure]] = {}
    for c in scan.collectives:
        if c.seq is not None and c.op is not None and c.kind in ("timeout", "error"):
            by_seq.setdefault(c.seq, []).append(c)
    for seq, calls in sorted(by_seq.items()):
        if len({(c.op, c.numel) for c in calls}) > 1:
            return seq, calls
    return None


def skewed_collectives(scan: Scan) -> list[CollectiveFailure] | None:
    """Ranks whose watchdogs timed out at different sequence numbers of the same op with different element
    counts. Each rank's watchdog names the oldest collective it still waits in (ProcessGroupNCCL's workMetaList
    is checked in issue order); a collective finishes on all its ranks together, so with the same calls on every
    rank that oldest number is the same everywhere. Different numbers with different sizes mean the ranks did
    not issue the same sequence: a rank behind, still in a large call the others matched with a smaller one
    (2U1/Qwen-VL-Series-Finetune#17: rank 0 at #959 in a 545M-element ALLREDUCE, ranks 1-5 at #963 in a
    2,560-element one, text-only batches skipping the vision tower)."""
    calls = [c for c in scan.collectives if c.kind == "timeout" and c.seq is not None and c.op and c.numel]
    for op in sorted({c.op for c in calls if c.op}):
        same = [c for c in calls if c.op == op]
        if len({c.seq for c in same}) > 1 and len({c.numel for c in same}) > 1:
            by_seq = {c.seq: {x.numel for x in same if x.seq == c.seq} for c in same}
            if all(not (a & b) for i, a in enumerate(by_seq.values()) for b in list(by_seq.values())[i + 1 :]):
                return same
    return None


SIGNALS = (
    Signal(
        "collectives",
        (
            rb"WorkNCCL",
            rb"NCCL error",
            rb"NCCL communicator",
            rb"DistNetworkError",
            rb"Detected mismatch between collectives",
            rb"Exception \(either an error or timeout\)",  # the watchdog's per-rank line (no WorkNCCL on it)
            rb"Watchdog caught collective",  # the timeout's message, also where a paste cut it (_WATCHDOG)
            rb"Timeout at NCCL work",
            rb"Some NCCL operations have failed",
            rb"Detected a disagreement on list",  # ZeRO-3's rank check since DeepSpeed 0.17.6: length or contents
            rb"RuntimeError: disagreement between rank",  # ... before 0.17.6 (a trigger starts on a rare byte)
            rb"x_fallocate failed",  # posi-x: a trigger starts on a rare byte (scan.py)
            rb"Error while creating shared memory",
            rb"Duplicate GPU detected",
            rb"NCCL WARN",
        ),
        (_failure, _mismatch),
    ),
    Signal("fingerprints", (rb"CollectiveFingerPrint",), (_fingerprint,)),
    Signal("nccl_transport", (rb"NET/IB : No device", rb"Using network Socket", rb"NET/Socket : Using"), (_transport,)),
)
