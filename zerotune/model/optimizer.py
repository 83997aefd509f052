"""The optimizer step at the accumulation boundary: the grad-norm all-reduce, the update, the offload
transfers (zerotune/model/offload.py), and for stage 1/2 the all-gather of the updated 16-bit
partitions (`all_gather_dp_groups`).

The update's seconds, first of:
1. `overheads.optimizer_params_per_s` (fitted by `zerotune calibrate`): DeepSpeed's whole step (grad
   norm, clip, Adam, partition copies, unflatten) in local-partition params/s, on the device that runs
   it without offload (the GPU, or the CPU of a CPU host). Under optimizer offload on a GPU host the
   update runs on the CPU and the next line applies instead;
2. CPU Adam (`host.cpu_adam_params_per_s`) under offload or on a CPU host;
3. fused Adam on GPU memory bandwidth (`gpu_adam_bytes` / HBM bandwidth): the Adam kernel
   only, so it is a lower bound of DeepSpeed's step.

On a CPU host the step's fresh buffers are priced apart (`fresh_step_buffers`): their first touch
costs per byte only above glibc's mmap threshold (zerotune/model/host_memory.py), so a rate per
parameter fitted on small partitions cannot carry it to large ones.
"""

from __future__ import annotations

from zerotune.model.host_memory import fresh_write_s
from zerotune.model.offload import (
    CPU_ADAM_PUBLISHED_RANGE,
    DEFAULT_CPU_ADAM_PARAMS_PER_S,
    cpu_adam_rate,
    node_cpu_adam,
    optimizer_transfer_s,
    pageable_note,
    thread_cpu_adam,
)
from zerotune.model.setup import StepSetup
from zerotune.model.states import config_state_bytes
from zerotune.model.timeline import Timeline
from zerotune.units import fmt_bytes

CPU_ADAM_FALLBACK = "CPU Adam rate not in the profile"
"""How the note that a step rests on the fallback CPU Adam rate begins (recommend looks for it to
warn)."""


def gpu_adam_bytes(s: StepSetup) -> int:
    """HBM traffic of one fused Adam update per parameter: read master, gradient copy and moments,
    write master and moments, and the working copy where the master is a separate tensor (stages
    1-3). With fp32 master weights under mixed precision 4+4+8 + 4+8 + 2 = 30 B; with bf16 master,
    gradient and moments 2+2+4 + 2+4 + 2 = 16 B. The update is memory-bound on GPUs."""
    sb = config_state_bytes(s.workload, s.zero, offload=False)
    width = sb.master_width
    return 2 * (width + sb.moments) + width + (sb.param if sb.master else 0)


