"""The collectives DeepSpeed 0.19.8 issues for one training step, and what each one costs.

What is issued (docs/deepspeed-facts.md §4; read in `deepspeed/runtime/zero/stage_1_and_2.py`,
`stage3.py`, `partitioned_param_coordinator.py`, `runtime/engine.py`):

- Stage 0: after the last backward of the step, the engine all-reduces every gradient in buffers of
  `MEMORY_OPT_ALLREDUCE_SIZE` = 5e8 elements (`engine.allreduce_gradients` ->
  `buffered_allreduce_fallback`), synchronously.
- Stage 1/2: gradients are copied, in backward order, into a bucket of `reduce_bucket_size` (R)
  elements; when the next gradient would overflow it the bucket is reduced
  (`reduce_independent_p_g_buckets_and_remove_grads`); a gradient larger than R is reduced on its own.
  With the default `use_multi_rank_bucket_allreduce=True` (not a config key) the bucket's slices are
  reduced by one **all-reduce** per bucket (`average_tensor` -> `allreduce_and_scatter`); with
  `reduce_scatter: false` it is an all-reduce too. Stage 2 reduces during every backward; stage 1 only
  in the backward of the accumulation boundary, through the hooks when `overlap_comm` is on, otherwise
  after backward in parameter order (`reduce_gradients`). After the optimizer step the updated 16-bit
  partitions are all-gathered, one call per parameter group (`all_gather_dp_groups`).
- Stage 3: before each module runs, its non-persistent parameters are all-gathered (one coalesced
  call), and queued parameters are prefetched up to min(`stage3_prefetch_bucket_size`,
  `stage3_max_live_parameters` - gathered elements). After the module, parameters are released unless
  they reappear within `stage3_max_reuse_distance` elements of the trace. Parameters with numel <=
  `stage3_param_persistence_threshold` (while the running total stays <= the model threshold) are
  never partitioned, so never gathered. Gradients fill a bucket of R elements that is
  **reduce-scattered** when full (all-reduce when `reduce_scatter: false`), every micro-step.
- ZeRO++: hpZ (`zero_hpz_partition_size` h > 1) gathers backward parameters from a secondary copy
  inside groups of h ranks (one node); qwZ sends int8 weights (half of 16-bit bytes) in the
  forward all-gather; qgZ replaces the gradient reduce-scatter with a 4-bit all-to-all (a quarter of
  16-bit bytes) when there is more than one node (single node falls back to reduce-scatter).

Cost: t = alpha + S * busbw_factor / busbw (zerotune.collectives), with the profile's numbers for the
link the group spans: intra-node for one node; for several nodes a flat ring runs at the slower of
the two link classes (the inter-node link, in practice).
"""

from __future__ import annotations

from dataclasses import dataclass

from zerotune.collectives import Collective, alpha_beta_time, busbw_factor, interpolate_busbw
from zerotune.schema.hardware import HardwareProfile, LinkClass
from zerotune.units import GB

LINK_EFFICIENCY = 0.8
"""busbw / nominal link bandwidth assumed when a profile quotes only the link's nominal bandwidth:
large-message nccl-tests all_reduce on 8x H200 NVSwitch with NVLink SHARP off reaches 367.6 of 450 GB/s,
82% (stas00/ml-engineering network/benchmarks/results/all-reduce-8xH200.md; shared/reference/ANCHORS.md
§2b); 8x A100 NVSwitch ~230 of 300 GB/s, 77% (NVIDIA/nccl#1712, as zerotune/profiles/hardware/8xa800.yaml);
the H100 ring collectives ~370 of 450 GB/s, 82% (NVIDIA/nccl-tests#212, zerotune/profiles/hardware/dgx-h100.yaml)."""

TCP_SOCKET_EFFICIENCY = 0.4
"""busbw / nominal for NCCL over TCP sockets (Ethernet without RDMA, EFA or InfiniBand: link kind `tcp`
or `ethernet-*`): 4 x 8 V100 nodes on 100 Gbps TCP reach 4-6 GB/s of all-reduce busbw at 8-128 MB
(NVIDIA/nccl issue #450, the best of the tunings tried), i.e. 32-48% of the 12.5 GB/s wire; "not more
than 60% of wire speed" on 32 Gbps even at large messages (NVIDIA/nccl issue #209). 0.4 = 5 / 12.5."""

