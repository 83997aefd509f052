"""Step-time model: a discrete-event timeline of one optimizer step under DeepSpeed ZeRO.

Two streams, as on a GPU: **compute** runs each module's forward, then (in reverse) its backward
(plus its forward again when activations are checkpointed); **comm** runs collectives in issue
order, one at a time. Collectives are issued where DeepSpeed issues them (zerotune/model/comm.py):
gradient buckets as backward fills them, stage-3 parameter gathers and prefetches before modules,
the post-step all-gather of stage 1/2. A collective is either

- *concurrent*: queued on the comm stream; compute runs on but is slowed by
  `compute.overlap_slowdown` (measured by the probe: compute time while a collective runs / alone)
  for as long as both run, and waits only where it needs the result (a gathered parameter, the end
  of backward); or
- *blocking*: compute waits for it to finish.

Which one it is follows DeepSpeed: reductions are concurrent only with `overlap_comm` on a device
with streams. DeepSpeed's CPU accelerator has no streams (`accelerator/cpu_accelerator.py`: `Stream`
is None, `stream()` is a no-op context), so on a CPU host a gradient reduction blocks the training
thread. Stage-3 parameter gathers are issued with `async_op=True` (`partition_parameters.py
_dist_allgather_fn`), so they run on the backend's own thread (NCCL stream, or gloo's worker thread)
even on CPU; on GPUs without `overlap_comm` they share the default stream and block.

One step = (grad_accum - 1) plain micro-steps + one boundary micro-step (stage 1 reduces and every
stage steps the optimizer only there), then the optimizer (on GPU memory bandwidth, or CPU Adam under
offload) and, for stage 1/2, the all-gather of the updated partitions.

The search calls `predict_step` for thousands of candidates: per-model data is prepared once and
cached, and `detail=False` skips events and per-call records.

Not modelled (stated so predictions are read right): DeepSpeed's per-module Python overhead (stage-3
hooks, fetch bookkeeping; large on a slow or busy host), rank skew at synchronous collectives,
allocator work, tensor/pipeline/expert parallelism (data parallelism only), and
`use_multi_rank_bucket_allreduce: false` (not in ZeroSettings; its default True is assumed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model.comm import CommCost, fill_buckets, persistent_flags
from zerotune.model.compute import LayerFlops, achieved_flops, model_flops, peak_flops
from zerotune.model.memory import STAGE0_ALLREDUCE_ELEMENTS
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload
from zerotune.units import DTYPE_BYTES, fmt_bytes

GPU_ADAM_BYTES_PER_PARAM = 30
"""HBM traffic of one fused Adam update with fp32 master weights: read master, grad, m, v (16 B),
write master, m, v (12 B) and the 16-bit copy (2 B). The update is memory-bound on GPUs."""

DEFAULT_PCIE_Bps = 25e9
"""Host<->device copy rate when the profile has none: ~80% of PCIe 4.0 x16's 31.5 GB/s."""

DEFAULT_CPU_ADAM_PARAMS_PER_S = 1e9
"""CPU Adam updates/s per node when the profile has none: DeepSpeedCPUAdam's AVX-512 kernel
(Ren et al. 2021, ZeRO-Offload, §4.1: about 1B params/s on a 2-socket Xeon node)."""

DEFAULT_NVME_Bps = 3e9
"""NVMe sequential rate per node when the profile has none (one PCIe 4.0 SSD)."""

QWZ_BYTES_RATIO = 0.5
"""qwZ: int8 weights instead of 16-bit in the forward all-gather (Wang et al. 2023, ZeRO++ §3.1)."""
QGZ_BYTES_RATIO = 0.25
"""qgZ: 4-bit gradients instead of 16-bit in an all-to-all (ZeRO++ §3.3)."""


