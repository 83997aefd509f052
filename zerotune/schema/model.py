"""Model architecture as every other module sees it.

The catalog (zerotune/catalog/models.py) builds a ModelSpec from profiles/models/*.yaml, from a
local Hugging Face config.json, or from ad-hoc --params/--layers/--hidden. Parameter counts are
computed from the architecture (the `layers` tensor lists), never typed in.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LayerKind = Literal["embedding", "block", "encoder_block", "decoder_block", "norm", "head", "vision"]
"""`vision`: a module of a multimodal model's image encoder (Gemma 3's SigLIP tower and projector). Its
parameters hold ZeRO states like any other; text-only batches never run it, so it has no FLOPs."""


class LayerSpec(BaseModel):
    """One module in forward order: an embedding, one transformer block, the final norm, the head.

    `tensors` lists the numel of each parameter tensor this module owns directly or through its
    children (for a block: q, k, v, o, mlp matrices, norms, biases), in module order. This is
    what bucket filling (stage 1/2) and parameter fetching/persistence (stage 3) act on.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: LayerKind
    tensors: tuple[int, ...]
    experts: int = Field(1, ge=1, description="routed experts in this block's MLP (1: a dense block)")

    @property
    def params(self) -> int:
        return sum(self.tensors)


class ModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    family: str = Field(description="a catalog family (zerotune.catalog.architectures.Family) or custom")
    source: str | None = None
    num_layers: int = Field(description="transformer blocks (encoder + decoder for T5)")
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int = Field(description="per-head size of queries and keys (MLA: nope + rope part)")
    v_head_dim: int | None = Field(None, description="per-head size of values when it differs (MLA)")
    attention_activation_width: int | None = Field(
        None, description="MLA: elements per token its attention keeps for backward (default: q/k/v of H·d = h)"
    )
    ffn_size: int = Field(description="MLP intermediate size (per expert for MoE)")
    vocab_size: int
    tied_embeddings: bool
    gated_mlp: bool = Field(description="SwiGLU/GeGLU (3 MLP matrices) vs plain (2)")
    num_experts: int = 1
    experts_per_token: int = 1
    max_seq_len: int | None = None
    activation: str = Field(
        "silu", description="the MLP's activation as HF configs name it (relu, gelu, gelu_new, silu, ...)"
    )
    qk_norm: bool = Field(False, description="an RMSNorm over q and over k (Qwen3, Gemma 3, OLMo 2)")
    block_norms: int = Field(2, description="norms per block (Gemma 2/3: 4, with post-attention/-feedforward norms)")
    shared_block_norm: bool = Field(
        False, description="one norm feeds a parallel block's attention and MLP (Falcon-7B, GPT-J, Phi-1/2)"
    )
    dropout: float = Field(0.0, description="dropout on each block's attention and MLP outputs in training")
    attention_dropout: float = Field(0.0, description="dropout on the attention probabilities in training")
    layers: tuple[LayerSpec, ...]

    @cached_property
    def params(self) -> int:
        """Total parameter count (tied embeddings counted once)."""
        return sum(layer.params for layer in self.layers)

    @cached_property
    def largest_tensor(self) -> int:
        """numel of the largest single parameter tensor (often the embedding)."""
        return max(max(layer.tensors) for layer in self.layers if layer.tensors)

    @cached_property
    def largest_layer(self) -> int:
        """Params of the largest entry of `layers` (a whole transformer block, usually).

        Not DeepSpeed's `largest_layer_params`: its estimators take the max over modules of their
        *direct* parameters (recurse=False, stage3.py), i.e. one Linear's weight (+ bias), which is
        `largest_tensor` up to a bias."""
        return max(layer.params for layer in self.layers)

    @cached_property
    def blocks(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if layer.kind.endswith("block"))

    @cached_property
    def block_params(self) -> int:
        """Params of one transformer block (the largest, for heterogeneous models)."""
        return max(layer.params for layer in self.blocks)

    @cached_property
    def active_params(self) -> int:
        """Params used per token: in each MoE block only `experts_per_token` of its experts."""
        expert = (3 if self.gated_mlp else 2) * self.hidden_size * self.ffn_size
        idle = sum((block.experts - self.experts_per_token) * expert for block in self.blocks if block.experts > 1)
        return self.params - idle
