"""One run a calibration learns from: its job and what it measured, and the model's prediction of it
(zerotune.model.step.predict_step, zerotune.model.memory.estimate_memory) on a profile sized to its GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field

from zerotune.catalog.hardware import with_counts
from zerotune.diagnose.measure import Figure, Measured
from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model.counters import counter_bytes
from zerotune.model.memory import estimate_memory
from zerotune.model.step import StepEstimate, predict_step
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload


@dataclass
class Observation:
    label: str
    """where the run comes from: the log's path, or --measured"""
    spec: ModelSpec
    workload: Workload
    zero: ZeroSettings
    measured: Measured
    job: list[str] = field(default_factory=list)
    """how its job was read: one `what: value (source)` per item"""

    @property
    def world(self) -> int:
        return self.workload.gpus_per_node * self.workload.nodes

    @property
    def samples_per_step(self) -> int:
        return self.workload.micro_batch * self.workload.grad_accum * self.world

    @property
    def tokens_per_step(self) -> int:
        return self.samples_per_step * self.workload.seq_len

    def step(self) -> Figure | None:
        """Measured seconds per optimizer step, from whichever figure the run gives."""
        m = self.measured
        if m.step_s is not None:
            return m.step_s
        if m.tokens_per_s is not None:
            return Figure(self.tokens_per_step / m.tokens_per_s.value, m.tokens_per_s.source + " (tokens/s)")
        if m.samples_per_s is not None:
            return Figure(self.samples_per_step / m.samples_per_s.value, m.samples_per_s.source)
        return None


def from_run(obs: Observation, figure: Figure) -> str:
    """Where a figure comes from: the run's label and its lines (--measured says itself)."""
    return figure.source if obs.label == "--measured" else f"{obs.label} {figure.source}"


def sized(profile: HardwareProfile, workload: Workload) -> HardwareProfile:
    """The profile at the run's GPU counts (a host without GPUs runs its ranks as it is)."""
    if not profile.has_gpus:
        return profile
    if profile.gpus_per_node == workload.gpus_per_node and profile.nodes == workload.nodes:
        return profile
    return with_counts(profile, gpus_per_node=workload.gpus_per_node, nodes=workload.nodes)


def predict(obs: Observation, profile: HardwareProfile) -> StepEstimate:
    return predict_step(obs.spec, obs.workload, obs.zero, sized(profile, obs.workload))


def predict_peak(obs: Observation, profile: HardwareProfile) -> int:
    memory = estimate_memory(obs.spec, obs.workload, obs.zero, hardware=sized(profile, obs.workload))
    return counter_bytes(memory, obs.measured.peak_kind)


# ---- the numbers a fit moves --------------------------------------------------------------------------------------



def pct(a: float, b: float) -> float:
    return (a / b - 1) * 100

