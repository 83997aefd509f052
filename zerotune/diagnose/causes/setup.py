"""Causes that stop a job before or as it starts: a DeepSpeed config rejected (pydantic, batch
assertions, HF's mismatch check), incompatible library versions, a DeepSpeed op that does not build,
ZeRO-Offload refusing a client optimizer, a master port another process holds."""

from __future__ import annotations

import re

from zerotune.diagnose.causes.evidence import evidence
from zerotune.diagnose.records import FieldError, Rejection, Scan
from zerotune.diagnose.report import (
    Diagnosis,
    RejectedField,
    RejectedInfo,
)
from zerotune.diagnose.signals import config


def _hf_auto(rej: Rejection) -> FieldError | None:
    """The field holding transformers' fractional "auto" prefetch bucket (signals.config.hf_auto_fraction)."""
    return next(
        (
            f
            for f in rej.fields
            if f.field in ("stage3_prefetch_bucket_size", "prefetch_bucket_size", "")
            and config.hf_auto_fraction(f.value)
        ),
        None,
    )


def _rejected_info(rej: Rejection) -> RejectedInfo:
    return RejectedInfo(
        model=rej.model,
        kind=rej.kind,  # type: ignore[arg-type]
        fields=[RejectedField(field=f.field, message=f.message, value=f.value) for f in rej.fields],
    )


