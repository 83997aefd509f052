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
"""

from __future__ import annotations

from zerotune.model.offload import (
    CPU_ADAM_PUBLISHED_RANGE,
    DEFAULT_CPU_ADAM_PARAMS_PER_S,
    cpu_adam_rate,
    node_cpu_adam,
    optimizer_transfer_s,
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
    if offload:
        transfer = optimizer_transfer_s(s, part)
    if not fitted and not (offload and hw.has_gpus):
        s.notes.append(
            "optimizer_params_per_s not in the profile: the step's optimizer is Adam alone "
            "(grad norm, clipping and partition copies left out)"
        )
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
