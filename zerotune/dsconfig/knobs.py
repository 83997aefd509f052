"""The knob table: every scalar `zero_optimization` key zerotune emits, defined once.

One row per key: the ZeroSettings field it sets, the DeepSpeed key it is written under, the ZeRO
stages that read it, and the search grid it is tuned on. Rows are in emission order. Who loops over it:
- dsconfig/emit.py writes, for a chosen stage, the keys of the rows whose `stages` hold it;
- search/candidate.py builds ZeroSettings and its cache keys from the rows;
- search/grids.py builds one grid per row with a `grid`, and search/space.py refines and
  descends over them;
- search/knob_reasons.py has one reason generator per row (a test checks they match).

The offload sections (`offload_optimizer`, `offload_param`) are not rows: they are sub-objects chosen
with the stage (search/space.py offload_choices), written by emit.py's `_offload`.

Grid functions are pure arithmetic on a `GridBasis` (the model's layer sizes and the link's
saturating message sizes, which search/saturation.py measures off the profile); each docstring gives
the evidence its values are anchored on. DeepSpeed's defaults are passed in (`GridBasis.defaults`),
so this module depends on nothing in zerotune and settings.py can derive STAGE3_KNOBS from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GridBasis:
    """What the grids of one model x hardware x precision are anchored on (sizes in elements)."""

    block: int
    """parameters of one transformer block"""
    params: int
    """parameters of the whole model"""
    hidden_size: int
    small_tensors: tuple[int, ...]
    """the distinct tensor sizes <= 1M of the model's blocks, sorted (norm weights, biases)"""
    saturating: tuple[int, ...]
    """the smallest gradient buckets reaching 90% of peak busbw (search/saturation.py BUSBW_TARGET):
    reduce-scatter (stage 3) and all-reduce (stage 1/2), where the profile says"""
    defaults: Mapping[str, Any]
    """DeepSpeed 0.19.8's default per ZeroSettings field (settings.ZeroSettings)"""


GridFn = Callable[[GridBasis], tuple]


def log_points(lo: float, hi: float, per_decade: tuple[float, ...] = (1, 2, 5)) -> list[int]:
    """1-2-5 points per decade inside [lo, hi]."""
    out = []
    for exp in range(int(math.floor(math.log10(max(lo, 1)))), int(math.ceil(math.log10(max(hi, 1)))) + 1):
        for m in per_decade:
            v = m * 10**exp
            if lo <= v <= hi:
                out.append(int(v))
    return out


