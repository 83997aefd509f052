"""ZT9xx: model- and hardware-aware checks (--model, --profile or --gpus/--gpu-memory).

The model, the hardware profile and the memory model come from other zerotune packages and are imported
lazily here, so `validate` without these options stays fast (zerotune.catalog, zerotune.model.memory).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from zerotune.dsconfig.load import pointer_of
from zerotune.lint.context import Context, LintOptions
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule
from zerotune.model.fit import padded
from zerotune.units import GiB, fmt_bytes, fmt_count


@dataclass(frozen=True)
class Hardware:
    name: str
    memory_bytes: int | None
    bf16_supported: bool | None
    gpus_per_node: int | None
    nodes: int
    host_ram_bytes: int | None
    profile: Any = None


@cache
def _profile(ref: str) -> Any:
    from zerotune.catalog.hardware import load_profile

    return load_profile(ref)


@cache
def _model(ref: str) -> Any:
    from zerotune.catalog.models import load_model

    return load_model(ref)


def hardware(ctx: Context) -> Hardware | None:
    """The GPU the config will run on, from --profile or --gpus/--gpu-memory; None when not given."""
    o = ctx.options
    if o.profile:
        p = _profile(o.profile)
        gpu = p.gpu
        mem = int(o.gpu_memory_gib * GiB) if o.gpu_memory_gib else (gpu.memory_bytes if gpu else None)
        return Hardware(
            gpu.name if gpu else p.name,
            mem,
            gpu.bf16_supported if gpu else None,
            o.gpus or p.gpus_per_node or None,
            p.nodes,
            p.host.ram_bytes,
            p,
        )
    if o.gpu_memory_gib:
        return Hardware(
            f"a {o.gpu_memory_gib:g} GiB GPU", int(o.gpu_memory_gib * GiB), o.bf16_capable, o.gpus, 1, None
        )
    return None


def model(ctx: Context) -> Any:
    return _model(ctx.options.model) if ctx.options.model else None


def judged(ctx: Context) -> tuple[Any, Any, Any] | None:
    """The memory estimate, fit verdict and workload of the job this config runs, read as predict and memory read it
    (zerotune.job.resolve_job: DeepSpeed's batch inference, HF "auto" filling, one margin); None
    without a model and hardware."""
    o = ctx.options
    if not o.model or not (o.profile or o.gpu_memory_gib):
        return None
    if "job" not in ctx.memo:  # three rules ask; the job is resolved once per file
        ctx.memo["job"] = _judge(ctx)
    return ctx.memo["job"]


def _inputs(o: LintOptions) -> Any:
    from zerotune.catalog.hardware import DEFAULT_PROFILE
    from zerotune.schema.job import JobInputs

    return JobInputs(
        model=o.model, profile=o.profile or DEFAULT_PROFILE, gpus=o.gpus, world_size=o.world_size,
        gpu_memory=o.gpu_memory_gib, seq_len=o.seq_len, checkpointing=o.checkpointing,
        checkpoint_in_cpu=o.checkpoint_in_cpu, margin=o.margin, hf=o.hf, **dict(o.workload),
    )  # fmt: skip


def check_job_options(o: LintOptions) -> None:
    """Raise the InputError of options that make no job whatever the config (--world-size 16 on a one-node
    profile), once, as predict does (exit 2): raised inside the memory rules it became a ZT000 "zerotune
    failed" on every file of the run, three times each."""
    if o.model and (o.profile or o.gpu_memory_gib):
        from zerotune.job import resolve_job

        resolve_job(_inputs(o), None, None)


def _judge(ctx: Context) -> tuple[Any, Any, Any] | None:
    from zerotune.errors import InputError
    from zerotune.job import resolve_job, sized_by_accelerate
    from zerotune.schema.record import read_record

    # the job as predict reads the same file: an accelerate config sized as it launches, a trainer's
    # arguments file's batch and precision under what the options say
    inputs, sized = sized_by_accelerate(_inputs(ctx.options), ctx.loaded.accelerate)
    if ctx.loaded.trainer_args is not None:
        inputs = _with_training_args(inputs, ctx.loaded.trainer_args_path or ctx.loaded.path)
    try:
        job = resolve_job(inputs, ctx.config, read_record(ctx.loaded.path))  # the job recommend wrote it for
    except InputError as exc:
        if not sized:
            raise
        # several machines on a one-node profile: ZT006 says why the memory rules say nothing of this file
        ctx.memo["unsized"] = exc.message
        return None
    memory = job.memory()
    return memory, job.verdict(memory), job.workload


def _with_training_args(inputs: Any, path: str | None) -> Any:
    """A trainer's arguments file read as predict reads it (zerotune.job.read_inputs: what the options say
    over the arguments' micro-batch, accumulation and precision), so both judge the same job; arguments HF
    TrainingArguments does not take leave the options' job, as predict says in a note."""
    from dataclasses import asdict

    from zerotune.errors import InputError
    from zerotune.job import read_inputs, said_options

    if path is None:
        return inputs
    try:
        return read_inputs(said_options(asdict(inputs)), None, path)[0]
    except InputError:
        return inputs


class GpuMemoryExceeded(Rule):
    """The config's predicted per-GPU memory exceeds the GPU.

    ## What it does
    With `--model` and `--profile` (or `--gpu-memory`), predicts the peak memory of one rank under this
    config (model states by ZeRO stage and offload, communication buffers, activations at the config's
    micro batch with `--checkpointing` (default on) and `--seq-len` tokens (default 2048), CUDA context) and
    compares it with the GPU, with the one safety margin every command uses (zerotune.model.fit).

    ## Why is this bad?
    The job will run out of memory, usually after minutes of start-up. Raising the stage, offloading, or
    lowering the micro batch is cheaper to decide before launch.

    ## Example
    `zerotune validate ds_zero1.json --model llama-13b --profile 4xrtx4090`

    ## Use instead
    A higher stage or offload: `"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}`,
    checked with `zerotune memory`.

    ## References
    - ZeRO (Rajbhandari et al., 2020) §5; zerotune/model/memory.py
    """

    code = "ZT901"
    name = "gpu-memory-exceeded"
    severity = Severity.ERROR
    message = (
        "predicted peak {total} per GPU (+{margin} margin) exceeds {capacity} on {gpu} "
        "(ZeRO stage {stage}, micro batch {mb})"
    )
    needs = frozenset({"model", "hardware"})

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        found = judged(ctx)
        if found is not None and found[1].reason == "gpu":
            est = found[0]
            yield self.emit(
                ctx,
                "/zero_optimization" if "zero_optimization" in ctx.config else "",
                total=fmt_bytes(est.per_gpu.total),
                capacity=fmt_bytes(est.gpu_capacity_bytes),
                margin=f"{found[1].margin:.0%}",
                gpu=hardware(ctx).name,
                stage=ctx.resolved.zero.stage,
                mb=found[2].micro_batch,
                help="try `zerotune memory` for the options that fit",
            )


class GpuMemoryTight(Rule):
    """The predicted per-GPU memory leaves little headroom.

    ## What it does
    Like ZT901, but reports configs whose prediction fits with the safety margin (zerotune.model.fit) and
    would not fit with twice that margin: less than one more margin to spare.

    ## Why is this bad?
    Fragmentation, longer sequences or a larger evaluation batch push such jobs over the edge; OOMs then
    appear intermittently.

    ## Example
    `zerotune validate ds.json --model llama3-8b --gpu-memory 24`

    ## Use instead
    Leave headroom: lower the micro batch or raise the ZeRO stage.

    ## References
    - zerotune/model/memory.py (safety margin); PyTorch CUDA caching allocator notes
    """

    code = "ZT902"
    name = "gpu-memory-tight"
    severity = Severity.WARNING
    message = "predicted peak {total} per GPU leaves {free} of {capacity} free"
    needs = frozenset({"model", "hardware"})

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        found = judged(ctx)
        if found is None or found[1].fits is not True or found[0].gpu_capacity_bytes is None:
            return
        est, verdict = found[0], found[1]
        total, cap = est.per_gpu.total, est.gpu_capacity_bytes
        if padded(total, 2 * verdict.margin) > cap:
            yield self.emit(
                ctx,
                "/zero_optimization" if "zero_optimization" in ctx.config else "",
                total=fmt_bytes(total),
                free=fmt_bytes(cap - total),
                capacity=fmt_bytes(cap),
            )


class HostMemoryExceeded(Rule):
    """Offload needs more host RAM than the node has.

    ## What it does
    With `--model` and a `--profile` that records host RAM, compares the predicted offload host memory per
    node (offloaded states plus pinned buffers, all ranks of the node) with the node's RAM.

    ## Why is this bad?
    The node swaps or the kernel's OOM killer ends the job; pinned memory cannot be swapped at all.

    ## Example
    `zerotune validate ds_zero3_offload.json --model llama-70b --profile 4xrtx4090`

    ## Use instead
    NVMe offload (`"device": "nvme"`), partial offload (`ratio`), or more nodes.

    ## References
    - ZeRO-Offload (Ren et al., 2021); ZeRO-Infinity (Rajbhandari et al., 2021)
    """

    code = "ZT903"
    name = "host-memory-exceeded"
    severity = Severity.ERROR
    message = "offload needs {need} of host RAM per node, the node has {have}"
    needs = frozenset({"model", "hardware"})

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        found, hw = judged(ctx), hardware(ctx)
        if found is None or found[1].reason != "host":
            return
        est = found[0]
        yield self.emit(
            ctx,
            "/zero_optimization",
            need=fmt_bytes(est.cpu_bytes_per_node),
            have=fmt_bytes(hw.host_ram_bytes),
        )


class NvmeBufferTooSmall(Rule):
    """NVMe parameter swap buffers smaller than the largest parameter.

    ## What it does
    With `--model` and `offload_param.device: "nvme"` at stage 3, checks `offload_param.buffer_size`
    (elements) against the model's largest parameter tensor.

    ## Why is this bad?
    The parameter swapper asserts "More elements … than buffer size" when a partition does not fit a
    buffer — typically the embedding matrix.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme",
     "buffer_size": 1e8}}}
    ```
    with a 128k-vocabulary, 8192-wide embedding (1.05e9 elements).

    ## Use instead
    `"buffer_size"` at least the largest tensor (here 1.1e9).

    ## References
    - deepspeed/runtime/swap_tensor/partitioned_param_swapper.py `get_buffer`
    """

    code = "ZT904"
    name = "nvme-buffer-too-small"
    severity = Severity.ERROR
    message = "offload_param.buffer_size {size} is smaller than the largest parameter ({largest} elements)"
    needs = frozenset({"model"})

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        m = model(ctx)
        if m is None:
            return
        z = ctx.resolved.zero
        if z.stage != 3 or z.offload_param.device != "nvme":
            return
        if z.offload_param.buffer_size < m.largest_tensor:
            ptr = "/zero_optimization/offload_param"
            if isinstance(ctx.zero.get("offload_param"), dict) and "buffer_size" in ctx.zero["offload_param"]:
                ptr = pointer_of("zero_optimization", "offload_param", "buffer_size")
            yield self.emit(
                ctx, ptr, size=fmt_count(z.offload_param.buffer_size), largest=fmt_count(m.largest_tensor)
            )


RULES = (GpuMemoryExceeded, GpuMemoryTight, HostMemoryExceeded, NvmeBufferTooSmall)
