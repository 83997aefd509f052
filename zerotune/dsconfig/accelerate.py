"""An HF Accelerate config file (`accelerate config` / `accelerate launch --config_file`, YAML or JSON) is not a
DeepSpeed config: its `deepspeed_config:` block holds accelerate's own option names, from which accelerate
builds the DeepSpeed config, or names the DeepSpeed JSON to use (`deepspeed_config_file`).

What accelerate builds, from `DeepSpeedPlugin.__post_init__` and `set_mixed_precision` in
huggingface/accelerate src/accelerate/utils/dataclasses.py (stored version 00595017): batch sizes "auto"
(accelerate fills them from the dataloader), gradient_accumulation_steps (default "auto"), zero stage
(default 2), both offload devices (default "none", nvme_path only for nvme),
stage3_gather_16bit_weights_on_model_save (default false), gradient_clipping only when set,
steps_per_print inf (left out here), and fp16/bf16 from mixed_precision (the chosen one enabled, fp16 with auto_cast; the
other written disabled). Only the option names DeepSpeedPlugin reads are mapped; the launcher's own keys
(num_processes, machine_rank, ...) are not DeepSpeed's business and are not checked here.
"""

from __future__ import annotations

from typing import Any

DEFAULT_STAGE = 2
"""DeepSpeedPlugin: ACCELERATE_DEEPSPEED_ZERO_STAGE defaults to 2."""


def is_accelerate_config(data: Any) -> bool:
    """An accelerate config file: `distributed_type` is the one key every `accelerate config` output has
    (ClusterConfig), and no DeepSpeed config has it."""
    return isinstance(data, dict) and "distributed_type" in data


def deepspeed_block(data: dict[str, Any]) -> dict[str, Any]:
    block = data.get("deepspeed_config")
    return block if isinstance(block, dict) else {}


def launcher_size(data: dict[str, Any]) -> dict[str, int]:
    """The job size the file gives its launcher, as JobInputs gpus/nodes: accelerate launch starts DeepSpeed
    with `--num_gpus num_processes // num_machines --num_nodes num_machines` (num_processes counts ranks over
    all machines; huggingface/accelerate src/accelerate/utils/launch.py prepare_deepspeed_cmd_env). Empty
    when either is missing or not a positive whole number (then the profile sizes the job)."""
    processes, machines = data.get("num_processes"), data.get("num_machines", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (processes, machines)):
        return {}
    if processes % machines:
        return {}  # no whole number of ranks per machine: the launcher's arithmetic floors, say nothing
    return {"gpus": processes // machines, "nodes": machines}


def config_file(data: dict[str, Any]) -> str | None:
    """The DeepSpeed JSON the accelerate config names (read relative to the launch folder), if any."""
    path = deepspeed_block(data).get("deepspeed_config_file")
    return str(path) if path not in (None, "", "none") else None


def uses_deepspeed(data: dict[str, Any]) -> bool:
    return str(data.get("distributed_type", "")).upper() == "DEEPSPEED"


def built_config(data: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed config accelerate builds from the `deepspeed_config:` options (no config file)."""
    ds = deepspeed_block(data)

    zero: dict[str, Any] = {"stage": ds.get("zero_stage", DEFAULT_STAGE)}
    for kind in ("optimizer", "param"):
        # accelerate always writes both sections; device "none" is DeepSpeed's own default (no offload), so a
        # "none" section is left out rather than reported as an inert setting the user never wrote
        device = ds.get(f"offload_{kind}_device", "none")
        if device not in (None, "none"):
            path = ds.get(f"offload_{kind}_nvme_path") if device == "nvme" else None
            zero[f"offload_{kind}"] = {"device": device, "nvme_path": path}
    zero["stage3_gather_16bit_weights_on_model_save"] = bool(ds.get("zero3_save_16bit_model", False))
    # steps_per_print: accelerate sets inf to silence DeepSpeed's logging; left out (not the user's setting)
    config: dict[str, Any] = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": ds.get("gradient_accumulation_steps", "auto"),
        "zero_optimization": zero,
    }
    if ds.get("gradient_clipping"):
        config["gradient_clipping"] = ds["gradient_clipping"]
    precision = str(data.get("mixed_precision", "no")).lower()
    if precision == "fp16":
        config["fp16"] = {"enabled": True, "auto_cast": True}
    elif precision == "bf16":
        config["bf16"] = {"enabled": True}
    for dtype in ("fp16", "bf16"):
        config.setdefault(dtype, {"enabled": False})
    return config