def version_mismatch(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    version_rej = sorted(
        ((r, keys) for r in scan.rejections if (keys := config.known_zero_keys(r))),
        key=lambda rk: -len(rk[1]),
    )
    auto = [r for r in scan.rejections if _hf_auto(r) is not None]
    if not (scan.version_errors or version_rej or auto):
        return None
    lines = list(scan.version_errors)
    text = ""
    rejected = None
    if auto:
        rej = max(auto, key=lambda r: len(r.fields))
        value = _hf_auto(rej).value  # type: ignore[union-attr]
        lines = [rej.line, *lines]
        rejected = _rejected_info(rej)
        text = (
            f'DeepSpeed rejected stage3_prefetch_bucket_size = {value}: that is transformers\' "auto" value '
            "(0.9 × hidden_size²), a fraction in transformers releases before 4.46, and DeepSpeed 0.15 or newer "
            "accepts only integers. The installed transformers and DeepSpeed do not go together: upgrade "
            'transformers, pin DeepSpeed below 0.15, or write an integer instead of "auto".'
        )
    if version_rej and not auto:
        rej, keys = version_rej[0]
        lines = [rej.line, *lines]
        have = scan.facts.get("deepspeed_version")
        text = (
            f"DeepSpeed{' ' + str(have.value) if have else ''} rejects {', '.join(keys)} as unknown keys, "
            "but DeepSpeed 0.19.8 defines them: the installed DeepSpeed is older than the config. "
            "Upgrade DeepSpeed, or remove these keys."
        )
    if scan.version_errors:
        text = (text + " " if text else "") + (
            "The libraries installed together do not match: a version check failed (e.g. the CUDA toolkit "
            "differs from the one torch was built with), or one library uses an API (an attribute, a keyword, "
            "a module) that the installed release of another does not have. Align the versions the message "
            "names (the releases the training framework pins)."
        )
    if any(config.ABSTRACT_REFUSAL.search(line.text) for line in scan.version_errors):
        text += (
            " A library could not instantiate a class of another package: the class lacks methods the library's "
            "interface requires (e.g. an accelerator plug-in such as intel-extension-for-deepspeed built for an "
            "older DeepSpeed). Install the plug-in release made for the installed library, or that library's "
            "release the plug-in supports."
        )
    if any(re.search(config.WEIGHTS_ONLY_REFUSAL, line.text) for line in scan.version_errors):
        text += (
            " torch.load refused a checkpoint under weights_only=True, torch's default since 2.6: the file holds "
            "pickled objects its loader (DeepSpeed's checkpoint engine before PR 7000, transformers' Trainer before "
            "PR 34632) does not opt out for. Use the library release that loads its own files with "
            "weights_only=False, torch < 2.6, or allowlist the class the message names "
            "(torch.serialization.add_safe_globals) for a file you trust."
        )
    if any("initialize your accelerator" in line.text for line in scan.version_errors):
        text += (
            " accelerate refused a state built outside an Accelerator(): the trainer (transformers, trl) of another "
            "release than the installed accelerate, or a script using accelerate before creating its Accelerator."
        )
    versions = ", ".join(
        f"{name.replace('_version', '')} {scan.facts[name].value}"
        for name in ("deepspeed_version", "torch_version", "cuda_version", "transformers_version")
        if name in scan.facts
    )
    if versions:
        text += f" The log states {versions}."
    return Diagnosis(
        cause="version_mismatch",
        title="Version mismatch",
        explanation=text,
        evidence=evidence(lines),
        line=min(line.number for line in lines),
        rejected=rejected,
    )


def config_rejected(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    other_rej = [r for r in scan.rejections if not config.known_zero_keys(r) and _hf_auto(r) is None]
    if not other_rej:
        return None
    rej = max(other_rej, key=lambda r: (len(r.fields), -r.line.number))
    info = RejectedInfo(
        model=rej.model,
        kind=rej.kind,  # type: ignore[arg-type]
        fields=[RejectedField(field=f.field, message=f.message, value=f.value) for f in rej.fields],
    )
    keys = ", ".join(f.field for f in rej.fields if f.field) or "a value"
    if rej.kind == "hf_mismatch":
        text = (
            f"HF Trainer refused the DeepSpeed config: {keys} disagree with TrainingArguments. "
            'Set these keys to "auto" so the Trainer fills them, or make them equal to the command line.'
        )
    elif rej.model == config.ACCELERATE_PLUGIN:
        text = (
            f"accelerate refused its own config's DeepSpeed settings ({keys}) next to a deepspeed_config_file: "
            "the DeepSpeed config file alone sets them. Remove them from the accelerate config (a stale default "
            "one in the cache, ~/.cache/huggingface/accelerate, is the usual source)."
        )
    elif rej.model == config.CONFIG_SOURCE:
        text = (
            "deepspeed.initialize takes its DeepSpeed config from one place and found "
            + ("none" if rej.fields and rej.fields[0].value == "none" else "both --deepscale_config and --deepspeed_config")
            + "."
        )
    elif rej.model == config.ACCELERATE_CONFIG_CHECK:
        text = (
            f"accelerate refused the DeepSpeed config it was given ({keys}) before DeepSpeed read it: its DeepSpeed "
            "plugin needs a zero_optimization section and a numeric gradient_accumulation_steps."
        )
    elif rej.model == config.ACCELERATE_PREPARE:
        text = (
            "accelerate refused to prepare the model for DeepSpeed: the config leaves train_micro_batch_size_per_gpu "
            "to it (\"auto\" or unset) and no dataloader passed to prepare() has an integer batch_size to take it "
            "from."
        )
    elif rej.model == config.PARALLEL_LAYOUT:
        text = (
            f"A size the parallel layout must divide does not ({keys}): the run was refused at start-up, before "
            "any step (DeepSpeed's expert/tensor/pipeline groups, Megatron's layer split)."
        )
    elif rej.model == config.OPTIMIZER_PAIRING:
        text = (
            "The trainer refused how the DeepSpeed config and the code share the optimizer and the scheduler "
            f"({keys}): each comes from the config or from the code, and the trainer's stand-ins (accelerate's "
            "DummyOptim/DummyScheduler) need the section they stand for; the transformers 4.30-4.33 Trainer also "
            "refused a config optimizer without a config scheduler."
        )
    elif rej.model == config.ZERO_STAGE_FEATURE:
        stage = rej.fields[0].value if rej.fields else None
        text = (
            f"The run asked for a feature that works only at ZeRO stage {stage or 'another stage'}, and the config "
            "sets another stage: the check refused it before training (DeepSpeed's own config checks, or transformers' "
            "ZeRO inference, which evaluates and predicts through DeepSpeed only under stage 3)."
        )
    elif rej.model == config.ZERO3_LOADING:
        text = (
            "transformers refused to load the model with low_cpu_mem_usage or a device_map while DeepSpeed ZeRO-3 "
            "is active: under ZeRO-3 the weights are partitioned as they load."
        )
    elif rej.model == config.QUANTIZED_UNDER_ZERO3:
        text = (
            "The training framework refused a quantized model (quantization on load, or a checkpoint quantized after "
            "training) while DeepSpeed ZeRO-3 is active: ZeRO-3 cuts every parameter into 1-D shards across the ranks, "
            "while a quantized weight's packed layout and block scales belong to the whole tensor."
        )
    elif rej.model == config.TENSOR_PARALLEL_LOAD:
        text = (
            "The model holds DTensor parameters, so DeepSpeed's (or DDP's) broadcast of its parameters found no device "
            "mesh for them: it was loaded tensor-parallel, as transformers does for device_map=\"auto\" in a distributed "
            "launch (before its PR 38942). DeepSpeed expects plain parameters and partitions them itself."
        )
    else:
        text = f"DeepSpeed's config parser ({rej.model}) rejected {keys}."
    return Diagnosis(
        cause="config_rejected",
        title=f"Config rejected by {rej.model or 'DeepSpeed'}",
        explanation=text,
        evidence=evidence([rej.line]),
        rejected=info,
        line=min(r.line.number for r in other_rej),
    )


_OP_TEXT = "a DeepSpeed C++/CUDA op"


def op_build(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.build_errors:
        return None
    ops = sorted({str(e.value) for e in scan.build_errors if e.value})
    named = ", ".join(ops) if ops else _OP_TEXT
    versions = ", ".join(
        f"{n.replace('_version', '')} {scan.facts[n].value}"
        for n in ("deepspeed_version", "torch_version", "cuda_version")
        if n in scan.facts
    )
    return Diagnosis(
        cause="op_build",
        title=f"DeepSpeed op failed to build or load ({named})",
        explanation=(
            f"DeepSpeed compiles its ops at first use (JIT, ninja) unless they were prebuilt: {named} could not "
            "be compiled or loaded. The usual reasons are a CUDA toolkit (nvcc, CUDA_HOME) missing or different "
            "from the one torch was built with, a missing compiler or ninja, or a stale build in "
            "~/.cache/torch_extensions." + (f" The log states {versions}." if versions else "")
        ),
        evidence=evidence([e.line for e in scan.build_errors]),
        line=scan.build_errors[0].line.number,
    )


def client_optimizer(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    if not scan.client_optimizer:
        return None
    return Diagnosis(
        cause="client_optimizer_offload",
        title="ZeRO-Offload refused a client optimizer",
        explanation=(
            "ZeRO-Offload runs the optimizer step on the CPU, and DeepSpeed refuses an optimizer built by the "
            "script (a torch or transformers AdamW): only its DeepSpeedCPUAdam is fast there. Name the "
            "optimizer in the DeepSpeed config, or allow the client optimizer explicitly."
        ),
        evidence=evidence(scan.client_optimizer),
        line=scan.client_optimizer[0].number,
    )


def port_in_use(scan: Scan, offload_configured: bool) -> Diagnosis | None:
    kinds = {e.kind for e in scan.port_conflicts}
    if "in_use" not in kinds and not {"bind", "listen"} <= kinds:
        return None  # an errno-98 warning for one address alone: the other may have bound
    port = next((e.value for e in scan.port_conflicts if e.value is not None), None)
    named = f"port {port}" if port is not None else "the master port"
    return Diagnosis(
        cause="port_in_use",
        title=f"Master {named} already in use",
        explanation=(
            f"The job stopped at start-up: rank 0 starts torch.distributed's rendezvous store (a TCP server) on "
            f"MASTER_PORT, and {named} was already held by another process on this machine (errno 98, EADDRINUSE). "
            "That is another job on the same node using the same port (29500 unless set), a process left over "
            "from an earlier run, or a launch that starts more than one master (a scheduler running the launcher "
            "once per rank)."
        ),
        evidence=evidence([e.line for e in scan.port_conflicts]),
        line=scan.port_conflicts[0].line.number,
    )
