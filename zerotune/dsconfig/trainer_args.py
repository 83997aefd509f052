"""A trainer's arguments file (HF TrainingArguments / TRL / LLaMA-Factory YAML or JSON, axolotl YAML) is not a
DeepSpeed config: its `deepspeed:` argument names the DeepSpeed JSON, which HF Trainer reads from the launch
folder (transformers TrainingArguments.deepspeed: "the path to deepspeed json config file ... or an already
loaded json file as a dict"; HfTrainerDeepSpeedConfig json.loads it and fills its "auto" values). Read whole,
each trainer argument (`learning_rate`, `micro_batch_size`, ...) would look like a key DeepSpeed ignores and
the batch size missing.

The file is recognised by a `deepspeed` argument that is a path or empty (`deepspeed:` left null, the job
runs without DeepSpeed): no DeepSpeed config has a string or null `deepspeed` key (GPT-NeoX's is a boolean,
SwissArmyTransformer's a mapping).
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