@dataclass(frozen=True)
class Event:
    stream: str
    """"compute" | "comm" | "host"."""
    label: str
    """What ran, e.g. "fwd L3" or "reduce_scatter bucket 2 (512.00 MiB)"."""
    start_s: float
    end_s: float
    kind: str
    """fwd | bwd | all_gather | reduce_scatter | all_reduce | optimizer | offload."""


@dataclass(frozen=True)
class CollectiveCall:
    op: str
    bytes: int
    """Total array size of one call (nccl-tests' S)."""
    count: int
    """Calls of this op and size in one optimizer step."""
    seconds: float
    """Predicted seconds of one call."""
    phase: str
    """forward | backward | step (after backward at the accumulation boundary)."""

    @property
    def total_s(self) -> float:
        return self.seconds * self.count


@dataclass(frozen=True)
class StepEstimate:
    step_time_s: float
    """One optimizer step (all grad_accum micro-steps)."""
    compute_s: float
    """Forward + backward (+ recompute) compute, stretched by contention while overlapping."""
    comm_s: float
    """Total time on the communication stream."""
    exposed_comm_s: float
    """Communication not hidden behind compute (compute waiting for it)."""
    optimizer_s: float
    """Optimizer step (GPU, or CPU Adam under offload)."""
    offload_s: float
    """Exposed PCIe/NVMe transfer time."""
    tokens_per_s: float
    mfu: float | None
    """Model FLOPs (6N + attention, no recompute) / peak; None without a peak for the precision."""
    bottleneck: str
    """compute | communication | offload | optimizer: the largest share of the step."""
    events: tuple[Event, ...] = ()
    collectives: tuple[CollectiveCall, ...] = ()
    notes: tuple[str, ...] = ()


def step_summary(estimate: StepEstimate) -> dict[str, Any]:
    """The headline numbers of a step estimate for --json output (predict and recommend)."""
    return {
        "step_time_s": estimate.step_time_s,
        "tokens_per_s": estimate.tokens_per_s,
        "mfu": estimate.mfu,
        "compute_s": estimate.compute_s,
        "comm_s": estimate.comm_s,
        "exposed_comm_s": estimate.exposed_comm_s,
        "optimizer_s": estimate.optimizer_s,
        "offload_s": estimate.offload_s,
        "bottleneck": estimate.bottleneck,
    }


# --------------------------------------------------------------------------- per-model preparation


@dataclass(frozen=True)
class _Layer:
    name: str
    kind: str
    tensors: tuple[int, ...]
    flops: LayerFlops

    @property
    def is_block(self) -> bool:
        return self.kind.endswith("block")


@dataclass
class _Prepared:
    model: ModelSpec  # kept alive so id() stays unique while cached
    layers: tuple[_Layer, ...]
    params: int
    backward_tensors: tuple[int, ...]
    """Tensor numels in the order gradients become ready (reverse module, reverse tensor order)."""
    backward_layer: tuple[int, ...]
    """Layer index of each entry of backward_tensors."""
    buckets: dict[object, tuple] = field(default_factory=dict)
    """Derived schedules keyed by the knobs they depend on (bucket size, persistence)."""


_PREPARED: dict[int, _Prepared] = {}


def _prepare(model: ModelSpec) -> _Prepared:
    cached = _PREPARED.get(id(model))
    if cached is not None and cached.model is model:
        return cached
    flops = model_flops(model)
    layers = tuple(
        _Layer(lay.name, lay.kind, tuple(lay.tensors), f) for lay, f in zip(model.layers, flops, strict=True)
    )
    bwd_tensors: list[int] = []
    bwd_layer: list[int] = []
    for i in range(len(layers) - 1, -1, -1):
        for numel in reversed(layers[i].tensors):
            bwd_tensors.append(numel)
            bwd_layer.append(i)
    prepared = _Prepared(model, layers, model.params, tuple(bwd_tensors), tuple(bwd_layer))
    if len(_PREPARED) > 256:
        _PREPARED.clear()
    _PREPARED[id(model)] = prepared
    return prepared


