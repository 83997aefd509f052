"""ZeRO-Offload / ZeRO-Infinity transfers (DeepSpeed 0.19.8 `stage_1_and_2.py`, `stage3.py`,
`swap_tensor/`): what crosses PCIe and NVMe, when, and whether the step waits for it.

Gradients, every reducing micro-step (`gradient_bytes_per_element`, per element of this rank's
partition, issued on the reduction stream after each bucket: concurrent with `overlap_comm`, on the
compute stream otherwise):
- stage 1/2 (`copy_grads_in_partition`): unless the step is one lone backward (GA 1),
  `async_accumulate_grad_in_cpu_via_gpu` copies the CPU accumulator to the GPU, adds, and copies it
  back (2 x 16-bit); at the boundary the gradient is converted to the master dtype on the GPU and
  copied into the fp32 CPU buffer (`async_inplace_copy_grad_to_fp32_buffer_from_gpu`: `src_tensor.to(
  master_weights_and_grads_dtype)` before the copy; the compact fp32 partition buffer path converts with
  `source.to(destination.dtype)` likewise): 4 B per element over PCIe, 2 B with a 16-bit master;
- stage 3 (`partition_grads`): the partition lands in the CPU `grad_partitions_flat_buffer` and is
  brought back to the GPU to accumulate or to hand on (2 x grad-accum dtype every micro-step), and
  at the boundary converted on the GPU to the master dtype and copied to the optimizer's gradient (4 B
  fp32; 2 B under `bf16/fp16_master_weights_and_grads`).
Optimizer step (`optimizer_transfer_s`, all blocking):
- CPU Adam on the partition, then the updated 16-bit partition goes back to the GPU. At stage 3 it
  is copied per sub-group (`_post_step`/`_reassign_or_swap_out_partitioned_parameters`), each copy
  synchronous after that sub-group's update, so it does not hide under the next sub-group's Adam:
  `sub_group_size` does not change the step time this way;
- stage 3 copies each updated master partition into the 16-bit partition wherever that lives
  (`_reassign_or_swap_out_partitioned_parameters`: `fp16_partitioned_groups_flat[i].copy_(
  fp32_partitioned_groups_flat[i])`). Under `offload_param: cpu` the 16-bit partition is the host's
  flat buffer (`_create_fp16_partitions_with_defragmentation`), so with the optimizer offloaded too the
  copy stays in host memory (nothing crosses PCIe), and with the optimizer on the GPU the updated
  master goes device -> host. That copy is blocking, and torch converts dtypes of a blocking CPU<->GPU
  copy on the CPU (aten/src/ATen/native/cuda/Copy.cu `copy_kernel_cuda`: "For blocking transfers
  conversions are performed on CPU"), so the master's own width crosses (4 B fp32), then the host
  narrows it (`param_copy_bytes`);
- NVMe optimizer (stage 3; stage 1/2 treat nvme as cpu): fp32 master, m, v are read before and
  written after each sub-group's update (12 + 12 B), and the fp32 gradients were swapped out at the
  boundary and are read back (4 + 4 B): 32 B per element for Adam (`nvme_optimizer_bytes`);
- `offload_param: nvme`: the updated 16-bit parameters are written back to NVMe.
Activation checkpoints under cpu_checkpointing (`checkpoint_copy_s`): each block input but the last goes
to pinned host memory in forward and comes back in backward, on the offload engine's own stream
(runtime/activation_checkpointing/offload_activations.py), so the copies run under that pass's
compute and only what outlasts it is exposed.

Pinned or pageable (`pin_memory` of each offload section; True by default since DeepSpeed 0.19.5,
False before: PR #8207, offload_config.py): a copy to or from pageable host memory is staged by the
driver through its own pinned buffer, so it runs slower (`host_copy_Bps`), and it is synchronous with
respect to the host (CUDA Runtime API, "API synchronization behavior": for pageable memory even
cudaMemcpyAsync "might be synchronous with respect to host"). PR #8207 measured what that costs
stage 3's gradient offload: "a synchronous, low-bandwidth (staged pageable) path with no overlap
against backward compute". So a gradient copy into a pageable buffer stalls the training loop
(`gradient_copies_overlap`) instead of queueing on the reduction stream. Which buffer each copy uses:
gradients the optimizer's (`grad_partitions_flat_buffer` at stage 3, the fp32 partition and the
accumulator at stage 1/2: `offload_optimizer.pin_memory`); stage-3 parameter fetches the host
partition (`offload_param.pin_memory`); the step's stage-3 copy of the updated parameters converts
dtypes, and torch converts a blocking CPU<->GPU copy on the CPU into a fresh, pageable temporary
(Copy.cu above), so that copy is pageable whatever the config says; stage 1/2 copy through the
16-bit staging buffer `param_buffer_of_bit16_for_cpu_offload_groups` (pinned with
`offload_optimizer.pin_memory`, stage_1_and_2.py).

Rates come from the profile (`host.h2d_pinned_Bps`, `host.h2d_pageable_Bps`, `host.nvme_read_Bps`/
`nvme_write_Bps`, `host.cpu_adam_params_per_s`, measured by the probe or sourced in the catalog) or
the stated defaults below. CPU-side dtype conversions are not modelled separately (they run at host
memory bandwidth, well above PCIe).
"""

