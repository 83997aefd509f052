"""A `Candidate`: one point of the search space, and the ZeroSettings DeepSpeed would resolve from it.

Its knob fields are the chosen rows of the knob table (dsconfig/knobs.py CHOSEN_FIELDS; a test checks
they match), defaulting to DeepSpeed 0.19.8's values; the rest are the search's own choices (offload,
batch split, checkpointing, precision).
"""

from __future__ import annotations

import operator
from typing import NamedTuple

from zerotune.dsconfig.knobs import CHOSEN_FIELDS, KNOBS
from zerotune.dsconfig.settings import (
    DS_ALLGATHER_BUCKET,
    DS_MAX_LIVE,
    DS_MAX_REUSE,
    DS_PERSISTENCE,
    DS_PREFETCH,
    DS_REDUCE_BUCKET,
    DS_SUB_GROUP,
    OffloadOptimizer,
    OffloadParam,
    ZeroSettings,
)
from zerotune.schema.workload import Precision

_ZERO_TEMPLATE = ZeroSettings()

OffloadChoice = tuple[str, str]
"""(offload_optimizer device, offload_param device)."""

_OFFLOAD_OPT = {d: OffloadOptimizer(device=d) for d in ("none", "cpu", "nvme")}
_OFFLOAD_PAR = {d: OffloadParam(device=d) for d in ("none", "cpu", "nvme")}

# The fixed rows of the knob table as ZeroSettings would resolve them at each stage: the written value
# where the stage reads the key, DeepSpeed's default elsewhere.
_FIXED_BY_STAGE = {
    stage: {
        k.field: k.fixed if stage in k.stages else getattr(_ZERO_TEMPLATE, k.field) for k in KNOBS if not k.chosen
    }
    for stage in (0, 1, 2, 3)
}


class Candidate(NamedTuple):
    """One configuration the search evaluates. Sizes are elements (DeepSpeed's unit).

    Field order is the deterministic tie-break order: lower stages, no offload, smaller
    micro-batches first. A NamedTuple, not a dataclass: the search builds, hashes and compares
    tens of thousands of these, and a tuple does all three in C (a frozen dataclass's __init__
    sets each field through object.__setattr__, ~5x slower). Compare Candidates only with
    Candidates (a tuple of the same values is equal).
    """

    stage: int
    offload_optimizer: str
    offload_param: str
    micro_batch: int
    grad_accum: int
    checkpointing: bool
    precision: Precision
    reduce_bucket_size: int = DS_REDUCE_BUCKET
    allgather_bucket_size: int = DS_ALLGATHER_BUCKET
    overlap_comm: bool = False
    contiguous_gradients: bool = True
    prefetch_bucket_size: int = DS_PREFETCH
    param_persistence_threshold: int = DS_PERSISTENCE
    max_live_parameters: int = DS_MAX_LIVE
    max_reuse_distance: int = DS_MAX_REUSE
    sub_group_size: int = DS_SUB_GROUP

    @property
    def offload(self) -> OffloadChoice:
        return (self.offload_optimizer, self.offload_param)

    @property
    def macro(self) -> tuple:
        """The memory-dominant choices; refinement happens within one macro."""
        return self[:6]  # stage, offload_optimizer, offload_param, micro_batch, grad_accum, checkpointing

    def with_(self, **changes) -> Candidate:
        """A copy with `changes`."""
        return self._replace(**changes)

    @property
    def zero_key(self) -> tuple:
        """The fields that end up in zero_optimization (candidates sharing it share ZeroSettings)."""
        return (self.offload_optimizer, self.offload_param, *_chosen(self))

    def zero_settings(self) -> ZeroSettings:
        """The ZeroSettings DeepSpeed would resolve from this candidate's emitted config.

        A copy of a validated template (model_copy is ~10x cheaper than construction): every
        value here comes from our own grids, and the search builds thousands of these.
        """
        update = dict(zip(CHOSEN_FIELDS, _chosen(self), strict=True))
        update.update(_FIXED_BY_STAGE[self.stage])
        update["offload_optimizer"] = _OFFLOAD_OPT[self.offload_optimizer]
        update["offload_param"] = _OFFLOAD_PAR[self.offload_param]
        return _ZERO_TEMPLATE.model_copy(update=update)

    def as_dict(self) -> dict:
        return self._asdict()


_chosen = operator.itemgetter(*(Candidate._fields.index(f) for f in CHOSEN_FIELDS))
"""The CHOSEN_FIELDS values of a Candidate, in that order."""