def _buckets_by_layer(prep: _Prepared, bucket_elements: int) -> tuple[tuple[int, ...], ...]:
    """Per layer (index), the bucket sizes (elements) that fire right after that layer's backward."""
    cached = prep.buckets.get(bucket_elements)
    if cached is not None:
        return cached
    fire: list[list[int]] = [[] for _ in prep.layers]
    for bucket in fill_buckets(prep.backward_tensors, bucket_elements):
        fire[prep.backward_layer[bucket.after]].append(bucket.numel)
    result = tuple(tuple(f) for f in fire)
    prep.buckets[bucket_elements] = result
    return result


# --------------------------------------------------------------------------- the timeline


class _Timeline:
    """Compute cursor + one FIFO comm stream, with contention while both are busy."""

    def __init__(self, slowdown: float, detail: bool):
        self.slowdown = max(slowdown, 1.0)
        self.t = 0.0
        self.comm_free = 0.0
        self.busy: list[tuple[float, float]] = []
        self._first = 0
        self.compute_s = 0.0
        self.comm_s = 0.0
        self.exposed = 0.0
        self.detail = detail
        self.events: list[Event] = []
        self.calls: dict[tuple[str, int, str], list[float]] = {}

    def compute(self, work: float, label: str, kind: str) -> None:
        start = self.t
        end = (
            self._stretch(start, work)
            if self.slowdown > 1.0 and self._first < len(self.busy)
            else start + work
        )
        self.t = end
        self.compute_s += end - start
        if self.detail:
            self.events.append(Event("compute", label, start, end, kind))

    def _stretch(self, t: float, remaining: float) -> float:
        """End of `remaining` seconds of work from t: rate 1 when the comm stream is idle, 1/k when busy."""
        busy, k = self.busy, self.slowdown
        while self._first < len(busy) and busy[self._first][1] <= t:
            self._first += 1
        i = self._first
        while remaining > 0:
            if i >= len(busy):
                return t + remaining
            s, e = busy[i]
            if s > t:
                if remaining <= s - t:
                    return t + remaining
                remaining -= s - t
                t = s
            if remaining * k <= e - t:
                return t + remaining * k
            remaining -= (e - t) / k
            t = e
            i += 1
        return t

    def collective(
        self,
        op: str,
        nbytes: float,
        seconds: float,
        label: str,
        phase: str,
        *,
        concurrent: bool,
        count: int = 1,
    ) -> float:
        """Issue `count` back-to-back calls of `seconds` each; returns when the last ends.
        A blocking call moves the compute cursor."""
        total = seconds * count
        if concurrent:
            start = max(self.t, self.comm_free)
            end = start + total
            if total > 0:
                self.busy.append((start, end))
        else:
            start = max(self.t, self.comm_free)
            end = start + total
            self.exposed += end - self.t
            self.t = end
        self.comm_free = end
        self.comm_s += total
        if self.detail:
            self.events.append(Event("comm", label, start, end, op))
            key = (op, int(nbytes), phase)
            rec = self.calls.setdefault(key, [0, seconds])
            rec[0] += count
        return end

    def wait(self, until: float) -> None:
        if until > self.t:
            self.exposed += until - self.t
            self.t = until

    def host(self, seconds: float, label: str, kind: str) -> None:
        """Work that stops the training loop (optimizer step, exposed offload copies)."""
        if seconds <= 0:
            return
        start = self.t
        self.t += seconds
        if self.detail:
            self.events.append(Event("host", label, start, self.t, kind))


# --------------------------------------------------------------------------- the model


@dataclass
class _Setup:
    prep: _Prepared
    layers: tuple[_Layer, ...]
    fwd_s: tuple[float, ...]
    bwd_s: tuple[float, ...]
    fwd_total: float
    bwd_total: float
    n: int
    nodes: int
    stage: int
    zero: ZeroSettings
    elem_bytes: int
    cost: CommCost
    streams: bool
    reduce_concurrent: bool
    gather_concurrent: bool
    hardware: HardwareProfile
    workload: Workload
    notes: list[str]