from __future__ import annotations

from zerotune.model.activations import checkpoint_host_bytes
from zerotune.model.setup import StepSetup
from zerotune.model.states import config_state_bytes
from zerotune.schema.hardware import HardwareProfile
from zerotune.units import DTYPE_BYTES

DEFAULT_PCIE_Bps = 25e9
"""Host<->device copy rate when the profile has none: ~80% of PCIe 4.0 x16's 31.5 GB/s."""

PAGEABLE_SHARE = 10.0 / 25.7
"""Pageable host->device copy rate as a share of the pinned rate of the same box, where the profile has no
probed `host.h2d_pageable_Bps`: CUDA samples' bandwidthTest on a DGX A100 (A100-SXM4-80GB, 32 MB
transfers) measured pinned 25.7 GB/s host->device and 25.8 device->host, pageable 10.0 and 10.8
(github.com/gengwg/gpu nvda_gpu_benchmark.md). The same page's A100 80GB PCIe server measured pageable
3.3 of pinned 17.3 host->device, and an NVIDIA engineer reports 5-6 GB/s pageable against 11-12 pinned on
PCIe 3 (rapidsai/dask-cuda#98): the share depends on the host (0.2-0.5); the DGX figure sits inside."""

DEFAULT_CPU_ADAM_PARAMS_PER_S = 1e9
"""CPU Adam updates/s per node when the profile has none: DeepSpeedCPUAdam's AVX-512 kernel
(Ren et al. 2021, ZeRO-Offload, §4.1: about 1B params/s on a 2-socket Xeon node)."""

CPU_ADAM_PUBLISHED_RANGE = (0.062e9, 1.6e9)
"""Published DeepSpeedCPUAdam rates per node, params/s, slowest and fastest found: 1.35B params in 21.8 s
on a 10-core Xeon Silver 4210R (DeepSpeed issue #1635, `update_optims` timer, ZeRO-3 offload, one RTX
3090); 10.28B in 6.2-6.5 s on a DGX-2's 2x24-core Xeon (DeepSpeed ZeRO-Offload tutorial log, the
catalog's dgx2-v100). The fallback sits inside it; where the profile has no measured rate the estimate
says the optimizer time may be off several-fold either way."""

CPU_ADAM_PER_CORE_AVX512 = 1.6e9 / 48
"""DeepSpeedCPUAdam updates/s per core with AVX-512: the DGX-2 anchor above (1.6e9 params/s on 2x
24-core Xeon Platinum 8168, AVX-512; the DeepSpeed ZeRO-Offload tutorial log) per core. DeepSpeed's
kernel runs one OpenMP thread per core over SIMD_WIDTH floats at a time (csrc/includes/simd.h: 16 with
AVX-512, 8 with AVX2), so an AVX2 core does half (`SIMD_FACTOR`). The slow anchor (10-core Xeon Silver
4210R, 0.062e9) is 5x below what this per-core figure gives: Silver parts have one AVX-512 unit and that
run timed a single rank; the model keeps the DGX-class anchor and says the host rate is derived."""

SIMD_FACTOR = {"avx512": 1.0, "avx2": 0.5}