def thin(values: list[int], limit: int, keep: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Sorted unique values, at most `limit`, picked evenly over the sorted list; `keep` always stays."""
    uniq = sorted(set(v for v in values if v >= 0))
    if len(uniq) <= limit:
        return tuple(uniq)
    kept = set(k for k in keep if k in uniq)
    rest = [v for v in uniq if v not in kept]
    slots = max(0, limit - len(kept))
    if slots and rest:
        step = (len(rest) - 1) / max(1, slots - 1) if slots > 1 else 0
        picks = {rest[round(i * step)] for i in range(slots)} if slots > 1 else {rest[len(rest) // 2]}
        kept |= picks
    return tuple(sorted(kept))


def _on_off(basis: GridBasis) -> tuple[bool, ...]:
    """Both settings: the step model prices each (overlap hides reductions behind backward;
    contiguous gradients trade a preallocated buffer for fewer copies)."""
    return (True, False)


def reduce_bucket_grid(basis: GridBasis) -> tuple[int, ...]:
    """Around 1/2..4 transformer blocks' worth of elements (seed 000, "Rule of Thumb for Bucket
    Sizing": ~2-3 layers' worth fires early enough to overlap and is still large enough to saturate
    the link), 1-2-5 points in between, plus the smallest messages that reach 90% of the link's peak
    bus bandwidth. Gradient buckets are reduce-scattered at stage 3 but all-reduced at stage 1/2
    (DeepSpeed 0.19.8's default use_multi_rank_bucket_allreduce, model/comm.py): both saturating
    sizes are in. At most 8 values, always keeping 1 and 2 blocks and the saturating sizes."""
    block, sats = basis.block, basis.saturating
    hi = max(2_000_000, min(basis.params, 1_000_000_000))
    lo = min(max(1_000_000, block // 8), hi)  # an MoE block past 8e9 (DeepSeek-V3: 11.3e9) keeps the cap
    anchors = [int(block * k) for k in (0.5, 1, 2, 3, 4)]
    reduce = [v for v in anchors + log_points(lo, hi) + list(sats) if lo <= v <= hi]
    keep = tuple(v for v in (int(block), int(2 * block), *sats) if v and lo <= v <= hi)
    return thin(reduce, 8, keep)


def prefetch_grid(basis: GridBasis) -> tuple[int, ...]:
    """1/4..2 blocks (the next layer's all-gather should start while this one computes) and
    DeepSpeed's default, no larger than the model; at most 5."""
    default = basis.defaults["prefetch_bucket_size"]
    prefetch = [int(basis.block * k) for k in (0.25, 0.5, 1, 2)] + [default]
    return thin([v for v in prefetch if v <= max(basis.params, default)], 5)


def persistence_grid(basis: GridBasis) -> tuple[int, ...]:
    """Thresholds just at the distinct small tensor sizes of a block: each grid point flips a class
    of tensors (norm weights, biases) between gathered and persistent; plus 0, DeepSpeed's default
    and HF's 10 x hidden. At most 4, always keeping 0 and the default."""
    default = basis.defaults["param_persistence_threshold"]
    persistence = [0, default, *basis.small_tensors[:2], 10 * basis.hidden_size]
    return thin(persistence, 4, keep=(0, default))


def max_live_grid(basis: GridBasis) -> tuple[int, ...]:
    """1, 2 and 4 blocks gathered at once (caps prefetch), and DeepSpeed's default."""
    b = basis.block
    return tuple(sorted({int(b), int(2 * b), int(4 * b), basis.defaults["max_live_parameters"]}))


def max_reuse_grid(basis: GridBasis) -> tuple[int, ...]:
    """0 (release after use: least memory), one block (keep what the next module reuses) and
    DeepSpeed's default."""
    return tuple(sorted({0, int(basis.block), basis.defaults["max_reuse_distance"]}))


def sub_group_grid(basis: GridBasis) -> tuple[int, ...]:
    """A decade either side of DeepSpeed's default: smaller sub-groups shrink the fp32 step buffer,
    larger ones cut the per-sub-group overhead under optimizer offload."""
    default = basis.defaults["sub_group_size"]
    return tuple(sorted({100_000_000, default, 10 * default}))


@dataclass(frozen=True)
class Knob:
    """One emitted `zero_optimization` key."""

    field: str
    """the ZeroSettings field (and the search Candidate's attribute when the search chooses it)"""
    key: str
    """the key written in zero_optimization: the stage3_* alias where DeepSpeed has one (the spelling
    its docs and the HF integration use; settings.ALIASES lists both)"""
    stages: frozenset[int]
    """the ZeRO stages that read it; it is written only there"""
    grid: GridFn | None = None
    """the search grid (see each function's docstring); None: not searched on a grid of its own"""
    fixed: Any = None
    """the value always written, for keys the search does not choose"""

    @property
    def pointer(self) -> str:
        """JSON pointer of the key, e.g. /zero_optimization/reduce_bucket_size."""
        return f"/zero_optimization/{self.key}"

    @property
    def path(self) -> str:
        """Dotted path of the key (how reasons and HF's paths name it)."""
        return f"zero_optimization.{self.key}"

    @property
    def chosen(self) -> bool:
        """True when the search chooses the value (the Candidate has the field)."""
        return self.fixed is None


ZERO_STAGES = frozenset({1, 2, 3})

KNOBS: tuple[Knob, ...] = (
    # the stage is chosen with the offload devices (search/space.py macros), not on a knob grid
    Knob("stage", "stage", frozenset({0, 1, 2, 3})),
    Knob("overlap_comm", "overlap_comm", ZERO_STAGES, _on_off),
    Knob("contiguous_gradients", "contiguous_gradients", ZERO_STAGES, _on_off),
    # DeepSpeed's default, written out: the gradient reduction mode is part of the config's story
    Knob("reduce_scatter", "reduce_scatter", ZERO_STAGES, fixed=True),
    Knob("reduce_bucket_size", "reduce_bucket_size", ZERO_STAGES, reduce_bucket_grid),
    # unused by DeepSpeed 0.19.8 on torch >= 1.13 (all_gather_into_tensor, docs/deepspeed-facts.md §4.1): not
    # searched, kept equal to the reduce bucket (even, stage_1_and_2.py asserts it) for older torch
    Knob("allgather_bucket_size", "allgather_bucket_size", frozenset({1, 2})),
    Knob("prefetch_bucket_size", "stage3_prefetch_bucket_size", frozenset({3}), prefetch_grid),
    Knob(
        "param_persistence_threshold", "stage3_param_persistence_threshold", frozenset({3}), persistence_grid
    ),
    Knob("max_live_parameters", "stage3_max_live_parameters", frozenset({3}), max_live_grid),
    Knob("max_reuse_distance", "stage3_max_reuse_distance", frozenset({3}), max_reuse_grid),
    Knob("sub_group_size", "sub_group_size", frozenset({3}), sub_group_grid),
    # so save_16bit_model() / HF save_pretrained write one loadable 16-bit checkpoint
    Knob(
        "gather_16bit_weights_on_model_save",
        "stage3_gather_16bit_weights_on_model_save",
        frozenset({3}),
        fixed=True,
    ),
)

BY_FIELD: dict[str, Knob] = {k.field: k for k in KNOBS}

CHOSEN_FIELDS: tuple[str, ...] = tuple(k.field for k in KNOBS if k.chosen)
"""The fields a configuration choice carries (dsconfig.settings.ConfigChoice, search Candidate)."""

STAGE3_KNOBS: tuple[str, ...] = tuple(k.field for k in KNOBS if k.stages == {3} and k.grid is not None)
"""Fields only stage 3 reads and the search tunes, in emission order: the secondary grid the search
refines and descends over."""

ZERO_KEYS: dict[str, str] = {k.field: k.key for k in KNOBS if k.field != "stage"}
"""field -> key in zero_optimization."""


def knobs_for(stage: int) -> tuple[Knob, ...]:
    """The rows a config at `stage` writes, in emission order."""
    return tuple(k for k in KNOBS if stage in k.stages)
