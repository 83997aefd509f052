"""The whole `diagnose` pipeline on one log: scan, classify, rebuild the job, explain, fix.

Returns the Report (the --json document) and the corrected config when there is one; writing files
and printing are the CLI's job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, BinaryIO

from zerotune.diagnose import advice, explain, fix_search, rejected
from zerotune.diagnose.causes import classify, training
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Diagnosis, FactOut, Report, StepCheck
from zerotune.diagnose.scan import scan_stream
from zerotune.diagnose.signals import facts
from zerotune.dsconfig.settings import resolve
from zerotune.errors import InputError, ZerotuneError
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.job import JobInputs
from zerotune.units import GiB


@dataclass(frozen=True)
class Options(JobInputs):
    """What the user said about the run: the job options predict takes (JobInputs, read by the same
    zerotune.job.read_inputs), which win over the log, and the run's DeepSpeed config file."""

    config: str | None = None
    notes: tuple[str, ...] = ()
    """What reading the launch line / training arguments found (zerotune.job.inputs_from_launch)."""

    @classmethod
    def of(cls, inputs: JobInputs, **extra: Any) -> Options:
        return cls(**{f.name: getattr(inputs, f.name) for f in fields(JobInputs)}, **extra)


def _offload_configured(config: dict[str, Any] | None) -> bool:
    if not config:
        return False
    z = resolve(config).zero
    return z.offload_optimizer.device != "none" or z.offload_param.device != "none"


def _profile(options: Options, notes: list[str]) -> tuple[HardwareProfile, str]:
    """(the profile, how it was chosen): --profile, else the one predict and recommend use without it
    (catalog.hardware.default_profile: this machine's cached calibration or GPU probe, else the built-in
    one), so the same job gets the same numbers from every command."""
    from zerotune.catalog.hardware import default_profile, load_profile

    if options.profile:
        return load_profile(options.profile), "--profile"
    said: list[str] = []
    hw, ref = default_profile(said)
    notes.extend(said)
    return hw, f"assumed (profile {ref}, no --profile)"


def _hardware(job: explain.Job, options: Options, oom_capacity: int | None, notes: list[str]):
    """The profile (`_profile`) with the GPU size the OOM message, else --gpu-memory, gives, resized to
    the job's ranks as predict resizes it (catalog.hardware.with_counts)."""
    from zerotune.catalog.hardware import with_counts

    hw, chosen = _profile(options, notes)
    capacity = oom_capacity
    if capacity is None and options.gpu_memory is not None and hw.gpu is not None:
        capacity = int(options.gpu_memory * GiB)
    if capacity is not None:
        job.capacity = capacity
        job.capacity_source = "log (OOM message)" if oom_capacity is not None else "--gpu-memory"
        if hw.gpu is not None:
            hw = hw.model_copy(update={"gpu": hw.gpu.model_copy(update={"memory_bytes": capacity})})
        elif hw.gpus_per_node == 0:
            notes.append(f"profile {hw.name!r} has no GPU: GPU capacity taken from the OOM message only")
    elif hw.has_gpus and hw.gpu is not None and hw.gpu.memory_bytes:
        job.capacity = hw.gpu.memory_bytes
        job.capacity_source = chosen
    if hw.has_gpus:
        per_node = min(job.world, job.ranks_per_node or hw.gpus_per_node, hw.gpus_per_node)
        nodes = math.ceil(job.world / per_node)
        if nodes == 1 or hw.inter_node is not None:
            hw = with_counts(hw, gpus_per_node=per_node, nodes=nodes)
        else:  # a multi-node run on a one-node profile: counted, its collectives timed as the node's
            hw = hw.model_copy(update={"nodes": nodes})
    return hw