def _micro_step(s: _Setup, tl: _Timeline, boundary: bool, mi: int) -> None:
    """One forward + backward; collectives as DeepSpeed issues them for this micro-step."""
    layers, z, n = s.layers, s.zero, s.n
    detail = tl.detail
    tag = f"m{mi} " if s.workload.grad_accum > 1 and detail else ""
    if s.stage == 3 and n > 1:
        _stage3_micro_step(s, tl, tag)
        return

    # ---- forward: no collectives below stage 3
    if detail:
        for i, layer in enumerate(layers):
            tl.compute(s.fwd_s[i], f"{tag}fwd {layer.name}", "fwd")
    else:
        tl.compute(s.fwd_total, "", "fwd")

    # ---- backward (reverse order); gradient buckets fire as they fill
    hooks = n > 1 and (s.stage == 2 or (s.stage == 1 and boundary and z.overlap_comm))
    if not hooks:
        if detail:
            for i in range(len(layers) - 1, -1, -1):
                tl.compute(s.bwd_s[i], f"{tag}bwd {layers[i].name}", "bwd")
        else:
            tl.compute(s.bwd_total, "", "bwd")
    else:
        fire = _buckets_by_layer(s.prep, z.reduce_bucket_size)
        bucket_no = 0
        pending = 0.0
        for i in range(len(layers) - 1, -1, -1):
            if detail:
                tl.compute(s.bwd_s[i], f"{tag}bwd {layers[i].name}", "bwd")
            else:
                pending += s.bwd_s[i]
            if fire[i]:
                if pending:
                    tl.compute(pending, "", "bwd")
                    pending = 0.0
                for numel in fire[i]:
                    bucket_no += 1
                    _reduce(s, tl, "all_reduce", numel, bucket_no, "backward", s.reduce_concurrent)
        if pending:
            tl.compute(pending, "", "bwd")
    tl.wait(tl.comm_free)  # the epilogue synchronizes the reduction stream

    if n <= 1 or not boundary:
        return
    if s.stage == 0:
        total, k = s.prep.params, 0
        while total > 0:
            chunk = min(total, STAGE0_ALLREDUCE_ELEMENTS)
            k += 1
            _reduce(s, tl, "all_reduce", chunk, k, "step", False)
            total -= chunk
    elif s.stage == 1 and not z.overlap_comm:
        # reduce_gradients: parameters in model order, bucketed, on the training thread
        for k, numel in enumerate(_forward_order_buckets(s.prep, z.reduce_bucket_size), 1):
            _reduce(s, tl, "all_reduce", numel, k, "step", False)


def _forward_order_buckets(prep: _Prepared, bucket_elements: int) -> tuple[int, ...]:
    key = ("fwd-order", bucket_elements)
    cached = prep.buckets.get(key)
    if cached is None:
        order = tuple(reversed(prep.backward_tensors))
        cached = tuple(b.numel for b in fill_buckets(order, bucket_elements))
        prep.buckets[key] = cached
    return cached


def _reduce(s: _Setup, tl: _Timeline, op: str, numel: int, k: int, phase: str, concurrent: bool) -> None:
    nbytes = numel * s.elem_bytes
    if op == "reduce_scatter" and s.zero.zero_quantized_gradients and s.nodes > 1:
        op, nbytes = "all_to_all", nbytes * QGZ_BYTES_RATIO
    seconds = s.cost.seconds(op, nbytes)  # type: ignore[arg-type]
    label = f"{op} bucket {k} ({fmt_bytes(nbytes)})" if tl.detail else ""
    tl.collective(op, nbytes, seconds, label, phase, concurrent=concurrent)