CPU_ADAM_ONE_THREAD = 536.9e6 / 1.93
"""Optimizer-offload Adam updates/s of ONE thread when no rank shares it (AVX-512 host): the published
microbenchmark of a CPU-offloaded fp32 AdamW step on an 8xH100 node's host, 1 rank on 1 thread, 512 tensors
of 1Mi elements (536.9M) in 1.93 s (ISEEKYAN/Megatron-LM#188, 2026-08-25; a second thread gains 6%, 1.81 s:
one core's arithmetic is not what bounds it). Not DeepSpeedCPUAdam: its fused loop streams fewer
bytes per element, while a stage-3 offload step on the same thread also norms, unscales and converts the
partition, so it is the same order. A lone thread does not share the node's memory bandwidth, so it runs
~8x the per-core anchor above (that anchor's 48 cores ran at once)."""

_AVX512 = ("xeon platinum", "xeon gold", "xeon silver", "xeon bronze", "xeon w-", "epyc 9")
"""CPU model names with AVX-512: Xeon Scalable (Skylake-SP and later: Intel ARK), AMD EPYC 9004/9005
(Zen 4/5). Other Xeons (E5/E7 v1-v4) and EPYC 7002/7003 (Zen 2/3) stop at AVX2."""


def _simd(cpu_model: str | None) -> str:
    """The widest SIMD DeepSpeedCPUAdam uses on this CPU (AVX2 where the model is unknown)."""
    name = (cpu_model or "").lower()
    return "avx512" if any(tag in name for tag in _AVX512) else "avx2"


def host_cpu_adam(cpu_model: str | None, cores: int | None) -> tuple[float, str] | None:
    """CPU Adam params/s of a node from its CPUs (cores x the per-core anchor x SIMD width), or None
    when the profile does not name them."""
    if not cpu_model or not cores:
        return None
    simd = _simd(cpu_model)
    rate = cores * CPU_ADAM_PER_CORE_AVX512 * SIMD_FACTOR[simd]
    return rate, (
        f"CPU Adam {rate:.2g} params/s per node derived from the host CPUs ({cpu_model}, {cores} cores, "
        f"{simd.upper()}) at the DGX-2 anchor's {CPU_ADAM_PER_CORE_AVX512 / 1e6:.0f}M params/s per AVX-512 core"
    )


REFERENCE_HOSTS: tuple[tuple[tuple[str, ...], str, int, str], ...] = (
    (("V100",), "2x Intel Xeon Platinum 8168", 48, "NVIDIA DGX-2 datasheet"),
    (("A100", "A800"), "2x AMD EPYC 7742", 128, "NVIDIA DGX A100 datasheet: dual AMD Rome 7742, 128 cores"),
    (("H100", "H800", "H200", "H20"), "2x Intel Xeon Platinum 8480C", 112,
     "NVIDIA DGX H100/H200 datasheets: dual Xeon Platinum 8480C, 112 cores"),
    (("B200",), "2x Intel Xeon Platinum 8570", 112, "NVIDIA DGX B200 datasheet: 2 Xeon Platinum 8570, 112 cores"),
)  # fmt: skip
"""The host NVIDIA builds around each data-center GPU (its DGX), assumed where a GPU profile names no
host CPU: HGX boards from other vendors carry CPUs of the same class. Consumer and workstation GPUs
have no reference host (the fallback applies, and says so)."""


def reference_host(gpu_name: str | None) -> tuple[str, int, str] | None:
    if not gpu_name:
        return None
    for tags, model, cores, source in REFERENCE_HOSTS:
        if any(tag in gpu_name for tag in tags):
            return model, cores, source
    return None


DEFAULT_NVME_Bps = 3e9
"""NVMe sequential rate per node when the profile has none (one PCIe 4.0 SSD)."""


def nvme_optimizer_bytes(s: StepSetup) -> int:
    """Bytes per partition element the stage-3 NVMe optimizer swapper reads per step, and writes again:
    master, moments and gradient (`_swap_out_offload_fp32_gradients` writes the gradient at the
    boundary; the update reads all three and writes back master and moments). 4 + 8 + 4 = 16 B for
    mixed-precision Adam; less with a 16-bit master or 16-bit moments (memory.py `state_bytes`)."""
    sb = config_state_bytes(s.workload, s.zero, offload=True)
    return 2 * sb.master_width + sb.moments


def pcie(hardware: HardwareProfile) -> float:
    return hardware.host.h2d_pinned_Bps or DEFAULT_PCIE_Bps


