"""The `zerotune diagnose --json` document: a versioned pydantic schema (stable for scripts and CI).

SCHEMA_VERSION changes only when a field is removed or changes meaning; new optional fields keep it.
Sizes are bytes, times milliseconds, every fact says where it came from (`source`): `log:LINE`,
`--config`, `--model`, `--profile`, `--seq-len`/`--world-size`, or `assumed`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Cause = Literal[
    "gpu_oom",
    "host_oom",
    "nvme_aio",
    "nccl_timeout",
    "nccl_desync",
    "nccl_error",
    "config_rejected",
    "version_mismatch",
    "op_build",
    "fp16_overflow",
    "checkpoint",
    "zero3_param",
    "client_optimizer_offload",
    "port_in_use",
    "hang",
    "slow",
    "unclassified",
    "none",
]
"""One primary cause. `version_mismatch`: CUDA/torch/DeepSpeed/transformers versions incompatible;
`op_build`: a DeepSpeed op (cpu_adam, fused_adam, ...) fails to compile or load; `fp16_overflow`: the
loss scale hit its minimum, or the loss is NaN/inf under fp16; `checkpoint`: saving, loading or
converting a checkpoint failed; `zero3_param`: a ZeRO-3 partitioned parameter used outside the
engine; `client_optimizer_offload`: ZeRO-Offload refused a client optimizer; `port_in_use`: the
rendezvous store could not bind the master port, another process held it; `hang`: stuck with no
collective timeout; `unclassified`: a failure (traceback, non-zero exit) we do not recognise;
`none`: no failure."""

Phase = Literal[
    "init",
    "param_gather",
    "activations_forward",
    "activations_backward",
    "gradient_buckets",
    "optimizer_states",
    "checkpoint_save",
    "unknown",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Evidence(_Model):
    line: int
    rank: int | None = None
    text: str


class FactOut(_Model):
    name: str
    value: str | int | float | bool | None
    source: str


class OomInfo(_Model):
    phase: Phase
    gpu_index: int | None = None
    tried_bytes: int | None = None
    capacity_bytes: int | None = None
    allocated_bytes: int | None = None
    free_bytes: int | None = None
    reserved_bytes: int | None = None
    count: int = Field(description="OOM messages in the whole log (all ranks)")


class CollectiveInfo(_Model):
    kind: Literal["timeout", "desync", "error"]
    op: str | None = None
    seq: int | None = None
    numel: int | None = None
    timeout_ms: int | None = None
    ranks: list[int] = Field(default_factory=list)


class RejectedField(_Model):
    field: str
    message: str = ""
    value: str | None = None


class RejectedInfo(_Model):
    model: str | None
    kind: Literal["pydantic", "hf_mismatch", "assert"]
    fields: list[RejectedField] = Field(default_factory=list)
    rule_codes: list[str] = Field(default_factory=list, description="zerotune validate codes for these keys")


class Diagnosis(_Model):
    cause: Cause
    title: str
    explanation: str
    evidence: list[Evidence] = Field(default_factory=list)
    oom: OomInfo | None = None
    collective: CollectiveInfo | None = None
    rejected: RejectedInfo | None = None
    also_seen: list[Cause] = Field(
        default_factory=list, description="other causes in the log, in the order they first appear"
    )
    line: int | None = Field(None, description="the first log line that shows this cause")


class MemoryCheck(_Model):
    """The memory model (zerotune.model.memory) on the reconstructed job."""

    capacity_bytes: int | None
    predicted_bytes: int
    terms: dict[str, int]
    overflowing_term: str | None
    phase_term_bytes: int | None = None
    observed_need_bytes: int | None = Field(
        None, description="allocated + reserved + tried from the OOM text"
    )
    phase_live_bytes: int | None = Field(
        None, description="the most bytes the model has live in the OOM's phase (the peak when it is unknown)"
    )
    model_gap_bytes: int = Field(
        0, description="observed need − phase_live_bytes, added to that phase in the fix check"
    )
    text: str


class TimerCheck(_Model):
    """One wall_clock_breakdown timer outside the compute against the step model's time for it."""

    timer: str = Field(description="bwd_allreduce (the exposed gradient reduction) | step (the optimizer step)")
    measured_ms: float
    predicted_ms: float
    slow: bool = Field(description="over the prediction by more than the job's expected error of the step")


class StepCheck(_Model):
    """The measured step (wall_clock_breakdown means) against zerotune's step-time model."""

    measured_ms: float
    measured_exposed_comm_ms: float | None = None
    predicted_ms: float
    predicted_exposed_comm_ms: float
    predicted_optimizer_ms: float
    bottleneck: str
    text: str
    expected_error: float = Field(0.0, description="the step-time error predict quotes for this job (fraction)")
    profile_said: bool = Field(False, description="the hardware is --profile's, not an assumed one")
    timers: list[TimerCheck] = Field(default_factory=list)


class LintFinding(_Model):
    code: str
    severity: str
    message: str
    pointer: str


class Change(_Model):
    key: str
    old: str | int | float | bool | dict | None
    new: str | int | float | bool | dict | None
    reason: str


class FixOut(_Model):
    """What to change. `checked`: the change was run through the memory model (predicted_bytes,
    capacity_bytes, fits) and validate; otherwise it is the change that follows from the cause, and
    `text` says what to pass for a checked one."""

    changes: list[Change]
    predicted_bytes: int | None = None
    capacity_bytes: int | None = None
    fits: bool | None = None
    checked: bool = True
    config_written: str | None = None
    reasons_written: str | None = None
    text: str


class Report(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    log: str
    lines: int
    bytes: int
    exit_code: int
    diagnosis: Diagnosis
    facts: list[FactOut] = Field(default_factory=list)
    memory: MemoryCheck | None = None
    step: StepCheck | None = None
    lint: list[LintFinding] = Field(default_factory=list)
    fix: FixOut | None = None
    notes: list[str] = Field(default_factory=list)
