"""Model states of one rank: bytes per parameter of each state, and where they live after ZeRO partitioning.

Model states follow the ZeRO paper (S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", arXiv:1910.02054, Sec. 3.1 and 5): mixed-precision Adam keeps
2Ψ bytes of 16-bit parameters, 2Ψ of 16-bit gradients and KΨ of optimizer states (K = 12: fp32
master weights, momentum, variance), and ZeRO partitions them over N_d data-parallel ranks:

    baseline  (2 + 2 + K)·Ψ        P_os  4Ψ + KΨ/N_d
    P_os+g    2Ψ + (2 + K)Ψ/N_d    P_os+g+p  (2 + 2 + K)Ψ/N_d

DeepSpeed 0.19.8 allocates a little more than the paper counts, and `model_states` says where
(docs/deepspeed-facts.md §4; deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, fp16/fused_optimizer.py):

- the optimizer steps on an fp32 copy of the gradient partition (`grads_fp32`, 4 B/param of the
  partition). Stage 1/2 build it per parameter group inside `step()`; stage 3 per sub-group of at
  most `sub_group_size` elements; with optimizer offload it is a persistent pinned CPU buffer.
  DeepSpeed's own estimators count it ("4_grads_32bit"), the paper does not;
- every stage 1-3 clones the partition into a separate master even when the model dtype is the
  master's (stage 1/2 `single_partition_of_fp32_groups`; stage 3 `_create_fp32_partitions` means to
  reuse a same-dtype partition, but compares the tensor's torch.device with the string device name,
  which is never equal: checked on a real 0.19.8 engine, tests/unit/test_master_weights.py);
- stage 3 keeps the gradient partitions in the model dtype (`grad_partitions_flat_buffer`),
  which DeepSpeed's ZeRO-3 estimator leaves out;
- CPU optimizer offload also keeps a 16-bit copy of the partition on the host (stage 1/2
  `param_buffer_of_bit16_for_cpu_offload_groups`, stage 3 the gradient partition buffer).

When each of these is live during the step is zerotune.model.live_bytes' business.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from zerotune.dsconfig.settings import ZeroSettings
from zerotune.schema.workload import Workload
from zerotune.units import DTYPE_BYTES

MOMENT_BYTES = {"adam": 8, "adamw": 8, "sgd": 4, "lion": 4, "adagrad": 4}
"""fp32 optimizer state per parameter, master weights excluded: Adam/AdamW momentum + variance
(Kingma & Ba 2015); SGD with momentum one buffer (torch.optim.SGD `momentum_buffer`; plain SGD
without momentum has none, we assume momentum); Lion one momentum (Chen et al. 2023,
arXiv:2302.06675); Adagrad one sum of squares (torch.optim.Adagrad `sum`)."""


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each model-state tensor, before partitioning."""

    param: int
    """working copy the forward/backward use (model dtype)"""
    grad: int
    """gradient as accumulated and reduced (model dtype, DeepSpeed's default grad-accum dtype)"""
    grad_fp32: int
    """fp32 copy of the gradient the optimizer steps on (0 when the model is fp32)"""
    master: int
    """fp32 master weights"""
    moments: int
    """optimizer moments (MOMENT_BYTES; half that in a 16-bit master dtype)"""
    master_width: int = 4
    """bytes per element of the master dtype, which the optimizer's gradient copy shares (fp32 unless
    `bf16/fp16_master_weights_and_grads`)"""

    @property
    def k(self) -> int:
        """The ZeRO paper's K: optimizer-state bytes per parameter (12 for mixed-precision Adam)."""
        return self.master + self.moments


@lru_cache(maxsize=256)
def state_bytes(
    precision: str,
    optimizer: str,
    stage: int,
    *,
    offload: bool = False,
    master_dtype: str = "fp32",
    states_16bit: bool = False,
) -> StateBytes:
    """Bytes per parameter of each state for this precision, optimizer and stage.

    Mixed precision (bf16/fp16): 16-bit params and grads, fp32 master, fp32 gradient copy.
    fp32: no separate gradient copy; a separate fp32 master at stages 1-3 (the module docstring:
    DeepSpeed clones the partition), none at stage 0, which steps the model's own tensors.
    A 16-bit `master_dtype` (ZeRO 1-3, DeepSpeed 0.19.8): the master clone and the gradient copy the
    optimizer steps on are in that dtype. On the GPU the optimizer creates its moments like the
    master (16-bit); DeepSpeed's CPU Adam keeps them fp32 unless `states_16bit`
    (`bf16_optimizer_states`).
    """
    e = DTYPE_BYTES[precision]
    moments = MOMENT_BYTES[optimizer]
    if master_dtype != "fp32" and stage >= 1:
        width = DTYPE_BYTES[master_dtype]
        if not offload or states_16bit:
            moments = moments * width // 4
        return StateBytes(param=e, grad=e, grad_fp32=width, master=width, moments=moments, master_width=width)
    if e < 4:
        return StateBytes(param=e, grad=e, grad_fp32=4, master=4, moments=moments)
    master = 4 if stage >= 1 else 0
    return StateBytes(param=4, grad=4, grad_fp32=0, master=master, moments=moments)


def config_state_bytes(workload: Workload, zero: ZeroSettings, *, offload: bool) -> StateBytes:
    """`state_bytes` of a workload under a resolved config (precision, optimizer, stage, master dtype)."""
    return state_bytes(
        workload.precision,
        workload.optimizer,
        zero.stage,
        offload=offload,
        master_dtype=zero.master_dtype,
        states_16bit=zero.optimizer_states_16bit,
    )


