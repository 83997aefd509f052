"""What every mechanism of the step model reads: the model prepared once (layers, gradient order,
cached schedules) and the per-call setup (world, knobs, per-layer compute seconds, link costs).

The search calls `predict_step` for thousands of candidates, so per-model data is prepared once and
cached by identity, and derived schedules (buckets, stage-3 layout) are cached on it by the knobs
they depend on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model.comm import CommCost
from zerotune.model.compute import LayerFlops, model_flops
from zerotune.model.lora import Lora, adapter_tensors, first_block_skipped_flops
from zerotune.model.overheads import Overheads
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload


@dataclass(frozen=True)
class Layer:
    name: str
    kind: str
    tensors: tuple[int, ...]
    flops: LayerFlops
    frozen_flops: float = 0.0
    """Backward matmul FLOPs per token it does not run: a frozen matrix's backward computes the input gradient
    only, one of the two gradient matmuls (Narayanan et al. 2021, arXiv:2104.04473 §5.1: the backward pass's 2x
    forward is the input and the weight gradients), so a LoRA job's base costs 1x forward, not 2x; plus, in the
    first block without checkpointing, the input gradients nothing needs (`first_block_skipped_flops`)."""
    trainable: int = -1
    """Tensors of it that get a gradient (-1: all of them)."""

    @property
    def is_block(self) -> bool:
        return self.kind.endswith("block")

    @property
    def grad_tensors(self) -> tuple[int, ...]:
        """The tensors that get a gradient, in order (a LoRA job: the adapters, the layer's last ones)."""
        return self.tensors if self.trainable < 0 else self.tensors[len(self.tensors) - self.trainable :]


@dataclass
class Prepared:
    model: ModelSpec  # kept alive so id() stays unique while cached
    layers: tuple[Layer, ...]
    params: int
    """Elements that get a gradient (all of them, or a LoRA job's adapters)."""
    backward_tensors: tuple[int, ...]
    """Tensor numels in the order gradients become ready (reverse module, reverse tensor order)."""
    backward_layer: tuple[int, ...]
    """Layer index of each entry of backward_tensors."""
    buckets: dict[object, tuple] = field(default_factory=dict)
    """Derived schedules keyed by the knobs they depend on (bucket size, persistence)."""


_PREPARED: dict[tuple[int, Lora | None, bool], Prepared] = {}


def prepare(model: ModelSpec, lora: Lora | None = None, checkpointing: bool = True) -> Prepared:
    """The model's layers and gradient order; with `lora`, each block also holds its adapters (zerotune/model/
    lora.py), which alone get gradients, and its base matrices and the head are frozen (`Layer.frozen_flops`);
    without `checkpointing` the first block's input needs no gradient (`first_block_skipped_flops`)."""
    if lora is None:
        checkpointing = True  # the same preparation either way
    key = (id(model), lora, checkpointing)
    cached = _PREPARED.get(key)
    if cached is not None and cached.model is model:
        return cached
    flops = model_flops(model)
    adapters = adapter_tensors(model, lora) if lora is not None else ()
    layers = []
    for lay, f in zip(model.layers, flops, strict=True):
        if lora is None:
            layers.append(Layer(lay.name, lay.kind, tuple(lay.tensors), f))
            continue
        block = lay.kind.endswith("block")
        extra = adapters if block else ()
        # an adapter's forward: x·A then (x·A)·B, 2 FLOPs per adapter parameter per token
        adapted = replace(f, matmul_flops=f.matmul_flops + 2.0 * sum(extra))
        saved = f.matmul_flops
        if block and not checkpointing and not any(layer.is_block for layer in layers):
            saved += first_block_skipped_flops(model, lora)
        layers.append(Layer(lay.name, lay.kind, tuple(lay.tensors) + extra, adapted, saved, len(extra)))
    bwd_tensors: list[int] = []
    bwd_layer: list[int] = []
    for i in range(len(layers) - 1, -1, -1):
        for numel in reversed(layers[i].grad_tensors):
            bwd_tensors.append(numel)
            bwd_layer.append(i)
    prepared = Prepared(model, tuple(layers), sum(bwd_tensors), tuple(bwd_tensors), tuple(bwd_layer))
    if len(_PREPARED) > 256:
        _PREPARED.clear()
    _PREPARED[key] = prepared
    return prepared


@dataclass
class StepSetup:
    prep: Prepared
    layers: tuple[Layer, ...]
    fwd_s: tuple[float, ...]
    bwd_s: tuple[float, ...]
    fwd_total: float
    bwd_total: float
    """Per layer seconds of a reducing micro-step, host hooks included (zerotune/model/overheads.py)."""
    n: int
    nodes: int
    stage: int
    zero: ZeroSettings
    elem_bytes: int
    """Model dtype: parameters, their all-gathers."""
    comm_bytes: int
    """Gradient reductions: `communication_data_type`, default the model dtype."""
    accum_bytes: int
    """Gradient accumulation/partition buffers: `data_types.grad_accum_dtype`, default the model dtype."""
    cost: CommCost
    streams: bool
    reduce_concurrent: bool
    gather_concurrent: bool
    hardware: HardwareProfile
    workload: Workload
    notes: list[str]
    overheads: Overheads
    offload_grads: bool
    """Optimizer offload on a GPU host: gradient partitions cross PCIe after each reduction."""
    copy_Bps: float | None
    """Memory bandwidth of the bucket copies (bytes read + written per second): the GPU's HBM, or
    on a CPU host the probed `host.memory_Bps`; None where the profile has neither (left out)."""
    first_touch_Bps: float | None
    """CPU host: the probed cost rate of writing freshly mapped pages (zerotune/model/host_memory.py);
    None on a GPU (the caching allocator reuses memory) or where not probed."""
