"""One job: what every modelling command (memory, predict, recommend, validate, diagnose) reads the
same way. `JobInputs` holds what the user said (its field descriptions are the CLI help, cli/options.py);
`resolve_job` turns it, with a DeepSpeed config when there is one, into a `Job`: the model, the
hardware resized to the ranks asked for, the resolved config and the `Workload` the models take.

Each default is decided here once, and each one a user did not choose is said in `Job.notices`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerotune.catalog.hardware import default_profile, load_profile, with_counts, with_live_host_ram
from zerotune.catalog.models import adhoc_model, default_seq_len, load_model, position_warning, shape_note
from zerotune.catalog.trust import inputs_provenance
from zerotune.dsconfig.settings import ResolvedConfig, resolve
from zerotune.errors import InputError
from zerotune.model.fit import Verdict, fits
from zerotune.model.memory import MemoryEstimate, estimate_memory
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.job import SAFETY_MARGIN, JobInputs, modelled_optimizer
from zerotune.schema.model import ModelSpec
from zerotune.schema.record import JobRecord
from zerotune.schema.workload import Workload
from zerotune.units import GiB


@dataclass
class Job:
    spec: ModelSpec
    hardware: HardwareProfile
    """The profile resized to the job's nodes x ranks per node."""
    workload: Workload
    resolved: ResolvedConfig | None
    """The DeepSpeed config as DeepSpeed reads it; None for a job without a config (memory)."""
    config: dict[str, Any] | None
    """The config after HF's "auto" filling (when it had any)."""
    margin: float
    notices: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ranks_per_node(self) -> int:
        return self.workload.gpus_per_node

    def memory(self) -> MemoryEstimate:
        if self.resolved is None:
            raise ValueError("a job without a config has no single memory estimate (compare_options)")
        return estimate_memory(
            self.spec, self.workload, self.resolved.zero, hardware=self.hardware, safety_margin=self.margin
        )

    def verdict(self, memory: MemoryEstimate) -> Verdict:
        return fits(memory, self.hardware, self.ranks_per_node, self.margin)