def _stage3_layout(s: _Setup) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[int, ...]]:
    """Per layer: non-persistent tensor numels, their sum, and the params of all later layers."""
    z = s.zero
    key = ("s3", z.param_persistence_threshold, z.model_persistence_threshold)
    cached = s.prep.buckets.get(key)
    if cached is None:
        flat = [t for layer in s.layers for t in layer.tensors]
        flags = persistent_flags(flat, z.param_persistence_threshold, z.model_persistence_threshold)
        parts, k = [], 0
        for layer in s.layers:
            parts.append(
                tuple(
                    t for t, p in zip(layer.tensors, flags[k : k + len(layer.tensors)], strict=True) if not p
                )
            )
            k += len(layer.tensors)
        totals = [sum(layer.tensors) for layer in s.layers]
        after = [0] * len(totals)
        for i in range(len(totals) - 2, -1, -1):
            after[i] = after[i + 1] + totals[i + 1]
        cached = (tuple(parts), tuple(sum(p) for p in parts), tuple(after))
        s.prep.buckets[key] = cached
    return cached


def _stage3_micro_step(s: _Setup, tl: _Timeline, tag: str) -> None:
    """Stage 3 (partitioned_param_coordinator.py): fetch + prefetch before each module, release
    after it unless reused within max_reuse_distance, reduce-scatter buckets in backward.

    The trace is the module order of the step: forward 0..L-1, then backward L-1..0 (position
    2L-1-i). Every module with parameters calls fetch_sub_module, and each call prefetches up to
    min(prefetch_bucket_size, max_live_parameters - gathered elements) *new* elements, walking the
    trace from a queue pointer and taking whole tensors (gathered ones are passed for free). A layer
    of k modules is modelled as one walk with k times that budget, issued as the same number of
    calls. A layer the walk passed while still gathered is not released: DeepSpeed marks it
    "fetched for" that later use (`__params_to_release`).
    """
    z, layers, detail = s.zero, s.layers, tl.detail
    parts, part_sum, after = _stage3_layout(s)
    nl = len(layers)
    last_pos = 2 * nl - 1
    modules = [max(len(layer.tensors), 1) for layer in layers]
    next_t = [0] * nl  # tensors of layer i gathered or in flight (a prefix of parts[i])
    ready = [0.0] * nl
    fetched_for = [-1] * nl  # furthest trace position a prefetch walk passed this layer for
    seen = [False] * nl  # gathered before in this micro-step (hpZ: a secondary copy exists)
    available = 0
    q = 0
    ncalls = 0
    prefetch = 1 if z.allgather_sequential else z.prefetch_bucket_size
    max_live = z.max_live_parameters
    hpz = z.zero_hpz_partition_size > 1
    qwz = z.zero_quantized_weights
    offload_rate = _param_source_Bps(s) if z.offload_param.device != "none" else 0.0
    elem, n, cost, concurrent = s.elem_bytes, s.n, s.cost, s.gather_concurrent

    def call(pieces: list[tuple[int, int]], forward: bool, secondary: bool, count: int) -> None:
        """`count` coalesced all-gathers of the pieces' elements; hpZ secondary gathers stay in
        groups of h ranks."""
        nonlocal available, ncalls
        numel = 0
        for p in pieces:
            numel += p[1]
        nbytes = numel * elem / count
        if qwz and not secondary:
            nbytes *= QWZ_BYTES_RATIO
        if secondary:
            seconds = cost.seconds("all_gather", nbytes, ranks=min(z.zero_hpz_partition_size, n), intra=True)
        else:
            seconds = cost.seconds("all_gather", nbytes)
        if offload_rate:
            seconds += numel / count / n * elem / offload_rate
        ncalls += count
        label = ""
        if detail:
            times = f" x{count}" if count > 1 else ""
            label = f"all_gather {'fwd' if forward else 'bwd'} #{ncalls}{times} ({fmt_bytes(nbytes)})"
        end = tl.collective(
            "all_gather",
            nbytes,
            seconds,
            label,
            "forward" if forward else "backward",
            concurrent=concurrent,
            count=count,
        )
        available += numel
        for layer, _ in pieces:
            seen[layer] = True
            if end > ready[layer]:
                ready[layer] = end

    def gather(pieces: list[tuple[int, int]], forward: bool, count: int = 1) -> None:
        if hpz:  # a layer gathered before in this micro-step has its hpZ secondary copy
            again = [p for p in pieces if seen[p[0]]]
            if again:
                call(again, forward, True, 1)
                pieces = [p for p in pieces if not seen[p[0]]]
                if not pieces:
                    return
        call(pieces, forward, False, count)

    def fetch(i: int, pos: int, forward: bool) -> None:
        nonlocal q
        if next_t[i] < len(parts[i]):
            rest = sum(parts[i][next_t[i] :])
            next_t[i] = len(parts[i])
            gather([(i, rest)], forward)
        if q <= pos:
            q = pos + 1
        if prefetch <= 0 or q > last_pos:
            tl.wait(ready[i])
            return
        # modules[i] calls, each taking whole tensors until it has min(prefetch, max_live -
        # gathered) new elements (so a call takes at least one tensor, however large)
        taken, pieces, calls_made, in_call = 0, [], 0, 0
        budget = min(prefetch, max_live - available)
        while q <= last_pos and budget > 0 and calls_made < modules[i]:
            j = q if q < nl else last_pos - q
            pj, tj = parts[j], next_t[j]
            got = 0
            while tj < len(pj):
                got += pj[tj]
                in_call += pj[tj]
                tj += 1
                if in_call >= budget:
                    calls_made += 1
                    taken += in_call
                    in_call = 0
                    budget = min(prefetch, max_live - available - taken)
                    if calls_made >= modules[i] or budget <= 0:
                        break
            next_t[j] = tj
            if got:
                pieces.append((j, got))
            if tj < len(pj):
                break
            fetched_for[j] = q
            q += 1
        if in_call:
            calls_made += 1
        if pieces:
            gather(pieces, forward, calls_made)
        tl.wait(ready[i])

    for i, layer in enumerate(layers):
        fetch(i, i, True)
        tl.compute(s.fwd_s[i], f"{tag}fwd {layer.name}" if detail else "", "fwd")
        if 2 * after[i] >= z.max_reuse_distance and fetched_for[i] < last_pos - i:
            available -= part_sum[i]
            next_t[i] = 0
    fire = _buckets_by_layer(s.prep, z.reduce_bucket_size)
    op = "reduce_scatter" if z.reduce_scatter else "all_reduce"
    bucket_no = 0
    for i in range(nl - 1, -1, -1):
        fetch(i, last_pos - i, False)
        tl.compute(s.bwd_s[i], f"{tag}bwd {layers[i].name}" if detail else "", "bwd")
        available -= part_sum[i]
        next_t[i] = 0
        for numel in fire[i]:
            bucket_no += 1
            _reduce(s, tl, op, numel, bucket_no, "backward", s.reduce_concurrent)
    tl.wait(tl.comm_free)


