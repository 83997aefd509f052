"""The value grids of one model x hardware x precision: one per knob-table row with a grid.

The table (dsconfig/knobs.py) says how each grid is anchored (model layer sizes, DeepSpeed's defaults,
the link's saturating message size); this module gathers that evidence and evaluates the rows. Grids
are sorted tuples, so the enumeration is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zerotune.dsconfig.knobs import KNOBS, GridBasis
from zerotune.dsconfig.settings import ZeroSettings
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Precision
from zerotune.search.saturation import saturating_bytes

_DEFAULTS = {name: getattr(ZeroSettings(), name) for name in ZeroSettings.model_fields}


@dataclass(frozen=True)
class Grids:
    """The value grids for one model x hardware x precision, by ZeroSettings field."""

    values: Mapping[str, tuple]
    """field -> its grid (the knob table's rows with a `grid`)"""
    saturating_elements: int | None
    """elements of the smallest reduce-scatter message reaching 90% of peak busbw (None: unknown):
    a stage-3 gradient bucket"""
    saturating_allreduce_elements: int | None = None
    """the same for all-reduce: a stage 1/2 gradient bucket (DeepSpeed 0.19.8 all-reduces it, see
    model/comm.py)"""

    def __getitem__(self, field: str) -> tuple:
        return self.values[field]

    def saturating_for(self, stage: int) -> int | None:
        """Elements a gradient bucket of `stage` needs to reach 90% of peak busbw."""
        return self.saturating_elements if stage == 3 else self.saturating_allreduce_elements


def build_grids(model: ModelSpec, hardware: HardwareProfile, precision: Precision) -> Grids:
    """Every table row's grid, anchored on the model's block size and the profile's busbw curve."""
    elem = 4 if precision == "fp32" else 2
    # Gradient buckets are reduce-scattered at stage 3 but all-reduced at stage 1/2 (DeepSpeed 0.19.8's
    # default use_multi_rank_bucket_allreduce, model/comm.py): the grid holds both saturating sizes.
    sat_bytes = saturating_bytes(hardware, "reduce_scatter")
    sat = int(sat_bytes / elem) if sat_bytes else None
    sat_ar_bytes = saturating_bytes(hardware, "all_reduce")
    sat_ar = int(sat_ar_bytes / elem) if sat_ar_bytes else None
    basis = GridBasis(
        block=model.block_params,
        params=model.params,
        hidden_size=model.hidden_size,
        small_tensors=tuple(sorted({t for layer in model.blocks for t in layer.tensors if t <= 1_000_000})),
        saturating=tuple(v for v in (sat, sat_ar) if v),
        defaults=_DEFAULTS,
    )
    return Grids(
        values={k.field: k.grid(basis) for k in KNOBS if k.grid is not None},
        saturating_elements=sat,
        saturating_allreduce_elements=sat_ar,
    )