def host_copy_Bps(hardware: HardwareProfile, pinned: bool) -> float:
    """Host<->device copy rate of one rank to or from pinned or pageable host memory (module docstring)."""
    if pinned:
        return pcie(hardware)
    return hardware.host.h2d_pageable_Bps or pcie(hardware) * PAGEABLE_SHARE


def pageable_note(s: StepSetup) -> str | None:
    """The note a step with pageable offload buffers carries (module docstring), or None."""
    z = s.zero
    sections = [
        name
        for name, section in (("offload_optimizer", z.offload_optimizer), ("offload_param", z.offload_param))
        if section.device == "cpu" and not section.pin_memory and (s.stage == 3 or name == "offload_optimizer")
    ]
    if not sections or not s.hardware.has_gpus:
        return None
    rate = host_copy_Bps(s.hardware, False)
    return (
        f"{' and '.join(sections)} pin_memory false: host copies from pageable memory at {rate / 1e9:.3g} GB/s, "
        "synchronous with the training loop (DeepSpeed's default before 0.19.5)"
    )


def gradient_copies_overlap(s: StepSetup) -> bool:
    """Can the offloaded-gradient copies queue on the reduction stream, or do they stall the training
    loop? Only copies into pinned buffers are asynchronous (module docstring)."""
    return s.zero.offload_optimizer.pin_memory


def _nvme(s: StepSetup, write: bool) -> float:
    host = s.hardware.host
    rate = (host.nvme_write_Bps if write else None) or host.nvme_read_Bps or DEFAULT_NVME_Bps
    return rate / max(s.workload.gpus_per_node, 1)


def param_source_Bps(s: StepSetup) -> float:
    """Per-rank rate stage-3 parameters arrive at from their offload device."""
    if s.zero.offload_param.device == "nvme":
        return _nvme(s, write=False)
    return host_copy_Bps(s.hardware, s.zero.offload_param.pin_memory)


def cpu_adam_rate(s: StepSetup) -> float:
    """CPU Adam params/s of one rank: the node's rate (`host.cpu_adam_params_per_s`, all its cores, or
    the fallback) shared by the ranks on the node, which run their updates at the same time; where each
    rank runs on `omp_threads` OpenMP threads (Workload.omp_threads), at most that many threads' rate.

    Why the launcher matters: DeepSpeedCPUAdam's update is an OpenMP loop (csrc/includes/cpu_adam.h
    Step_AVX, `#pragma omp parallel for`; built with -fopenmp, op_builder TorchCPUOpBuilder), so its
    threads are OMP_NUM_THREADS. The deepspeed launcher sets it only with --bind_cores_to_rank (cores per
    rank: launcher/launch.py), else each rank's pool spans the node (the shared node rate). torchrun
    exports OMP_NUM_THREADS=1 when nproc_per_node > 1 and it is unset (torch/distributed/run.py), and
    accelerate launch exports --num_cpu_threads_per_process, default OMP_NUM_THREADS or 1 on GPU jobs
    (accelerate commands/launch.py `_validate_launch_command`, utils/launch.py; 1 since accelerate PR #753,
    Oct 2022: before it, from PR #562, every process took all physical cores): each rank's CPU Adam, and
    torch's CPU ops of the step, then run on one thread."""
    per_node = max(s.workload.gpus_per_node, 1)
    shared = node_cpu_adam(s.hardware)[0] / per_node
    threads = s.workload.omp_threads
    if threads is None or not s.hardware.has_gpus:
        return shared
    return min(shared, threads * thread_cpu_adam(s.hardware)[0])


def thread_cpu_adam(hardware: HardwareProfile) -> tuple[float, str]:
    """CPU Adam params/s of ONE OpenMP thread, and where it comes from: the profile's or the global
    prior's `overheads.cpu_adam_thread_params_per_s` (fitted on the published runs that ran one thread
    per rank, scripts/evidence/fit_published.py), else the published one-thread rate (CPU_ADAM_ONE_THREAD)
    at the host's SIMD width."""
    fitted = hardware.overheads.cpu_adam_thread_params_per_s
    if fitted:
        return fitted, "fitted"
    host = hardware.host
    model = host.cpu_model
    if not model and hardware.gpu is not None:
        ref = reference_host(hardware.gpu.name)
        model = ref[0] if ref else None
    simd = _simd(model)
    return CPU_ADAM_ONE_THREAD * SIMD_FACTOR[simd], f"the published one-thread offloaded AdamW rate ({simd.upper()})"


