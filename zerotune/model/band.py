"""The expected error of a prediction for its kind of job: how far leave-one-source-out predictions of
published runs of that kind were from what their sources measured (scripts/evidence/loso.py writes
error_bands.json next to this module; docs/accuracy.md quotes it).

A band is the smallest |error| that covers at least BAND_COVERAGE of the runs of its category, so a
prediction stated as "tokens/s within ±b" holds for that share of jobs like it that nobody fitted on.
A category with too few runs of its own takes the overall band (and says so).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

BANDS_PATH = Path(__file__).resolve().parent / "error_bands.json"

BAND_COVERAGE = 0.8
"""Share of the published runs of a category a band must cover (issue 18: >= 80%)."""

LONG_CONTEXT = 16384
"""Tokens per sequence from which a job counts as long context: where the s x s attention products stop
being a small correction. Per token per block they cost 4·s·H·Q FLOPs against the matmuls' 2·N/L; for
Llama-2-7B (H·Q = 4096, N/L = 202M) that is 66% at s = 16384 (equal at ~24.7K, a third at 8K). The cut
at the power of two past half is a choice, not fitted on the published runs."""

CATEGORIES = ("offload", "moe", "long context", "multi-node", "fused kernels", "dense")
"""Band categories, most specific first: a job takes the first that applies."""


def band_category(*, seq_len: int, moe: bool, offload: bool, multi_node: bool, fused: bool) -> str:
    """The one category whose LOSO residuals state this job's expected error."""
    for name, applies in zip(
        CATEGORIES, (offload, moe, seq_len >= LONG_CONTEXT, multi_node, fused, True), strict=True
    ):
        if applies:
            return name
    return "dense"  # unreachable: "dense" always applies


@dataclass(frozen=True)
class Band:
    category: str
    throughput: float | None
    """|tokens/s error| bound (0.2 = ±20%)."""
    memory: float | None
    runs: int
    """Published runs (throughput) the band comes from."""
    overall: bool
    """The category had too few runs: the overall band."""

    def line(self) -> str:
        parts = []
        if self.throughput is not None:
            parts.append(f"throughput ±{self.throughput:.0%}")
        if self.memory is not None:
            parts.append(f"peak memory ±{self.memory:.0%}")
        whose = "all published runs" if self.overall else f"published {self.category} runs"
        return (
            f"expected error: {', '.join(parts)} (covers {BAND_COVERAGE:.0%} of {whose}, each predicted "
            f"leave-one-source-out; {self.runs} runs)"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "category": self.category,
            "throughput": self.throughput,
            "memory": self.memory,
            "coverage": BAND_COVERAGE,
            "runs": self.runs,
            "from_overall": self.overall,
        }


@cache
def _table() -> dict:
    try:
        return json.loads(BANDS_PATH.read_text())
    except (OSError, ValueError):
        return {}


def expected_error(category: str) -> Band | None:
    """The band of `category` (None when no table was generated)."""
    table = _table()
    if not table:
        return None
    own = table.get("categories", {}).get(category, {})
    overall = table.get("overall", {})
    tput = own.get("throughput") or overall.get("throughput")
    mem = own.get("memory") or overall.get("memory")
    return Band(
        category=category,
        throughput=tput["band"] if tput else None,
        memory=mem["band"] if mem else None,
        runs=tput["runs"] if tput else 0,
        overall="throughput" not in own,
    )


def job_category(model, workload, offload: bool) -> str:
    """A job's band category from the model (MoE), the workload and whether ZeRO offloads."""
    fused = (
        workload.attention in ("flash", "flash3", "flash4")
        or workload.cross_entropy in ("fused", "fused_linear")
        or "fused" in (workload.swiglu, workload.rmsnorm)
    )
    return band_category(
        seq_len=workload.seq_len,
        moe=model.num_experts > 1,
        offload=offload,
        multi_node=workload.nodes > 1,
        fused=fused,
    )


def job_band(model, workload, offload: bool) -> Band | None:
    """The band of a job (job_category)."""
    return expected_error(job_category(model, workload, offload))
