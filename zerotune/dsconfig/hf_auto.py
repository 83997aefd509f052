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

from typing import Any

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

HF_EXAMPLE_ALLGATHER_BUCKET = 200_000_000
"""allgather_bucket_size in HF's ZeRO-2 example config."""


def hf_hidden_size_values(model: ModelSpec) -> dict[str, int]:
    """HF's three "auto" formulas for `model` (see module docstring)."""
    h = model.hidden_size
    return {
        "reduce_bucket_size": h * h,
        "stage3_prefetch_bucket_size": int(0.9 * h * h),
        "stage3_param_persistence_threshold": 10 * h,
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
