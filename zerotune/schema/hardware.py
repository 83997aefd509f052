"""Hardware profile: one versioned schema for the built-in catalog (profiles/hardware/*.yaml)
and for what `zerotune probe` measures, so a measured profile and a built-in one are
interchangeable everywhere (memory, predict, recommend, validate).

Conventions: bytes and bytes/s (`_Bps`), FLOP/s (`_flops`), seconds (`_s`). Memory sizes are
exact byte counts (an "80 GB" H100 has 80 GiB = 85899345920 B of HBM as NVML reports it).
Unknown values are null, never guessed: consumers must say "n/a" or fall back to a stated
default. Every sub-object carries `source`: a datasheet URL, an nccl-tests result, a paper,
or "measured by zerotune probe <version> on <date>".
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from zerotune.collectives import Collective, alpha_beta_time, interpolate_busbw

SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    _SIGNED: ClassVar[frozenset[str]] = frozenset()
    """Fields whose numbers may be negative (a fit's residual); every other count, size, rate and time
    is a physical quantity, and a negative (or NaN) one is a broken file, not a profile. Infinity stays
    allowed: a fit with no measurable size dependence reports an unbounded bandwidth
    (collectives.fit_alpha_beta)."""

    @field_validator("*", mode="after")
    @classmethod
    def _physical(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name not in cls._SIGNED and not all(_physical(n) for n in _numbers(value)):
            raise ValueError("must not be negative")
        return value


def _numbers(value: Any):
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _numbers(v)


def _physical(number: float) -> bool:
    return number >= 0  # False for NaN too


class GpuSpec(_Strict):
    """One GPU model (every GPU of a profile is the same model)."""

    _SIGNED: ClassVar[frozenset[str]] = frozenset({"memory_slack_bytes"})

    name: str
    memory_bytes: int | None = Field(None, description="HBM capacity in bytes, as NVML reports it")
    peak_bf16_flops: float | None = Field(None, description="dense (no sparsity) tensor-core peak")
    peak_fp16_flops: float | None = None
    peak_fp32_flops: float | None = Field(None, description="non-tensor-core FP32 peak")
    hbm_bandwidth_Bps: float | None = None
    compute_capability: str | None = None
    bf16_supported: bool | None = Field(None, description="compute capability >= 8.0 (Ampere+)")
    memory_slack_bytes: int | None = Field(
        None,
        description="bytes per GPU a real run on this machine held beyond the memory model's estimate (negative: "
        "less), measured by `zerotune calibrate --from-log` from the run's peak counter; added to every estimate",
    )
    source: str | None = None

    def peak_flops(self, precision: str) -> float | None:
        return {"bf16": self.peak_bf16_flops, "fp16": self.peak_fp16_flops, "fp32": self.peak_fp32_flops}.get(
            precision
        )


class CollectivePerf(_Strict):
    """How one collective performs on one link class.

    `curve` holds measured (total bytes, busbw B/s) points (nccl-tests' definition of S and
    busbw); when present it wins over the alpha-beta pair, which is then the fitted summary.
    """

    alpha_s: float | None = Field(None, description="latency term of t = alpha + S*factor/busbw")
    busbw_Bps: float | None = Field(None, description="large-message bus bandwidth")
    curve: list[tuple[float, float]] = Field(default_factory=list)
    source: str | None = None

    def time(self, op: Collective, size_bytes: float, n: int) -> float | None:
        """Predicted seconds for one call, or None when this link has no numbers."""
        if n <= 1 or size_bytes <= 0:
            return 0.0
        alpha = self.alpha_s or 0.0
        if self.curve:
            # The curve folds latency into busbw inside its range; below its smallest point a call
            # is latency-bound and costs what that point costs, never less than alpha.
            size = max(size_bytes, min(point[0] for point in self.curve))
            return max(alpha_beta_time(op, size, n, 0.0, interpolate_busbw(self.curve, size)), alpha)
        if self.busbw_Bps is None:
            return None
        return alpha_beta_time(op, size_bytes, n, alpha, self.busbw_Bps)


class LinkClass(_Strict):
    """A class of links that a process group's collectives run over (NVLink inside a node,
    InfiniBand between nodes, gloo over loopback on a CPU host...)."""

    kind: str = Field(description="nvlink4 | nvlink3 | pcie4 | pcie5 | ib-ndr400 | tcp | loopback-gloo ...")
    backend: Literal["nccl", "gloo"] = "nccl"
    ranks: int | None = Field(None, description="ranks the numbers were measured or quoted at")
    nominal_Bps: float | None = Field(None, description="per-GPU unidirectional link peak (datasheet)")
    p2p: bool | None = Field(None, description="GPU peer-to-peer available (False: staged through host)")
    collectives: dict[Collective, CollectivePerf] = Field(default_factory=dict)
    source: str | None = None


class HostSpec(_Strict):
    cpu_model: str | None = None
    cpu_cores: int | None = None
    ram_bytes: int | None = None
    ram_available_bytes: int | None = None
    shm_bytes: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    h2d_pinned_Bps: float | None = Field(None, description="host->device copy bandwidth, pinned memory")
    d2h_pinned_Bps: float | None = None
    h2d_pageable_Bps: float | None = None
    nvme_read_Bps: float | None = None
    nvme_write_Bps: float | None = None
    cpu_adam_params_per_s: float | None = Field(
        None,
        description="CPU Adam updates/s of the whole node (all its cores); the ranks on a node share it",
    )
    memory_Bps: float | None = Field(
        None,
        description="host memory bandwidth of a large copy between warm buffers, bytes read plus written "
        "per second (as a GPU's HBM bandwidth); measured by the probe per rank with its peers measuring "
        "(zerotune/probe/compute.py measure_host_memory)",
    )
    first_touch_Bps: float | None = Field(
        None,
        description="first write to a fresh allocation above glibc's mmap threshold (page fault + kernel "
        "zeroing), bytes per second of the cost beyond a warm write; probed like memory_Bps",
    )
    source: str | None = None


class ShapePoint(_Strict):
    """Achieved FLOP/s of a transformer block's fwd+bwd at one shape: small matmuls run far below
    peak, so one number per dtype cannot serve a 128-token proxy and a 16k-token micro-step alike."""

    tokens: int = Field(description="tokens per micro-step per rank (micro-batch x seq_len)")
    hidden: int = Field(description="hidden size of the block")
    flops: float = Field(description="achieved FLOP/s at this shape")
    source: str | None = None


class ComputeSpec(_Strict):
    """Achieved (not peak) throughput: measured by the probe, or a stated assumption."""

    achieved_flops: dict[str, float] = Field(
        default_factory=dict, description="dtype -> FLOP/s of a transformer block fwd+bwd"
    )
    mfu_assumption: float | None = Field(
        None, description="achieved/peak to use when achieved_flops lacks the dtype"
    )
    overlap_slowdown: float | None = Field(
        None, description="compute time multiplier while a collective runs concurrently (>= 1)"
    )
    measured_shape: str | None = None
    shape_points: dict[str, list[ShapePoint]] = Field(
        default_factory=dict, description="dtype -> achieved FLOP/s by shape (wins over achieved_flops)"
    )
    source: str | None = None


class OverheadSpec(_Strict):
    """Costs DeepSpeed adds beyond FLOPs and bytes on the wire. Each is measured by `zerotune
    calibrate` (fitted from real DeepSpeed steps) or taken from a cited source; null = unknown, and
    the model then states that it left the term out."""

    per_step_s: float | None = Field(
        None,
        description="fixed cost once per optimizer step: engine bookkeeping, timers, scheduler, Python, and on a "
        "job of more than one rank the synchronisation across ranks (the gradient-norm and overflow all-reduces, "
        "waiting for the slowest rank); a one-rank job takes single_rank_per_step_s where the profile has it",
    )
    single_rank_per_step_s: float | None = Field(
        None,
        description="the fixed cost once per optimizer step of a job on ONE rank (no cross-rank "
        "synchronisation); null: per_step_s serves one-rank jobs too",
    )
    per_micro_step_s: float | None = Field(
        None, description="fixed cost per forward+backward micro-step: engine hooks, loss scaling, launches"
    )
    per_module_hook_s: float | None = Field(
        None,
        description="stage 3: fetch+release bookkeeping per module per pass (every module, parameterless "
        "containers too), paid in forward and again in backward",
    )
    per_param_grad_hook_s: float | None = Field(
        None, description="stage 1/2: per-parameter gradient hook (copy into the bucket, bookkeeping)"
    )
    per_layer_launch_s: float | None = Field(
        None,
        description="every stage: host seconds to run one transformer block's Python and enqueue its kernels "
        "in one forward (backward pays it again, twice with recompute); on a GPU a block takes the larger "
        "of its kernels and this",
    )
    optimizer_params_per_s: float | None = Field(
        None,
        description="DeepSpeed's whole optimizer step on the device that runs it (grad norm, clip, Adam, "
        "partition copies, unflatten), in parameters of the local partition per second",
    )
    cpu_adam_thread_params_per_s: float | None = Field(
        None,
        description="DeepSpeedCPUAdam parameters per second on ONE OpenMP thread (a rank run with "
        "OMP_NUM_THREADS=1, as torchrun and accelerate launch leave it): the host's optimizer step then "
        "runs at this rate per rank instead of its share of every core",
    )
    step_scale: float | None = Field(
        None,
        description="measured step time over the model's on this machine, from the user's own run(s) "
        "(`zerotune calibrate --from-log`/`--measured`) where they identify no single term: every predicted time "
        "is multiplied by it (a machine that runs everything this much slower or faster than its profile)",
    )
    origin: Literal["calibrate", "published"] | None = Field(
        None,
        description="who fitted the values: `zerotune calibrate` on this host, or scripts/evidence/fit_published.py "
        "on the published suite (a catalog profile); null = cited or unknown",
    )
    source: str | None = None


class CalibratedValue(_Strict):
    """One number of the profile as the probe had it and as calibration fitted it."""

    _SIGNED: ClassVar[frozenset[str]] = frozenset({"residual", "probed", "calibrated"})
    """The value itself is checked where it lands (the profile field at `path`); a signed field there
    (gpu.memory_slack_bytes) is signed here too."""

    path: str = Field(description="dotted path in the profile, e.g. compute.achieved_flops.fp32")
    probed: float | None = None
    calibrated: float
    residual: float | None = Field(None, description="relative residual of the fit for this number")
    note: str | None = Field(None, description="how it was found when not a free fit, e.g. on a physical bound")
    source: str | None = Field(
        None,
        description="the user's own run it was measured from (`calibrate --from-log`/`--measured`): the log and "
        "its lines, or --measured; null for the design runs of `zerotune calibrate`",
    )


class Calibration(_Strict):
    """Provenance of `zerotune calibrate`: the fitted values are written into the profile's own
    fields (compute, overheads, links), and this section says which ones, from what runs."""

    created: str = Field(description="ISO-8601 time of the calibration")
    zerotune_version: str | None = None
    deepspeed_version: str | None = None
    torch_version: str | None = None
    runs: list[str] = Field(default_factory=list, description="one line per design run: its config and result")
    values: list[CalibratedValue] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    expected_error_pct: float | None = Field(
        None,
        description="step-time error predictions from this profile are expected to stay within, percent, "
        "from the calibration's own self-check (zerotune/calibrate/check.py); null = not checked",
    )
    expected_error_method: str | None = Field(None, description="how expected_error_pct was measured")
    jobs: list[str] = Field(
        default_factory=list,
        description="the kind of job of each run the last calibrate --from-log/--measured fitted "
        "(zerotune.catalog.trust.job_kind: model, stage, offload, checkpointing)",
    )
    same_job_error_pct: float | None = Field(
        None,
        description="throughput error (|predicted tokens/s / measured - 1|, percent) expected for a job of one of "
        "`jobs`' kinds (one-run calibrations)",
    )
    other_job_error_pct: float | None = Field(
        None,
        description="throughput error (percent) expected for a job of another kind (one-run calibrations)",
    )
    other_job_weight: float | None = Field(
        None,
        ge=0,
        le=1,
        description="how much of a one-run calibration a job of another kind than `jobs` takes: each value fitted on "
        "the run at probed x (calibrated / probed)^weight (zerotune/model/carried.py); null = all of it",
    )

    def calibrated_paths(self) -> set[str]:
        return {value.path for value in self.values}


class NvLinkInfo(_Strict):
    link: int
    version: int | None = None
    remote_pci_bus_id: str | None = None
    bandwidth_Bps: float | None = None


class DeviceInfo(_Strict):
    """Per-GPU facts read through NVML by `zerotune probe`."""

    index: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    compute_capability: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    nvlinks: list[NvLinkInfo] = Field(default_factory=list)
    numa_node: int | None = None
    cpu_affinity: str | None = None
    power_limit_w: float | None = None
    ecc_enabled: bool | None = None
    mig_enabled: bool | None = None


class Topology(_Strict):
    """Pairwise GPU connectivity, nvidia-smi topo style: NV<k> (k NVLinks), PIX (same PCIe
    switch), PXB (several switches), PHB (host bridge), NODE (same NUMA node), SYS (cross-socket)."""

    matrix: list[list[str]]


class HardwareProfile(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    name: str
    description: str = ""
    origin: Literal["catalog", "probe"] = "catalog"
    created: str | None = Field(None, description="ISO-8601 time of the probe")
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(description="0 for a host without NVIDIA GPUs")
    gpu: GpuSpec | None = None
    host: HostSpec = Field(default_factory=HostSpec)
    intra_node: LinkClass | None = None
    inter_node: LinkClass | None = None
    compute: ComputeSpec = Field(default_factory=ComputeSpec)
    overheads: OverheadSpec = Field(default_factory=OverheadSpec)
    calibration: Calibration | None = None
    devices: list[DeviceInfo] = Field(default_factory=list)
    topology: Topology | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    hourly_rate_usd: float | None = Field(None, description="whole-cluster $/h, for --objective cost")
    notes: list[str] = Field(default_factory=list)

    @field_validator("gpu")
    @classmethod
    def _gpus_for_the_gpu(cls, gpu: GpuSpec | None, info: ValidationInfo) -> GpuSpec | None:
        if gpu is not None and info.data.get("gpus_per_node") == 0:
            raise ValueError("a gpu section next to gpus_per_node: 0 (a host without GPUs has gpu: null)")
        return gpu

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def has_gpus(self) -> bool:
        return self.gpus_per_node > 0 and self.gpu is not None

    @property
    def default_precision(self) -> Literal["bf16", "fp16", "fp32"]:
        """The precision a job runs when nobody says: bf16 where the GPU supports it (Ampere+), fp16 on
        older GPUs, fp32 on a CPU host (bf16 matmuls are ~150x slower than fp32 on CPUs, fp16 is
        unsupported)."""
        if not self.has_gpus:
            return "fp32"
        if self.gpu.bf16_supported:
            return "bf16"
        if self.gpu.bf16_supported is None and (self.gpu.compute_capability or "0") >= "8.0":
            return "bf16"
        return "fp16"