def read_job(scan: Scan, options: Options, notes: list[str]) -> explain.Job:
    """The job as the flags and the log tell it (config, world size, sequence length, model), each
    value with its source; shared with `calibrate --from-log`."""
    job = explain.Job()
    bench = scan.bench_job or {}
    where = f"log:{scan.bench_job_line.number}, the job `zerotune bench` ran" if scan.bench_job_line else ""
    # the config: --config, else the bench's job line, else DeepSpeed's dump, else single facts
    if options.config is not None:
        from zerotune.dsconfig.load import read_config

        raw = read_config(options.config)
        if not isinstance(raw, dict):
            raise InputError(f"{options.config}: a DeepSpeed config must be a JSON object")
        job.config, job.config_source = raw, "--config"
    elif isinstance(bench.get("config"), dict):
        job.config, job.config_source = bench["config"], where
    elif scan.config is not None:
        job.config, job.config_source = (
            scan.config,
            f"log:{scan.config_line.number}" if scan.config_line else "log",
        )
    elif (printed := facts.printed_config(scan)) is not None:
        line = facts.printed_line(scan)
        job.config = printed
        job.config_source = f"log:{line.number if line else '?'} (DeepSpeedConfig.print, reconstructed)"
    else:
        rebuilt = explain.reconstruct_config(scan)
        if rebuilt is not None:
            job.config, job.config_source = rebuilt, "log (reconstructed from engine lines)"
    if scan.config_error:
        notes.append(scan.config_error)

    # the job: world size, sequence length, checkpointing, model, hardware
    if said_world := _world_said(options):
        (job.world, job.ranks_per_node), job.world_source = said_world
    elif isinstance(bench.get("world_size"), int):
        job.world, job.world_source = max(1, bench["world_size"]), where
    elif "world_size" in scan.facts:
        fact = scan.facts["world_size"]
        job.world, job.world_source = max(1, int(fact.value)), f"log:{fact.line.number}"  # type: ignore[call-overload]
    elif (derived := _world_from_batch(scan) or _world_from_launch(scan) or _world_from_printed(job)) is not None:
        job.world, job.world_source = derived
    if "ranks_per_node" in scan.facts and not said_world:
        job.ranks_per_node = max(1, int(scan.facts["ranks_per_node"].value))  # type: ignore[call-overload]
    launched = scan.facts.get("seq_len"), scan.facts.get("checkpointing")  # the launcher's echo of the script args
    if options.seq_len is not None:
        job.seq_len, job.seq_source = options.seq_len, "--seq-len"
    elif isinstance(bench.get("seq_len"), int):
        job.seq_len, job.seq_source = bench["seq_len"], where
    elif launched[0] is not None:
        job.seq_len, job.seq_source = int(launched[0].value), f"log:{launched[0].line.number} (the script's arguments)"  # type: ignore[call-overload]
    if options.checkpointing is not None:
        job.checkpointing, job.checkpointing_source = options.checkpointing, "--checkpointing flag"
    elif isinstance(bench.get("activation_checkpointing"), bool):
        job.checkpointing, job.checkpointing_source = bench["activation_checkpointing"], where
    elif launched[1] is not None and launched[1].value is True:
        job.checkpointing, job.checkpointing_source = True, f"log:{launched[1].line.number} (the script's arguments)"
    job.workload_options = options.workload_options()
    if "deepspeed_version" not in job.workload_options and "deepspeed_version" in scan.facts:
        # the release the log prints: before 0.19.4 stage 3 keeps more gathered (model.memory_facts)
        job.workload_options["deepspeed_version"] = str(scan.facts["deepspeed_version"].value)
    if options.checkpoint_in_cpu:
        job.workload_options["checkpoint_in_cpu"] = True
    if isinstance(job.config, dict) and job.config is bench.get("config") and "optimizer" not in job.config:
        # `zerotune bench` takes the optimizer section out of the engine's config exactly when its ranks
        # pass a torch optimizer (zerotune.bench.config.prepare): its update's passes and temporaries
        job.workload_options["torch_optimizer"] = True
    job.optimizer = options.optimizer
    job.micro_batch, job.grad_accum = options.micro_batch, options.grad_accum
    if options.margin is not None:
        job.margin = options.margin
    if options.model is not None or options.adhoc:
        from zerotune.job import load_spec

        job.spec = load_spec(options, notes)
        job.spec_source = "--model" if options.model is not None else "--params/--layers/--hidden"
    elif _bench_model(bench, job, where, notes):
        pass
    elif _model_from_log(scan, job, notes):
        pass
    else:
        params = scan.facts.get("params")
        if params is not None:
            from zerotune.catalog.models import adhoc_model

            try:
                job.spec = adhoc_model(params=float(params.value))  # type: ignore[arg-type]
                job.spec_source = f"log:{params.line.number} (llama-shaped model of that size)"
            except ZerotuneError as exc:
                notes.append(f"parameter count on line {params.line.number} not usable: {exc.message}")
    if job.seq_source == "assumed" and job.spec is not None:
        from zerotune.catalog.models import default_seq_len

        job.seq_len, note = default_seq_len(job.spec)  # predict's default (zerotune.job.resolve_job)
        if note:
            notes.append(note)
    notes.extend(options.notes)
    return job


