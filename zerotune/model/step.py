"""Step-time model: a discrete-event timeline of one optimizer step under DeepSpeed ZeRO.

The mechanisms live in one module each, named after what DeepSpeed does:

- zerotune/model/timeline.py: the two-stream event engine (compute cursor + FIFO comm stream, with
  contention while both run);
- zerotune/model/buckets.py: stage 0/1/2 gradient buckets and their all-reduce;
- zerotune/model/stage3.py: stage-3 fetch/release, prefetch, persistence, reduce-scatter;
- zerotune/model/optimizer.py and offload.py: the optimizer step, CPU Adam, PCIe/NVMe transfers
  (gradient copies every micro-step under optimizer offload, blocking step-time copies and swaps,
  activation checkpoints held in host memory);
- zerotune/model/overheads.py: DeepSpeed's fixed and per-hook host costs;
- zerotune/model/comm.py: what each collective costs on the profile's links.

Reductions are concurrent with compute only with `overlap_comm` on a device with streams. DeepSpeed's
CPU accelerator has no streams (`accelerator/cpu_accelerator.py`: `Stream` is None, `stream()` is a
no-op context), so on a CPU host a gradient reduction blocks the training thread.

One step = (grad_accum - 1) plain micro-steps + one boundary micro-step (stage 1 reduces and every
stage steps the optimizer only there), then the optimizer (on GPU memory bandwidth, or CPU Adam under
offload) and, for stage 1/2, the all-gather of the updated partitions.

The search calls `predict_step` for thousands of candidates: per-model data is prepared once and
cached (zerotune/model/setup.py), and `detail=False` skips events and per-call records.

Fixed costs (zerotune/model/overheads.py) enter where DeepSpeed pays them: per step (its value by
whether the job runs on more than one rank: overheads.step_seconds), per micro-step,
stage-3 hooks on every module in both passes, stage 1/2 gradient hooks per parameter, and the
optimizer step's fitted rate. Each is read from the profile's `overheads`; a null one is left out and
the notes say so (no hidden default).

On a CPU host the buffers DeepSpeed allocates anew each micro-step pay a first-touch cost
(zerotune/model/host_memory.py) and bucket copies run at the probed host memory bandwidth.

Not modelled (stated so predictions are read right): rank skew at synchronous collectives, allocator
work on a GPU (cudaMalloc retries near the memory limit), stage 3's fresh gather buffers on a CPU
host, CPU-side dtype conversions of offloaded tensors, tensor/pipeline/expert parallelism (data parallelism only), and `use_multi_rank_bucket_allreduce:
false` (not in ZeroSettings; its default True is assumed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from zerotune.catalog.trust import job_kind
from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model import buckets, stage3
from zerotune.model.carried import for_job
from zerotune.model.comm import CommCost
from zerotune.model.compute import (
    achieved_flops,
    attention_flops_rate,
    eager_score_seconds,
    executed_attention_share,
    peak_flops,
)
from zerotune.model.lora import Lora, targets_of
from zerotune.model.offload import checkpoint_copy_s
from zerotune.model.optimizer import optimizer_step
from zerotune.model.overheads import Overheads, layer_seconds, overhead_notes, overheads, pass_seconds
from zerotune.model.setup import Prepared, StepSetup, prepare
from zerotune.model.timeline import Event, Timeline
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload
from zerotune.units import DTYPE_BYTES

__all__ = ["CollectiveCall", "Event", "StepEstimate", "predict_step", "step_summary"]


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
    """Exposed PCIe/NVMe transfer time: the optimizer step's blocking copies and swaps, and the
    offloaded gradient copies of every micro-step where they stall compute (without overlap_comm;
    with it they queue on the reduction stream, and a wait for them counts as exposed comm)."""
    tokens_per_s: float
    mfu: float | None
    """Model FLOPs (6N + attention, no recompute) / peak; None without a peak for the precision."""
    bottleneck: str
    """compute | communication | offload | optimizer | overhead: the largest share of the step."""
    events: tuple[Event, ...] = ()
    collectives: tuple[CollectiveCall, ...] = ()
    notes: tuple[str, ...] = ()
    overhead_s: float = 0.0
    """Fixed per-step and per-micro-step costs (profile `overheads`; hooks are inside compute_s)."""


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
        "overhead_s": estimate.overhead_s,
        "bottleneck": estimate.bottleneck,
    }


def _micro_step(s: StepSetup, tl: Timeline, boundary: bool, mi: int) -> None:
    """One forward + backward; collectives as DeepSpeed issues them for this micro-step."""
    tag = f"m{mi} " if s.workload.grad_accum > 1 and tl.detail else ""
    tl.host(s.overheads.per_micro_step_s, f"{tag}micro-step overhead" if tl.detail else "", "overhead")
    if s.stage == 3 and s.n > 1:
        stage3.micro_step(s, tl, boundary, tag)
    else:
        buckets.micro_step(s, tl, boundary, tag)


_TIMES: dict[tuple, tuple] = {}
_COSTS: dict[tuple, tuple] = {}


def _compute_times(prep: Prepared, workload: Workload, hardware: HardwareProfile) -> tuple:
    """Per-layer forward and backward(+recompute) seconds, cached per model/workload/hardware."""
    key = (
        id(prep),
        id(hardware),
        workload.seq_len,
        workload.micro_batch,
        workload.precision,
        workload.activation_checkpointing,
        workload.attention,
    )
    hit = _TIMES.get(key)
    if hit is not None and hit[0] is hardware:
        return hit[1]
    tokens = workload.micro_batch * workload.seq_len
    flops_per_s, source = achieved_flops(
        hardware, workload.precision, tokens=tokens, hidden=prep.model.hidden_size
    )
    kernel = attention_flops_rate(hardware, workload.precision, workload.attention)
    # a causal kernel skips the masked half on every GPU (flash, SDPA's flash / memory-efficient backends);
    # where no attention rate is published it runs at the GEMM rate
    share = executed_attention_share(prep.model, workload.attention) if hardware.has_gpus else 1.0
    attention_rate = kernel[0] if kernel else flops_per_s
    if kernel:
        source += f"; attention {share:.0%} of the s x s product (causal kernel) at {attention_rate / 1e12:.3g} TFLOP/s ({kernel[1]})"
    fwd, bwd = [], []
    for layer in prep.layers:
        lf = layer.flops
        f = tokens * (lf.matmul_flops / flops_per_s + lf.attention_flops_per_seq * workload.seq_len * share / attention_rate)
        # eager attention's s x s scores make HBM round trips its FLOPs do not count (compute.eager_score_seconds)
        ef, eb = eager_score_seconds(hardware, lf, prep.model, tokens, workload.seq_len, workload.attention)
        recompute = workload.activation_checkpointing and layer.is_block
        frozen = tokens * layer.frozen_flops / flops_per_s  # their backward: the input gradient only
        fwd.append(f + ef)
        bwd.append(2 * f - frozen + eb + (f + ef if recompute else 0.0))
    model_flops_per_token = sum(layer.flops.training_flops(1, workload.seq_len) - layer.frozen_flops for layer in prep.layers)
    value = (tuple(fwd), tuple(bwd), sum(fwd), sum(bwd), source, model_flops_per_token)
    if len(_TIMES) > 4096:
        _TIMES.clear()
    _TIMES[key] = (hardware, value)
    return value


def _hooked(
    times: tuple[float, ...], host: tuple[float, ...], serial: bool | tuple[bool, ...], on: bool,
    reverse: bool | None = None,
) -> tuple[float, ...]:
    """Per-layer seconds with host work: a whole pass through the device's queue (`pass_seconds`;
    `reverse`: backward's order), or, with `reverse` None, layer by layer (`layer_seconds`: host work
    joining a pass already composed, stage 1/2's gradient hooks)."""
    if not on or not any(host):
        return times
    flags = serial if isinstance(serial, tuple) else (serial,) * len(times)
    if reverse is None:
        return tuple(layer_seconds(t, h, f) for t, h, f in zip(times, host, flags, strict=True))
    return pass_seconds(times, host, flags, reverse)


