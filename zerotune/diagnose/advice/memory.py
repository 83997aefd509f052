"""The fix for memory causes: the knob that follows from a GPU OOM's phase at the world size read,
and what relieves host RAM."""

from __future__ import annotations

from zerotune.diagnose import fix_search
from zerotune.diagnose.advice.unchecked import EXACT, unchecked
from zerotune.diagnose.explain import Job
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Change, Diagnosis, FixOut
from zerotune.diagnose.signals.memory import loading_checkpoint_at
from zerotune.dsconfig.settings import resolve


def _stage(job: Job, scan: Scan) -> int | None:
    if job.config is not None:
        return resolve(job.config).zero.stage
    fact = scan.facts.get("zero_stage")
    return int(fact.value) if fact is not None else None  # type: ignore[call-overload]


def gpu_oom(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    phase = d.oom.phase if d.oom else "unknown"
    stage = _stage(job, scan)
    if phase == "checkpoint_save":
        return unchecked(
            [
                Change(
                    key="zero_optimization.stage3_gather_16bit_weights_on_model_save",
                    old=None,
                    new=False,
                    reason="saving gathers the full 16-bit model on one GPU: save the sharded checkpoint "
                    "(save_checkpoint) and convert it offline with zero_to_fp32.py",
                )
            ],
            "The OOM is in the save, not in training. " + EXACT + ".",
        )
    if job.config is not None:
        order = fix_search.ORDER.get(phase, fix_search.ORDER["unknown"])
        if phase == "unknown" and stage is not None and stage < 3 and job.world > 1:
            order = (fix_search.knob_stage_up, *order)
        for knob in order:
            edit = next(iter(knob(job.config, job.checkpointing, job)), None)
            if edit is not None:
                _, _, changes = edit
                return unchecked(
                    changes,
                    f"The first change for an OOM {phase.replace('_', ' ')} at world size {job.world} "
                    f"({job.world_source}); not checked against the memory model: {EXACT}.",
                )
    changes: list[Change] = []
    if (
        stage is not None
        and stage < 3
        and job.world > 1
        and phase not in ("activations_forward", "activations_backward")
    ):
        changes.append(
            Change(
                key="zero_optimization.stage",
                old=stage,
                new=stage + 1,
                reason=f"partitions more of the model states over the {job.world} ranks",
            )
        )
    elif phase in ("activations_forward", "activations_backward", "unknown"):
        changes.append(
            Change(
                key="train_micro_batch_size_per_gpu",
                old=None,
                new="half",
                reason="activation memory scales with the micro-batch (raise gradient_accumulation_steps to keep the global batch)",
            )
        )
        if not job.checkpointing or job.checkpointing_source == "assumed":
            changes.append(
                Change(
                    key="(model) gradient_checkpointing",
                    old=None,
                    new=True,
                    reason="recompute activations in the backward pass instead of keeping them",
                )
            )
    elif phase == "param_gather":
        changes.append(
            Change(
                key="zero_optimization.stage3_max_live_parameters",
                old=None,
                new=fix_search.DS_MAX_LIVE // 10,
                reason="fewer gathered parameters live at once (also lower stage3_prefetch_bucket_size)",
            )
        )
    else:
        changes.append(
            Change(
                key="zero_optimization.offload_optimizer.device",
                old=None,
                new="cpu",
                reason="moves the fp32 optimizer states to host RAM (slower step)",
            )
        )
    return unchecked(
        changes,
        f"Follows from the phase ({phase.replace('_', ' ')}) and the world size {job.world} ({job.world_source}); {EXACT}.",
    )


def shm_change(reason: str) -> Change:
    """A larger /dev/shm: a container's default (Docker: 64 MB) fills up (NVIDIA/nccl issue 525, the NCCL
    maintainer's answer; DeepSpeed#4002, the DeepSpeed maintainer's --shm-size)."""
    return Change(
        key="(container) /dev/shm",
        old=None,
        new="larger (docker --shm-size or --ipc=host; Kubernetes: a memory emptyDir at /dev/shm)",
        reason=reason,
    )


def host_oom(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    if any(k.signal == 7 for k in scan.kills):
        return unchecked(
            [shm_change("a process died of SIGBUS writing to /dev/shm: it is full")],
            "Shared memory, not host RAM: `df -h /dev/shm` in the container shows its size.",
        )
    z = resolve(job.config).zero if job.config is not None else None
    if d.line is not None and loading_checkpoint_at(scan, d.line) is not None:
        change = Change(
            key="(script) load_checkpoint",
            old=None,
            new="load_optimizer_states=False (weights only), or the ranks of a node loading in turn",
            reason="each rank reads its optimizer-state file into host RAM at once; a resume that needs the "
            "optimizer state needs that RAM (DeepSpeed#3938, the maintainer's suggestion)",
        )
    elif z is not None and z.offload_param.device == "cpu":
        change = Change(
            key="zero_optimization.offload_param.device",
            old="cpu",
            new="nvme",
            reason="parameters offloaded to host RAM on every rank of the node exceed it: NVMe (or no parameter offload)",
        )
    elif z is not None and z.offload_optimizer.device == "cpu" and z.offload_optimizer.pin_memory:
        change = Change(
            key="zero_optimization.offload_optimizer.pin_memory",
            old=True,
            new=False,
            reason="pinned (page-locked) host buffers cannot be swapped and add to the optimizer states in RAM",
        )
    else:
        change = Change(
            key="(script) load the model once, partitioned",
            old=None,
            new="zero.Init / low_cpu_mem_usage=True",
            reason="each rank loading the full model into host RAM multiplies it by the ranks per node",
        )
    return unchecked(
        [change],
        "Host RAM, not GPU memory; with --model and --config the note gives the host RAM the offload needs.",
    )
