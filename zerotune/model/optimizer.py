"""The optimizer step at the accumulation boundary: the grad-norm all-reduce, the update, the offload
transfers (zerotune/model/offload.py), and for stage 1/2 the all-gather of the updated 16-bit
partitions (`all_gather_dp_groups`).

The update's seconds, first of:
1. `overheads.optimizer_params_per_s` (fitted by `zerotune calibrate`): DeepSpeed's whole step (grad
   norm, clip, Adam, partition copies, unflatten) in local-partition params/s, on the device that runs
   it without offload (the GPU, or the CPU of a CPU host). Under optimizer offload on a GPU host the
   update runs on the CPU and the next line applies instead;
2. CPU Adam (`host.cpu_adam_params_per_s`) under offload or on a CPU host;
3. on a GPU, DeepSpeed 0.19.8's whole step as its source runs it (`gpu_step`): the HBM bytes every pass
   of the step moves (overflow check, gradient norm, gradient flatten and cast, unscale/clip, the
   update, the copy back to the 16-bit weights) over HBM bandwidth, and the host's eager ops, one
   `HOST_OP_S` each, issued per parameter tensor; the host runs ahead of the device, so the step costs
   the larger of the two, except where a per-tensor host sync makes them take turns (stage 0's
   overflow check).

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


HOST_OP_S = 8.5e-6
"""Host seconds of one eager PyTorch op on a CUDA tensor outside autograd (the optimizer step runs
under no_grad): the midpoints of the per-layer costs in 'From PyTorch op to kernel launch'
(https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html, its table): Python
bytecode ~1 us, pybind11 ~1 us, ATen dispatcher 1-2 us, backend 1-5 us, cudaLaunchKernel 1-3 us on
CUDA 12+ drivers (autograd's 1-3 us left out), 1 + 1 + 1.5 + 3 + 2 = 8.5 us; the page puts the whole
at ~5-25 us per op. Not fitted: the H200 benches (data/gpu/2026-11-28-NVIDIA-H200) are its check."""

CHECK_OPS = 6
"""Eager ops per gradient tensor of DeepSpeed's overflow check: `amax`, `amin`, two `isfinite`,
`logical_and`, `logical_not` (runtime/utils.py:205-228 `has_inf_or_nan`); stage 1/2 add the count's
`+=` (zero/stage_1_and_2.py:3229-3235)."""

NORM_OPS = 2
"""Eager ops per gradient tensor of the ZeRO gradient norm: the cast to the norm dtype and the norm
(zero/stage_1_and_2.py:2684 and zero/stage3.py:2457: `.to(get_norm_dtype())` then the norm;
the `.to(device)` there is a no-op on a tensor already on the device)."""

NORM_DTYPE_BYTES = 8
"""ZeRO's gradient norms accumulate in fp64 on devices that have it (zero/utils.py:59-63
`get_norm_dtype`): each gradient is cast to an fp64 copy (written, then read by the norm)."""


def adam_bytes(s: StepSetup) -> int:
    """HBM bytes of the update per parameter, on the master width W (the gradient the optimizer steps
    on has it too) and the moments' bytes M (both together, m = M/2 each):

    - DeepSpeed's FusedAdam, one multi-tensor kernel (csrc/adam/multi_tensor_adam.cu): reads parameter,
      gradient and both moments, writes parameter and moments: 3W + 2M (fp32: 28 B);
    - torch's Adam/AdamW on CUDA, which defaults to foreach when `fused` is unset
      (torch/optim/optimizer.py `_default_to_fused_or_foreach`): one pass per op of `_multi_tensor_adam`
      (torch/optim/adam.py): AdamW's decay `_foreach_mul_(params)` 2W (AdamW's default weight_decay is
      1e-2; Adam's 0 skips it), `_foreach_lerp_(exp_avgs, grads)` 2m + W, `_foreach_mul_(exp_avg_sqs)`
      2m, `_foreach_addcmul_(exp_avg_sqs, grads, grads)` 2m + W, `_foreach_sqrt` into a new tensor 2m,
      `_foreach_div_` 2m, `_foreach_add_(eps)` 2m, `_foreach_addcdiv_(params, exp_avgs, denom)` 2W + 2m:
      4W + 14m, + 2W for AdamW (fp32: 80 B)."""
    sb = config_state_bytes(s.workload, s.zero, offload=False)
    width, moments = sb.master_width, sb.moments
    if not s.workload.torch_optimizer or s.workload.optimizer not in ("adam", "adamw"):
        return 3 * width + 2 * moments
    decay = 2 * width if s.workload.optimizer == "adamw" else 0
    return decay + 4 * width + 7 * moments


def gpu_step_bytes(s: StepSetup) -> tuple[int, int]:
    """HBM bytes per local parameter of DeepSpeed 0.19.8's optimizer step on a GPU without offload:
    (the overflow check's, the rest's). e: the model's element bytes, W: the master width.

    - stage 0, 16-bit model: the engine wraps a torch optimizer in FP16_UnfusedOptimizer and FusedAdam
      in FP16_Optimizer, in bf16 mode for bf16 (engine.py:2321 `_do_optimizer_sanity_check`, 2555-2610
      `_configure_fp16_optimizer`). Unfused (fp16/unfused_optimizer.py:197-241 `step`): the overflow
      check's `amax` + `amin` of each gradient 2e; its norm `p.float().norm()` e + 2W (utils.py:578); the
      cast of each gradient `.to(fp32)` e + W; unscale `mul_` 2W; the update; the copy back W + e.
      Fused (fp16/fused_optimizer.py:256-364 `step`): check 2e, cast e + W and `_flatten_dense_tensors` 2W, the
      flat norm W, unscale 2W, the update, the copy back W + e;
    - stage 0, fp32 model: no wrapper; the engine clips with torch's `clip_grad_norm_` (engine.py:3511
      `_take_model_step`): the norm W, the scaling 2W, then the update;
    - stage 1/2 (zero/stage_1_and_2.py:3013-3146 `step`): check 2e (`has_overflow_partitioned_grads_serial`),
      the fp64 norm e + 2 x 8 (`get_grad_norm_direct`), the flatten of the partition's gradients 2e,
      their cast to the master dtype e + W (none when the model is already in it), unscale 2W (clipping
      is on by default, gradient_clipping 1.0), the update, the copy back W + e;
    - stage 3 (zero/stage3.py:2873-2925 `step`): the check on the flat gradient buffer, `isinf(...).any()`
      and `isnan(...).any()`, each reading e and writing then reading a 1-byte mask, 2(e + 2)
      (stage3.py:3013-3014); the fp64 norm e + 16 (`get_grad_norm_direct`); per sub-group the flatten
      2e and cast e + W (stage3.py:2686 `_prepare_fp32_grad_for_sub_group`), unscale 2W, the update, the
      copy back W + e (stage3.py:2858 `_reassign_or_swap_out_partitioned_parameters`)."""
    e = s.elem_bytes
    width = config_state_bytes(s.workload, s.zero, offload=False).master_width
    update = adam_bytes(s)
    if s.stage == 0:
        if e >= width:
            return 0, 3 * width + update
        if s.workload.torch_optimizer:  # FP16_UnfusedOptimizer
            return 2 * e, (e + 2 * width) + (e + width) + 2 * width + update + (width + e)
        return 2 * e, (e + 3 * width) + width + 2 * width + update + (width + e)
    cast = e + width if e != width else 0
    norm = e + 2 * NORM_DTYPE_BYTES
    check = 2 * (e + 2) if s.stage == 3 else 2 * e
    return check, norm + 2 * e + cast + 2 * width + update + (width + e)


def gpu_step_host_ops(s: StepSetup) -> tuple[int, int]:
    """Eager ops the host issues in the step: (those of the overflow check at stage 0, which syncs the
    host on every tensor, the rest). Per gradient tensor the step loops over: stage 0 the check's
    CHECK_OPS (the truthiness of each tensor's result, runtime/utils.py:291-295
    `has_overflow_serial`, waits for the device), the norm's 4 (`float`, `norm`, `**`, `+=`:
    utils.py:568-579) where unfused, the cast, the unscale and the copy back (unfused) or the cast and
    the copy back (fused); stage 1/2 the check's CHECK_OPS + 1 and the norm's NORM_OPS over the
    partition's tensors; stage 3 the norm's NORM_OPS over every parameter's partition. Plus one per
    tensor the optimizer steps (`stepped_tensors`: torch's foreach Adam and FusedAdam both walk their
    tensor lists in Python); an fp32 model at stage 0 issues only those (torch's clipping is foreach)."""
    tensors = len(s.prep.backward_tensors)
    stepped = len(stepped_tensors(s))
    if s.stage == 0:
        if s.elem_bytes >= 4:
            return 0, stepped
        per = (4 + 3) if s.workload.torch_optimizer else 2
        return CHECK_OPS * tensors, per * tensors + stepped
    if s.stage in (1, 2):
        local = -(-tensors // s.n) + (1 if s.n > 1 else 0)  # the partition's tensors, one cut at each edge
        return 0, (CHECK_OPS + 1 + NORM_OPS) * local + stepped
    return 0, NORM_OPS * tensors + stepped


def gpu_step(s: StepSetup, part: float, bandwidth: float) -> float:
    """Seconds of the GPU optimizer step (module docstring): the stage-0 overflow check takes turns
    with the host, the rest overlaps it."""
    check_bytes, rest_bytes = gpu_step_bytes(s)
    synced_ops, ops = gpu_step_host_ops(s)
    synced = part * check_bytes / bandwidth + synced_ops * HOST_OP_S
    return synced + max(part * rest_bytes / bandwidth, ops * HOST_OP_S)


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
            opt = gpu_step(s, part, bw)
    if offload or (s.stage == 3 and z.offload_param.device != "none"):
        transfer = optimizer_transfer_s(s, part)
        note = pageable_note(s)
        if note:
            s.notes.append(note)
    if not fitted and not offload and hw.has_gpus:
        s.notes.append(
            "optimizer_params_per_s not in the profile: the optimizer step is DeepSpeed's passes over HBM "
            "(overflow check, norm, cast, clip, the update, copy back) and its per-tensor host ops"
        )
    elif not fitted and not hw.has_gpus:
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