def _world_said(options: Options) -> tuple[tuple[int, int], str] | None:
    """((ranks, ranks per node), source) from --world-size or --gpus/--nodes, read as predict reads them
    (zerotune.job.world) on the profile `_profile` chooses; None when none was said."""
    if options.world_size is None and options.gpus is None and options.nodes is None:
        return None
    from zerotune.job import world

    per_node, nodes = world(options, _profile(options, [])[0])
    flags = ("--world-size",) if options.world_size is not None else ()
    flags += tuple(f for f, v in (("--gpus", options.gpus), ("--nodes", options.nodes)) if v is not None)
    return (per_node * nodes, per_node), "/".join(flags)


def hf_said(options: Options) -> dict[str, Any]:
    return {"precision": options.precision, "micro_batch": options.micro_batch, "grad_accum": options.grad_accum}


def analyse(stream: BinaryIO, name: str, options: Options) -> tuple[Report, dict[str, Any] | None]:
    scan = scan_stream(stream)
    notes: list[str] = []
    job = read_job(scan, options, notes)
    offload = _offload_configured(job.config)
    step = _step(scan, job, options, notes)
    judged = training.slow(scan, step, offload or bool(scan.offload_hints)) if step and step.profile_said else None
    diagnosis = classify(scan, offload_configured=offload, judged=(judged,) if judged else ())
    oom_capacity = diagnosis.oom.capacity_bytes if diagnosis.oom else None
    if (
        options.profile is not None
        or options.gpu_memory is not None
        or oom_capacity is not None
        or (job.spec is not None and job.config is not None)
    ):
        job.hardware = _hardware(job, options, oom_capacity, notes)
    explain.fill_hf(job, scan, hf_said(options), notes)

    report = Report(
        log=name,
        lines=scan.lines,
        bytes=scan.bytes,
        exit_code=0 if diagnosis.cause == "none" else 1,
        diagnosis=diagnosis,
        facts=_facts(scan, job, options),
        notes=notes,
        step=step,
    )
    fixed: dict[str, Any] | None = None
    try:
        fixed = _explain(report, diagnosis, job, scan, options, notes)
    except (ValueError, TypeError, LookupError, ArithmeticError) as exc:
        # values read from an arbitrary log can be out of the models' range: keep the diagnosis
        notes.append(
            f"the job rebuilt from the log could not be modelled ({type(exc).__name__}: {exc})"[:300]
        )
    report.notes = [*notes, *job.notes]
    return report, fixed


def _explain(
    report: Report, diagnosis: Diagnosis, job: explain.Job, scan: Scan, options: Options, notes: list[str]
) -> dict[str, Any] | None:
    """The numbers behind the diagnosis (lint, memory, fix, step time); the corrected config if any."""
    fixed: dict[str, Any] | None = None
    # config rejected: the validate rules on the config with the rejected values put back
    if diagnosis.rejected is not None and diagnosis.cause in ("config_rejected", "version_mismatch"):
        cfg = rejected.rejected_config(job.config, diagnosis)
        if cfg is not None:
            world = rejected.rejected_world(diagnosis)
            report.lint = rejected.lint_config(
                cfg, world=world if world and world > 0 else None, seq_len=job.seq_len
            )
            keys = {f.field for f in diagnosis.rejected.fields} if diagnosis.rejected else set()
            codes = sorted(
                {
                    f.code
                    for f in report.lint
                    if f.severity == "error" and f.pointer.rsplit("/", 1)[-1] in keys
                }
            )
            if diagnosis.rejected is not None:
                diagnosis.rejected.rule_codes = codes
            if codes:
                diagnosis.explanation += f" zerotune validate reports it as {', '.join(codes)}."
    elif job.config is not None and "reconstructed" not in job.config_source:
        report.lint = [
            f
            for f in rejected.lint_config(job.config, world=job.world, seq_len=job.seq_len, hf=bool(job.hf_values) or options.hf)
            if f.severity != "info"
        ]

    # memory: the model on the job, and a fix for a GPU OOM
    if job.spec is None and diagnosis.cause == "gpu_oom":
        notes.append(
            "pass --model (a catalog name or config.json) for the memory model and a corrected config"
        )
    if job.config is None and diagnosis.cause == "gpu_oom":
        notes.append("pass --config (the DeepSpeed JSON) for the memory model and a corrected config")
    wanted = diagnosis.cause == "gpu_oom" or (_model_said(options) and diagnosis.cause != "host_oom")
    checked = explain.memory_check(job, diagnosis) if wanted else None
    if checked is not None:
        report.memory, gap = checked
        if diagnosis.cause == "gpu_oom":
            found = fix_search.fix_report(job, diagnosis, gap)
            if found is not None:
                report.fix, fixed = found
            elif diagnosis.oom is not None and diagnosis.oom.phase != "checkpoint_save":
                notes.append(f"no change of at most {fix_search.MAX_KNOBS} keys is predicted to fit")
    if diagnosis.cause == "host_oom" and job.spec is not None and job.config is not None:
        notes.append(explain.host_memory_text(job))
    if report.fix is None and diagnosis.cause != "none":
        report.fix = advice.advise(diagnosis, scan, job)
        whole_config = job.config_source == "--config" or (
            job.config_source.startswith("log:") and "reconstructed" not in job.config_source
        )
        if report.fix is not None and job.config is not None and whole_config:
            candidate = advice.apply_changes(job.config, report.fix.changes)  # type: ignore[union-attr]
            if candidate is not None:
                errors = [
                    f.code
                    for f in rejected.lint_config(candidate, world=job.world, seq_len=job.seq_len, hf=bool(job.hf_values) or options.hf)
                    if f.severity == "error"
                ]
                report.fix.text += (  # type: ignore[union-attr]
                    f" zerotune validate on the corrected config: {', '.join(sorted(set(errors)))}."
                    if errors
                    else " zerotune validate finds no error in the corrected config."
                )
                fixed = candidate
    if diagnosis.oom is not None and diagnosis.oom.phase == "checkpoint_save":
        notes.append(
            "saving gathers the full 16-bit weights (stage3_gather_16bit_weights_on_model_save) or the whole "
            "state dict on one device: save sharded checkpoints (save_checkpoint) and convert offline with "
            "zero_to_fp32.py, or free GPU memory before saving"
        )
    return fixed