def _pcie(hardware: HardwareProfile) -> float:
    return hardware.host.h2d_pinned_Bps or DEFAULT_PCIE_Bps


def _param_source_Bps(s: _Setup) -> float:
    if s.zero.offload_param.device == "nvme":
        return (s.hardware.host.nvme_read_Bps or DEFAULT_NVME_Bps) / max(s.workload.gpus_per_node, 1)
    return _pcie(s.hardware)


def _optimizer(s: _Setup, tl: _Timeline) -> tuple[float, float]:
    """Optimizer step at the boundary: (optimizer seconds, exposed transfer seconds)."""
    z, hw, wl = s.zero, s.hardware, s.workload
    part = s.prep.params / s.n if s.stage >= 1 else s.prep.params
    if s.stage >= 1 and s.n > 1:  # global grad norm for clipping: a one-element all-reduce
        tl.collective(
            "all_reduce", 4, s.cost.seconds("all_reduce", 4), "all_reduce grad norm", "step", concurrent=False
        )
    per_node = max(wl.gpus_per_node, 1)
    # the probe times one rank with its share of the host's cores, so its rate is per rank;
    # the fallback is a whole node's, shared by its ranks
    cpu_rate = hw.host.cpu_adam_params_per_s or DEFAULT_CPU_ADAM_PARAMS_PER_S / per_node
    offload = z.offload_optimizer.device != "none" and s.stage >= 1
    transfer = 0.0
    if offload or not hw.has_gpus:
        opt = part / cpu_rate
        if offload and hw.has_gpus:
            h2d = part * s.elem_bytes / _pcie(hw)
            subgroups = max(1, math.ceil(part / max(z.sub_group_size, 1))) if s.stage == 3 else 1
            transfer = h2d / subgroups  # each sub-group's copy hides under the next one's update
        if z.offload_optimizer.device == "nvme":
            nvme = (hw.host.nvme_read_Bps or DEFAULT_NVME_Bps) / per_node
            transfer += part * 12 * 2 / nvme  # fp32 master, m, v read and written back
    else:
        bw = hw.gpu.hbm_bandwidth_Bps if hw.gpu and hw.gpu.hbm_bandwidth_Bps else None
        if bw is None:
            s.notes.append("no HBM bandwidth in the profile: optimizer step assumed 1 ms/100M params")
            opt = part * 1e-11
        else:
            opt = part * GPU_ADAM_BYTES_PER_PARAM / bw
    tl.host(opt, "optimizer step" + (" (CPU Adam)" if offload or not hw.has_gpus else ""), "optimizer")
    tl.host(transfer, "offload transfers", "offload")
    if s.stage in (1, 2) and s.n > 1:
        nbytes = s.prep.params * s.elem_bytes
        tl.collective(
            "all_gather",
            nbytes,
            s.cost.seconds("all_gather", nbytes),
            f"all_gather updated partitions ({fmt_bytes(nbytes)})" if tl.detail else "",
            "step",
            concurrent=False,
        )
    return opt, transfer


