"""The fix for a job that cannot start: the config keys to set, the versions to align, the op to
prebuild, NVMe offload's libaio, the optimizer to name under ZeRO-Offload."""

from __future__ import annotations

from zerotune.diagnose.advice.unchecked import unchecked
from zerotune.diagnose.causes.stopped import OLD_COMPILER_TITLE
from zerotune.diagnose.explain import Job
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Change, Diagnosis, FixOut
from zerotune.diagnose.signals.config import (
    ACCELERATE_CONFIG_CHECK,
    ACCELERATE_PLUGIN,
    ACCELERATE_PREPARE,
    COMM_BACKEND_UNSET,
    CONFIG_GIVEN_TWICE,
    CONFIG_SOURCE,
    OPTIMIZER_PAIRING,
    PARALLEL_LAYOUT,
    QUANTIZED_UNDER_ZERO3,
    TENSOR_PARALLEL_LOAD,
    ZERO3_LOADING,
    ZERO_STAGE_FEATURE,
)
from zerotune.diagnose.signals.memory import unset_swapper


def config_rejected(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    rej = d.rejected
    changes: list[Change] = []
    if rej is not None and rej.kind == "hf_mismatch":
        for f in rej.fields:
            changes.append(
                Change(
                    key=f.field,
                    old=f.value,
                    new="auto",
                    reason="let the HF Trainer fill it from TrainingArguments",
                )
            )
        return unchecked(changes, 'Set the mismatching keys to "auto" (or make them equal to the command line).')
    if rej is not None and rej.model == ACCELERATE_PLUGIN:
        for f in rej.fields:
            changes.append(
                Change(
                    key=f"(accelerate config) {f.field}",
                    old="set",
                    new="removed",
                    reason="the deepspeed_config_file sets it: accelerate refuses it in both places",
                )
            )
        return unchecked(changes, "Keep the DeepSpeed settings in the DeepSpeed config file only.")
    if rej is not None and rej.model == CONFIG_SOURCE:
        none = bool(rej.fields) and rej.fields[0].value == "none"
        change = Change(
            key="--deepspeed_config / --deepscale_config / config=",
            old="none given" if none else "both flags given",
            new="a config file or dict" if none else "--deepspeed_config only (--deepscale_config is its old name)",
            reason="deepspeed.initialize reads its config from exactly one place",
        )
        return unchecked([change], "Give deepspeed.initialize one DeepSpeed config.")
    if rej is not None and rej.model == ACCELERATE_CONFIG_CHECK:
        if any(f.field == "gradient_accumulation_steps" for f in rej.fields):
            change = Change(
                key="gradient_accumulation_steps",
                old="auto",
                new="an integer (the script's accumulation steps)",
                reason="accelerate's DeepSpeed plugin reads it before anything fills an \"auto\"",
            )
        else:
            change = Change(
                key="zero_optimization",
                old="missing",
                new='{"stage": N}',
                reason="accelerate's DeepSpeed plugin refuses a DeepSpeed config without a ZeRO section",
            )
        return unchecked([change], "Fix the DeepSpeed config file given to accelerate or to --deepspeed.")
    if rej is not None and rej.model == ACCELERATE_PREPARE:
        return unchecked(
            [
                Change(
                    key="train_micro_batch_size_per_gpu",
                    old="auto / unset",
                    new="the per-GPU batch, an integer",
                    reason="accelerate takes it from a prepared dataloader's batch_size; none was passed",
                )
            ],
            "Or pass the training dataloader to accelerator.prepare() with the model; a script that does not "
            "support DeepSpeed runs without it (an accelerate config without DeepSpeed).",
        )
    if rej is not None and rej.model == PARALLEL_LAYOUT:
        sizes = ", ".join(f.field for f in rej.fields)
        return unchecked(
            [
                Change(
                    key=f"(launch) {sizes}",
                    old="not a divisor",
                    new="sizes that divide each other",
                    reason=(rej.fields[0].message or "a size the parallel layout must divide")[:200],
                )
            ],
            "Pick the GPU count, tensor/pipeline/expert-parallel sizes and the layer or expert count so each "
            "divides the one it splits.",
        )
    if rej is not None and rej.model == OPTIMIZER_PAIRING:
        key = rej.fields[0].field if rej.fields else "scheduler"
        message = rej.fields[0].message if rej.fields else ""
        if "in the config file and in the code" in message:
            new, text = (
                "in one place only",
                f"Remove the {key} section from the DeepSpeed config, or build accelerate's Dummy stand-in for it "
                "in the code so the config's one is used.",
            )
        elif "without specifying" in message or "DummyScheduler` in the code" in message:
            new, text = (
                "a section in the DeepSpeed config",
                f"accelerate's Dummy {key} stands in for the config's section: add it to the config, or build the "
                f"real {key} in the code (a Dummy scheduler also needs the Dummy optimizer).",
            )
        else:
            new, text = (
                "a scheduler section in the DeepSpeed config",
                'With an optimizer in the DeepSpeed config, give the config a scheduler too (WarmupLR or '
                'WarmupDecayLR with "auto" values), or use a transformers release that accepts an HF scheduler '
                "with it.",
            )
        return unchecked([Change(key=key, old="as the code and config have it", new=new, reason=message[:200])], text)
    if rej is not None and rej.model == ZERO_STAGE_FEATURE:
        stage = rej.fields[0].value if rej.fields else None
        return unchecked(
            [
                Change(
                    key="zero_optimization.stage",
                    old="another stage",
                    new=int(stage) if stage and stage.isdigit() else f"stage {stage or 'the message names'}",
                    reason=(rej.fields[0].message if rej.fields else "a feature of one ZeRO stage")[:200],
                )
            ],
            "Or turn the feature off at this stage (for transformers' ZeRO inference: evaluate or predict without "
            "DeepSpeed, or with the stage-3 config).",
        )
    if rej is not None and rej.model == ZERO3_LOADING:
        return unchecked(
            [
                Change(
                    key="(script) from_pretrained(device_map=..., low_cpu_mem_usage=...)",
                    old="set",
                    new="removed under ZeRO-3",
                    reason="ZeRO-3 builds the model under zero.Init and places the weights itself",
                )
            ],
            "If the script passes neither, a transformers/accelerate pair of other releases than the script's "
            "sets them (install the versions it pins).",
        )
    if rej is not None and rej.model == QUANTIZED_UNDER_ZERO3:
        return unchecked(
            [
                Change(
                    key="zero_optimization.stage",
                    old=3,
                    new="2 (or below)",
                    reason="ZeRO-3 cuts each parameter into 1-D shards; a quantized weight's layout and scales are whole",
                )
            ],
            "Or keep ZeRO-3 and load the model unquantized (no quantization_bit; a bf16 checkpoint instead of a "
            "PTQ-quantized one).",
        )
    if rej is not None and rej.model == TENSOR_PARALLEL_LOAD:
        return unchecked(
            [
                Change(
                    key="(script) from_pretrained(device_map=...)",
                    old='"auto" (or a tp_plan)',
                    new='none, or "cuda" / the local rank\'s device',
                    reason="a device_map of \"auto\" in a distributed launch loaded the model tensor-parallel "
                    "(DTensor parameters) in the transformers releases before PR 38942; DeepSpeed shards the model itself",
                )
            ],
            "Or a transformers with PR 38942, where only an explicit tp_plan loads tensor-parallel.",
        )
    values = {f.field: f.value for f in rej.fields} if rej else {}
    if "world_size" in values and all(
        values.get(k) for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    ):
        try:
            micro, accum, world = (
                int(values[k])
                for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "world_size")
            )  # type: ignore[arg-type]
            changes.append(
                Change(
                    key="train_batch_size",
                    old=values.get("train_batch_size"),
                    new=micro * accum * world,
                    reason=f"DeepSpeed requires train_batch_size = micro-batch {micro} × accumulation {accum} × world size {world} (or leave one of the three out)",
                )
            )
        except (TypeError, ValueError):
            pass
    for f in rej.fields if rej else []:
        if not changes and f.field and "greater than 0" in f.message:
            changes.append(Change(key=f.field, old=f.value, new="≥ 1", reason=f.message))
    codes = f" (zerotune validate: {', '.join(rej.rule_codes)})" if rej and rej.rule_codes else ""
    if not changes and rej is not None:
        for f in rej.fields[:3]:
            if f.field:
                changes.append(
                    Change(
                        key=f.field,
                        old=f.value,
                        new="a value DeepSpeed accepts",
                        reason=(f.message or "rejected")[:200],
                    )
                )
    return unchecked(
        changes, f"Correct the rejected keys{codes}; `zerotune validate` checks the config before a run."
    )


