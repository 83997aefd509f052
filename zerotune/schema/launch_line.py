"""The job a training launch line describes: `deepspeed`, `torchrun` or `accelerate launch` in front of a
script that takes HF Trainer / TRL arguments, or the same arguments as a TrainingArguments JSON.

Pure: argv (or a dict) in, `LaunchLine` out; nothing is read or run. An argument this module does not
know is listed in `unknown`, never guessed; one it knows that does not change the job's memory or step
time (learning rate, logging, output paths...) is listed in `ignored`.

Argument names, as their parsers spell them (HfArgumentParser accepts `--name` and `--name value`
for booleans, "true"/"false"/"1"/"0" as values):
- transformers `TrainingArguments`: deepspeed, per_device_train_batch_size, gradient_accumulation_steps,
  gradient_checkpointing, bf16, fp16, use_liger_kernel, optim, torch_compile;
- TRL `SFTConfig`: max_length (`max_seq_length` before TRL 0.20), packing, padding_free,
  activation_offloading (TRL trainers' configs all carry it); TRL `ModelConfig`:
  model_name_or_path, attn_implementation, torch_dtype / dtype;
- transformers examples (run_clm.py `ModelArguments` / `DataTrainingArguments`): model_name_or_path,
  block_size;
- launchers: deepspeed (`--num_gpus`, `--num_nodes`), torchrun / `python -m torch.distributed.run`
  (`--nproc_per_node`, `--nnodes`), accelerate launch (`--num_processes`: processes over all machines,
  `--num_machines`, `--mixed_precision`, `--deepspeed_config_file`, `--num_cpu_threads_per_process`); the
  OpenMP threads each rank gets follow the launcher (`_launcher_threads`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zerotune.errors import InputError

ATTENTION = {
    "flash_attention_2": "flash",
    "flash_attention_3": "flash3",
    "flash_attention_4": "flash4",
    "sdpa": "sdpa",
    "eager": "eager",
}
"""HF `attn_implementation` values -> zerotune's attention kernels (flash-attention 3 and 4 keep what 2 keeps in
memory; their Hopper and Blackwell kernels run faster: zerotune/model/compute.py FA3_/FA4_KERNEL_FRACTION)."""

OPTIM = {
    "adamw_torch": "adamw",
    "adamw_torch_fused": "adamw",
    "adamw_hf": "adamw",
    "adamw_apex_fused": "adamw",
    "adamw_torch_xla": "adamw",
    "adafactor": None,
    "sgd": "sgd",
    "adagrad": "adagrad",
    "lion_32bit": "lion",
    "lion_8bit": None,
}
"""HF `optim` values -> zerotune optimizers (None: an optimizer zerotune does not model; said as unknown)."""

SEQ_LEN_ARGS = ("max_length", "max_seq_length", "block_size", "model_max_length", "max_seq_len")
"""Tokens per sequence: TRL SFTConfig max_length (max_seq_length before TRL 0.20), run_clm block_size,
the model_max_length of FastChat-style scripts."""

BOOL_ARGS = {
    "gradient_checkpointing": "checkpointing",
    "use_liger_kernel": "liger",
    "packing": "packing",
    "padding_free": "packing",
    "activation_offloading": "activation_offloading",
}
"""Boolean script arguments -> JobInputs fields."""

INT_ARGS = {"per_device_train_batch_size": "micro_batch", "gradient_accumulation_steps": "grad_accum"}

IGNORED = frozenset(
    """output_dir overwrite_output_dir do_train do_eval do_predict learning_rate weight_decay adam_beta1
    adam_beta2 adam_epsilon max_grad_norm num_train_epochs max_steps lr_scheduler_type warmup_ratio
    warmup_steps logging_dir logging_strategy logging_steps logging_first_step save_strategy save_steps
    save_total_limit save_only_model eval_strategy evaluation_strategy eval_steps per_device_eval_batch_size
    seed data_seed report_to run_name dataloader_num_workers dataloader_pin_memory remove_unused_columns
    push_to_hub hub_model_id trust_remote_code use_fast_tokenizer cache_dir dataset_name dataset_config_name
    dataset_text_field dataset_train_split dataset_test_split train_file validation_file
    preprocessing_num_workers local_rank ddp_timeout tf32 gradient_checkpointing_kwargs bf16_full_eval
    fp16_full_eval load_best_model_at_end metric_for_best_model greater_is_better disable_tqdm
    log_level torch_dtype dtype lora_alpha use_rslora
    completion_only_loss assistant_only_loss eos_token pad_token tokenizer_name config_name
    low_cpu_mem_usage overwrite_cache validation_split_percentage streaming label_names
    include_num_input_tokens_seen include_tokens_per_second save_safetensors resume_from_checkpoint""".split()
)
"""Arguments that do not change per-GPU memory or step time as zerotune models them (optimizer
hyper-parameters, logging, saving, data paths). LoRA's alpha and rsLoRA scale the adapters' output, not
their sizes."""

LORA_SWITCHES = ("use_peft", "finetuning_type")
"""What turns LoRA on: TRL ModelConfig `use_peft` (trl/trainer/model_config.py), LlamaFactory FinetuningArguments
`finetuning_type` ("lora", its default; "full", "freeze", "oft" are not LoRA: src/llamafactory/hparams/
finetuning_args.py)."""
LORA_RANK_ARGS = ("lora_r", "lora_rank")
"""The adapters' rank: TRL ModelConfig `lora_r` (and most training scripts'), LlamaFactory `lora_rank`."""
LORA_TARGET_ARGS = ("lora_target_modules", "lora_target")
"""The adapted linears: TRL ModelConfig `lora_target_modules` (a list; None = peft's default for the family),
LlamaFactory `lora_target` (comma-separated; "all" = every linear, its default)."""
DEFAULT_LORA_RANK = {"use_peft": 16, "finetuning_type": 8}
"""The rank when the line turns LoRA on without one: TRL ModelConfig lora_r = 16, LlamaFactory lora_rank = 8."""
LORA_ARGS = frozenset(LORA_SWITCHES + LORA_RANK_ARGS + LORA_TARGET_ARGS + ("lora_dropout",))
LIST_ARGS = frozenset(("lora_target_modules",))
"""Script arguments that take several values (`--lora_target_modules q_proj v_proj`, HfArgumentParser's
nargs for a list field)."""

LAUNCHERS = {
    "deepspeed": {"num_gpus": "gpus", "num_nodes": "nodes"},
    "torchrun": {"nproc_per_node": "gpus", "nnodes": "nodes"},
    "accelerate": {"num_processes": "world_size", "num_machines": "nodes"},
}
"""Launcher arguments that size the job; their others (ports, hostfiles, rendezvous) do not matter here."""

LAUNCHER_VALUE_ARGS = frozenset(
    """hostfile include exclude master_addr master_port node_rank rdzv_backend rdzv_endpoint rdzv_id
    main_process_ip main_process_port machine_rank config_file dynamo_backend gpu_ids
    deepspeed_hostfile deepspeed_multinode_launcher zero_stage offload_optimizer_device
    offload_param_device gradient_accumulation_steps mixed_precision deepspeed_config_file
    zero3_init_flag zero3_save_16bit_model launcher ssh_port max_restarts monitor_interval
    num_cpu_threads_per_process""".split()
)
"""Launcher options that take a value (so the value is not mistaken for the script)."""


@dataclass
class LaunchLine:
    """What a launch line says about the job, as JobInputs keyword arguments plus the config it runs."""

    inputs: dict[str, Any] = field(default_factory=dict)
    config: str | None = None
    """The DeepSpeed config (`--deepspeed`, accelerate's `--deepspeed_config_file`)."""
    script: str | None = None
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def merged_into(self, said: dict[str, Any]) -> dict[str, Any]:
        """JobInputs keyword arguments: what was said explicitly (not None) over the launch line's."""
        return self.inputs | {k: v for k, v in said.items() if v is not None}


def _flag(token: str) -> tuple[str, str | None]:
    """`--name=value` / `--name` -> (name with '-' as '_', value or None)."""
    name, eq, value = token.lstrip("-").partition("=")
    return name.replace("-", "_"), (value if eq else None)


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InputError(f"launch line: --{name} {value!r} is not a boolean", hint="use true or false")


def _int(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputError(f"launch line: --{name} {value!r} is not an integer") from None


def _launcher(argv: list[str]) -> tuple[str | None, int]:
    """The launcher's name and where its own arguments start."""
    if not argv:
        raise InputError("empty launch line", hint="e.g. -- deepspeed train.py --deepspeed ds.json ...")
    head = argv[0].rsplit("/", 1)[-1]
    if head == "accelerate" and argv[1:2] == ["launch"]:
        return "accelerate", 2
    if head in ("deepspeed", "torchrun"):
        return head, 1
    if head.startswith("python") and argv[1:3] == ["-m", "torch.distributed.run"]:
        return "torchrun", 3
    if head.startswith("python"):
        return None, 1
    return None, 0


def parse_launch(argv: list[str], read: Callable[[str], dict[str, Any]] | None = None) -> LaunchLine:
    """The job `argv` launches. `read` loads a TrainingArguments JSON/YAML the script is given as its
    only positional argument (HfArgumentParser.parse_json_file / parse_yaml_file) or through TRL's
    `--config`; without it such a file is listed as unknown. Arguments on the line win over the file."""
    out = LaunchLine()
    launcher, i = _launcher(argv)
    sizing = LAUNCHERS.get(launcher or "", {})
    while i < len(argv) and launcher is not None:  # the launcher's own options, up to the script
        token = argv[i]
        if not token.startswith("-"):
            break
        name, value = _flag(token)
        takes_value = name in sizing or name in LAUNCHER_VALUE_ARGS
        if takes_value and value is None and i + 1 < len(argv):
            value, i = argv[i + 1], i + 1
        if name in sizing:
            out.inputs[sizing[name]] = _int(name, value)
        elif name == "deepspeed_config_file":
            out.config = value
        elif name == "mixed_precision" and value in ("bf16", "fp16"):
            out.inputs["precision"] = value
        elif name == "num_cpu_threads_per_process":
            out.inputs["omp_threads"] = _int(name, value)
        i += 1
    _launcher_threads(launcher, out)
    if launcher is not None and i < len(argv) and argv[i] in ("-m",):
        i += 1
    if i < len(argv):
        out.script, i = argv[i], i + 1
    args = argv[i:]
    values: dict[str, Any] = {}
    if args and not args[0].startswith("-") and args[0].endswith((".json", ".yaml", ".yml")):
        values |= _read(args[0], read, out)
        args = args[1:]
    values |= _script_args(args, out)
    if "config" in values:
        values = _read(str(values.pop("config")), read, out) | values
    apply_training_args(values, out)
    return out


def _launcher_threads(launcher: str | None, out: LaunchLine) -> None:
    """The OpenMP threads per rank the launcher leaves (JobInputs.omp_threads). accelerate launch exports
    OMP_NUM_THREADS = --num_cpu_threads_per_process, by default the caller's OMP_NUM_THREADS or 1 on a GPU
    job (accelerate commands/launch.py `_validate_launch_command`); torchrun sets 1 when nproc_per_node > 1
    and it is unset (torch/distributed/run.py); deepspeed sets it only with --bind_cores_to_rank (cores per
    rank: the node's cores shared, as when unset). A caller's own OMP_NUM_THREADS is not on the line:
    --omp-threads says it."""
    if "omp_threads" in out.inputs:
        return
    if launcher == "accelerate" or (launcher == "torchrun" and out.inputs.get("gpus", 1) > 1):
        out.inputs["omp_threads"] = 1
        out.notes.append(
            f"{launcher} leaves OMP_NUM_THREADS=1 in each rank (unless your environment sets it: say --omp-threads): "
            "an offloaded optimizer's CPU Adam runs on one thread per rank"
        )


def _read(path: str, read: Callable[[str], dict[str, Any]] | None, out: LaunchLine) -> dict[str, Any]:
    if read is None:
        out.unknown.append(path)
        return {}
    loaded = read(path)
    out.notes.append(f"training arguments read from {path}")
    return loaded


def _script_args(args: list[str], out: LaunchLine) -> dict[str, Any]:
    """`--name value`, `--name=value` and bare boolean `--name` -> {name: value}."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("-"):
            out.unknown.append(token)
            i += 1
            continue
        name, value = _flag(token)
        if name in LIST_ARGS and value is None:
            items = []
            while i + 1 < len(args) and not args[i + 1].startswith("-"):
                items.append(args[i + 1])
                i += 1
            values[name] = items or True
            i += 1
            continue
        if value is None and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value, i = args[i + 1], i + 1
        values[name] = True if value is None else value
        i += 1
    return values


def apply_training_args(values: dict[str, Any], out: LaunchLine) -> LaunchLine:
    """HF TrainingArguments / TRL config values (a launch line's or a JSON's) into `out`."""
    for name, value in values.items():
        if name in ("deepspeed", "deepspeed_config"):
            if isinstance(value, dict):
                out.notes.append("--deepspeed is an inline dict: give the config file with --config")
            else:
                out.config = str(value)
        elif name == "model_name_or_path":
            out.inputs["model"] = str(value)
        elif name in ("bf16", "fp16"):
            if _bool(name, value):
                out.inputs["precision"] = name
        elif name in BOOL_ARGS:
            out.inputs[BOOL_ARGS[name]] = _bool(name, value) or out.inputs.get(BOOL_ARGS[name], False)
        elif name in INT_ARGS:
            out.inputs[INT_ARGS[name]] = _int(name, value)
        elif name in SEQ_LEN_ARGS:
            if value is not None and str(value).lower() != "none":
                out.inputs["seq_len"] = _int(name, value)
        elif name == "attn_implementation":
            kernel = ATTENTION.get(str(value))
            if kernel is None:
                out.unknown.append(f"--attn_implementation {value}")
            else:
                out.inputs["attention"] = kernel
        elif name == "optim":
            optimizer = OPTIM.get(str(value))
            if optimizer is None:
                out.unknown.append(f"--optim {value}")
            else:
                out.inputs["optimizer"] = optimizer
        elif name in LORA_ARGS:
            continue  # read together below (`_lora`)
        elif name in IGNORED:
            out.ignored.append(f"--{name}")
        else:
            out.unknown.append(f"--{name}")
    if out.config is not None:
        out.inputs["hf"] = True  # HF Trainer fills the config's "auto" values
    _lora(values, out)
    return out


def _lora(values: dict[str, Any], out: LaunchLine) -> None:
    """LoRA's rank and targets (JobInputs.lora_rank, lora_targets) from the arguments that state them."""
    if not any(k in values for k in LORA_ARGS):
        return
    switch = next((k for k in LORA_SWITCHES if k in values), None)
    if switch == "use_peft" and not _bool(switch, values[switch]):
        return
    if switch == "finetuning_type" and str(values[switch]).lower() != "lora":
        if str(values[switch]).lower() in ("freeze", "oft"):
            out.notes.append(
                f"finetuning_type {values[switch]}: zerotune models full fine-tuning for it (an upper bound)"
            )
        return
    rank = next((_int(k, values[k]) for k in LORA_RANK_ARGS if k in values), None)
    if rank is None and switch is None:
        out.notes.append("the launch line sets LoRA options but no rank: pass --lora-rank (modelled as full fine-tuning)")
        return
    if rank is None:
        rank = DEFAULT_LORA_RANK[str(switch)]
        out.notes.append(f"LoRA rank {rank}, the default of --{switch}'s trainer (the line names none)")
    out.inputs["lora_rank"] = rank
    target = next((values[k] for k in LORA_TARGET_ARGS if k in values), None)
    if target is None and switch == "finetuning_type":
        target = "all"  # LlamaFactory's default lora_target
    if target not in (None, True):
        names = target if isinstance(target, list) else str(target).split(",")
        names = ["all-linear" if n.strip() in ("all", "all-linear") else n.strip() for n in names if n.strip()]
        out.inputs["lora_targets"] = ",".join(names)
    dropout = values.get("lora_dropout", 0.05 if switch == "use_peft" else 0.0)
    try:
        dropout = float(dropout)
    except (TypeError, ValueError):
        raise InputError(f"launch line: --lora_dropout {dropout!r} is not a number") from None
    if dropout > 0:
        # TRL ModelConfig's default lora_dropout is 0.05
        out.notes.append(
            f"lora_dropout {dropout:g}: each adapter's dropout copy of its input and its mask are not modelled "
            "(an under-estimate of the saved activations without checkpointing)"
        )