def node_cpu_adam(hardware: HardwareProfile) -> tuple[float, str]:
    """The node's CPU Adam params/s and where it comes from: measured or sourced in the profile, else
    derived from its CPUs (host_cpu_adam), else the fallback."""
    host = hardware.host
    if host.cpu_adam_params_per_s:
        return host.cpu_adam_params_per_s, "profile"
    # a GPU box's host; a host without GPUs is probed (its ranks share the cores with their compute)
    derived = host_cpu_adam(host.cpu_model, host.cpu_cores) if hardware.has_gpus else None
    if derived is not None:
        return derived
    ref = reference_host(hardware.gpu.name) if hardware.gpu is not None else None
    if ref is not None:
        rate, why = host_cpu_adam(ref[0], ref[1])  # type: ignore[misc]  # a named CPU always derives
        return rate, f"{why}: the profile names no host CPU, assumed {hardware.gpu.name}'s reference host ({ref[2]})"
    return DEFAULT_CPU_ADAM_PARAMS_PER_S, "fallback"


def gradient_bytes_per_element(s: StepSetup, boundary: bool) -> int:
    """PCIe bytes per partition element after a reduction under optimizer offload (module docstring)."""
    if s.stage == 3:
        return 2 * s.accum_bytes + (DTYPE_BYTES[s.zero.master_dtype] if boundary else 0)
    accumulate = not boundary or s.workload.grad_accum > 1
    return (2 * s.elem_bytes if accumulate else 0) + (DTYPE_BYTES[s.zero.master_dtype] if boundary else 0)


def gradient_copy_s(s: StepSetup, numel: int, boundary: bool) -> float:
    """Seconds of the offloaded-gradient copies after reducing a bucket of `numel` elements."""
    rate = host_copy_Bps(s.hardware, s.zero.offload_optimizer.pin_memory)
    return numel / s.n * gradient_bytes_per_element(s, boundary) / rate


def param_copy_bytes(s: StepSetup) -> int:
    """PCIe bytes per partition element of the step's copy of the updated parameters into their 16-bit
    partition (module docstring): the 16-bit width host -> device under optimizer offload, none when
    stage 3 keeps both on the host (`offload_param: cpu`), the master width device -> host when only
    the parameters are offloaded; 0 without offload."""
    optimizer = s.zero.offload_optimizer.device != "none"
    params_on_host = s.stage == 3 and s.zero.offload_param.device == "cpu"
    if optimizer:
        return 0 if params_on_host else s.elem_bytes
    if params_on_host:
        return config_state_bytes(s.workload, s.zero, offload=False).master_width
    return 0


def optimizer_transfer_s(s: StepSetup, part: float) -> float:
    """Blocking host<->device and NVMe seconds of an offloaded optimizer step (module docstring)."""
    z, hw = s.zero, s.hardware
    master = config_state_bytes(s.workload, s.zero, offload=False).master_width
    # stage 3 converts through torch's pageable temporary; stage 1/2 stage through a buffer pinned per config
    pinned = z.offload_optimizer.pin_memory and not (s.stage == 3 and master != s.elem_bytes)
    transfer = part * param_copy_bytes(s) / host_copy_Bps(hw, pinned) if hw.has_gpus else 0.0
    if s.stage == 3 and z.offload_optimizer.device == "nvme":
        swapped = part * nvme_optimizer_bytes(s)
        transfer += swapped / _nvme(s, write=False) + swapped / _nvme(s, write=True)
    if s.stage == 3 and z.offload_param.device == "nvme":
        transfer += part * s.elem_bytes / _nvme(s, write=True)
    return transfer


def checkpoint_copy_s(s: StepSetup) -> float:
    """Exposed seconds per micro-step of cpu_checkpointing's copies (module docstring): to the host
    during forward, back during backward, each hidden under its pass up to that pass's length."""
    w, hw = s.workload, s.hardware
    if not (w.checkpoint_in_cpu and w.activation_checkpointing and hw.has_gpus):
        return 0.0
    m = s.prep.model
    nbytes = checkpoint_host_bytes(m.num_layers, w.seq_len, w.micro_batch, m.hidden_size, w.precision)
    to_host = nbytes / (hw.host.d2h_pinned_Bps or pcie(hw))
    back = nbytes / pcie(hw)
    return max(0.0, to_host - s.fwd_total) + max(0.0, back - s.bwd_total)
