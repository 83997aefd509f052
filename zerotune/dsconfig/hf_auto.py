"""The two baselines `zerotune recommend` compares its choice with, for the same workload:
DeepSpeed's own defaults and Hugging Face's "auto" formulas.

HF (transformers `src/transformers/integrations/deepspeed.py`, `HfTrainerDeepSpeedConfig.
trainer_config_finalize`; docs/deepspeed-facts.md §6) fills three zero_optimization keys from the
model's hidden size h when they are "auto" — blind to the hardware:

    reduce_bucket_size                   h * h            (any stage)
    stage3_prefetch_bucket_size          int(0.9 * h * h) (stage 3 only)
    stage3_param_persistence_threshold   10 * h           (stage 3 only)

The rest of the HF baseline is the ZeRO-2/ZeRO-3 example config of HF's DeepSpeed guide
(transformers docs/source/en/deepspeed.md): overlap_comm and contiguous_gradients on,
allgather_bucket_size 2e8 (stage 2), max_live/reuse/sub_group 1e9 (DeepSpeed's defaults).
DeepSpeed's defaults are 0.19.8's (`DeepSpeedZeroConfig.model_fields`, §1.2): buckets 5e8,
overlap_comm only at stage 3, prefetch 5e7, persistence 1e5, max_live/reuse/sub_group 1e9.
Both baselines keep the candidate's stage, offload and batch split: the comparison isolates
the communication knobs.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import escape
from zerotune.dsconfig.settings import (
    DS_ALLGATHER_BUCKET,
    DS_MAX_LIVE,
    DS_MAX_REUSE,
    DS_PERSISTENCE,
    DS_PREFETCH,
    DS_REDUCE_BUCKET,
    DS_SUB_GROUP,
)
from zerotune.schema.model import ModelSpec

HIDDEN = "the hidden size"
"""`HfAuto.fills_from` of the keys HF computes from the model's hidden size (hf_hidden_size_values)."""


@dataclass(frozen=True)
class HfAuto:
    fills_from: str
    """The TrainingArguments flag HF Trainer fills the key from (and checks a concrete value against),
    or HIDDEN."""
    stage3_only: bool = False


# The one table of the keys Hugging Face's HfTrainerDeepSpeedConfig fills when their value is "auto"
# (transformers integrations/deepspeed.py, trainer_config_process / trainer_config_finalize;
# docs/deepspeed-facts.md §6), by JSON pointer. The linter (lint/rules/hf.py), the bench (bench/config.py
# fill_auto), the job (zerotune.job) and recommend --hf (to_auto, hf_values) all read it.
HF_AUTO_KEYS: dict[str, HfAuto] = {
    "/train_micro_batch_size_per_gpu": HfAuto("--per_device_train_batch_size"),
    "/gradient_accumulation_steps": HfAuto("--gradient_accumulation_steps"),
    "/train_batch_size": HfAuto("world_size x per_device_train_batch_size x gradient_accumulation_steps"),
    "/gradient_clipping": HfAuto("--max_grad_norm"),
    "/optimizer/params/lr": HfAuto("--learning_rate"),
    "/optimizer/params/betas": HfAuto("--adam_beta1/--adam_beta2"),
    "/optimizer/params/eps": HfAuto("--adam_epsilon"),
    "/optimizer/params/weight_decay": HfAuto("--weight_decay"),
    "/scheduler/params/warmup_min_lr": HfAuto("0 (fixed)"),
    "/scheduler/params/warmup_max_lr": HfAuto("--learning_rate"),
    "/scheduler/params/warmup_num_steps": HfAuto("--warmup_steps/--warmup_ratio"),
    "/scheduler/params/total_num_steps": HfAuto("the number of training steps"),
    "/fp16/enabled": HfAuto("--fp16"),
    "/bf16/enabled": HfAuto("--bf16"),
    "/zero_optimization/reduce_bucket_size": HfAuto(HIDDEN),
    "/zero_optimization/stage3_prefetch_bucket_size": HfAuto(HIDDEN, stage3_only=True),
    "/zero_optimization/stage3_param_persistence_threshold": HfAuto(HIDDEN, stage3_only=True),
}


