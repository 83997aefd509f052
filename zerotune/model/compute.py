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

Seconds = FLOPs / achieved FLOP/s: the profile's measured `compute.achieved_flops[precision]`
(what `zerotune probe` measures on a transformer block), else the GPU's peak for the precision
times `compute.mfu_assumption`.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import LayerSpec, ModelSpec

DEFAULT_MFU = 0.4
"""Achieved/peak when a profile states neither achieved FLOP/s nor an MFU assumption: typical of
well-tuned dense transformer training on A100/H100 (Chowdhery et al. 2022 Table 3 reports 46% MFU
for PaLM 540B; Narayanan et al. 2021 report 52% of peak on A100s)."""


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


def dense_block_flops(matrix_params: int, heads: int, head_dim: int, *, name: str = "block") -> LayerFlops:
    """One transformer block: 2 FLOPs per matrix parameter plus 4·H·Q attention FLOPs per position."""
    return LayerFlops(name, "block", 2.0 * max(matrix_params, 0), 4.0 * heads * head_dim)


def _is_matrix(numel: int, model: ModelSpec) -> bool:
    """Norm weights and biases are vectors no longer than the widest activation; matrices are larger."""
    widest = max(
        model.hidden_size,
        model.ffn_size,
        model.num_heads * model.head_dim,
        model.num_kv_heads * model.head_dim,
    )
    return numel > widest


def _idle_expert_params(model: ModelSpec) -> int:
    """Expert-MLP parameters of one block that a token does not pass through."""
    if model.num_experts <= 1:
        return 0
    expert = (3 if model.gated_mlp else 2) * model.hidden_size * model.ffn_size
    return (model.num_experts - model.experts_per_token) * expert


def layer_flops(model: ModelSpec, layer: LayerSpec) -> LayerFlops:
    """Forward FLOPs per token of one module (see the module docstring for the formula)."""
    if layer.kind == "embedding":
        return LayerFlops(layer.name, layer.kind, 0.0, 0.0)
    if layer.kind == "head":
        return LayerFlops(layer.name, layer.kind, 2.0 * model.vocab_size * model.hidden_size, 0.0)
    if layer.kind == "norm":
        return LayerFlops(layer.name, layer.kind, 0.0, 0.0)
    matrices = sum(t for t in layer.tensors if _is_matrix(t, model)) - _idle_expert_params(model)
    block = dense_block_flops(matrices, model.num_heads, model.head_dim, name=layer.name)
    attention = block.attention_flops_per_seq
    if layer.kind == "decoder_block" and model.family == "t5":
        attention *= 2  # self-attention and cross-attention
    return LayerFlops(layer.name, layer.kind, block.matmul_flops, attention)


def model_flops(model: ModelSpec) -> tuple[LayerFlops, ...]:
    return tuple(layer_flops(model, layer) for layer in model.layers)


def forward_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """2·N_matmul + 4·L·s·H·Q: the forward FLOPs of one token through the whole model."""
    return sum(f.forward_flops(1, seq_len) for f in model_flops(model))


def training_flops_per_token(model: ModelSpec, seq_len: int, *, recompute: bool = False) -> float:
    """Forward + backward (3x forward), plus one more forward of the blocks when recomputing."""
    return sum(
        f.training_flops(1, seq_len, recompute=recompute and f.kind.endswith("block"))
        for f in model_flops(model)
    )


def achieved_flops(hardware: HardwareProfile, precision: str) -> tuple[float, str]:
    """FLOP/s to divide by, and where the number comes from (for notes)."""
    measured = hardware.compute.achieved_flops.get(precision)
    if measured:
        return (
            measured,
            f"achieved {precision} FLOP/s measured on this hardware ({measured / 1e12:.3g} TFLOP/s)",
        )
    peak = hardware.gpu.peak_flops(precision) if hardware.gpu is not None else None
    if peak:
        mfu = hardware.compute.mfu_assumption or DEFAULT_MFU
        return peak * mfu, f"{precision} peak {peak / 1e12:.4g} TFLOP/s x assumed MFU {mfu:.0%}"
    if hardware.compute.achieved_flops:  # a CPU probe measured another dtype only
        dtype, value = next(iter(hardware.compute.achieved_flops.items()))
        return value, f"no {precision} number in the profile; used its {dtype} achieved FLOP/s"
    raise ValueError(f"hardware profile {hardware.name!r} has no FLOP/s for {precision}")


def peak_flops(hardware: HardwareProfile, precision: str) -> float | None:
    """Peak FLOP/s per device for MFU, or None (a CPU host, or an unknown GPU)."""
    if hardware.gpu is None:
        return None
    return hardware.gpu.peak_flops(precision)