@dataclass(frozen=True)
class ModelStates:
    """Where the model states of one rank live, in bytes. GPU terms map onto MemoryBreakdown."""

    params: int
    grads: int
    grads_fp32: int
    optimizer: int
    cpu: int
    nvme: int


def model_states(
    psi: int,
    n_d: int,
    stage: int,
    sb: StateBytes,
    *,
    offload_optimizer: str = "none",
    offload_param: str = "none",
    persistent: int = 0,
    sub_group_size: int = ZeroSettings().sub_group_size,
    max_in_cpu: int = ZeroSettings().offload_param.max_in_cpu,
    trainable: int | None = None,
) -> ModelStates:
    """Model-state bytes of one rank for Ψ = `psi` parameters over N_d = `n_d` ranks.

    GPU: stage 0 replicates everything; stage 1 partitions master + moments (the ZeRO paper's
    P_os); stage 2 also the gradients (P_os+g, `grads_in_partition`); stage 3 also the parameters
    (P_os+g+p), except `persistent` elements that stay gathered on every rank. Partitions are
    ⌈Ψ/N_d⌉ elements (DeepSpeed pads the last one).
    Offload (docs/deepspeed-facts.md §2.3, §4): stage 1/2 treat any offload device as CPU; the GPU then
    holds no optimizer state and (stage 2) no gradient partition. Stage 3 `nvme` keeps
    min(partition, max_in_cpu) parameter elements in host RAM and the rest on NVMe; NVMe optimizer
    state lives entirely on NVMe. The host pinned swap buffers are in `offload_host_buffers`.
    With `sb.grad_fp32 = 0` and K = `sb.k` this is exactly the paper's formula.
    `trainable`: the elements with requires_grad when fewer than Ψ (a LoRA job's adapters,
    zerotune.model.lora): gradients, master weights, moments and their offloaded copies cover only
    those; the parameters are all Ψ, whole in the model dtype at stage 0-2 and partitioned at stage 3.
    """
    t = psi if trainable is None else trainable
    part = -(-t // n_d)
    opt_dev = offload_optimizer if stage > 0 else "none"
    if stage in (1, 2) and opt_dev == "nvme":
        opt_dev = "cpu"
    par_dev = offload_param if stage == 3 else "none"
    if stage == 0:
        return ModelStates(psi * sb.param, t * sb.grad, t * sb.grad_fp32, t * sb.k, 0, 0)
    if stage == 3:
        params = persistent * sb.param
        if par_dev == "none":
            params += -(-(psi - persistent) // n_d) * sb.param
    else:
        params = psi * sb.param
    cpu = nvme = 0
    param_part = -(-psi // n_d)
    if par_dev == "cpu":
        cpu += param_part * sb.param
    elif par_dev == "nvme":
        in_cpu = min(param_part, max_in_cpu)
        cpu += in_cpu * sb.param
        nvme += (param_part - in_cpu) * sb.param
    if opt_dev == "none":
        grads = t * sb.grad if stage == 1 else part * sb.grad
        step_elems = min(part, sub_group_size) if stage == 3 else part
        return ModelStates(params, grads, step_elems * sb.grad_fp32, part * sb.k, cpu, nvme)
    # Optimizer offload: master + moments + gradient (fp32 unless a 16-bit master dtype), and a
    # model-dtype partition copy.
    offloaded = part * (sb.master_width + sb.moments + sb.master_width)
    cpu += part * sb.param
    if opt_dev == "nvme":
        nvme += offloaded
    else:
        cpu += offloaded
    grads = t * sb.grad if stage == 1 else 0
    return ModelStates(params, grads, 0, 0, cpu, nvme)


@lru_cache(maxsize=8192)
def cached_model_states(
    psi: int,
    n_d: int,
    stage: int,
    sb: StateBytes,
    opt: str,
    par: str,
    persistent: int,
    sub_group: int,
    in_cpu: int,
    trainable: int | None = None,
) -> ModelStates:
    """model_states memoised: the search repeats the same states under many bucket settings."""
    return model_states(
        psi,
        n_d,
        stage,
        sb,
        offload_optimizer=opt,
        offload_param=par,
        persistent=persistent,
        sub_group_size=sub_group,
        max_in_cpu=in_cpu,
        trainable=trainable,
    )


def offload_host_buffers(
    psi: int, n_d: int, stage: int, zero: ZeroSettings, elem_bytes: int, trainable: int | None = None
) -> int:
    """Pinned host swap buffers of one rank for stage-3 NVMe offload (docs/deepspeed-facts.md §2, §4.2).

    Optimizer: `buffer_count` fp32 buffers of the largest sub-group (swap_tensor/optimizer_utils.py
    SwapBufferManager). Its sub-groups hold the trainable elements only (stage3.py
    `_get_trainable_parameter_groups`): `trainable` of Ψ for a LoRA job, whose buffers are the adapters'.
    Parameters: `buffer_count` × `buffer_size` elements in the model dtype (partitioned_param_swapper.py).
    """
    if stage != 3:
        return 0
    total = 0
    if zero.offload_optimizer.device == "nvme":
        sub_group = min(-(-(psi if trainable is None else trainable) // n_d), zero.sub_group_size)
        total += zero.offload_optimizer.buffer_count * sub_group * 4
    if zero.offload_param.device == "nvme":
        total += zero.offload_param.buffer_count * zero.offload_param.buffer_size * elem_bytes
    return total