def stepped_tensors(s: StepSetup) -> tuple[int, ...]:
    """Elements of each tensor the optimizer steps on its own: every parameter at stage 0 (the
    engine hands the model's parameters to the optimizer); the rank's flat fp32 partition at stage 1/2
    (stage_1_and_2.py `single_partition_of_fp32_groups`, one per parameter group); at stage 3 one flat
    partition per sub-group, cut where the partition elements reach `sub_group_size`
    (stage3.py `_create_fp16_sub_groups`)."""
    if s.stage == 0:
        return s.prep.backward_tensors
    if s.stage in (1, 2):
        return (s.prep.params // s.n,)
    groups, size = [], 0
    for numel in reversed(s.prep.backward_tensors):  # model order
        size += -(-numel // s.n)
        if size >= s.zero.sub_group_size:
            groups.append(size)
            size = 0
    return (*groups, size) if size else tuple(groups)


def fresh_step_buffers(s: StepSetup) -> float:
    """Seconds of first touch (zerotune/model/host_memory.py) of the buffers a CPU host's optimizer step
    allocates anew, per tensor stepped (`stepped_tensors`); 0 on a GPU and under optimizer offload
    (DeepSpeed's CPU Adam updates in place, from the fp32 partition's own gradient buffer).

    - stage 1-3: DeepSpeed first flattens the partition's gradients into a new tensor, then casts it to
      the master dtype, a second new tensor unless the model already is fp32 (stage_1_and_2.py `step`:
      `flatten(self.averaged_gradients[i])` then `.to(...)`; stage3.py
      `_prepare_fp32_grad_for_sub_group`); a 16-bit model at stage 0 casts each gradient to an fp32
      copy (fp16/unfused_optimizer.py `step`);
    - the update: on a CPU host without offload the optimizer is a torch one (what `zerotune bench`
      passes there, zerotune/bench/config.py), and torch's AdamW runs its single-tensor loop on CPU
      (torch/optim/optimizer.py `_default_to_fused_or_foreach`: foreach kernels are for accelerator
      devices only), which makes two temporaries of each stepped tensor in the master dtype
      (torch/optim/adam.py `_single_tensor_adam`: `exp_avg_sq.sqrt()` and its quotient by the bias
      correction), written whole."""
    rate = s.first_touch_Bps
    if not rate or s.zero.offload_optimizer.device != "none":
        return 0.0
    master = config_state_bytes(s.workload, s.zero, offload=False).master_width
    seconds = 0.0
    for numel in stepped_tensors(s):
        buffers = [numel * master, numel * master]  # the update's two temporaries
        if s.stage >= 1:
            buffers.append(numel * s.elem_bytes)  # the flattened gradients
        if s.elem_bytes != master:
            buffers.append(numel * master)  # their cast to the master dtype
        seconds += sum(fresh_write_s(b, b, rate) for b in buffers)
    return seconds


def optimizer_step(s: StepSetup, tl: Timeline) -> tuple[float, float]:
    """Optimizer step at the boundary: (optimizer seconds, exposed transfer seconds)."""
    z, hw = s.zero, s.hardware
    part = s.prep.params / s.n if s.stage >= 1 else s.prep.params
    if s.stage >= 1 and s.n > 1:  # global grad norm for clipping: a one-element all-reduce
        tl.collective(
            "all_reduce", 4, s.cost.seconds("all_reduce", 4), "all_reduce grad norm", "step", concurrent=False
        )
    offload = z.offload_optimizer.device != "none" and s.stage >= 1
    transfer = 0.0
    fitted = hw.overheads.optimizer_params_per_s
    if fitted and not (offload and hw.has_gpus):
        opt = part / fitted
    elif offload or not hw.has_gpus:
        opt = part / cpu_adam_rate(s)
        rate, origin = node_cpu_adam(hw)
        if origin not in ("profile", "fallback"):
            s.notes.append(origin)
        threads = s.workload.omp_threads
        if threads is not None and hw.has_gpus and cpu_adam_rate(s) < rate / max(s.workload.gpus_per_node, 1):
            per_thread, why = thread_cpu_adam(hw)
            s.notes.append(
                f"CPU Adam on {threads} OpenMP thread(s) per rank (OMP_NUM_THREADS={threads}: torchrun / "
                f"accelerate launch leave it at 1): {threads * per_thread:.3g} params/s per rank ({why}), "
                "not the rank's share of every core"
            )
        if origin == "fallback":
            low, high = CPU_ADAM_PUBLISHED_RANGE
            s.notes.append(
                f"{CPU_ADAM_FALLBACK}: {DEFAULT_CPU_ADAM_PARAMS_PER_S:.1e} params/s per node "
                f"assumed; published DeepSpeed rates span {low:.2g} (10-core Xeon Silver) to {high:.2g} (DGX-2 "
                f"host), so the optimizer's {opt:.3g} s may be off several-fold either way: `zerotune probe` "
                "on the host measures it"
            )
    else:
        bw = hw.gpu.hbm_bandwidth_Bps if hw.gpu and hw.gpu.hbm_bandwidth_Bps else None
        if bw is None:
            s.notes.append("no HBM bandwidth in the profile: optimizer step assumed 1 ms/100M params")
            opt = part * 1e-11
        else:
            opt = part * gpu_adam_bytes(s) / bw
    if offload or (s.stage == 3 and z.offload_param.device != "none"):
        transfer = optimizer_transfer_s(s, part)
        note = pageable_note(s)
        if note:
            s.notes.append(note)
    if not fitted and not (offload and hw.has_gpus):
        s.notes.append(
            "optimizer_params_per_s not in the profile: the step's optimizer is Adam alone "
            "(grad norm, clipping and partition copies left out)"
        )
    tl.host(opt, "optimizer step" + (" (CPU Adam)" if offload or not hw.has_gpus else ""), "optimizer")
    fresh = fresh_step_buffers(s)
    if fresh:
        tl.host(fresh, "first touch of the step's fresh buffers" if tl.detail else "", "copy")
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
    return opt + fresh, transfer
