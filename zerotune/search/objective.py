"""What "best" means: the three objectives of `zerotune recommend --objective`.

- throughput: highest predicted tokens/s among the configurations that fit.
- memory: lowest predicted per-GPU bytes among the fitting configurations whose throughput is
  within MEMORY_TOLERANCE (TIE_BAND, 5.2%) of the best one. Pure "least memory" would always pick stage 3
  with every offload on and a micro-batch of 1, which is never what anyone wants; the tolerance
  buys headroom (longer sequences, fragmentation, a bigger eval batch) at a bounded speed cost.
- cost: lowest $ per 1B tokens = hourly rate / 3600 / tokens_per_s * 1e9 (seed 002's "USD / 1B
  tokens" column), with the rate from --hourly-rate or the profile's hourly_rate_usd. On one
  fixed cluster it ranks like throughput; it differs when the rate differs between candidates.

Ties (throughput and cost): configurations whose predicted throughput is within TIE_BAND of the
fastest cannot be told apart by the model, so among them the simplest wins — the lowest rung of
LADDER (no parameter offload before parameter offload, lower stage, fewer host transfers); within
a rung the faster one. Remaining ties are broken deterministically: throughput at 4 significant
digits, contiguous_gradients on before off, lower per-GPU memory, then the candidate's field order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:  # rank_key only sorts evaluations; evaluate.py imports nothing from here
    from zerotune.search.evaluate import Evaluation

Objective = Literal["throughput", "memory", "cost"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)

TIE_BAND = 0.052
"""Predicted throughputs closer than this share are a tie. It is the model's measured ranking
resolution: the largest predicted gap between two alternatives for the same job that the calibrated
model orders wrong although their noise-aware measurements are distinguishable (scripts/evidence/accuracy.py,
17 held-out DeepSpeed configs in 3 jobs on the CPU testbed). The three valid held-out runs re-analysed
with this model (`--load`, 2026-11-23 18:52, 19:14, 19:42) give 5.2%, 1.9% and 8.3%; this is their
median. Closer predictions do not order configurations, so the simpler one wins (rank.py)."""

LADDER: tuple[tuple[int, str, str], ...] = (
    (0, "none", "none"),
    (1, "none", "none"),
    (2, "none", "none"),
    (3, "none", "none"),
    (1, "cpu", "none"),
    (2, "cpu", "none"),
    (3, "cpu", "none"),
    (3, "cpu", "cpu"),
    (3, "nvme", "none"),
    (3, "nvme", "nvme"),
)
"""(stage, offload_optimizer, offload_param) from simplest to most involved: least to most memory
saving, and least to most communication and host transfer per step."""


def simplicity(stage: int, offload_optimizer: str, offload_param: str) -> int:
    """Rung of LADDER (lower is simpler); unknown combinations last."""
    key = (stage, offload_optimizer, offload_param)
    return LADDER.index(key) if key in LADDER else len(LADDER)


MEMORY_TOLERANCE = TIE_BAND
"""--objective memory trades at most this share of the best throughput for less memory: the model's
ranking resolution, so the trade never gives up a throughput difference the model can resolve."""


def cost_per_billion_tokens(tokens_per_s: float, hourly_rate_usd: float) -> float:
    """USD to train on 1e9 tokens at `tokens_per_s` on a cluster rented at `hourly_rate_usd`."""
    if tokens_per_s <= 0:
        return float("inf")
    return hourly_rate_usd / 3600.0 / tokens_per_s * 1e9


def quantize(x: float, digits: int = 4) -> float:
    """`x` rounded to `digits` significant digits, so float noise never decides a ranking."""
    return float(f"{x:.{digits}g}")


def rank_key(objective: Objective, best_tps: float, rate: float | None) -> Callable[[Evaluation], tuple]:
    """Sort key for fitting evaluations under `objective` (objective.py documents the rules).

    Throughput and cost: within TIE_BAND of `best_tps` the simplest configuration (LADDER rung) comes
    first. Among equal throughputs, contiguous_gradients on (DeepSpeed's default) comes before off: the
    step model cannot see its benefit (no scattered-gradient copies or fragmentation), so "off"
    should win only where "on" does not fit.
    """
    if objective == "memory":
        floor = best_tps * (1 - MEMORY_TOLERANCE)

        def key(ev: Evaluation) -> tuple:
            eligible = ev.tokens_per_s >= floor
            return (
                not eligible,
                ev.per_gpu_bytes if eligible else 0,
                -quantize(ev.tokens_per_s),
                ev.per_gpu_bytes,
                ev.candidate,
            )

        return key
    tie_floor = best_tps * (1 - TIE_BAND)

    def rung(ev: Evaluation) -> tuple[bool, int]:
        c = ev.candidate
        tied = ev.tokens_per_s >= tie_floor
        return (not tied, simplicity(c.stage, c.offload_optimizer, c.offload_param) if tied else 0)

    if objective == "cost":

        def key(ev: Evaluation) -> tuple:
            cost = cost_per_billion_tokens(ev.tokens_per_s, rate or 0.0)
            return (
                *rung(ev),
                quantize(cost),
                not ev.candidate.contiguous_gradients,
                ev.per_gpu_bytes,
                ev.candidate,
            )

        return key

    def key(ev: Evaluation) -> tuple:
        return (
            *rung(ev),
            -quantize(ev.tokens_per_s),
            not ev.candidate.contiguous_gradients,
            ev.per_gpu_bytes,
            ev.candidate,
        )

    return key
