"""What "best" means: the three objectives of `zerotune recommend --objective`.

- throughput: highest predicted tokens/s among the configurations that fit.
- memory: lowest predicted per-GPU bytes among the fitting configurations whose throughput is
  within MEMORY_TOLERANCE (5%) of the best one. Pure "least memory" would always pick stage 3
  with every offload on and a micro-batch of 1, which is never what anyone wants; the tolerance
  buys headroom (longer sequences, fragmentation, a bigger eval batch) at a bounded speed cost.
- cost: lowest $ per 1B tokens = hourly rate / 3600 / tokens_per_s * 1e9 (seed 002's "USD / 1B
  tokens" column), with the rate from --hourly-rate or the profile's hourly_rate_usd. On one
  fixed cluster it ranks like throughput; it differs when the rate differs between candidates.

Ties are broken deterministically: throughput is compared at 4 significant digits (the model is
not more precise than that), then lower per-GPU memory wins, then the candidate's field order
(lower stage, no offload, smaller micro-batch first).
"""

from __future__ import annotations

from typing import Literal, get_args

Objective = Literal["throughput", "memory", "cost"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)

MEMORY_TOLERANCE = 0.05
"""--objective memory trades at most this share of the best throughput for less memory."""


def cost_per_billion_tokens(tokens_per_s: float, hourly_rate_usd: float) -> float:
    """USD to train on 1e9 tokens at `tokens_per_s` on a cluster rented at `hourly_rate_usd`."""
    if tokens_per_s <= 0:
        return float("inf")
    return hourly_rate_usd / 3600.0 / tokens_per_s * 1e9


def quantize(x: float, digits: int = 4) -> float:
    """`x` rounded to `digits` significant digits, so float noise never decides a ranking."""
    return float(f"{x:.{digits}g}")
