"""A trainer's arguments file (HF TrainingArguments / TRL / LLaMA-Factory YAML or JSON, axolotl YAML) is not a
DeepSpeed config: its `deepspeed:` argument names the DeepSpeed JSON, which HF Trainer reads from the launch
folder (transformers TrainingArguments.deepspeed: "the path to deepspeed json config file ... or an already
loaded json file as a dict"; HfTrainerDeepSpeedConfig json.loads it and fills its "auto" values). Read whole,
each trainer argument (`learning_rate`, `micro_batch_size`, ...) would look like a key DeepSpeed ignores and
the batch size missing.

The file is recognised by a `deepspeed` argument that is a path or empty (`deepspeed:` left null, the job
runs without DeepSpeed): no DeepSpeed config has a string or null `deepspeed` key (GPT-NeoX's is a boolean,
SwissArmyTransformer's a mapping).

TrainingArguments also take the DeepSpeed config as a dict (transformers training_args.py `deepspeed`: "or an
already loaded json file as a `dict`"), so a launcher file may keep the config as a `deepspeed` mapping
beside the arguments (IlyaGusev/rulm self_instruct/configs: `TrainingArguments(deepspeed=config["deepspeed"],
**config["trainer"])`). HF Trainer fills that mapping's "auto" values from those arguments, as it fills a
named JSON's.
"""

from __future__ import annotations

from typing import Any


def is_trainer_args(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and "deepspeed" in data
        and (data["deepspeed"] is None or isinstance(data["deepspeed"], str))
    )


def config_file(data: dict[str, Any]) -> str | None:
    """The DeepSpeed JSON the arguments name (read relative to the launch folder), if any."""
    path = data.get("deepspeed")
    return path.strip() if isinstance(path, str) and path.strip() else None


# The mark of HF TrainingArguments (and TRL's configs, which extend them): the per-device batch size, a name
# no DeepSpeed config and no other launcher read here uses (SwissArmyTransformer's `batch_size`,
# ArcticTraining's `micro_batch_size`).
ARGUMENTS_MARK = "per_device_train_batch_size"


def arguments_beside(data: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The HF TrainingArguments of a launcher file whose `deepspeed` mapping is the DeepSpeed config: its top
    level itself (pointer "") or one mapping beside `deepspeed` (its JSON pointer), without `deepspeed`."""
    from zerotune.dsconfig.load import pointer_of

    if ARGUMENTS_MARK in data:
        return "", {k: v for k, v in data.items() if k != "deepspeed"}
    for key, value in data.items():
        if key != "deepspeed" and isinstance(value, dict) and ARGUMENTS_MARK in value:
            return pointer_of(key), value
    return None
