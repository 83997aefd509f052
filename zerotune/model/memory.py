"""Per-GPU memory of a DeepSpeed ZeRO job: the peak of a timeline of live bytes, plus overhead.

The model states (zerotune.model.states: the ZeRO paper's formulas and where DeepSpeed 0.19.8
allocates more), the activations (zerotune.model.activations, Korthikanti et al. 2022) and the
communication buffers are placed on a timeline of the step's phase boundaries (after init, end of
forward, start of backward, bucket flushes, end of autograd, reduce, optimizer step, after step:
zerotune.model.live_bytes and zerotune.model.stage3_live), and the peak is the phase with the most
live bytes, not the sum of each term's own maximum. `MemoryEstimate.per_gpu` is what is live at that
phase plus the CUDA context and the allocator's fragmentation; `peak_phase` names it.
Everything here is pure arithmetic on ints: the search calls `estimate_memory` for every candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model.activations import checkpoint_host_bytes
from zerotune.model.fit import padded
from zerotune.model.live_bytes import (
    ACTIVATIONS,
    BUFFERS,
    CUBLAS_WORKSPACES,
    GRADS,
    OPTIMIZER,
    OVERHEAD,
    PARAMS,
    Phase,
    StepInputs,
    cublas_workspace_bytes,
    peak,
    timeline_below_stage3,
)
from zerotune.model.lora import Lora, targets_of
from zerotune.model.memory_facts import (
    activation_phases,
    facts_of,
    first_fetch_elements,
    gathered_elements,
    largest_sub_group,
    linear_keeps_gathered,
    persistent_of,
    reuse_kept_elements,
    reuse_note,
    stage3_note,
    with_lora,
)
from zerotune.model.stage3_live import timeline_stage3
from zerotune.model.states import MOMENT_BYTES, cached_model_states, config_state_bytes, offload_host_buffers
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.job import SAFETY_MARGIN
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload
from zerotune.units import DTYPE_BYTES, GiB, fmt_bytes, fmt_count

DEFAULT_MARGIN = SAFETY_MARGIN  # the one margin (schema/job.py); callers judging otherwise pass theirs

CUDA_CONTEXT_BYTES = 1 * GiB
"""Fixed per-process GPU memory outside PyTorch's allocator, which nvidia-smi counts and torch's
counters do not: the CUDA context with the kernels loaded so far (about 300 MB since CUDA 11.7's lazy
module loading, over 1000 MB before it: https://github.com/pytorch/pytorch/issues/107667) and NCCL's
communicator buffers, per channel and peer (NCCL_BUFFSIZE 4 MiB each; more channels and more
communicators take more: https://github.com/NVIDIA/nccl/issues/986). Measured together on 8x H100:
1.06 GB outside PyTorch with the communicators set up (https://github.com/NVIDIA/nccl/issues/1685).
Rounded to 1 GiB."""

FRAGMENTATION = 0.10
"""Caching-allocator slack booked in the fit, as a fraction of the short-lived allocations
(activations, gathered parameters, buckets): their varying sizes leave reserved-but-unallocated
blocks. What a fit needs is less than what `max_memory_reserved` shows (zerotune/model/counters.py):
under pressure the allocator frees its cached blocks and retries before it reports out of memory,
so a job whose live bytes fit runs, slower (DeepSpeed warns of "pytorch allocator cache flushes").
ASSUMED, not measured: the published memory figures cannot measure it (counters.py takes it back out
before comparing: memory MAPE 12.4% at 0, 0.1 and 0.2), they only bound it. It moves the fit verdict
alone, and a published run that ran is predicted not to fit from 0.15 on (0 runs at 0.125, 1 at 0.15:
scripts/evidence/loso.py, margin 0). Runs that state both max_memory_allocated and max_memory_reserved
would measure it."""


_host_total = attrgetter("host_total")


def _compute_capability(hardware: HardwareProfile | None) -> str | None:
    gpu = hardware.gpu if hardware is not None else None
    return gpu.compute_capability if gpu is not None else None


def held_logits_bytes(workload: Workload, vocab: int) -> int:
    """Bytes of the logits a training loop that keeps the model's output holds (Workload.logits_held):
    seq·micro·V in the model's dtype (transformers >= 4.46: `LlamaForCausalLM.forward` returns the head's
    output and its loss, `loss_utils.ForCausalLMLoss`, upcasts a copy) or in fp32 (before 4.46 the
    causal-LM forward itself ran `logits = logits.float()` when labels were given, transformers
    v4.45 models/llama/modeling_llama.py, "TODO: remove the float() operation in v4.46")."""
    if workload.logits_held == "none":
        return 0
    width = 4 if workload.logits_held == "fp32" else DTYPE_BYTES[workload.precision]
    return workload.seq_len * workload.micro_batch * vocab * width


def _slack(hardware: HardwareProfile | None) -> int:
    """What a run on this machine measured beyond (or below) the estimate: `gpu.memory_slack_bytes`,
    fitted by `zerotune calibrate --from-log` (zerotune/calibrate/from_log.py); 0 when not measured."""
    gpu = hardware.gpu if hardware is not None else None
    return (gpu.memory_slack_bytes or 0) if gpu is not None else 0


OFFLOAD_OPTIONS: tuple[tuple[int, str, str], ...] = (
    (0, "none", "none"),
    (1, "none", "none"),
    (1, "cpu", "none"),
    (1, "nvme", "none"),
    (2, "none", "none"),
    (2, "cpu", "none"),
    (2, "nvme", "none"),
    (3, "none", "none"),
    (3, "cpu", "none"),
    (3, "cpu", "cpu"),
    (3, "nvme", "nvme"),
)
"""(stage, offload_optimizer, offload_param) combinations worth comparing; stage 0 ignores offload."""


class MemoryBreakdown(NamedTuple):
    """Bytes per GPU (a NamedTuple, as MemoryEstimate)."""

    params: int
    gradients: int
    optimizer_states: int
    comm_buffers: int
    activations: int
    overhead: int

    @property
    def model_states(self) -> int:
        return self.params + self.gradients + self.optimizer_states

    @property
    def total(self) -> int:
        return self.model_states + self.comm_buffers + self.activations + self.overhead


class MemoryEstimate(NamedTuple):
    """One rank's memory (a NamedTuple: the search makes one per distinct candidate, thousands, and a
    frozen dataclass sets each field through object.__setattr__, several times slower)."""

    per_gpu: MemoryBreakdown
    cpu_bytes_per_node: int
    """host RAM the offload needs on each node (pinned buffers included)"""
    nvme_bytes_per_node: int
    gpu_capacity_bytes: int | None
    """from the hardware profile; None without GPUs/profile"""
    fits: bool | None
    """total·(1 + margin) ≤ capacity; None when capacity is unknown"""
    headroom_bytes: int | None
    """capacity − total·(1 + margin): ≥ 0 exactly when it fits"""
    notes: tuple[str, ...]
    timeline: tuple[Phase, ...] = ()
    """live bytes at each phase boundary of the step, in order (zerotune.model.live_bytes)"""
    host_per_rank: int = 0
    """peak host bytes of one rank (offload buffers): on a CPU-only host they share the one memory"""
    host_static: int = 0
    """host bytes of one rank that are not on the timeline (live throughout)"""

    def phase(self, name: str) -> Phase:
        """The timeline's phase called `name` (KeyError when this stage has none)."""
        for p in self.timeline:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def peak_phase(self) -> Phase | None:
        """The phase that sets the peak, and what is live then."""
        return peak(self.timeline) if self.timeline else None

    def bench_phases(self, *, host_is_device: bool = False) -> dict[str, tuple[int, int]]:
        """Per phase `zerotune bench` measures (init, forward, backward, step): (most live bytes in
        it, live bytes at its end), allocated bytes only (no CUDA context or fragmentation); with
        `host_is_device` the rank's host buffers are added (CPU ranks: one memory)."""
        extra = self.host_static if host_is_device else 0

        def live(p: Phase) -> int:
            return p.total + (p.host_total if host_is_device else 0) + extra

        out: dict[str, tuple[int, int]] = {}
        for group in ("init", "forward", "backward", "step"):
            phases = [p for p in self.timeline if p.group == group]
            if phases:
                out[group] = (max(live(p) for p in phases), live(phases[-1]))
        after = [p for p in self.timeline if p.group == "end"]
        if after and "step" in out:
            out["step"] = (out["step"][0], live(after[-1]))
        return out

    def bench_phases_flat(self, *, host_is_device: bool = False) -> dict[str, int]:
        """`bench_phases` as the evidence compares them: live after init and after the step, the peaks
        of forward, backward and step."""
        phases = self.bench_phases(host_is_device=host_is_device)
        return {
            "init": phases["init"][1],
            "forward": phases["forward"][0],
            "backward": phases["backward"][0],
            "step": phases["step"][0],
            "after step": phases["step"][1],
        }


def estimate_memory(
    model: ModelSpec,
    workload: Workload,
    zero: ZeroSettings,
    *,
    hardware: HardwareProfile | None = None,
    safety_margin: float = DEFAULT_MARGIN,
    torch_optimizer: bool = False,
    foreach: bool | None = None,
    gloo: bool = False,
) -> MemoryEstimate:
    """Peak bytes per GPU (and host/NVMe per node) of one data-parallel DeepSpeed ZeRO rank.

    Data parallelism only: N_d = workload.world_size. The peak is the phase of the step with the most
    live bytes (module docstring). `torch_optimizer`: the optimizer is a torch one passed to
    `deepspeed.initialize` (its update makes temporaries; DeepSpeed's fused and CPU Adam do not);
    `foreach`: it runs torch's multi-tensor implementation (None: torch's default for the ranks'
    device, multi-tensor on CUDA and single-tensor on CPU; zerotune.model.live_bytes
    `optimizer_temporaries`). `gloo`: the ranks' collectives run on gloo (CPU ranks: `zerotune bench`
    on a CPU host, where no cuBLAS workspace exists).
    """
    facts = facts_of(model)
    if workload.lora_rank:
        facts = with_lora(facts, model, Lora(workload.lora_rank, targets_of(model, workload.lora_targets)))
    # Gradients, fp32 master weights, moments, buckets and the step cover the trainable elements only
    # (zerotune.model.lora: DeepSpeed builds its groups from parameters with requires_grad); the parameters
    # themselves are all of them, frozen ones included.
    trainable = facts.trainable
    stage = zero.stage
    n_d = workload.world_size
    precision = workload.precision
    e = DTYPE_BYTES[precision]
    opt_dev = zero.offload_optimizer.device if stage > 0 else "none"
    par_dev = zero.offload_param.device if stage == 3 else "none"
    sb = config_state_bytes(workload, zero, offload=opt_dev != "none")
    persistent = gathered = kept = in_flight = 0
    # One data-parallel rank holds every parameter whole as its partition: ZeRO-3 then gathers nothing,
    # `all_gather_coalesced` hands out the partition itself (DeepSpeed 0.19.8 partition_parameters.py:1559
    # `_no_gather_coalesced` when every partition group has one rank; NoGatherHandle, :74, points
    # `param.data` at `ds_tensor.data.to(device)`, the same tensor while it is on the GPU). Offloaded
    # partitions are still copied to the GPU.
    gathers = n_d > 1 or (zero.offload_param.device if stage == 3 else "none") != "none"
    if stage == 3 and gathers:
        persistent = persistent_of(facts, zero.param_persistence_threshold, zero.model_persistence_threshold)
        kept = reuse_kept_elements(
            facts,
            zero.max_reuse_distance,
            zero.param_persistence_threshold,
            workload.activation_checkpointing,
            linear_keeps_gathered(workload.deepspeed_version, workload.zero_init, zero.memory_efficient_linear),
        )
        gathered = gathered_elements(facts, zero, persistent, kept)
        in_flight = first_fetch_elements(facts, zero, persistent)
    states = cached_model_states(
        facts.psi,
        n_d,
        stage,
        sb,
        opt_dev,
        par_dev,
        persistent,
        zero.sub_group_size,
        zero.offload_param.max_in_cpu,
        trainable,
    )
    params = states.params
    # hpZ's secondary partition (psi / h elements of the 16-bit weights) lives on the partitions' remote
    # device: `Init._partition_param_sec` allocates it with `device=self.remote_device`, which `Init.__init__`
    # takes from `offload_param.device` (runtime/zero/partition_parameters.py, alike in v0.14.2 and v0.19.5;
    # docs/deepspeed-facts.md, hpZ row).
    # So it costs GPU memory only without parameter offload; with offload to CPU it is host memory.
    hpz = zero.zero_hpz_partition_size if stage == 3 else 1
    hpz_secondary = -(-facts.psi // hpz) * sb.param if hpz > 1 else 0
    if par_dev == "none":
        params += hpz_secondary
    acts = activation_phases(
        facts,
        workload.seq_len,
        workload.micro_batch,
        precision,
        workload.activation_checkpointing,
        workload.attention,
        workload.cross_entropy,
        workload.swiglu,
        workload.rmsnorm,
        workload.checkpoint_in_cpu,
        workload.autocast,
    )
    part = -(-trainable // n_d)
    offload = opt_dev != "none"
    accum = DTYPE_BYTES.get(zero.grad_accum_dtype or "", e)
    host_moments = part * sb.moments if offload and (stage < 3 or opt_dev == "cpu") else 0
    host_init = host_accum = 0
    if offload:
        host_init = states.cpu - host_moments
        if stage < 3:
            # pinned CPU staging buffer of the largest parameter (stage_1_and_2.py __init__
            # `temp_grad_buffer_for_cpu_offload`); with accumulation, per-parameter CPU accumulators
            # of this rank's partition (`async_accumulate_grad_in_cpu_via_gpu`)
            host_init += facts.largest_trainable * e
            host_accum = part * e if workload.grad_accum > 1 else 0
    inputs = StepInputs(
        stage=stage,
        elem=e,
        comm_elem=DTYPE_BYTES.get(zero.communication_data_type or "", e),
        psi=trainable,
        part=part,
        params=params,
        master=0 if offload else (trainable if stage == 0 else part) * sb.master,
        moments=0 if offload else (trainable if stage == 0 else part) * sb.moments,
        master_width=sb.master_width,
        grad_accum_width=accum,
        largest_tensor=facts.largest_trainable,
        bucket=zero.reduce_bucket_size,
        contiguous=zero.contiguous_gradients or offload,
        overlap=zero.overlap_comm,
        grad_accum=workload.grad_accum,
        acts=acts,
        torch_optimizer=torch_optimizer,
        step_elements=largest_sub_group(facts, n_d, zero.sub_group_size) if stage == 3 else part,
        offload=offload,
        gathered_bytes=gathered * e,
        prefetch_bytes=min(zero.prefetch_bucket_size, facts.psi) * e if stage == 3 else 0,
        in_flight_bytes=in_flight * e,
        gloo=gloo,
        host_init=host_init,
        host_moments=host_moments,
        host_accum=host_accum,
        reduce_scatter=zero.reduce_scatter,
        zero_init=workload.zero_init,
        frozen=facts.psi - trainable,
        foreach=not gloo if foreach is None else foreach,
        blas_workspaces=0 if gloo else CUBLAS_WORKSPACES * cublas_workspace_bytes(_compute_capability(hardware)),
        held_logits=held_logits_bytes(workload, facts.vocab),
    )
    timeline = timeline_stage3(inputs) if stage == 3 else timeline_below_stage3(inputs)
    kinds = peak(timeline).kinds()
    comm = kinds.get(BUFFERS, 0)
    activations = kinds.get(ACTIVATIONS, 0)
    breakdown = MemoryBreakdown(
        params=kinds.get(PARAMS, 0),
        gradients=kinds.get(GRADS, 0),
        optimizer_states=kinds.get(OPTIMIZER, 0),
        comm_buffers=comm,
        activations=activations,
        overhead=max(
            0, kinds.get(OVERHEAD, 0) + CUDA_CONTEXT_BYTES + int(FRAGMENTATION * (activations + comm)) + _slack(hardware)
        ),
    )
    per_node = workload.gpus_per_node
    # host memory outside the optimizer-offload timeline: offloaded parameters without optimizer
    # offload, NVMe swap buffers, checkpoints kept in CPU memory
    host_static = (0 if offload else states.cpu) + offload_host_buffers(facts.psi, n_d, stage, zero, e, trainable)
    host_static += hpz_secondary if par_dev == "cpu" else 0
    if workload.checkpoint_in_cpu and workload.activation_checkpointing:
        seq, micro = workload.seq_len, workload.micro_batch
        host_static += checkpoint_host_bytes(facts.num_layers, seq, micro, facts.hidden, precision)
    host_rank = host_static + max(map(_host_total, timeline))
    cpu = host_rank * per_node
    nvme = states.nvme * per_node

    capacity = fits = headroom = None
    notes: list[str] = []
    if hardware is not None and hardware.has_gpus and hardware.gpu.memory_bytes:
        capacity = hardware.gpu.memory_bytes
        headroom = capacity - padded(breakdown.total, safety_margin)
        fits = headroom >= 0
    elif hardware is not None:
        notes.append(f"profile {hardware.name!r} has no GPU memory size: fit cannot be judged")
    if workload.checkpoint_in_cpu and not workload.activation_checkpointing:
        notes.append("checkpoint_in_cpu has no effect without activation checkpointing")
    if stage in (1, 2) and opt_dev == "nvme":
        notes.append("stage 1/2 treat offload_optimizer.device nvme as cpu")
    if sb.master_width < 4:
        notes.append(
            f"{zero.master_dtype}_master_weights_and_grads: master weights and the optimizer's gradient copy in "
            f"{zero.master_dtype}, moments in {'16' if sb.moments < MOMENT_BYTES[workload.optimizer] else '32'} bits: "
            f"{sb.k} B of optimizer state per parameter instead of {4 + MOMENT_BYTES[workload.optimizer]}"
        )
    if facts.lora is not None:
        notes.append(
            f"LoRA r{facts.lora.rank} on {', '.join(facts.lora.targets)}: {fmt_count(trainable)} trainable parameters "
            f"of {fmt_count(facts.psi)}; gradients, master weights and moments cover the adapters, the frozen base is "
            + ("partitioned with them" if stage == 3 else "kept whole on every rank")
        )
    if stage == 3:
        notes.append(stage3_note(gathered, persistent, zero.prefetch_bucket_size, zero.max_live_parameters))
        if kept:
            notes.append(reuse_note(zero.max_reuse_distance, kept))
    if hardware is not None and hardware.host.ram_bytes and cpu > hardware.host.ram_bytes:
        notes.append(
            f"offload needs {fmt_bytes(cpu)} of host RAM per node, the node has {fmt_bytes(hardware.host.ram_bytes)}"
        )
    return MemoryEstimate(
        per_gpu=breakdown,
        cpu_bytes_per_node=cpu,
        nvme_bytes_per_node=nvme,
        gpu_capacity_bytes=capacity,
        fits=fits,
        headroom_bytes=headroom,
        notes=tuple(notes),
        timeline=timeline,
        host_per_rank=host_rank,
        host_static=host_static,
    )


@dataclass(frozen=True)
class OffloadRow:
    """One (stage, offload) option and its estimate."""

    stage: int
    offload_optimizer: str
    offload_param: str
    estimate: MemoryEstimate


def compare_options(
    model: ModelSpec,
    workload: Workload,
    *,
    hardware: HardwareProfile | None = None,
    base: ZeroSettings | None = None,
    safety_margin: float = DEFAULT_MARGIN,
) -> list[OffloadRow]:
    """Estimates for every OFFLOAD_OPTIONS row; other knobs from `base` (DeepSpeed's defaults),
    with `overlap_comm` at DeepSpeed's per-stage default (on at stage 3 only)."""
    base = base or ZeroSettings()
    rows = []
    for stage, opt, par in OFFLOAD_OPTIONS:
        zero = base.model_copy(
            update={
                "stage": stage,
                "overlap_comm": stage == 3,
                "offload_optimizer": base.offload_optimizer.model_copy(update={"device": opt}),
                "offload_param": base.offload_param.model_copy(update={"device": par}),
            }
        )
        estimate = estimate_memory(model, workload, zero, hardware=hardware, safety_margin=safety_margin)
        rows.append(OffloadRow(stage, opt, par, estimate))
    return rows