TCP_ALPHA_S = 50e-6
"""NCCL latency over TCP sockets: 38-46 us for the smallest nccl-tests message between two nodes
(NVIDIA/nccl-tests issue #82, V100 nodes over eth0 with NCCL_IB_DISABLE=1)."""


def is_tcp(link: LinkClass | None) -> bool:
    """NCCL runs this link over its socket transport (no RDMA)."""
    return link is not None and link.backend == "nccl" and link.kind.startswith(("tcp", "eth"))


DEFAULT_ALPHA_S = {"nccl": 40e-6, "gloo": 0.8e-3}
"""Latency assumed when a profile has no measured alpha. NCCL: the ~40 us flat small-message time of
torch.distributed all_reduce on 8x H200 NVSwitch (stas00/ml-engineering network/benchmarks/results/
all-reduce-8xH200.md, 32-512 KiB), the value the catalog's NVSwitch profiles state (dgx-h100.yaml).
gloo: what `zerotune probe` measured for 2 gloo ranks on this project's 2-vCPU testbed, quiet rounds of
the 2026-11-27 stability series: 0.26-1.6 ms per collective, median 0.78 ms (data/evidence/
calibration_runs/round01,03,05,07,09.json, design.base); a host with more free cores runs lower."""

FALLBACK_BUSBW_Bps = 100e9 / 8 * LINK_EFFICIENCY
"""Last resort when a profile has neither measured nor nominal link numbers (stated in the notes):
a 100 Gbps link at LINK_EFFICIENCY, 10 GB/s. ASSUMED: the slowest inter-node link DeepSpeed's
maintainers discuss for multi-node ZeRO ("100 Gbps is not enough", microsoft/DeepSpeed#2928; ANCHORS.md §2b), so an
unknown link is costed as a poor one; `zerotune probe` measures the real one."""


@dataclass(frozen=True)
class Bucket:
    """One gradient reduction: `numel` elements, issued once tensor `after` (backward order) is ready."""

    numel: int
    after: int


def fill_buckets(numels: list[int] | tuple[int, ...], bucket_elements: int) -> tuple[Bucket, ...]:
    """Bucket filling as in `reduce_independent_p_g_buckets_and_remove_grads`.

    Tensors arrive in `numels` order. Before adding one, if bucket + numel > R the bucket is reduced
    (so a tensor larger than R flushes the bucket and is then reduced by itself at the next flush).
    The final partial bucket is reduced by the epilogue after the last tensor.
    """
    out: list[Bucket] = []
    filled = 0
    for i, numel in enumerate(numels):
        if numel <= 0:
            continue
        if filled and filled + numel > bucket_elements:
            out.append(Bucket(filled, i - 1))
            filled = 0
        filled += numel
        if numel > bucket_elements:  # reduced alone: the next tensor (or the epilogue) flushes it
            out.append(Bucket(filled, i))
            filled = 0
    if filled:
        out.append(Bucket(filled, len(numels) - 1))
    return tuple(out)


def persistent_flags(numels: list[int] | tuple[int, ...], threshold: int, model_threshold: int) -> list[bool]:
    """Stage-3 persistence (`parameter_offload.mark_persistent_parameters`): numel <= threshold,
    while the running total of persistent elements stays <= model_threshold."""
    flags = []
    total = 0
    for numel in numels:
        keep = numel <= threshold and total + numel <= model_threshold
        if keep:
            total += numel
        flags.append(keep)
    return flags


@dataclass(frozen=True)
class LinkModel:
    """alpha/busbw per collective for one group span, with where the numbers came from."""

    alpha_s: dict[str, float]
    busbw_Bps: dict[str, float]
    curves: dict[str, list[tuple[float, float]]]
    source: str

    def seconds(self, op: Collective, size_bytes: float, n: int) -> float:
        if n <= 1 or size_bytes <= 0:
            return 0.0
        curve = self.curves.get(op)
        if curve:  # the measured curve wins over the fitted pair (schema/hardware.py CollectivePerf)
            return alpha_beta_time(op, size_bytes, n, 0.0, interpolate_busbw(curve, size_bytes))
        return alpha_beta_time(op, size_bytes, n, self.alpha_s[op], self.busbw_Bps[op])