def batch_triple(train_batch: int | None, micro: int | None, accum: int | None, world: int) -> tuple[int, int]:
    """(micro_batch, grad_accum) the way DeepSpeed infers them from the batch keys it was given
    (docs/deepspeed-facts.md §3.1, deepspeed/runtime/config.py `_set_batch_related_parameters`)."""
    if micro and accum:
        return micro, accum
    if train_batch and micro:
        return micro, max(train_batch // micro // world, 1)
    if train_batch and accum:
        return max(train_batch // world // accum, 1), accum
    if train_batch:
        return max(train_batch // world, 1), 1
    return micro or 1, accum or 1


def load_spec(inputs: JobInputs, notices: list[str], recorded_model: str | None = None) -> ModelSpec:
    if inputs.adhoc:
        spec = adhoc_model(params=inputs.params, layers=inputs.layers, hidden=inputs.hidden)
        notices.append(shape_note(spec))
        return spec
    if inputs.model is None and recorded_model is None:
        raise InputError("give --model (or an ad-hoc shape with --params)", hint="e.g. --model llama-7b")
    return load_model(inputs.model or recorded_model)


def load_hardware(inputs: JobInputs, notices: list[str], recorded: str | None = None) -> tuple[HardwareProfile, str]:
    """The profile named, else the one recommend recorded, else the default rule (catalog/hardware.py
    default_profile), with its provenance said; --gpu-memory overrides its GPU size."""
    if inputs.profile is not None or recorded:
        ref = inputs.profile or recorded
        hardware = load_profile(ref)
        if hardware.calibration is not None and any(v.source for v in hardware.calibration.values):
            notices.append(inputs_provenance(hardware, "bf16" if hardware.has_gpus else "fp32"))  # the user's run
    else:
        hardware, ref = default_profile(notices)
        notices.append(inputs_provenance(hardware, "bf16" if hardware.has_gpus else "fp32"))
    hardware, live = with_live_host_ram(hardware)
    if live:
        notices.append(live)
    if inputs.gpu_memory is not None:
        if not hardware.has_gpus:
            raise InputError(f"--gpu-memory: profile {hardware.name!r} has no GPUs", hint="pass a GPU --profile")
        gpu = hardware.gpu.model_copy(update={"memory_bytes": int(inputs.gpu_memory * GiB)})
        hardware = hardware.model_copy(update={"gpu": gpu})
        notices.append(f"GPU memory {inputs.gpu_memory:g} GiB (--gpu-memory) instead of the profile's")
    return hardware, ref


def world(inputs: JobInputs, hardware: HardwareProfile, recorded: Workload | None = None) -> tuple[int, int]:
    """(ranks per node, nodes): the flags, else the recorded workload, else the profile. A node can only
    shrink (with_counts refuses more GPUs than the profile's node has); a host without GPUs runs gloo
    ranks on one node."""
    gpus, nodes, total = inputs.gpus, inputs.nodes, inputs.world_size
    if total is None and gpus is None and nodes is None and recorded is not None:
        return recorded.gpus_per_node, recorded.nodes
    if not hardware.has_gpus:
        if nodes not in (None, 1):
            raise InputError(f"--nodes {nodes}: profile {hardware.name!r} is a host without GPUs (one node)")
        ranks = total or gpus or (hardware.intra_node.ranks if hardware.intra_node else None) or 2
        return ranks, 1
    per_node = gpus or hardware.gpus_per_node
    if total is not None:
        if total <= per_node and nodes in (None, 1):
            return total, 1
        if total % per_node:
            raise InputError(
                f"--world-size {total} is not a multiple of {per_node} GPUs per node",
                hint="pass --gpus/--nodes instead",
            )
        return per_node, total // per_node
    return per_node, nodes or hardware.nodes


def resolve_job(inputs: JobInputs, config: dict[str, Any] | None = None, record: JobRecord | None = None) -> Job:
    """The job `inputs` describe, running `config` (None: a job without a config, as `memory` compares
    every stage). `record` is what `recommend` wrote next to the config (zerotune.schema.record: its
    workload, model, profile): flags override it."""
    inputs.check()
    notices: list[str] = []
    recorded = record.workload if record else None
    spec = load_spec(inputs, notices, record.model if record else None)
    hardware, _ = load_hardware(inputs, notices, record.profile if record else None)
    per_node, node_count = world(inputs, hardware, recorded)
    if hardware.has_gpus and (per_node, node_count) != (hardware.gpus_per_node, hardware.nodes):
        hardware = with_counts(hardware, gpus_per_node=per_node, nodes=node_count)
    seq = inputs.seq_len or (recorded.seq_len if recorded else None)
    if seq is None:
        seq, note = default_seq_len(spec)
        if note:
            notices.append(note)
    ckpt = inputs.checkpointing
    if ckpt is None:
        ckpt = recorded.activation_checkpointing if recorded else True
        if recorded is None:
            notices.append(
                "activation checkpointing assumed on (it is the training script's switch, not a config key): "
                "pass --no-checkpointing if the script does not enable it"
            )
    base = recorded or Workload()
    options = inputs.workload_options()
    update: dict[str, Any] = {
        **options,
        "seq_len": seq,
        "activation_checkpointing": ckpt,
        "checkpoint_in_cpu": inputs.checkpoint_in_cpu or base.checkpoint_in_cpu,
        "gpus_per_node": per_node,
        "nodes": node_count,
    }
    notices.extend(_option_notes(options, base, spec, ckpt))
    if options.get("activation_offloading") and ckpt:
        update["checkpoint_in_cpu"] = True
    resolved = filled = None
    if config is None:
        update |= {
            "micro_batch": inputs.micro_batch or 1,
            "grad_accum": inputs.grad_accum or 1,
            "precision": inputs.precision or hardware.default_precision,
            "optimizer": inputs.optimizer or "adamw",
        }
    else:
        filled = _fill_auto(config, inputs, spec, hardware, recorded, record, per_node * node_count, notices)
        resolved = resolve(filled)
        if inputs.precision is not None and filled is config and inputs.precision != resolved.precision:
            raise InputError(
                f"--precision {inputs.precision} but the config enables {resolved.precision}",
                hint='--precision only fills a config that leaves bf16/fp16 "auto"',
            )
        mb, ga = batch_triple(
            resolved.train_batch_size, resolved.micro_batch, resolved.grad_accum, per_node * node_count
        )
        if recorded and resolved.micro_batch is None and resolved.train_batch_size is None:
            mb, ga = recorded.micro_batch, recorded.grad_accum
        optimizer, said = modelled_optimizer(resolved.optimizer_type, inputs.optimizer)
        if said:
            notices.append(said)
        update |= {
            "micro_batch": inputs.micro_batch or mb,
            "grad_accum": inputs.grad_accum or ga,
            "precision": resolved.precision,
            "optimizer": optimizer,
            "autocast": options.get("autocast", resolved.autocast),
        }
    workload = base.model_copy(update=update)
    section = (filled or {}).get("activation_checkpointing")
    if isinstance(section, dict) and section.get("cpu_checkpointing") is True and not workload.checkpoint_in_cpu:
        notices.append(
            "the config sets activation_checkpointing.cpu_checkpointing, which applies only where the training "
            "code calls deepspeed.checkpointing.configure (Megatron-DeepSpeed, not HF Trainer): "
            "pass --checkpoint-in-cpu if yours does"
        )
    warnings = [w for w in (position_warning(spec, seq),) if w]
    margin = inputs.margin
    if margin is None:  # not said: what recommend predicted the config with, else the one margin
        margin = record.safety_margin if record else SAFETY_MARGIN
    return Job(spec, hardware, workload, resolved, filled, margin, notices, warnings)


def _option_notes(options: dict[str, Any], base: Workload, spec: ModelSpec, checkpointing: bool) -> list[str]:
    """What the model makes of the workload options, where that is not plain from the option."""
    notes = []
    if options.get("activation_offloading"):
        notes.append(
            "activation offloading modelled as the block inputs waiting in pinned host memory (DeepSpeed's "
            "cpu_checkpointing moves the same bytes)"
            if checkpointing
            else "activation offloading without checkpointing: the model keeps every activation on the GPU "
            "(an upper bound); turn checkpointing on to model the offloaded inputs"
        )
    if spec.num_experts > 1 and (options.get("moe_impl") or base.moe_impl) == "loop":
        notes.append(
            "--moe-impl loop: the loop's host syncs (.nonzero / torch.where per expert) are modelled, so each "
            "MoE block's host work adds to its kernels (zerotune/model/step.py synced_blocks); its expert GEMMs "
            "run at the dense rate (a 2.5x slower expert rate from huggingface/transformers#27915 made the "
            "published DeepCompile Mixtral runs worse, so none is applied)"
        )
    return notes


def _fill_auto(config, inputs, spec, hardware, recorded, record, world_size, notices) -> dict[str, Any]:
    """HF Trainer fills "auto" values from TrainingArguments and the hidden size before DeepSpeed sees
    the config (dsconfig/hf_auto.py): model what will run, not DeepSpeed's defaults."""
    from zerotune.dsconfig import hf_auto

    if next(hf_auto.auto_pointers(config), None) is None:
        return config
    if not (inputs.hf or (record and record.hf)):
        notices.append('the config has "auto" values (HF Trainer fills them): predicting as HF would')
    # HF runs with the flag a concrete `"enabled": true` pins (it refuses a mismatch)
    prec = inputs.precision or (recorded.precision if recorded else None) or hf_auto.pinned_precision(config)
    known = prec is not None
    if prec is None:
        prec = hardware.default_precision
        # said only where the config leaves the precision to HF: an explicit fp16/bf16 section (an
        # accelerate config's mixed_precision) does not take this value
        if any(hf_auto.has(config, p) and hf_auto.get(config, p) == "auto" for p in ("/fp16/enabled", "/bf16/enabled")):
            notices.append(f'precision "auto": assumed {prec} (HF --{prec}); pass --precision to change')
            known = True
    mb = inputs.micro_batch or (recorded.micro_batch if recorded else 1)
    ga = inputs.grad_accum or (recorded.grad_accum if recorded else 1)
    values = hf_auto.trainer_values(spec, precision=prec, micro_batch=mb, grad_accum=ga, world_size=world_size)
    if record and record.hf_values and inputs.micro_batch is None and inputs.grad_accum is None and inputs.precision is None:
        values.update(record.hf_values)
    filled = hf_auto.fill(config, values)
    # accelerate adds the section of the run's mixed precision when the config lacks it; a config that says
    # nothing of precision leaves the flag unknown, and nothing is added
    return hf_auto.with_mixed_precision(filled, prec) if known else filled


def _check_bf16(workload: Workload, hardware: HardwareProfile) -> None:
    gpu = hardware.gpu if hardware.has_gpus else None
    if workload.precision == "bf16" and gpu is not None and gpu.bf16_supported is False:
        raise InputError(
            f"the job runs bf16 but {gpu.name} ({hardware.name}) has no bf16",
            hint='use fp16 ("fp16": {"enabled": true}) on this GPU, or a bf16 profile',
        )


def check_step_inputs(job: Job) -> None:
    """A step time needs the profile's FLOP/s at the job's precision and a GPU that runs it; memory needs
    neither (a bf16 config's bytes are the same on a GPU without bf16, so `memory` and validate's memory
    rules judge it; raised while resolving the job it was a ZT000 "zerotune failed" in validate)."""
    from zerotune.model.compute import achieved_flops

    _check_bf16(job.workload, job.hardware)
    try:
        achieved_flops(job.hardware, job.workload.precision)
    except ValueError as exc:
        raise InputError(f"{exc}", hint="use a profile with that precision, or change the config") from None


def read_training_args(path: str) -> dict[str, Any]:
    """A TrainingArguments / TRL config file (JSON, or YAML as TRL's `--config` takes) as a dict."""
    from pathlib import Path

    import yaml

    from zerotune.files import read_json

    file = Path(path)
    if not file.is_file():
        raise InputError(f"training arguments file {path} not found", hint="check the path")
    if file.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(file.read_text())
    else:
        data = read_json(file)
    if not isinstance(data, dict):
        raise InputError(f"{path}: training arguments must be a JSON/YAML object")
    return data


def inputs_from_launch(
    said: dict[str, Any],
    launch: list[str] | None,
    training_args: str | None,
    arguments: dict[str, Any] | None = None,
) -> tuple[JobInputs, str | None, list[str]]:
    """JobInputs from what was said explicitly (not None) over a launch line (zerotune.schema.launch_line)
    over a TrainingArguments file; the DeepSpeed config the line names; notices listing what it left
    out (`ignored`) and did not know (`unknown`)."""
    from zerotune.schema.launch_line import LaunchLine, apply_training_args, parse_launch

    line = LaunchLine()
    if training_args is not None:
        apply_training_args(read_training_args(training_args) if arguments is None else arguments, line)
        if arguments is not None:
            line.inputs["hf"] = True  # HF Trainer got the DeepSpeed config as a dict: it fills the "auto" values
        line.notes.append(f"training arguments read from {training_args}")
    if launch:
        parsed = parse_launch(launch, read=read_training_args)
        parsed.inputs = line.inputs | parsed.inputs
        parsed.config = parsed.config or line.config
        parsed.notes = line.notes + parsed.notes
        parsed.unknown = line.unknown + parsed.unknown
        line = parsed
    notices = list(line.notes)
    if line.inputs:
        shown = ", ".join(f"{k}={v}" for k, v in line.inputs.items() if said.get(k) is None)
        if shown:
            notices.append(f"from the launch line / training arguments: {shown}")
    if line.ignored:
        notices.append(f"launch line arguments with no effect on memory or step time: {' '.join(line.ignored)}")
    if line.unknown:
        notices.append(
            f"launch line arguments zerotune does not know (not modelled; pass them as options if they "
            f"matter): {' '.join(line.unknown)}"
        )
    return JobInputs(**line.merged_into(said)), line.config, notices


def sized_by_accelerate(inputs: JobInputs, accelerate: dict[str, Any] | None) -> tuple[JobInputs, list[str]]:
    """An accelerate config read as the job's config sizes the job as its launcher does
    (dsconfig/accelerate.py launcher_size), unless gpus, nodes or world_size were said (options or launch
    line); the notice says where the size came from."""
    from dataclasses import replace

    from zerotune.dsconfig.accelerate import launcher_size

    size = launcher_size(accelerate) if accelerate is not None else {}
    if not size or any(v is not None for v in (inputs.gpus, inputs.nodes, inputs.world_size)):
        return inputs, []
    shown = ", ".join(f"{k}={v}" for k, v in size.items())
    return replace(inputs, **size), [f"from the accelerate config (num_processes, num_machines): {shown}"]


def said_options(values: dict[str, Any]) -> dict[str, Any]:
    """JobInputs fields as given (by name; a command's locals() or a JobInputs' fields) with what was not
    said as None, as read_inputs takes them: None is not said, and so is a False flag that has no --no- form
    (--hf, --checkpoint-in-cpu, whose default is False)."""
    from dataclasses import fields

    out = {}
    for f in fields(JobInputs):
        value = values.get(f.name)
        out[f.name] = None if value is False and f.default is False else value
    return out


def read_inputs(
    said: dict[str, Any],
    launch: list[str] | None = None,
    training_args: str | None = None,
    arguments: dict[str, Any] | None = None,
) -> tuple[JobInputs, str | None, list[str]]:
    """The job options every modelling command takes (predict, diagnose): what was said (None: not
    said), over the launch line and TrainingArguments file when given (inputs_from_launch); checked.
    `arguments`: the TrainingArguments already read from `training_args` (a launcher file's section)."""
    if launch or training_args:
        inputs, config, notices = inputs_from_launch(said, launch, training_args, arguments)
    else:
        inputs, config, notices = JobInputs(**{k: v for k, v in said.items() if v is not None}), None, []
    inputs.check()
    return inputs, config, notices