def _versions(scan: Scan) -> str:
    return ", ".join(
        f"{n.replace('_version', '')} {scan.facts[n].value}"
        for n in ("deepspeed_version", "torch_version", "cuda_version", "transformers_version")
        if n in scan.facts
    )


def version_mismatch(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    if any(CONFIG_GIVEN_TWICE.search(line.text) for line in scan.version_errors):
        change = Change(
            key="deepspeed.initialize(args=..., config=...)",
            old="the config in both",
            new="in one (drop args.deepspeed_config or config=), or DeepSpeed < 0.9 for a script pinned to it",
            reason="DeepSpeed 0.9.0 refuses a config given twice; earlier releases took one silently",
        )
        return unchecked([change], "The script predates DeepSpeed 0.9's check; its pinned DeepSpeed also runs it.")
    if any(COMM_BACKEND_UNSET.search(line.text) for line in scan.version_errors):
        change = Change(
            key="deepspeed.init_distributed()",
            old="not called before DeepSpeed's collectives",
            new="called once torch.distributed is set up (before deepspeed.checkpointing or DeepSpeed's comm), "
            "or the DeepSpeed release the code pins",
            reason="DeepSpeed's comm layer (0.6.6+) needs its own backend; deepspeed.initialize sets it, earlier "
            "releases used torch.distributed directly",
        )
        return unchecked([change], "The code predates DeepSpeed's comm layer; its pinned DeepSpeed also runs it.")
    versions = _versions(scan) or "the versions in the error"
    return unchecked(
        [
            Change(
                key="(environment) versions",
                old=versions,
                new="a matching set",
                reason="install the CUDA toolkit torch was built with (or the torch build for the toolkit), "
                "and a DeepSpeed/transformers pair released together; `ds_report` shows them",
            )
        ],
        "Align the versions the error names; nothing in the DeepSpeed config changes.",
    )


def op_build(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    if scan.old_compiler is not None and d.title == OLD_COMPILER_TITLE:
        return unchecked(
            [
                Change(
                    key="(environment) C++ compiler",
                    old=scan.old_compiler[0],
                    new="GCC 5 or newer first on PATH as c++ (a conda gxx_linux-64, devtoolset), then rebuild",
                    reason="torch builds extensions with the system c++; PyTorch's headers need a GCC >= 5",
                )
            ],
            "Or install DeepSpeed with its ops prebuilt (DS_BUILD_OPS=1) on a machine with a newer compiler.",
        )
    op = next((str(e.value) for e in scan.build_errors if e.value), "the op")
    if any(e.kind == "install_build" for e in scan.build_errors):
        # the prebuild at pip install stopped in the op's sources (signals.ops _SETUP_BUILD): prebuilding again is
        # no fix; leaving the op to the JIT build (or out) is
        return unchecked(
            [
                Change(
                    key=f"(environment) DS_BUILD_{op.upper()}" if op != "the op" else "(environment) DS_BUILD_OPS",
                    old="1 (built at install)",
                    new="0 (built at first use, or not at all if the run does not use it)",
                    reason=f"the compiler stopped in {op}'s sources: this toolkit (CUDA/ROCm) and this DeepSpeed "
                    "release do not build it together",
                )
            ],
            "If the run needs the op, install a DeepSpeed release whose sources build with this toolkit.",
        )
    return unchecked(
        [
            Change(
                key="(environment) build",
                old=f"{op} JIT build failed",
                new=f"DS_BUILD_{op.upper()}=1 pip install deepspeed" if op != "the op" else "prebuilt ops",
                reason="prebuild the op with a CUDA toolkit matching torch (CUDA_HOME set, nvcc and ninja on PATH), "
                "or clear ~/.cache/torch_extensions if a stale build is loaded",
            )
        ],
        "An install problem, not a config one; `ds_report` shows which ops are compatible.",
    )


def nvme_aio(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    if any(unset_swapper(line) for line in scan.aio_errors):
        # the swapper DeepSpeed left unset for this NVMe combination (issues 4998 and 1534)
        return unchecked(
            [
                Change(
                    key="zero_optimization.offload_optimizer.device",
                    old=None,
                    new="nvme (with offload_param nvme), or a DeepSpeed release with PR 6963",
                    reason="parameters on NVMe reached swap code whose optimizer swapper was never built",
                )
            ],
            "Or offload only the optimizer to NVMe, parameters to cpu.",
        )
    if not scan.aio_errors and scan.swap_refusals:
        # the file system refused the swap folder under nvme_path (transformers#16616)
        return unchecked(
            [
                Change(
                    key="zero_optimization.offload_param.nvme_path",
                    old=None,
                    new="a folder on a local NVMe drive the training user can write (and the same for offload_optimizer)",
                    reason="the swappers create their swap folders under nvme_path at start-up; the write was refused",
                )
            ],
            "Or remove the NVMe offload (offload_optimizer/offload_param device nvme → cpu).",
        )
    return unchecked(
        [
            Change(
                key="(environment) libaio",
                old=None,
                new="libaio-dev installed, async_io [OKAY] in ds_report",
                reason="NVMe offload needs DeepSpeed's async_io op; swap files on a local NVMe filesystem with room",
            )
        ],
        "Or remove the NVMe offload (offload_optimizer/offload_param device nvme → cpu).",
    )


def client_optimizer(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    old = job.config.get("optimizer") if job.config is not None else None
    return unchecked(
        [
            Change(
                key="optimizer",
                old=old,
                new={"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
                reason="an optimizer named in the config is built by DeepSpeed as DeepSpeedCPUAdam under offload "
                '("auto" lets the HF Trainer fill the values)',
            )
        ],
        'Or keep the script\'s optimizer and set "zero_force_ds_cpu_optimizer": false (slower CPU step).',
    )


def port_in_use(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    port = next((e.value for e in scan.port_conflicts if e.value is not None), None)
    held = f":{port}" if port is not None else ":<port>"
    return unchecked(
        [
            Change(
                key="(launcher) --master_port / MASTER_PORT",
                old=port,
                new="a free port",
                reason="each job on a node needs its own rendezvous port (deepspeed/torchrun --master_port, "
                "accelerate --main_process_port, MASTER_PORT for launchers that read the environment)",
            )
        ],
        f"If no other job should hold it, a process of an earlier run still does: find it with `ss -ltnp | grep {held}` "
        "and end it. Under slurm or mpirun on one node, start the launcher once per node, not once per rank "
        "(deepspeed --force_multi with --launcher slurm/openmpi), so only rank 0 binds the port.",
    )