_TIMES: dict[tuple, tuple] = {}
_COSTS: dict[tuple, tuple] = {}


def _compute_times(prep: _Prepared, workload: Workload, hardware: HardwareProfile) -> tuple:
    """Per-layer forward and backward(+recompute) seconds, cached per model/workload/hardware."""
    key = (
        id(prep),
        id(hardware),
        workload.seq_len,
        workload.micro_batch,
        workload.precision,
        workload.activation_checkpointing,
    )
    hit = _TIMES.get(key)
    if hit is not None and hit[0] is hardware:
        return hit[1]
    flops_per_s, source = achieved_flops(hardware, workload.precision)
    tokens = workload.micro_batch * workload.seq_len
    fwd, bwd = [], []
    for layer in prep.layers:
        f = layer.flops.forward_flops(tokens, workload.seq_len) / flops_per_s
        fwd.append(f)
        bwd.append(2 * f + (f if workload.activation_checkpointing and layer.is_block else 0.0))
    model_flops_per_token = sum(layer.flops.training_flops(1, workload.seq_len) for layer in prep.layers)
    value = (tuple(fwd), tuple(bwd), sum(fwd), sum(bwd), source, model_flops_per_token)
    if len(_TIMES) > 4096:
        _TIMES.clear()
    _TIMES[key] = (hardware, value)
    return value


def _comm_cost(hardware: HardwareProfile, n: int, nodes: int) -> CommCost:
    key = (id(hardware), n, nodes)
    hit = _COSTS.get(key)
    if hit is not None and hit[0] is hardware:
        return hit[1]
    cost = CommCost(hardware, n, nodes)
    if len(_COSTS) > 1024:
        _COSTS.clear()
    _COSTS[key] = (hardware, cost)
    return cost


