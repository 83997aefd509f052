"""What `zerotune bench` measures, as one versioned, JSON-serialisable result (pure pydantic).

Times are seconds, sizes bytes. `step_time_s` comes from the *unlogged* pass: DeepSpeed's comms
logger synchronises after every collective (deepspeed/comm/comm.py `timed_op`), which serialises
communication with compute, so the logged pass gives per-bucket records and per-layer compute but
not the true overlapped step time.
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Phase = Literal["forward", "backward", "step"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Proxy(_Model):
    """The model actually run: the derived spec, the shape of the batch and the world."""

    model: dict[str, Any] = Field(description="ModelSpec.model_dump(mode='json') of the proxy")
    layers: int
    width_scale: float
    seq_len: int
    micro_batch: int
    dtype: Literal["fp32", "bf16", "fp16"]
    nproc: int
    grad_accum: int
    nodes: int = 1
    activation_checkpointing: bool = Field(False, description="blocks recomputed in backward")
    lora: dict[str, Any] | None = Field(
        None, description="LoRA adapters on a frozen base: {rank, targets} (zerotune.bench.decoder add_lora)"
    )


class Phases(_Model):
    """Median per optimizer step over the measured unlogged steps (DeepSpeed's global timers
    'fwd', 'bwd', 'step' with wall_clock_breakdown; fwd/bwd summed over the micro-batches)."""

    forward_s: float
    backward_s: float
    step_s: float


class Collective(_Model):
    """Calls of one op with one message size within one phase, per optimizer step (rank 0).

    `bytes` is the message size DeepSpeed's comms logger reports: the input tensor, so one rank's
    shard for all_gather_into_tensor and the whole bucket for all_reduce / reduce_scatter_tensor."""

    op: str
    bytes: int
    size_bytes: int = Field(description="nccl-tests' S: `bytes`, times the rank count for an all-gather")
    count: float = Field(description="calls per optimizer step (mean over the logged steps)")
    mean_latency_s: float
    total_s: float = Field(description="count x mean_latency_s: time per step spent in these calls")
    phase: Phase | None = None


class Bucket(_Model):
    """One collective call in the recorded step of rank 0, in issue order (the timeline)."""

    index: int
    op: str
    bytes: int
    phase: Phase
    start_s: float = Field(description="from the start of the step")
    latency_s: float


class LayerTime(_Model):
    """Compute time of one module per micro-batch (median over the logged micro-steps),
    with the collectives issued inside its interval subtracted."""

    name: str
    forward_s: float
    backward_s: float


class Segment(_Model):
    """A compute interval of the recorded step on rank 0 (from the start of the step)."""

    label: str
    phase: Phase
    start_s: float
    end_s: float


class StageRun(_Model):
    stage: int
    losses: list[float] = Field(description="rank 0 loss per optimizer step, warm-up included")
    step_time_s: float
    collectives: list[Collective] = Field(default_factory=list)
    buckets: list[Bucket] = Field(default_factory=list, description="one logged step's calls, in order")


class Parity(_Model):
    """`--compare-stages`: the same seed and data under each ZeRO stage."""

    stages: list[StageRun]
    max_abs_diff: float
    max_rel_diff: float
    rtol: float
    agree: bool


class PredictedCall(_Model):
    """One row of the step-time model's collectives (zerotune.model.step.CollectiveCall)."""

    op: str
    phase: str
    size_bytes: int = Field(description="nccl-tests' S: the whole array of one call")
    count: int
    seconds: float = Field(description="one call")


class Prediction(_Model):
    step_time_s: float | None = None
    phases: dict[str, float] = Field(default_factory=dict)
    collectives: list[PredictedCall] = Field(default_factory=list)
    error_pct: float | None = Field(None, description="(predicted - measured) / measured x 100")
    note: str | None = None
    profile: str | None = Field(None, description="name of the hardware profile predicted with")
    provenance: str | None = Field(
        None, description="calibrated (date) or probe-only with its expected error band"
    )
    expected_error_pct: float | None = Field(
        None, description="the profile's expected step-time error, percent (catalog/trust.py expected_error)"
    )
    peak_memory_bytes: int | None = Field(
        None,
        description="zerotune.model.memory's per-GPU peak for the proxy (no margin) as max_memory_allocated "
        "counts it: no CUDA context, no cached blocks (zerotune.model.counters)",
    )


class MemoryPhase(_Model):
    """Live bytes of one phase of the step (zerotune.bench.live_memory), measured on rank 0 and
    predicted by zerotune.model.memory's timeline for the same proxy."""

    phase: str = Field(description="init, forward, backward or step (the largest over micro-steps)")
    measured_peak_bytes: int = Field(description="most live bytes inside the phase")
    measured_end_bytes: int = Field(description="live bytes when the phase ended")
    predicted_peak_bytes: int | None = None
    predicted_end_bytes: int | None = None


class BenchResult(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    zerotune_version: str
    deepspeed_version: str
    torch_version: str
    device: str = Field(description="'cpu' (gloo ranks) or the CUDA device name")
    backend: str
    nproc: int
    stage: int
    proxy: Proxy
    config: dict[str, Any] = Field(description="the DeepSpeed config the engine was given")
    warmup_steps: int
    steps: int
    step_time_s: float = Field(description="median over the unlogged measured steps")
    step_times_s: list[float]
    step_time_precision_pct: float | None = Field(
        None, description="estimated relative standard error of the median (zerotune.bench.noise)"
    )
    step_time_spread_pct: float | None = Field(None, description="interquartile range / median x 100")
    stop_reason: str | None = Field(None, description="why the measured steps stopped")
    full_grad_accum: int | None = Field(
        None, description="the config's accumulation when fewer micro-steps were measured"
    )
    full_step_time_s: float | None = Field(
        None, description="step time scaled to full_grad_accum (see notes for how)"
    )
    logged_step_time_s: float = Field(description="median step time with the comms logger on")
    phases: Phases
    collectives: list[Collective]
    buckets: list[Bucket]
    timeline: list[Segment]
    layers: list[LayerTime]
    peak_memory_bytes: list[int] = Field(description="per rank")
    baseline_memory_bytes: list[int] = Field(description="per rank, before the model was built (CPU)")
    memory_method: str = Field(description="how peak_memory_bytes was measured")
    peak_reserved_bytes: list[int] | None = Field(
        None, description="per rank, torch.cuda.max_memory_reserved (CUDA only)"
    )
    optimizer_class: str | None = Field(None, description="the optimizer that ran the update (rank 0)")
    memory_phases: list[MemoryPhase] | None = Field(
        None, description="measured (and predicted) live bytes per phase, with --memory-phases"
    )
    host_memory: dict[str, float | None] | None = Field(
        None,
        description="calibrate: host memory rates measured by every rank after its steps (median over the "
        "ranks; zerotune/probe/compute.py measure_host_memory)",
    )
    pace_s: list[float] | None = Field(
        None,
        description="calibrate: seconds of a fixed matmul read by every rank at once just before and just after "
        "the measured steps (slowest rank; zerotune/probe/compute.py measure_pace)",
    )
    losses: dict[str, list[float]] = Field(description="stage -> rank 0 loss per optimizer step")
    parity: Parity | None = None
    prediction: Prediction | None = None
    notes: list[str] = Field(default_factory=list)

    def comm_bytes(self, op: str | None = None, phase: Phase | None = None) -> float:
        """Bytes per step over the collectives matching `op` / `phase`."""
        return sum(
            c.bytes * c.count
            for c in self.collectives
            if (op is None or c.op == op) and (phase is None or c.phase == phase)
        )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
