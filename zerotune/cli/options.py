"""Command-line options that more than one command takes, defined once so they read the same."""

from __future__ import annotations

from typing import Annotated

import typer

from zerotune.errors import InputError
from zerotune.schema.job import WORKLOAD_OPTIONS

Distributed = Annotated[
    bool,
    typer.Option("--distributed", help="Run as one rank under torchrun (every rank runs this); rank 0 reports."),
]
# bench and calibrate run proxies of the model on this host
ProxyRanks = Annotated[int | None, typer.Option("--nproc", help="Ranks: GPUs, or gloo processes on CPU (default 2).")]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
Fault = Annotated[str | None, typer.Option("--fault", hidden=True, help="Test only: JSON fault injection.")]


# The job options: one definition each, with zerotune.schema.job.JobInputs' field descriptions as the help,
# so memory, predict, recommend and validate describe a job with the same words and defaults.
def _help(name: str) -> str:
    from zerotune.schema.job import description

    return description(name)


Model = Annotated[str | None, typer.Option(help=_help("model"))]
Profile = Annotated[str | None, typer.Option(help=_help("profile"))]
Gpus = Annotated[int | None, typer.Option(help=_help("gpus"))]
Nodes = Annotated[int | None, typer.Option(help=_help("nodes"))]
WorldSize = Annotated[int | None, typer.Option("--world-size", "--nproc", help=_help("world_size"))]
GpuMemory = Annotated[float | None, typer.Option(help=_help("gpu_memory"))]
SeqLen = Annotated[int | None, typer.Option(help=_help("seq_len"))]
MicroBatch = Annotated[int | None, typer.Option(help=_help("micro_batch"))]
GradAccum = Annotated[int | None, typer.Option(help=_help("grad_accum"))]
Precision = Annotated[str | None, typer.Option(help=_help("precision"))]
Optimizer = Annotated[str | None, typer.Option(help=_help("optimizer"))]
Checkpointing = Annotated[
    bool | None,
    typer.Option("--checkpointing/--no-checkpointing", help=_help("checkpointing"), show_default=False),
]
CheckpointInCpu = Annotated[bool, typer.Option("--checkpoint-in-cpu", help=_help("checkpoint_in_cpu"))]
AdHocParams = Annotated[float | None, typer.Option("--params", help=_help("params"))]
AdHocLayers = Annotated[int | None, typer.Option("--layers", help=_help("layers"))]
AdHocHidden = Annotated[int | None, typer.Option("--hidden", help=_help("hidden"))]
Hf = Annotated[bool, typer.Option("--hf", help=_help("hf"))]
Margin = Annotated[float | None, typer.Option(help=_help("margin"), show_default=False)]
FromLog = Annotated[
    list[str] | None,
    typer.Option("--from-log", help="Calibrate from this training log (DeepSpeed/HF output) instead of running steps; repeatable."),
]
Measured = Annotated[
    str | None,
    typer.Option(help="A measured figure: tokens_per_s=...,samples_per_s=...,step_time_s=...,peak_memory=61GiB,memory_kind=max_allocated."),
]
RunConfig = Annotated[str | None, typer.Option("--config", help="The run's DeepSpeed config (else the one the log prints).")]
RunWorld = Annotated[int | None, typer.Option("--world-size", help="The run's ranks (else what the log prints).")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON only, on stdout.")]
# The workload options (the kernels the training script runs, packing, activation offloading, MoE experts):
# every command that models a job takes all of them (the JobInputs fields of the same names).
Attention = Annotated[str | None, typer.Option(help=_help("attention"))]
Liger = Annotated[
    bool | None, typer.Option("--liger/--no-liger", help=_help("liger"), show_default=False)
]
CrossEntropy = Annotated[str | None, typer.Option(help=_help("cross_entropy"))]
Swiglu = Annotated[str | None, typer.Option(help=_help("swiglu"))]
Rmsnorm = Annotated[str | None, typer.Option(help=_help("rmsnorm"))]
Rotary = Annotated[str | None, typer.Option(help=_help("rotary"))]
Packing = Annotated[
    bool | None, typer.Option("--packing/--no-packing", help=_help("packing"), show_default=False)
]
ActivationOffloading = Annotated[
    bool | None,
    typer.Option(
        "--activation-offloading/--no-activation-offloading", help=_help("activation_offloading"), show_default=False
    ),
]
ZeroInit = Annotated[
    bool | None, typer.Option("--zero-init/--no-zero-init", help=_help("zero_init"), show_default=False)
]
MoeImpl = Annotated[str | None, typer.Option(help=_help("moe_impl"))]
LogitsHeld = Annotated[str | None, typer.Option(help=_help("logits_held"), show_default=False)]
OmpThreads = Annotated[int | None, typer.Option(help=_help("omp_threads"), show_default=False)]
Autocast = Annotated[
    bool | None, typer.Option("--autocast/--no-autocast", help=_help("autocast"), show_default=False)
]
DeepspeedVersion = Annotated[str | None, typer.Option(help=_help("deepspeed_version"), show_default=False)]
LoraRank = Annotated[int | None, typer.Option(help=_help("lora_rank"), show_default=False)]
LoraTargets = Annotated[str | None, typer.Option(help=_help("lora_targets"), show_default=False)]
Launch = Annotated[
    list[str] | None,
    typer.Argument(
        help="The launch line after --, read for the job (deepspeed / torchrun / accelerate launch with HF "
        "Trainer or TRL arguments); explicit options win over it.",
        show_default=False,
    ),
]



def job_said(values: dict[str, object]) -> dict[str, object]:
    """The job options a command was given (its parameters named as the JobInputs fields, e.g. its
    locals()), as zerotune.job.read_inputs takes them (zerotune.job.said_options)."""
    from zerotune.job import said_options

    return said_options(values)


def workload_said(values: dict[str, object]) -> dict[str, object]:
    """The workload options a command was given (its parameters named as the WORKLOAD_OPTIONS, e.g. its
    locals()) as JobInputs keyword arguments, None left out."""
    return {name: v for name in WORKLOAD_OPTIONS if (v := values.get(name)) is not None}
TrainingArgs = Annotated[
    str | None,
    typer.Option(help="A TrainingArguments / TRL config file (JSON or YAML) to read the job from."),
]



def at_least(minimum: int, **flags: int | None) -> None:
    """A one-line InputError for the first flag (given as its parameter name) under `minimum`; None is
    a flag not given."""
    for name, value in flags.items():
        if value is not None and value < minimum:
            raise InputError(f"--{name.replace('_', '-')} must be at least {minimum}, got {value}")


def check_proxy(device: str, width_scale: float | None) -> None:
    """The flags bench and calibrate share for their proxy runs."""
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"--device must be auto, cpu or cuda, got {device!r}")
    if width_scale is not None and not 0 < width_scale <= 1:
        raise InputError(f"--width-scale must be in (0, 1], got {width_scale:g}")


def fault_json(text: str | None) -> dict | None:
    """--fault's JSON (test-only fault injection), or an InputError."""
    if not text:
        return None
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--fault is not valid JSON: {exc}") from None