def predict_step(
    model: ModelSpec,
    workload: Workload,
    zero: ZeroSettings,
    hardware: HardwareProfile,
    *,
    detail: bool = False,
) -> StepEstimate:
    """Predicted time of one optimizer step (see the module docstring)."""
    prep = _prepare(model)
    notes: list[str] = []
    n, nodes = workload.world_size, workload.nodes
    fwd_s, bwd_s, fwd_total, bwd_total, flops_source, model_flops_per_token = _compute_times(
        prep, workload, hardware
    )
    streams = hardware.has_gpus
    stage = zero.stage
    cost = _comm_cost(hardware, n, nodes)
    notes.extend(cost.notes)
    setup = _Setup(
        prep=prep,
        layers=prep.layers,
        fwd_s=fwd_s,
        bwd_s=bwd_s,
        fwd_total=fwd_total,
        bwd_total=bwd_total,
        n=n,
        nodes=nodes,
        stage=stage,
        zero=zero,
        elem_bytes=DTYPE_BYTES[workload.precision],
        cost=cost,
        streams=streams,
        reduce_concurrent=streams and zero.overlap_comm,
        gather_concurrent=zero.overlap_comm if streams else True,
        hardware=hardware,
        workload=workload,
        notes=notes,
    )
    slowdown = hardware.compute.overlap_slowdown or 1.0
    if detail:
        notes.append(flops_source)
        if not streams and stage in (1, 2) and zero.overlap_comm and n > 1:
            notes.append("overlap_comm has no effect here: DeepSpeed's CPU accelerator has no streams")

    # The boundary micro-step, then the optimizer. Plain micro-steps (grad_accum - 1 of them) are
    # the same forward/backward as the boundary one for stage 2/3 (they reduce every micro-step) and
    # pure compute for stage 0/1 (they reduce only at the boundary).
    last = _Timeline(slowdown, detail)
    _micro_step(setup, last, True, workload.grad_accum)
    micro = (last.t, last.compute_s, last.comm_s, last.exposed)
    micro_calls = {k: v[0] for k, v in last.calls.items()} if detail else {}
    opt, transfer = _optimizer(setup, last)
    reps = workload.grad_accum - 1
    if stage in (2, 3) and n > 1:
        plain = micro
    else:
        plain = (fwd_total + bwd_total, fwd_total + bwd_total, 0.0, 0.0)
        micro_calls = {}
    step = last.t + plain[0] * reps
    compute = last.compute_s + plain[1] * reps
    comm = last.comm_s + plain[2] * reps
    exposed = last.exposed + plain[3] * reps

    events: tuple[Event, ...] = ()
    calls: tuple[CollectiveCall, ...] = ()
    if detail:
        events = tuple(last.events)
        merged: dict[tuple[str, int, str], list[float]] = {k: list(v) for k, v in last.calls.items()}
        for key, count in micro_calls.items():
            merged[key][0] += count * reps
        calls = tuple(
            CollectiveCall(op, nbytes, int(count), secs, phase)
            for (op, nbytes, phase), (count, secs) in sorted(
                merged.items(), key=lambda kv: (kv[0][2], kv[0][0], -kv[0][1])
            )
        )
        if workload.grad_accum > 1:
            notes.append(
                f"timeline shows the last of {workload.grad_accum} micro-steps (the accumulation boundary)"
            )

    tokens_per_s = workload.tokens_per_step / step if step > 0 else 0.0
    peak = peak_flops(hardware, workload.precision)
    mfu = None
    if peak:
        mfu = tokens_per_s * model_flops_per_token / (peak * n)
    shares = {"compute": compute, "communication": exposed, "optimizer": opt, "offload": transfer}
    bottleneck = max(shares, key=lambda k: shares[k])
    return StepEstimate(
        step_time_s=step,
        compute_s=compute,
        comm_s=comm,
        exposed_comm_s=exposed,
        optimizer_s=opt,
        offload_s=transfer,
        tokens_per_s=tokens_per_s,
        mfu=mfu,
        bottleneck=bottleneck,
        events=events,
        collectives=calls,
        notes=tuple(dict.fromkeys(notes)),
    )
