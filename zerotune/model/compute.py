"""Training FLOPs per layer, and the seconds they take on a hardware profile.

Counting convention: a multiply-add is 2 FLOPs. Per token, for one module's forward:

    matmul   2 * (matrix parameters the token passes through)          Kaplan et al. 2020, §2.1
    attention 4 * seq * heads * head_dim per transformer block          PaLM (Chowdhery et al. 2022), App. B
              (2·s·H·Q for Q·Kᵀ plus 2·s·H·Q for A·V; the full s×s
              product, as dense SDPA computes it; a causal flash kernel
              skips about half of it)
    head     2 * vocab * hidden (the logits matmul; tied or not)
    embedding, norms, biases: no matmul FLOPs (lookups and elementwise work)

so a forward pass costs 2·N_matmul + 4·L·s·H·Q per token. Backward costs twice the forward (each
matmul has two gradient matmuls: Kaplan et al. 2020 §2.1; Narayanan et al. 2021 eq. 1), which gives
PaLM's 6·N + 12·L·H·Q·T per token for forward + backward. Full activation checkpointing
recomputes every block's forward once more during backward: 8·N instead of 6·N for the blocks
(Korthikanti et al. 2022, arXiv 2205.05198, §5). For MoE models only `experts_per_token` of
`num_experts` expert MLPs are active per token.

The count above is the model's FLOPs (MFU is quoted on it). The step's time splits it: the matmuls at
the achieved GEMM rate below, and the attention products as the kernel executes them
(`executed_attention_share`: a causal flash / SDPA kernel skips the masked half on a GPU,
FlashAttention-2 §3.1) at the attention kernel's own rate (`attention_flops_rate`, FlashAttention-2's
published figures) where one is published for the GPU, else at the GEMM rate; eager attention and CPU
hosts compute the full product at the GEMM rate.

Seconds = FLOPs / achieved FLOP/s, taken from the first of (`achieved_flops`):

1. `compute.shape_points[precision]`: achieved FLOP/s measured (probe, calibrate) or published at
   several shapes. Small matmuls run far below peak, so the rate depends on the tokens per
   micro-step and the hidden size. Interpolation (`shape_flops`): the points of the hidden size
   nearest to the model's (in log distance), then piecewise-linear in log(FLOP/s) over log(tokens)
   between the two nearest token counts, held flat outside the measured range (no extrapolation);
2. `compute.achieved_flops[precision]`: one measured number (what `zerotune probe` measures on a
   transformer block);
3. the GPU's peak for the precision times `compute.mfu_assumption`, else times the MFU of its GPU
   generation and precision (`GENERATION_MFU`, published figures), else DEFAULT_MFU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zerotune.schema.hardware import HardwareProfile, ShapePoint
from zerotune.schema.model import LayerSpec, ModelSpec

DEFAULT_MFU = 0.4
"""Achieved/peak when a profile states neither achieved FLOP/s nor an MFU assumption and its GPU generation
has no published figure (GENERATION_MFU). ASSUMED, not measured on those GPUs: the low end of what large
tuned runs publish on data-centre parts (PaLM 540B 46.2% MFU, Chowdhery et al. 2022 Table 3; GPT 1T 52% of
A100 peak, Narayanan et al. 2021 Table 1; Llama 3 405B 38-43% on H100, GENERATION_MFU). The catalog's
consumer and workstation profiles state their own MFU instead, 0.50 x (largest measured torch matmul / rated
peak) (profiles/hardware/*.yaml `compute.source`); only the RTX 6000 Ada, with no published matmul, is left
on this default. No published run pins it: in the suite the 3090/4090/A6000 runs and two of the three A40
runs take their rate from the source's own single-GPU rows (scripts/evidence/published.py `same_box`), and
the TITAN RTX runs' predicted steps are held by the per-block launch floor and exposed communication (BELLE
#402) or CPU Adam (the HF blog): their LOSO errors move by <= 1 point between MFU 0.2 and 0.8. A probe or
calibration on the GPU replaces it."""


GENERATION_MFU: dict[tuple[str, str], tuple[float, str]] = {
    ("7.0", "fp16"): (
        0.30,
        "V100: Megatron-LM 8.3B on 512 V100s, 39 TFLOP/s per GPU = 30% of 125 (Shoeybi et al. 2019, §5.1); "
        "ZeRO-100B 38 TFLOP/s per V100 (Rajbhandari et al. 2019, §10.2)",
    ),
    ("8.0", "bf16"): (
        0.44,
        "A100: 137-163 TFLOP/s per GPU = 44-52% of 312 for GPT 1.7B-1T (Narayanan et al. 2021, Table 1; "
        "the smallest model's 44%)",
    ),
    ("8.0", "fp16"): (
        0.44,
        "A100: as bf16 (same tensor-core peak; Narayanan et al. 2021, Table 1)",
    ),
    ("9.0", "bf16"): (
        0.40,
        "H100: 38-43% BF16 MFU for Llama 3 405B pre-training (Dubey et al. 2024, Table 4)",
    ),
}
"""(compute capability, precision) -> (achieved/peak, source), used when a profile states neither
achieved FLOP/s nor an MFU assumption. Published figures are from well-tuned large runs: small
per-GPU work runs below them (issue 10), which shape points and calibration capture."""


MATMUL_CEILING: dict[str, tuple[float, str]] = {
    "A100 SXM": (0.859, "267.9 of 312 TFLOP/s"),
    "H100 SXM": (0.801, "792.1 of 989 TFLOP/s"),
    "B200 SXM": (1745 / 2250, "1745 of 2250 TFLOP/s"),
}
"""Maximum achievable matmul FLOP/s (MAMF: the best large bf16 matmul measured) over the datasheet peak:
stas00/ml-engineering compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison table'."""


def sibling_mfu(anchor_mfu: float, ceiling: float, anchor_flops_per_byte: float, flops_per_byte: float) -> float:
    """Training MFU of a GPU that shares its kernels with an anchor GPU of published MFU but has another
    peak-FLOP/s-to-HBM-bandwidth ratio (a roofline with two parts): a step's time is its matmuls at the
    matmul ceiling (`ceiling` x peak: MATMUL_CEILING) plus memory-bound work (norms, activations, softmax,
    optimizer) whose seconds follow HBM bandwidth, not the peak. The anchor fixes the memory-bound share
    per FLOP (1/anchor_mfu - 1/ceiling, at its FLOP/byte); the sibling pays it at its own FLOP/byte:
    a bandwidth-rich, FLOP-capped part (H20) reaches a larger fraction of its peak, a bandwidth-poor one
    (A100 40GB) a smaller."""
    memory_bound = (1 / anchor_mfu - 1 / ceiling) * flops_per_byte / anchor_flops_per_byte
    return 1 / (1 / ceiling + memory_bound)


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs of one module for one token, split so sequence length can vary."""

    name: str
    kind: str
    matmul_flops: float
    """2 * matrix params per token (independent of sequence length)."""
    attention_flops_per_seq: float
    """4 * H * Q: multiply by the sequence length for the attention FLOPs of one token."""

    def forward_flops(self, tokens: int, seq_len: int) -> float:
        return tokens * (self.matmul_flops + self.attention_flops_per_seq * seq_len)

    def training_flops(self, tokens: int, seq_len: int, *, recompute: bool = False) -> float:
        """Forward + backward (2x forward), plus one more forward when recomputing (checkpointing)."""
        return (4 if recompute else 3) * self.forward_flops(tokens, seq_len)


def dense_block_flops(matrix_params: int, heads: int, head_dim: float, *, name: str = "block") -> LayerFlops:
    """One transformer block: 2 FLOPs per matrix parameter plus 4·H·Q attention FLOPs per position."""
    return LayerFlops(name, "block", 2.0 * max(matrix_params, 0), 4.0 * heads * head_dim)


def is_matrix(numel: int, model: ModelSpec) -> bool:
    """Norm weights and biases are vectors no longer than the widest activation; matrices are larger."""
    widest = max(
        model.hidden_size,
        model.ffn_size,
        model.num_heads * model.head_dim,
        model.num_kv_heads * model.head_dim,
    )
    return numel > widest


def _idle_expert_params(model: ModelSpec, layer: LayerSpec) -> int:
    """Expert-MLP parameters of one block that a token does not pass through (none in a dense block,
    e.g. DeepSeek's first_k_dense_replace blocks)."""
    if layer.experts <= 1:
        return 0
    expert = (3 if model.gated_mlp else 2) * model.hidden_size * model.ffn_size
    return (layer.experts - model.experts_per_token) * expert


def attention_head_dim(model: ModelSpec) -> float:
    """The head size 4·H·d attention FLOPs per position take: MLA (DeepSeek) scores over the q/k head
    size and multiplies A.V over the value head size, 2·H·(d_qk + d_v), which is 4·H·d at their mean."""
    return (model.head_dim + (model.v_head_dim or model.head_dim)) / 2


def layer_flops(model: ModelSpec, layer: LayerSpec) -> LayerFlops:
    """Forward FLOPs per token of one module (see the module docstring for the formula)."""
    if layer.kind == "embedding":
        return LayerFlops(layer.name, layer.kind, 0.0, 0.0)
    if layer.kind == "head":
        return LayerFlops(layer.name, layer.kind, 2.0 * model.vocab_size * model.hidden_size, 0.0)
    if layer.kind in ("norm", "vision"):  # vision: an image encoder that text-only batches never run
        return LayerFlops(layer.name, layer.kind, 0.0, 0.0)
    matrices = sum(t for t in layer.tensors if is_matrix(t, model)) - _idle_expert_params(model, layer)
    block = dense_block_flops(matrices, model.num_heads, attention_head_dim(model), name=layer.name)
    attention = block.attention_flops_per_seq
    if layer.kind == "decoder_block" and model.family == "t5":
        attention *= 2  # self-attention and cross-attention
    return LayerFlops(layer.name, layer.kind, block.matmul_flops, attention)


def model_flops(model: ModelSpec) -> tuple[LayerFlops, ...]:
    """Per layer, in forward order. A tied head has no layer of its own (its weight is the embedding's,
    counted once: zerotune/catalog/architectures.py), but its logits matmul runs all the same: HF's
    `lm_head` is an nn.Linear whose weight is the embedding's Parameter (`PreTrainedModel.tie_weights`),
    called after the final norm. Its 2·V·h FLOPs per token go to the model's last layer, where the
    forward computes them (no recompute: not a block)."""
    flops = [layer_flops(model, layer) for layer in model.layers]
    if model.tied_embeddings and flops and not any(layer.kind == "head" for layer in model.layers):
        last = flops[-1]
        head = 2.0 * model.vocab_size * model.hidden_size
        flops[-1] = LayerFlops(last.name, last.kind, last.matmul_flops + head, last.attention_flops_per_seq)
    return tuple(flops)


def forward_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """2·N_matmul + 4·L·s·H·Q: the forward FLOPs of one token through the whole model."""
    return sum(f.forward_flops(1, seq_len) for f in model_flops(model))


def training_flops_per_token(model: ModelSpec, seq_len: int, *, recompute: bool = False) -> float:
    """Forward + backward (3x forward), plus one more forward of the blocks when recomputing."""
    return sum(
        f.training_flops(1, seq_len, recompute=recompute and f.kind.endswith("block"))
        for f in model_flops(model)
    )


def shape_flops(points: list[ShapePoint], tokens: int, hidden: int) -> float:
    """Achieved FLOP/s at (tokens per micro-step, hidden) from measured shape points (module docstring):
    the nearest hidden size in log distance, then log-log linear in tokens, flat outside the range."""
    best = min(points, key=lambda p: abs(math.log(max(p.hidden, 1) / max(hidden, 1))))
    row = sorted((p for p in points if p.hidden == best.hidden), key=lambda p: p.tokens)
    if tokens <= row[0].tokens:
        return row[0].flops
    if tokens >= row[-1].tokens:
        return row[-1].flops
    for lo, hi in zip(row, row[1:], strict=False):
        if lo.tokens <= tokens <= hi.tokens:
            if hi.tokens == lo.tokens:
                return hi.flops
            w = math.log(tokens / lo.tokens) / math.log(hi.tokens / lo.tokens)
            return math.exp(math.log(lo.flops) + w * math.log(hi.flops / lo.flops))
    return row[-1].flops  # unreachable: tokens lies inside the sorted row


def generation_mfu(hardware: HardwareProfile, precision: str) -> tuple[float, str] | None:
    """Published MFU for the profile's GPU generation (compute capability) and precision."""
    gpu = hardware.gpu
    if gpu is None or not gpu.compute_capability:
        return None
    return GENERATION_MFU.get((gpu.compute_capability, precision))


def achieved_flops(
    hardware: HardwareProfile, precision: str, *, tokens: int | None = None, hidden: int | None = None
) -> tuple[float, str]:
    """FLOP/s to divide by, and where the number comes from (for notes). `tokens` (per micro-step
    per rank) and `hidden` select a shape point when the profile has them."""
    points = hardware.compute.shape_points.get(precision)
    if points and tokens and hidden:
        value = shape_flops(points, tokens, hidden)
        return (
            value,
            f"achieved {precision} FLOP/s at {tokens} tokens x hidden {hidden} from the profile's "
            f"shape points ({value / 1e12:.3g} TFLOP/s)",
        )
    measured = hardware.compute.achieved_flops.get(precision)
    if measured:
        return (
            measured,
            f"achieved {precision} FLOP/s measured on this hardware ({measured / 1e12:.3g} TFLOP/s)",
        )
    peak = hardware.gpu.peak_flops(precision) if hardware.gpu is not None else None
    if peak:
        if hardware.compute.mfu_assumption:
            mfu, why = hardware.compute.mfu_assumption, "the profile's assumed MFU"
        elif (gen := generation_mfu(hardware, precision)) is not None:
            mfu, why = gen[0], f"published MFU for this GPU generation ({gen[1]})"
        else:
            mfu, why = DEFAULT_MFU, "default MFU"
        return peak * mfu, f"{precision} peak {peak / 1e12:.4g} TFLOP/s x {why} {mfu:.0%}"
    if hardware.compute.achieved_flops:  # a CPU probe measured another dtype only
        dtype, value = next(iter(hardware.compute.achieved_flops.items()))
        return value, f"no {precision} number in the profile; used its {dtype} achieved FLOP/s"
    raise ValueError(f"hardware profile {hardware.name!r} has no FLOP/s for {precision}")


ATTENTION_KERNEL_FRACTION: dict[str, tuple[float, str]] = {
    "8.0": (
        189 / 312,
        "A100 SXM: FlashAttention-2 forward+backward with causal mask, head dim 128, sequence 16K: 189 TFLOP/s of "
        "312 dense bf16 (Dao 2023, arXiv 2307.08691, Fig. 4d; Dao-AILab/flash-attention "
        "assets/flash2_a100_fwd_bwd_benchmark.png); 203 without the mask",
    ),
    "9.0": (
        328 / 989.4,
        "H100 SXM: FlashAttention-2 forward+backward with causal mask, head dim 128, sequence 16K: 328 TFLOP/s of "
        "989.4 dense bf16 (Dao 2023, arXiv 2307.08691, Fig. 7d; Dao-AILab/flash-attention "
        "assets/flash2_h100_fwd_bwd_benchmark.png); 338 without the mask",
    ),
    "10.0": (
        346 / 2250,
        "B200: FlashAttention-2 (its sm80 kernels; it has no Blackwell path) forward+backward 259-346 TFLOP/s of "
        "2250 dense bf16, head dim 64, sequence 512-16K (Dao-AILab/flash-attention#1589, flash_attn 2.7.4, the "
        "repository's benchmark_flash_attention.py on a B200); the top figure",
    ),
}
"""Achieved/peak of the FlashAttention-2 kernel by compute capability: what flash and SDPA's flash backend
(PyTorch SDPA dispatches to the same FlashAttention-2 kernel on sm80+) run attention at. The paper
counts a causal kernel's FLOPs as the unmasked half (its benchmark divides by 2 with causal=True), the
same convention as `executed_attention_flops`; the figures are its causal ones (decoders run causal) at
the longest sequence charted, where attention's share of a step is largest."""

FA3_KERNEL_FRACTION: dict[str, tuple[float, str]] = {
    "9.0": (
        3.5 / (1 / 616 + 2.5 / 561) / 989.4,
        "H100 SXM: FlashAttention-3 BF16 at head dim 128, sequence 16K: forward with causal mask 616 TFLOP/s (Shah "
        "et al. 2024, arXiv 2407.08608, Fig. 5d; Dao-AILab/flash-attention assets/flash3_fp16_fwd.png), backward "
        "561 (Fig. 6, published without the mask only), 576 TFLOP/s for the forward+backward mix (the backward "
        "holds 2.5 of the 3.5 FLOPs); the same charts' FlashAttention-2 bars (335 causal forward, 322 backward) "
        "mix to 326, against FA2's own causal forward+backward 328 above"
    ),
}
"""Achieved/peak of FlashAttention-3 (HF `attn_implementation="flash_attention_3"`): its kernels use Hopper's
wgmma/TMA, so only sm90 has a rate of its own; elsewhere it runs FlashAttention-2's figure."""

FA4_KERNEL_FRACTION: dict[str, tuple[float, str]] = {
    "10.0": (
        0.71 * 63 / 73,
        "B200: FlashAttention-4 forward up to 1613 TFLOP/s, 71% of the 2250 dense bf16 peak (Zadouri et al. 2026, "
        "arXiv 2603.05451, abstract); the backward, 2.5 of the 3.5 forward+backward FLOPs, is not in the abstract "
        "and is ASSUMED to keep FlashAttention-2's backward/forward ratio on A100 (63% / 73%, Dao 2023 §4.1)",
    ),
}
"""Achieved/peak of FlashAttention-4 (HF `attn_implementation="flash_attention_4"`): written for Blackwell's
tcgen05/TMEM (sm100); elsewhere it runs FlashAttention-3's figure on Hopper, else FlashAttention-2's."""

CAUSAL_FRACTION = 0.5
"""Share of the s x s score and A.V products a causal flash kernel computes: the blocks above the
diagonal are skipped (FlashAttention-2 §3.1.1, "causal masking"); eager attention computes them all
and masks them after."""


def executed_attention_share(model: ModelSpec, attention: str) -> float:
    """Share of the full s x s attention product the kernel executes: half for a causal decoder under
    flash / SDPA, all of it for eager attention and for T5 (bidirectional encoder)."""
    if attention == "eager" or model.family == "t5":
        return 1.0
    return CAUSAL_FRACTION


EAGER_SCORE_PASSES = (4, 7)
"""HBM passes over the s x s score matrices of one attention in an unfused (eager) implementation, forward and
backward: the forward writes S = QK^T, reads it for the softmax, writes P and reads it for PV; the backward reads
P (dV), writes dP, reads P and dP (softmax backward), writes dS and reads it twice (dQ, dK). FlashAttention
(Dao et al. 2022, arXiv 2205.14135), Algorithm 0 and Appendix B.2 (standard attention backward), which also
shows these passes, not the FLOPs, set eager attention's time; masking and dropout add passes, not counted."""


def eager_score_seconds(
    hardware: HardwareProfile, layer: LayerFlops, model: ModelSpec, tokens: int, seq_len: int, attention: str
) -> tuple[float, float]:
    """HBM seconds of one layer's s x s score traffic under eager attention (forward, backward), in the
    activations' 16-bit dtype; (0, 0) for fused kernels (flash, SDPA keep S and P on chip), CPU hosts and
    layers without attention. A token attends to seq_len positions in each of the layer's score matrices
    (heads, and self + cross attention in a T5 decoder)."""
    gpu = hardware.gpu
    if attention != "eager" or gpu is None or not gpu.hbm_bandwidth_Bps or not layer.attention_flops_per_seq:
        return 0.0, 0.0
    matrices = layer.attention_flops_per_seq / (4 * attention_head_dim(model))
    element_bytes = 2 * tokens * seq_len * matrices / gpu.hbm_bandwidth_Bps
    forward, backward = EAGER_SCORE_PASSES
    return forward * element_bytes, backward * element_bytes


def attention_flops_rate(hardware: HardwareProfile, precision: str, attention: str) -> tuple[float, str] | None:
    """FLOP/s of the attention kernel itself (flash, SDPA), from FlashAttention-2's published figures
    for the GPU generation (FlashAttention-3's for flash3 on Hopper, FlashAttention-4's for flash4 on Blackwell); None where none is published (eager attention runs as GEMMs; older GPUs,
    CPU hosts): the GEMM rate applies."""
    gpu = hardware.gpu
    if attention == "eager" or gpu is None or not gpu.compute_capability or precision not in ("bf16", "fp16"):
        return None
    cc = gpu.compute_capability
    entry = (
        (FA4_KERNEL_FRACTION.get(cc) if attention == "flash4" else None)
        or (FA3_KERNEL_FRACTION.get(cc) if attention in ("flash3", "flash4") else None)
        or ATTENTION_KERNEL_FRACTION.get(cc)
    )
    peak = gpu.peak_flops(precision)
    if entry is None or not peak:
        return None
    anchor = ATTENTION_ANCHOR_GPU[cc]
    fp32 = gpu.peak_fp32_flops
    if (peak, fp32) == anchor[:2] or not fp32:
        return entry[0] * peak, entry[1]
    rate = sibling_attention_rate(entry[0], anchor, peak, fp32)
    return rate, (
        f"{entry[1]}; on this GPU ({peak / 1e12:.4g} TFLOP/s tensor, {fp32 / 1e12:.3g} fp32) the kernel's matmuls run "
        f"at its own matmul ceiling and the rest at its fp32 rate: {rate / peak:.0%} of peak"
    )


ATTENTION_ANCHOR_GPU: dict[str, tuple[float, float, float, str]] = {
    "8.0": (312e12, 19.5e12, MATMUL_CEILING["A100 SXM"][0], "A100 SXM"),
    "9.0": (989.4e12, 66.9e12, MATMUL_CEILING["H100 SXM"][0], "H100 SXM"),
    "10.0": (2250e12, 80e12, MATMUL_CEILING["B200 SXM"][0], "B200 SXM"),
}
"""The GPU each attention figure above was measured on, per compute capability: (dense 16-bit tensor peak, fp32
peak, matmul ceiling as a fraction of the tensor peak, name); peaks from the datasheets (A100: 312 / 19.5, H100
SXM: 989.4 / 66.9, B200: 2250 / 80 TFLOP/s)."""


def sibling_attention_rate(
    fraction: float, anchor: tuple[float, float, float, str], peak: float, fp32: float
) -> float:
    """Attention kernel FLOP/s on a GPU of the anchor's compute capability but other tensor and fp32 peaks
    (the H20: GH100 with its tensor rate capped to 148 TFLOP/s, fp32 44 against the H100's 67). A flash kernel's
    time is its two matmuls at the tensor cores plus the softmax between them (exponentials, rescaling, masking)
    in fp32 off the tensor cores: FlashAttention-2 §3.1 prices these non-matmul FLOPs by the fp32 rate (A100:
    312 TFLOP/s of matmul against 19.5 of non-matmul fp32, each non-matmul FLOP 16x dearer), and
    FlashAttention-4's 'asymmetric hardware scaling' is the same split on B200. On the anchor the matmuls run at its matmul ceiling
    and the figure fixes the rest per FLOP (1/fraction - 1/ceiling, in anchor-peak seconds); a sibling runs the
    matmuls at its own ceiling x peak and the rest in proportion to its fp32 rate. The anchor itself gets
    fraction x peak; like `sibling_mfu`, the sibling keeps the anchor's ceiling as a fraction of its peak."""
    anchor_peak, anchor_fp32, ceiling, _ = anchor
    rest = (1 / fraction - 1 / ceiling) / anchor_peak * anchor_fp32 / fp32
    return 1 / (1 / (ceiling * peak) + rest)


def peak_flops(hardware: HardwareProfile, precision: str) -> float | None:
    """Peak FLOP/s per device for MFU, or None (a CPU host, or an unknown GPU)."""
    if hardware.gpu is None:
        return None
    return hardware.gpu.peak_flops(precision)