def _link_numbers(link: LinkClass | None) -> tuple[dict, dict, dict, str]:
    alphas: dict[str, float] = {}
    bws: dict[str, float] = {}
    curves: dict[str, list] = {}
    if link is None:
        return alphas, bws, curves, "none"
    for op, perf in link.collectives.items():
        if perf.curve:
            curves[op] = list(perf.curve)
        if perf.busbw_Bps:
            bws[op] = perf.busbw_Bps
            alphas[op] = perf.alpha_s or 0.0
    return alphas, bws, curves, "measured" if (bws or curves) else "nominal"


def link_model(link: LinkClass | None) -> tuple[LinkModel, str | None]:
    """A complete per-op model for one link class; missing ops borrow from measured ones (busbw is
    comparable across collectives by construction), else from the nominal rate x LINK_EFFICIENCY."""
    alphas, bws, curves, kind = _link_numbers(link)
    note = None
    backend = link.backend if link is not None else "nccl"
    default_alpha = TCP_ALPHA_S if is_tcp(link) else DEFAULT_ALPHA_S[backend]
    ops: tuple[Collective, ...] = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast")
    if bws or curves:
        # ops the profile lacks borrow the all-reduce numbers (or any measured op's): busbw is
        # comparable across collectives by construction
        donor = next(op for op in ("all_reduce", *ops) if op in bws or op in curves)
        for op in ops:
            if op not in bws and op not in curves:
                if donor in curves:
                    curves[op] = curves[donor]
                else:
                    bws[op], alphas[op] = bws[donor], alphas[donor]
        source = f"{link.kind} ({link.backend}) measured collectives"
    elif link is not None and link.nominal_Bps:
        efficiency = TCP_SOCKET_EFFICIENCY if is_tcp(link) else LINK_EFFICIENCY
        bw = link.nominal_Bps * efficiency
        bws = {op: bw for op in ops}
        alphas = {op: default_alpha for op in ops}
        source = f"{link.kind}: nominal {link.nominal_Bps / GB:.0f} GB/s x {efficiency:.0%} (no measured collectives)"
        note = f"collective times assume {efficiency:.0%} of {link.kind}'s nominal bandwidth; probe for measured numbers"
    else:
        bws = {op: FALLBACK_BUSBW_Bps for op in ops}
        alphas = {op: default_alpha for op in ops}
        source = f"no link numbers; assumed {FALLBACK_BUSBW_Bps / GB:.0f} GB/s busbw"
        note = f"the profile has no link numbers: collectives assume {FALLBACK_BUSBW_Bps / GB:.0f} GB/s busbw"
    del kind
    return LinkModel(alphas, bws, curves, source), note


class CommCost:
    """Seconds of each collective for a world of `n` ranks over `nodes` nodes on `hardware`."""

    def __init__(self, hardware: HardwareProfile, n: int, nodes: int):
        self.n = n
        self.nodes = nodes
        self.notes: list[str] = []
        intra, note = link_model(hardware.intra_node)
        if note:
            self.notes.append(note)
        self.intra = intra
        if nodes > 1:
            inter, note = link_model(hardware.inter_node)
            if note and hardware.inter_node is None:
                note = "the profile has no inter-node link: multi-node collectives use the fallback bandwidth"
            if note:
                self.notes.append(note)
            self.world = _Slower(intra, inter)
        else:
            self.world = intra
        self._cache: dict[tuple[str, int, int, bool], float] = {}

    def seconds(
        self, op: Collective, size_bytes: float, *, ranks: int | None = None, intra: bool = False
    ) -> float:
        """One call of `op` on a `size_bytes` (total array) message over `ranks` (default: all)."""
        n = self.n if ranks is None else ranks
        key = (op, int(size_bytes), n, intra)
        cached = self._cache.get(key)
        if cached is None:
            cached = (self.intra if intra or self.nodes == 1 else self.world).seconds(op, size_bytes, n)
            self._cache[key] = cached
        return cached


@dataclass(frozen=True)
class _Slower:
    """A flat ring across nodes is as slow as its slowest hop: the slower of the two link models."""

    a: LinkModel
    b: LinkModel

    def seconds(self, op: Collective, size_bytes: float, n: int) -> float:
        return max(self.a.seconds(op, size_bytes, n), self.b.seconds(op, size_bytes, n))


def bus_bytes(op: Collective, size_bytes: float, n: int) -> float:
    """Bytes each rank sends for one call (nccl-tests: size x busbw factor), the ZeRO paper's unit."""
    return size_bytes * busbw_factor(op, n) if n > 1 else 0.0