def _step(scan: Scan, job: explain.Job, options: Options, notes: list[str]) -> StepCheck | None:
    """The wall_clock_breakdown against the step model when the job (model and config) is known; a
    verdict needs the hardware said (--profile): against an assumed profile the comparison is a note.
    Without the job, the breakdown in words (training.breakdown_note), no verdict."""
    if not scan.breakdown:
        return None
    step = None
    if job.spec is not None and job.config is not None:
        try:
            # its notes (which profile) are written once, where analyse resizes the profile for the job
            job.hardware = job.hardware or _hardware(job, options, None, [])
            step = explain.step_check(job, scan, profile_said=options.profile is not None)
        except (ValueError, TypeError, LookupError, ArithmeticError) as exc:
            notes.append(f"the step could not be modelled ({type(exc).__name__}: {exc})"[:300])
    if step is None:
        note = training.breakdown_note(scan)
        if note:
            notes.append(note)
    elif not step.profile_said and any(t.slow for t in step.timers):
        over = ", ".join(
            f"{t.timer} {t.measured_ms:.0f} ms vs {t.predicted_ms:.0f} ms predicted" for t in step.timers if t.slow
        )
        notes.append(
            f"on the assumed profile {job.hardware.name if job.hardware else ''} the step model puts {over} "
            "beyond its expected error: pass --profile (the run's hardware) for a verdict"
        )
    return step