def synced_blocks(prep: Prepared, workload: Workload, hardware: HardwareProfile) -> tuple[bool, ...]:
    """Per layer: does its forward wait for the device, so its host work cannot run ahead of its kernels?

    HF transformers' sparse-MoE expert loop (`moe_impl: loop`; e.g. MixtralSparseMoeBlock.forward) asks
    which experts were hit with `.nonzero()` and, per hit expert, which tokens with a one-argument
    `torch.where`: both return shapes only the device knows, so the host blocks until the queue drains,
    E + 1 times per MoE block forward. The block's host work (its launches, stage 3's hooks) then adds to
    its kernels instead of hiding under them (`layer_seconds` serial), as on a CPU host. Backward replays
    autograd's saved indices without syncing; only a recomputed forward (activation checkpointing)
    syncs again."""
    loop = hardware.has_gpus and prep.model.num_experts > 1 and workload.moe_impl == "loop"
    return tuple(loop and layer.is_block for layer in prep.layers)


_OVERHEADS: dict[tuple, tuple] = {}


def _overheads(prep: Prepared, hardware: HardwareProfile, stage: int, ranks: int, moe_loop: bool) -> Overheads:
    key = (id(prep), id(hardware), stage, ranks == 1, moe_loop)
    hit = _OVERHEADS.get(key)
    if hit is not None and hit[0] is hardware and hit[1] is prep:
        return hit[2]
    value = overheads(hardware.overheads, prep.model, stage, ranks, moe_loop)
    if any(layer.trainable >= 0 for layer in prep.layers):
        # a LoRA job: gradient hooks fire on the adapters only; each adapter is two more hooked modules
        # (peft's lora_A and lora_B Linears)
        grad = hardware.overheads.per_param_grad_hook_s if stage in (1, 2) else None
        hook = hardware.overheads.per_module_hook_s if stage == 3 else None
        value = replace(
            value,
            grad_hook_s=tuple((grad or 0.0) * len(layer.grad_tensors) for layer in prep.layers),
            module_hook_s=tuple(
                t + (hook or 0.0) * (len(layer.tensors) - len(base.tensors))
                for t, layer, base in zip(value.module_hook_s, prep.layers, prep.model.layers, strict=True)
            ),
        )
    if len(_OVERHEADS) > 1024:
        _OVERHEADS.clear()
    _OVERHEADS[key] = (hardware, prep, value)
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
    if hardware.calibration is not None and hardware.calibration.other_job_weight is not None:
        # a one-run calibration carries to a job of another kind at its weight (zerotune/model/carried.py)
        kind = job_kind(model.name, zero.stage, zero.offload_optimizer.device, zero.offload_param.device,
                        workload.activation_checkpointing)  # fmt: skip
        hardware = for_job(hardware, kind)
    lora = Lora(workload.lora_rank, targets_of(model, workload.lora_targets)) if workload.lora_rank else None
    prep = prepare(model, lora, workload.activation_checkpointing)
    notes: list[str] = []
    n, nodes = workload.world_size, workload.nodes
    fwd_s, bwd_s, fwd_total, bwd_total, flops_source, model_flops_per_token = _compute_times(
        prep, workload, hardware
    )
    streams = hardware.has_gpus
    stage = zero.stage
    cost = _comm_cost(hardware, n, nodes)
    notes.extend(cost.notes)
    oh = _overheads(prep, hardware, stage, n, prep.model.num_experts > 1 and workload.moe_impl == "loop")
    serial = not hardware.has_gpus
    # Per-layer seconds with host hooks (zerotune/model/overheads.py): stage 3 hooks every module in
    # both passes; stage 1/2 gradient hooks in the backwards that fill buckets (stage 2 all of them,
    # stage 1 the boundary's, and there only inside backward with overlap_comm).
    # the block's own Python and launches (every stage), plus stage 3's hooks, all on the host thread
    recompute = 2.0 if workload.activation_checkpointing else 1.0
    hooks = oh.module_hook_s if stage == 3 else (0.0,) * len(fwd_s)
    synced = tuple(serial or x for x in synced_blocks(prep, workload, hardware))
    bwd_synced = synced if workload.activation_checkpointing else serial
    fwd_r = _hooked(fwd_s, tuple(a + b for a, b in zip(oh.launch_s, hooks, strict=True)), synced, True, False)
    bwd_r = _hooked(bwd_s, tuple(recompute * a + b for a, b in zip(oh.launch_s, hooks, strict=True)), bwd_synced, True, True)
    bwd_r = _hooked(bwd_r, oh.grad_hook_s, serial, stage == 2 or (stage == 1 and zero.overlap_comm))
    plain_busy = sum(fwd_r) + sum(bwd_r if stage in (2, 3) else _hooked(bwd_s, tuple(recompute * a for a in oh.launch_s), serial, True, True))
    elem = DTYPE_BYTES[workload.precision]
    offload = zero.offload_optimizer.device != "none" and stage >= 1
    host = hardware.host
    setup = StepSetup(
        prep=prep,
        layers=prep.layers,
        fwd_s=fwd_r,
        bwd_s=bwd_r,
        fwd_total=sum(fwd_r),
        bwd_total=sum(bwd_r),
        n=n,
        nodes=nodes,
        stage=stage,
        zero=zero,
        elem_bytes=elem,
        comm_bytes=DTYPE_BYTES.get(zero.communication_data_type or "", elem),
        accum_bytes=DTYPE_BYTES.get(zero.grad_accum_dtype or "", elem),
        cost=cost,
        streams=streams,
        reduce_concurrent=streams and zero.overlap_comm,
        gather_concurrent=zero.overlap_comm if streams else True,
        hardware=hardware,
        workload=workload,
        notes=notes,
        overheads=oh,
        offload_grads=offload and hardware.has_gpus,
        copy_Bps=hardware.gpu.hbm_bandwidth_Bps if hardware.has_gpus and hardware.gpu else host.memory_Bps,
        first_touch_Bps=None if hardware.has_gpus else host.first_touch_Bps,
    )
    slowdown = hardware.compute.overlap_slowdown or 1.0
    if lora is not None:
        notes.append(
            f"LoRA r{lora.rank} on {', '.join(lora.targets)}: the frozen base's backward computes input gradients "
            f"only; reductions and the optimizer step cover the {prep.params:,} adapter parameters"
            + ("; stage 3 still gathers the base" if stage == 3 else "")
        )
    if detail:
        notes.append(flops_source)
        if not streams and stage in (1, 2) and zero.overlap_comm and n > 1:
            notes.append("overlap_comm has no effect here: DeepSpeed's CPU accelerator has no streams")
        notes.extend(overhead_notes(oh, hardware.overheads.source))
        if not hardware.has_gpus and n > 1:
            missing = [k for k in ("memory_Bps", "first_touch_Bps") if getattr(host, k) is None]
            if missing:
                notes.append(f"left out (null in the profile's host; `zerotune probe` measures them): {', '.join(missing)}")
            else:
                notes.append(
                    f"host memory (probed): bucket copies at {host.memory_Bps / 1e9:.2f} GB/s, first touch of "
                    f"fresh buffers above 32 MiB at {host.first_touch_Bps / 1e9:.2f} GB/s"
                )

    # The boundary micro-step, then the optimizer. Plain micro-steps (grad_accum - 1 of them) are the
    # same forward/backward as the boundary one for stage 2/3 (they reduce every micro-step; under
    # optimizer offload their gradient copies differ, so one is simulated on its own) and pure
    # compute for stage 0/1 (they reduce only at the boundary).
    last = Timeline(slowdown, detail)
    _micro_step(setup, last, True, workload.grad_accum)
    micro = (last.t, last.compute_s, last.comm_s, last.exposed, last.copy_exposed)
    micro_calls = {k: v[0] for k, v in last.calls.items()} if detail else {}
    opt, transfer = optimizer_step(setup, last)
    if stage == 3:
        stage3.post_step(setup, last)
    last.host(oh.per_step_s, "step overhead" if detail else "", "overhead")
    reps = workload.grad_accum - 1
    if stage in (2, 3) and n > 1:
        plain = micro
        if reps and setup.offload_grads:
            other = Timeline(slowdown, False)
            _micro_step(setup, other, False, 1)
            plain = (other.t, other.compute_s, other.comm_s, other.exposed, other.copy_exposed)
    else:
        plain = (plain_busy + oh.per_micro_step_s, plain_busy, 0.0, 0.0, 0.0)
        micro_calls = {}
    step = last.t + plain[0] * reps
    compute = last.compute_s + plain[1] * reps
    comm = last.comm_s + plain[2] * reps
    exposed = last.exposed + plain[3] * reps
    transfer += last.copy_exposed + plain[4] * reps
    checkpoint_copies = checkpoint_copy_s(setup) * workload.grad_accum
    step += checkpoint_copies
    transfer += checkpoint_copies
    if detail and workload.checkpoint_in_cpu and workload.activation_checkpointing:
        notes.append(
            "activation checkpoints wait in host memory (cpu_checkpointing): copied on a side stream, "
            f"{checkpoint_copies:.3g} s per step not hidden under forward/backward"
        )

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

    overhead = oh.per_step_s + oh.per_micro_step_s * workload.grad_accum
    scale = hardware.overheads.step_scale
    if scale and scale != 1.0:  # a run measured on this machine (calibrate --from-log): every time scales
        step, compute, comm, exposed, opt, transfer, overhead = (
            t * scale for t in (step, compute, comm, exposed, opt, transfer, overhead)
        )
        notes.append(f"every time x {scale:.3g}: the step time your run measured against the model's (calibrate --from-log)")
    tokens_per_s = workload.tokens_per_step / step if step > 0 else 0.0
    peak = peak_flops(hardware, workload.precision)
    mfu = None
    if peak:
        mfu = tokens_per_s * model_flops_per_token / (peak * n)
    shares = {
        "compute": compute,
        "communication": exposed,
        "optimizer": opt,
        "offload": transfer,
        "overhead": overhead,
    }
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
        overhead_s=overhead,
    )
