"""The fix for collectives, hangs and speed: the rank to find, the leaf modules, the transport,
where ranks wait, the exposed timer; and the unrecognised failure's pointer to its evidence."""

from __future__ import annotations

from zerotune.diagnose.advice.memory import shm_change
from zerotune.diagnose.advice.unchecked import unchecked
from zerotune.diagnose.causes.memory import CACHE_FLUSH_TITLE
from zerotune.diagnose.explain import Job
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Change, Diagnosis, FixOut


def nccl_timeout(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    c = d.collective
    seconds = (c.timeout_ms or 0) / 1000 if c else 0
    return unchecked(
        [
            Change(
                key="(script) the slowest rank",
                old=None,
                new="found and fixed",
                reason="the ranks that time out wait for one that did not arrive (an error, data loading, rank-0-only "
                "work): its log comes first",
            ),
            Change(
                key="(script) init_process_group timeout",
                old=f"{seconds:g} s" if seconds else None,
                new="longer than the rank-0-only work",
                reason="only if that work (saving, evaluation) is legitimately long; HF: --ddp_timeout",
            ),
        ],
        "Run with NCCL_DEBUG=INFO and TORCH_NCCL_TRACE_BUFFER_SIZE set to see which rank lags.",
    )


def nccl_desync(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    return unchecked(
        [
            Change(
                key="(script) deepspeed.utils.set_z3_leaf_modules",
                old=None,
                new="(model, [the MoE block class])",
                reason="under ZeRO-3 a mixture-of-experts block must be gathered as one leaf so every rank runs the "
                "same collectives whatever the routing; otherwise make every rank take the same code path",
            )
        ],
        "Ranks must issue the same collectives in the same order; TORCH_DISTRIBUTED_DEBUG=DETAIL shows where they part.",
    )


def _socket_slow(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    return unchecked(
        [
            Change(
                key="(environment) NCCL_IB_HCA / NCCL_SOCKET_IFNAME",
                old="TCP sockets",
                new="InfiniBand/RoCE (RDMA enabled, NCCL_IB_DISABLE=0)",
                reason="inter-node gradient and parameter traffic needs RDMA; `NCCL_DEBUG=INFO` should say NET/IB",
            )
        ],
        "A network setup problem, not the DeepSpeed config.",
    )


def nccl_error(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    details = {c.detail for c in scan.collectives if c.kind == "error"}
    if "shm" in details:
        # NCCL keeps intra-node buffers in /dev/shm (NCCL_SHM_DISABLE in NCCL's env docs)
        return unchecked(
            [shm_change("NCCL could not create its shared-memory segment: /dev/shm is full")],
            "Remove stale nccl-* files from /dev/shm; NCCL_SHM_DISABLE=1 works around it at some speed cost.",
        )
    if details == {"system"}:
        return unchecked(
            [
                Change(
                    key="(environment) NCCL_DEBUG",
                    old=None,
                    new="WARN",
                    reason="ncclSystemError: a system call NCCL made failed; the WARN line names it (socket, "
                    "shared memory, munmap)",
                )
            ],
            "In a container the usual one is NCCL's shared-memory transport in a 64 MB /dev/shm: start it with "
            "--ipc=host or a larger --shm-size; between nodes, check the interface NCCL picked (NCCL_SOCKET_IFNAME).",
        )
    if "duplicate_gpu" in details:
        # NCCL refuses two ranks on one device (init.cc); each rank must select its own GPU before
        # deepspeed.initialize / zero.Init build their communicators (DeepSpeed issue 1604)
        return unchecked(
            [
                Change(
                    key="(script) torch.cuda.set_device(local_rank)",
                    old=None,
                    new="before deepspeed.initialize and zero.Init",
                    reason="two ranks use the same GPU: the script or a hard-coded device puts them there",
                )
            ],
            "Do not hard-code a CUDA device; let the launcher's LOCAL_RANK choose it.",
        )
    if "peer_access" in details:
        # NCCL's CUDA call failed with cudaErrorPeerAccessUnsupported (217): its P2P transport between GPUs
        # without peer access; the SHM transport maps peer memory too, so SkyRL PR 108 disables both
        return unchecked(
            [
                Change(
                    key="(environment) NCCL_P2P_DISABLE / NCCL_SHM_DISABLE",
                    old=None,
                    new="1 / 1",
                    reason="these GPUs cannot access each other's memory (no P2P: PCIe cards such as L4/L40S, or "
                    "across NUMA nodes); NCCL then goes through host memory over the network transport",
                )
            ],
            "`nvidia-smi topo -m` shows the links; torch.cuda.can_device_access_peer(i, j) says which pairs lack P2P.",
        )
    if "ib_completion" in details:
        # a failed InfiniBand work completion (status 12: retries exhausted) is the fabric between the two
        # GPUs, not the job: NCCL_IB_TIMEOUT/NCCL_IB_RETRY_CNT tune how long it retries (NCCL's env docs)
        return unchecked(
            [
                Change(
                    key="(environment) NCCL_IB_HCA / NCCL_IB_GID_INDEX",
                    old=None,
                    new="the HCAs and GID the fabric routes",
                    reason="InfiniBand work completions failed between the ranks the WARN lines name: check the link (ibstat) and the RoCE GID",
                )
            ],
            "A fabric problem, not the DeepSpeed config; NCCL_IB_DISABLE=1 confirms it by running over sockets.",
        )
    return unchecked(
        [
            Change(
                key="(environment) NCCL_DEBUG",
                old=None,
                new="INFO",
                reason="shows the transport that failed (IB, sockets, P2P); NCCL_P2P_DISABLE=1 for GPUs without P2P",
            )
        ],
        "A transport or driver problem, not the DeepSpeed config.",
    )


def hang(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    kinds = {e.kind for e in scan.hangs}
    if "barrier_timeout" in kinds:
        change = Change(
            key="(launcher) MASTER_ADDR / MASTER_PORT",
            old=None,
            new="reachable from every node",
            reason="the rendezvous never completed: a firewall, the wrong interface (NCCL_SOCKET_IFNAME), or a rank stuck before it",
        )
    else:
        change = Change(
            key="(environment) a stuck start-up",
            old=None,
            new="py-spy dump --pid <rank pid>",
            reason="shows where each rank waits; a stale op-build lock is fixed by removing ~/.cache/torch_extensions, "
            "consumer GPUs without P2P need NCCL_P2P_DISABLE=1",
        )
    return unchecked([change], "No error to fix in the config: find where the ranks wait first.")


def _cache_flush_slow(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    return unchecked(
        [
            Change(
                key="(memory) the step's peak",
                old="at the GPU's capacity",
                new="below it",
                reason="a smaller micro-batch or sequence, activation checkpointing, or offload leaves the "
                "allocator room so its allocations stop failing and flushing",
            ),
            Change(
                key="(script) get_accelerator().empty_cache()",
                old=None,
                new="on every rank at the same point of each step",
                reason="DeepSpeed's advice when the flushes remain: ranks then flush together instead of one "
                "stalling the others' collectives",
            ),
        ],
        "--model/--config/--profile let diagnose check how close the job's predicted peak is to the GPU.",
    )


def slow(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    if d.title == "NCCL runs over TCP sockets":
        return _socket_slow(d, scan, job)
    if d.title == CACHE_FLUSH_TITLE:
        return _cache_flush_slow(d, scan, job)
    if "overlap_comm" in d.explanation:  # training.slow: the all-reduce is the timer furthest over
        z = job.config.get("zero_optimization") if job.config else None
        return unchecked(
            [
                Change(
                    key="zero_optimization.overlap_comm",
                    old=z.get("overlap_comm") if isinstance(z, dict) else None,
                    new=True,
                    reason="overlaps the gradient reduction with the backward pass",
                )
            ],
            "Larger reduce buckets and fewer accumulation boundaries hide more of it; --model/--config/--profile "
            "compare the step with zerotune's prediction.",
        )
    if "CPU Adam" in d.explanation:  # training.slow says so only where the config or log shows offload
        return unchecked(
            [
                Change(
                    key="(hardware) CPU cores per rank",
                    old=None,
                    new="more",
                    reason="the optimizer step is over its prediction: under offload it runs on the CPU",
                )
            ],
            "NVMe or partial offload (offload_optimizer.ratio) moves less of the step to the CPU.",
        )
    return unchecked(
        [],
        "The optimizer step takes longer than the model predicts for this hardware: check the GPUs and "
        "links match --profile (`zerotune probe`) and that nothing else runs on them; under ZeRO-1/2 the "
        "step includes the parameter all-gather (allgather_bucket_size, the inter-node link).",
    )


def unclassified(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    return unchecked(
        [],
        "zerotune does not recognise this failure: the evidence lines (the first exception) are what to search for.",
    )