def _world_from_batch(scan: Scan) -> tuple[int, str] | None:
    """HF Trainer's header: total batch = per-device batch × accumulation × world size."""
    need = ("train_batch_size", "micro_batch", "grad_accum")
    if not all(n in scan.facts for n in need):
        return None
    total, micro, accum = (int(scan.facts[n].value) for n in need)  # type: ignore[call-overload]
    if micro < 1 or accum < 1 or total % (micro * accum):
        return None
    lines = ", ".join(str(scan.facts[n].line.number) for n in need)
    return max(1, total // (micro * accum)), f"log:{lines} (total batch / (per-device batch × accumulation))"


def _world_from_printed(job: explain.Job) -> tuple[int, str] | None:
    """The batch identity of a config the run printed: DeepSpeed accepted it at start only if train_batch_size =
    micro-batch × accumulation × data-parallel size (deepspeed/runtime/config.py `_batch_assertion`), so the
    three integers it shows give that size (accelerate#910: 64 = 32 × 1 × 2)."""
    if job.config is None or not job.config_source.startswith("log:"):
        return None
    values = [job.config.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    total, micro, accum = values
    if total % (micro * accum):
        return None
    return total // (micro * accum), f"{job.config_source.split(' ')[0]} (the printed config: train batch / (micro-batch × accumulation))"


def _world_from_launch(scan: Scan) -> tuple[int, str] | None:
    """nodes × ranks per node from the launch command (--num_gpus, --nproc_per_node, --include host:0,1,..)."""
    per_node = scan.facts.get("ranks_per_node")
    listed = scan.facts.get("gpus_listed")
    if per_node is None and listed is not None:
        count = len([g for g in str(listed.value).split(",") if g.strip()])
        return count, f"log:{listed.line.number} (the GPUs --include lists)"
    if per_node is None:
        return None
    nodes = scan.facts.get("nodes")
    n = int(nodes.value) if nodes is not None else 1  # type: ignore[call-overload]
    where = f"log:{per_node.line.number}" + (f", {nodes.line.number}" if nodes is not None else "")
    return max(1, n * int(per_node.value)), f"{where} (nodes × ranks per node)"  # type: ignore[call-overload]


def _bench_model(bench: dict[str, Any], job: explain.Job, where: str, notes: list[str]) -> bool:
    """The proxy model a `zerotune bench` run printed (a ModelSpec: no catalog model has its shape)."""
    if not isinstance(bench.get("model"), dict):
        return False
    from pydantic import ValidationError

    from zerotune.schema.model import ModelSpec

    try:
        job.spec = ModelSpec.model_validate(bench["model"])
    except ValidationError as exc:
        notes.append(f"the bench's model on {where} could not be read: {exc.errors()[0]['msg']}"[:200])
        return False
    job.spec_source = where
    return True


def _model_from_log(scan: Scan, job: explain.Job, notes: list[str]) -> bool:
    """The model from the HF config dump in the log, else its name (--model_name_or_path) when the
    catalog knows it."""
    from zerotune.catalog.architectures import build_model
    from zerotune.catalog.models import load_architecture, model_from_hf_config

    if scan.model_config is not None:
        name = str(scan.model_config.get("_name_or_path") or "model from the log")
        try:
            job.spec = model_from_hf_config(scan.model_config, name=name)
            line = scan.model_config_line.number if scan.model_config_line else "?"
            job.spec_source = f"log:{line} (the model config transformers printed)"
            return True
        except (ZerotuneError, ValueError, TypeError, KeyError) as exc:
            notes.append(f"the model config in the log could not be read: {exc}"[:200])
    fact = scan.facts.get("model_name")
    if fact is None:
        return False
    try:
        job.spec = build_model(load_architecture(str(fact.value)))
    except (ZerotuneError, ValueError, OSError):
        notes.append(f"model {fact.value!r} (line {fact.line.number}) is not in the catalog: pass --model")
        return False
    job.spec_source = f"log:{fact.line.number} ({fact.value}, catalog)"
    return True


def _facts(scan: Scan, job: explain.Job, options: Options) -> list[FactOut]:
    out = [
        FactOut(
            name=name,
            value=fact.value if isinstance(fact.value, (str, int, float, bool)) else str(fact.value),
            source=f"log:{fact.line.number}",
        )
        for name, fact in scan.facts.items()
    ]
    total, count = scan.samples_per_s
    if count and scan.throughput_line is not None:
        out.append(
            FactOut(
                name="samples_per_s (mean)",
                value=round(total / count, 3),
                source=f"log:{scan.throughput_line.number} and {int(count) - 1} more lines",
            )
        )
    step = {k: v[0] / v[1] for k, v in scan.breakdown.items() if v[1] and k in ("fwd", "bwd", "step")}
    if "fwd" in step and "bwd" in step and scan.breakdown_line is not None:
        out.append(
            FactOut(
                name="step_ms (mean fwd + bwd + step)",
                value=round(sum(step.values()), 2),
                source=f"log:{scan.breakdown_line.number} and {int(scan.breakdown['fwd'][1]) - 1} more lines",
            )
        )
    if job.config is not None:
        out.append(FactOut(name="config", value="DeepSpeed config", source=job.config_source))
        r = explain.resolved(job.config, job)
        out.append(FactOut(name="zero_stage (config)", value=r.zero.stage, source=job.config_source))
        out.append(FactOut(name="precision (config)", value=r.precision, source=job.config_source))
    if job.spec is not None:
        out.append(
            FactOut(
                name="model", value=f"{job.spec.name} ({job.spec.params:,} params)", source=job.spec_source
            )
        )
    if job.capacity is not None:
        out.append(FactOut(name="gpu_capacity_bytes", value=job.capacity, source=job.capacity_source))
    if job.hardware is not None:
        out.append(
            FactOut(
                name="profile",
                value=job.hardware.name,
                source="--profile" if options.profile else "assumed (built-in; only for what the log lacks)",
            )
        )
    out.append(FactOut(name="world_size (used)", value=job.world, source=job.world_source))
    out.append(FactOut(name="seq_len (used)", value=job.seq_len, source=job.seq_source))
    out.append(
        FactOut(
            name="activation_checkpointing (used)", value=job.checkpointing, source=job.checkpointing_source
        )
    )
    return out


def _model_said(options: Options) -> bool:
    """--model or an ad-hoc shape: the user asked for the model's numbers whatever the log's cause."""
    return options.model is not None or options.adhoc