def auto_pointers(value: Any, pointer: str = "") -> Iterator[str]:
    """JSON pointers of every value that is exactly the string "auto", in document order."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield from auto_pointers(child, f"{pointer}/{escape(key)}")
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from auto_pointers(child, f"{pointer}/{i}")
    elif schema.is_auto(value):
        yield pointer


def hf_fills(pointer: str, stage: int) -> bool:
    """Does HF Trainer replace an "auto" at `pointer` (its stage-3-only keys only at stage 3)?"""
    key = HF_AUTO_KEYS.get(pointer)
    return key is not None and (not key.stage3_only or stage == 3)


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def get(config: Any, pointer: str) -> Any:
    """The value at `pointer` (KeyError when the config has none there)."""
    node = config
    for token in _tokens(pointer):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise KeyError(pointer)
    return node


def has(config: Any, pointer: str) -> bool:
    try:
        get(config, pointer)
    except KeyError:
        return False
    return True


def _set(config: Any, pointer: str, value: Any) -> None:
    *parents, last = _tokens(pointer)
    node = config
    for token in parents:
        node = node[int(token)] if isinstance(node, list) else node[token]
    node[int(last) if isinstance(node, list) else last] = value


def fill(config: dict[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `config` where every "auto" at a pointer of `values` has that value (what HF does at
    trainer init; other values are left as they are)."""
    out = copy.deepcopy(config)
    for pointer in list(auto_pointers(out)):
        if pointer in values:
            _set(out, pointer, values[pointer])
    return out


def trainer_values(model: ModelSpec, *, precision: str, micro_batch: int, grad_accum: int, world_size: int) -> dict[str, Any]:
    """JSON pointer -> what HF Trainer puts into each "auto" key for this job: the batch triple, the
    precision flags, TrainingArguments' max_grad_norm default (1.0) and the optimizer values zerotune
    writes (dsconfig/emit.py), and the hidden-size formulas for `model`. predict and diagnose both
    fill a config with it (one reading of an HF config)."""
    from zerotune.dsconfig.emit import OPTIMIZER_PARAMS

    return {
        "/train_batch_size": micro_batch * grad_accum * world_size,
        "/train_micro_batch_size_per_gpu": micro_batch,
        "/gradient_accumulation_steps": grad_accum,
        "/gradient_clipping": 1.0,
        "/bf16/enabled": precision == "bf16",
        "/fp16/enabled": precision == "fp16",
        **{f"/optimizer/params/{k}": v for k, v in OPTIMIZER_PARAMS.items()},
        **{f"/zero_optimization/{k}": v for k, v in hf_hidden_size_values(model).items()},
    }


def pinned_precision(config: dict[str, Any]) -> str | None:
    """The mixed precision a config fixes for HF Trainer: HF checks a concrete fp16/bf16 `enabled` against
    --fp16/--bf16 and refuses a mismatch (`fill_match`, docs/deepspeed-facts.md §6), so a config with
    `"enabled": true` there runs only with that flag."""
    for name in ("fp16", "bf16"):
        if has(config, f"/{name}/enabled") and get(config, f"/{name}/enabled") is True:
            return name
    return None


def with_mixed_precision(config: dict[str, Any], precision: str) -> dict[str, Any]:
    """The config after accelerate's `DeepSpeedPlugin.set_mixed_precision`, which AcceleratorState calls
    under HF Trainer too (huggingface/accelerate@16cb6eb8 src/accelerate/utils/dataclasses.py:1415-1446,
    state.py:973-979): with fp16 or bf16 mixed precision, a config without that section gets it enabled
    (fp16 with auto_cast). So `--bf16` with a config holding only `"fp16": {"enabled": "auto"}` trains in
    bf16, not fp32."""
    if precision not in ("fp16", "bf16") or precision in config:
        return config
    out = copy.deepcopy(config)
    out[precision] = {"enabled": True, "auto_cast": True} if precision == "fp16" else {"enabled": True}
    return out


