"""The designed set of short DeepSpeed runs that `zerotune calibrate` measures (pure).

Not a grid: each run is there to make one unknown of the step model identifiable from the others
(zerotune/calibrate/fit.py says how each is fitted):

- per-layer compute FLOP/s at two shapes: the stage-0 runs (no ZeRO hooks inside the layers) at
  (micro-batch x seq) = base and 4x the tokens, plus one at twice the hidden size;
- per-micro-step vs per-step overhead: the same config at gradient accumulation 1 and 2;
- stage 1/2 per-parameter gradient hooks: stage 2 vs stage 0 at equal shape;
- stage 3 per-module fetch/release hooks: stage 3 vs stage 0 at equal shape;
- collective latency (alpha) and bandwidth: small (1e5 elements) vs large (5e7) buckets give
  per-call records at message sizes 500x apart;
- the optimizer step rate: stage 0 (whole model per rank) vs stage 2/3 (1/n of it) give the
  optimizer segment at two partition sizes, so a fixed part and a per-parameter rate separate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

SMALL_BUCKET = 100_000
LARGE_BUCKET = 50_000_000
"""Bucket sizes (elements) of the design's small- and large-message runs, 500x apart so alpha and busbw
separate (module docstring); design choices, not facts about the host."""
PERSISTENCE = 1_000
"""Stage-3 persistence threshold of the design (elements): below every matrix of the proxy, above
its norm weights, so the gathers are the matrices (DeepSpeed's default 1e5 would keep small
proxies' matrices resident and leave nothing to gather)."""


@dataclass(frozen=True)
class DesignRun:
    name: str
    stage: int
    micro_batch: int
    seq_len: int
    grad_accum: int
    bucket: int
    overlap: bool = False
    width_factor: float = 1.0
    """Multiplies the design's width scale (a second hidden size for the FLOP/s shape points)."""
    why: str = ""
    precision: str = "fp32"
    """bf16 / fp16 on a GPU (the training dtype), fp32 on CPU (bench's CPU proxy is fp32)."""

    def config(self) -> dict[str, Any]:
        zero: dict[str, Any] = {
            "stage": self.stage,
            "reduce_bucket_size": self.bucket,
            "allgather_bucket_size": self.bucket,
            "overlap_comm": self.overlap,
        }
        if self.stage == 3:
            zero["stage3_prefetch_bucket_size"] = self.bucket
            zero["stage3_param_persistence_threshold"] = PERSISTENCE
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": self.micro_batch,
            "gradient_accumulation_steps": self.grad_accum,
            "zero_optimization": zero,
        }
        if self.precision in ("bf16", "fp16"):
            config[self.precision] = {"enabled": True}
        return config

    def describe(self) -> str:
        ov = " overlap" if self.overlap else ""
        width = f" width x{self.width_factor:g}" if self.width_factor != 1 else ""
        return (
            f"stage {self.stage}, bucket {self.bucket:.0e}{ov}, mb {self.micro_batch}, seq {self.seq_len}, "
            f"GA {self.grad_accum}{width}"
        )


def design(
    micro_batch: int = 1, seq_len: int = 128, *, wide: bool = True, precision: str = "fp32"
) -> list[DesignRun]:
    """The calibration runs for a base shape (micro-batch, seq_len) in `precision`; `wide` adds the
    run at twice the hidden size (CPU proxies; on a GPU the real width is the only one that matters)."""
    mb, seq = micro_batch, seq_len
    mb4, seq4 = (mb * 2, seq * 2) if seq * 2 <= 4096 else (mb * 4, seq)
    runs = [
        DesignRun("s0", 0, mb, seq, 1, LARGE_BUCKET, why="base compute FLOP/s, stage-0 all-reduce"),
        DesignRun(
            "s0-ga2-big", 0, mb4, seq4, 2, LARGE_BUCKET, why="FLOP/s at 4x tokens; per-micro-step cost"
        ),
        DesignRun("s2-small", 2, mb, seq, 1, SMALL_BUCKET, why="gradient hooks; small-message latency"),
        DesignRun(
            "s2-large-ga2", 2, mb, seq, 2, LARGE_BUCKET, True, why="large messages; hooks x2 micro-steps"
        ),
        DesignRun("s3-small", 3, mb, seq, 1, SMALL_BUCKET, why="stage-3 module hooks; small gathers"),
        DesignRun(
            "s3-large-ga2", 3, mb, seq, 2, LARGE_BUCKET, True, why="stage-3 large gathers, x2 micro-steps"
        ),
    ]
    runs = [replace(r, precision=precision) for r in runs]
    if wide:
        runs.append(
            DesignRun("s0-wide", 0, mb, seq, 1, LARGE_BUCKET, width_factor=2.0, why="FLOP/s at 2x hidden")
        )
    return runs