def to_auto(config: dict[str, Any], *, keep_tuned: bool = False) -> dict[str, Any]:
    """A copy of `config` with every key HF Trainer manages set to "auto" (recommend --hf). With
    `keep_tuned` the hidden-size keys stay concrete: HF fills them only when they are "auto" and never
    checks a concrete value, so hardware-tuned values survive."""
    out = copy.deepcopy(config)
    for pointer, key in HF_AUTO_KEYS.items():
        if has(out, pointer) and not (keep_tuned and key.fills_from == HIDDEN):
            _set(out, pointer, "auto")
    return out


def hf_values(concrete: dict[str, Any], model: ModelSpec) -> dict[str, Any]:
    """JSON pointer -> what HF Trainer puts into that "auto" key of `concrete` (the config as
    predicted): the TrainingArguments matching it, and the hidden-size formulas for `model`."""
    hidden = {f"/zero_optimization/{k}": v for k, v in hf_hidden_size_values(model).items()}
    return {
        pointer: hidden[pointer] if key.fills_from == HIDDEN else get(concrete, pointer)
        for pointer, key in HF_AUTO_KEYS.items()
        if has(concrete, pointer)
    }


def dotted(pointer: str) -> str:
    """The dotted form `reasons` are keyed by (a config key as people write it: zero_optimization.stage)."""
    return ".".join(_tokens(pointer))


HF_EXAMPLE_ALLGATHER_BUCKET = 200_000_000
"""allgather_bucket_size in HF's ZeRO-2 example config."""


HF_PREFETCH_SHARE = 0.9
"""HF's "auto" stage3_prefetch_bucket_size per h * h (module docstring)."""
HF_PERSISTENCE_PER_HIDDEN = 10
"""HF's "auto" stage3_param_persistence_threshold per h (module docstring)."""


def hf_hidden_size_values(model: ModelSpec) -> dict[str, int]:
    """HF's three "auto" formulas for `model` (see module docstring)."""
    h = model.hidden_size
    return {
        "reduce_bucket_size": h * h,
        "stage3_prefetch_bucket_size": int(HF_PREFETCH_SHARE * h * h),
        "stage3_param_persistence_threshold": HF_PERSISTENCE_PER_HIDDEN * h,
    }


def deepspeed_defaults(stage: int, model: ModelSpec | None = None) -> dict[str, Any]:
    """Every zero_optimization knob at DeepSpeed 0.19.8's default for `stage` (`model` unused: the
    defaults do not depend on it), as ZeroSettings field -> value."""
    return {
        "reduce_bucket_size": DS_REDUCE_BUCKET,
        "allgather_bucket_size": DS_ALLGATHER_BUCKET,
        "overlap_comm": stage == 3,
        "contiguous_gradients": True,
        "prefetch_bucket_size": DS_PREFETCH,
        "param_persistence_threshold": DS_PERSISTENCE,
        "max_live_parameters": DS_MAX_LIVE,
        "max_reuse_distance": DS_MAX_REUSE,
        "sub_group_size": DS_SUB_GROUP,
    }


def hf_auto(stage: int, model: ModelSpec) -> dict[str, Any]:
    """The knobs of HF's example config for `stage` with "auto" values filled for `model`."""
    values = hf_hidden_size_values(model)
    stage3 = stage == 3
    return {
        "reduce_bucket_size": values["reduce_bucket_size"],
        "allgather_bucket_size": HF_EXAMPLE_ALLGATHER_BUCKET,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "prefetch_bucket_size": values["stage3_prefetch_bucket_size"] if stage3 else DS_PREFETCH,
        "param_persistence_threshold": values["stage3_param_persistence_threshold"]
        if stage3
        else DS_PERSISTENCE,
        "max_live_parameters": DS_MAX_LIVE,
        "max_reuse_distance": DS_MAX_REUSE,
        "sub_group_size": DS_SUB_GROUP,
    }


BASELINES = {"DeepSpeed defaults": deepspeed_defaults, 'HF "auto"': hf_auto}
"""name -> (stage, model) -> the baseline's zero_optimization knobs (ZeroSettings field -> value); the
search applies them to its candidate, keeping stage, offload and batch split."""
