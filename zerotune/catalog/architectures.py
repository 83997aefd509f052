"""Architecture descriptions and the builder that turns one into per-tensor parameter counts.

An `Architecture` is what a catalog profile (profiles/models/*.yaml) or a parsed Hugging Face
config.json says about a model: dimensions plus the handful of structural switches in which the
supported families differ. `build_model` lists the numel of every parameter tensor, module by
module, so counts are computed, never typed in; they equal transformers' own
`sum(p.numel() for p in model.parameters())` (tests/golden/hf_param_counts.json, transformers 5.24).

Shapes were read from transformers' modeling files (models/<family>/modeling_<family>.py):

- decoder-only (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2,
  gemma3_text, phi3, phi, olmo2, gpt_oss, falcon, gpt2, gpt_neox, gptj, starcoder2, opt, mpt, bloom): token embedding
  [V, h] (+ learned positions [P, h] for GPT-2, [P + 2, h] for OPT, + a LayerNorm for BLOOM; OPT-350m's embedding
  is [V, 512] with project_in [h, 512] after it and project_out [512, h] at the end, and no final norm:
  modeling_opt.py); per block an attention norm, q [H·d, h], k and v
  [Hkv·d, h] (one fused tensor for Phi-3/Falcon/GPT-2/GPT-NeoX/BLOOM), o [h, H·d], an MLP norm, then
  gate/up [f, h] (fused for Phi-3) and down [h, f], or up/down for plain MLPs; Gemma 2 and Gemma 3 add a
  post-attention and a post-feedforward RMSNorm (4 per block); Qwen3 and Gemma 3 an RMSNorm [d] over each
  head's q and k, OLMo 2 one over all of q [H·d] and one over k [Hkv·d] (its two block norms sit after
  attention and MLP); gpt-oss biases q/k/v/o and adds a sink logit per head [H]; Mixtral, Qwen2/3-MoE
  and gpt-oss add a router [E, h] (biased for gpt-oss) and E experts (biased for gpt-oss), Qwen2-MoE
  also a shared expert (gate/up/down of its own size) and its gate [1, h]; a final norm; lm_head [V, h]
  unless tied (GPT-NeoX: embed_out; Phi-1/2: with a bias [V], after one LayerNorm per block feeding the
  parallel attention and MLP, biased q/k/v/dense and fc1/fc2; GPT-J, modeling_gptj.py: the same with unbiased
  q/k/v/out_proj). StarCoder2 (modeling_starcoder2.py) is Llama's layout with LayerNorms and a plain biased MLP
  (c_fc, c_proj), OPT's block (modeling_opt.py) GPT-2's with separate q/k/v and a ReLU fc1/fc2, MPT's
  (modeling_mpt.py) a fused Wqkv, out_proj, up/down of 4h, no biases, LayerNorms without bias, ALiBi, tied head.
- DeepSeek-V2/V3 (modeling_deepseek_v2.py, modeling_deepseek_v3.py): multi-head latent attention
  (`MLA`: q_a [r_q, h] -> RMSNorm [r_q] -> q_b [H·(d_nope + d_rope), r_q], or one q_proj when r_q is
  None; kv_a [r_kv + d_rope, h] -> RMSNorm [r_kv] -> kv_b [H·(d_nope + d_v), r_kv]; o [h, H·d_v]);
  the first `first_k_dense_replace` blocks have a dense MLP of intermediate_size, the others a router
  [E, h], E routed experts of moe_intermediate_size and one shared MLP of n_shared x that size. V3's
  router e_score_correction_bias is a buffer (not counted, as transformers does not); the checkpoint's
  multi-token-prediction block is not part of transformers' model and is not counted.
- Gemma 3 multimodal (modeling_gemma3.py Gemma3ForConditionalGeneration, modeling_siglip.py): the
  gemma3_text language model plus the SigLIP vision tower (patch Conv2d with bias, learned positions,
  LayerNorm/q/k/v/out/fc1/fc2 with biases per encoder layer, post LayerNorm) and the projector
  ([vision hidden, text hidden] + an RMSNorm), listed as `vision` layers: they hold ZeRO states and
  take no FLOPs in text-only batches.
- T5 (modeling_t5.py): shared embedding [V, h]; encoder blocks (self-attention + FF) and decoder
  blocks (self-attention + cross-attention + FF), each sub-layer with an RMS-style T5LayerNorm;
  the relative position bias [buckets, H] only in the first block of each stack; no biases.

LayerNorm has weight and bias; RMSNorm (and T5LayerNorm) a weight only. MoE experts are listed as the
checkpoints store them, three [f, h] matrices (and biases) per expert; transformers 5 fuses each layer's
experts into two 3-D tensors (gate_up [E, 2f, h], down [E, h, f]) of the same total size.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from zerotune.schema.model import LayerSpec, ModelSpec

Family = Literal[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gemma3",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "olmo2",
    "phi3",
    "phi",
    "falcon",
    "gpt2",
    "gpt_neox",
    "gptj",
    "starcoder2",
    "opt",
    "mpt",
    "bloom",
    "t5",
]
FAMILIES: tuple[str, ...] = Family.__args__  # type: ignore[attr-defined]


class MLA(BaseModel):
    """DeepSeek's multi-head latent attention (DeepseekV2Attention / DeepseekV3Attention): queries through a
    low-rank q_a -> RMSNorm -> q_b (or one q_proj when q_lora_rank is None, as in DeepSeek-V2-Lite), keys
    and values from a shared latent kv_a [kv_lora_rank + rope, h] -> RMSNorm -> kv_b, o [h, H·v_head_dim]."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q_lora_rank: int | None = Field(gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class VisionTower(BaseModel):
    """A multimodal model's SigLIP image encoder (transformers SiglipVisionModel without its pooling head, as
    Gemma 3 builds it: vision_use_head false) and the projector into the language model (Gemma3MultiModalProjector)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden: int = Field(gt=0)
    ffn: int = Field(gt=0)
    layers: int = Field(gt=0)
    image_size: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    channels: int = Field(3, gt=0)


class Architecture(BaseModel):
    """One model's architecture, as written in profiles/models/<name>.yaml."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    family: Family
    hf_class: str = Field(description="transformers class that builds it, e.g. LlamaForCausalLM")
    source: str | None = Field(None, description="URL of the Hugging Face config.json the values come from")
    aliases: tuple[str, ...] = Field((), description="other names accepted by `--model`")

    layers: int = Field(gt=0, description="transformer blocks (T5: encoder blocks)")
    decoder_layers: int | None = Field(None, gt=0, description="T5 only: decoder blocks")
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int | None = Field(None, gt=0, description="key/value heads (GQA/MQA); default: heads")
    head_dim: int | None = Field(None, gt=0, description="default: hidden // heads")
    ffn: int = Field(gt=0, description="MLP intermediate size (per expert for MoE)")
    vocab: int = Field(gt=0)
    tied_embeddings: bool
    gated_mlp: bool = Field(description="gate+up+down (SwiGLU/GeGLU) vs up+down")
    experts: int = Field(1, gt=0)
    experts_per_token: int = Field(1, gt=0)
    shared_expert_ffn: int | None = Field(
        None,
        gt=0,
        description="intermediate size of the always-active shared expert (Qwen2-MoE, with a sigmoid gate; "
        "DeepSeek: n_shared_experts x moe_intermediate_size, no gate)",
    )
    dense_layers: int = Field(
        0, ge=0, description="DeepSeek's first_k_dense_replace: leading blocks with a dense MLP"
    )
    dense_ffn: int | None = Field(None, gt=0, description="intermediate size of those dense blocks' MLP")
    mla: MLA | None = Field(None, description="DeepSeek's multi-head latent attention instead of q/k/v/o")
    vision: VisionTower | None = Field(None, description="Gemma 3's image encoder (multimodal checkpoints)")

    norm: Literal["rmsnorm", "layernorm"] = Field(
        description="layernorm has weight and bias, rmsnorm a weight"
    )
    norm_bias: bool = Field(
        True,
        description="false: LayerNorms without a bias (MPT: transformers' MptBlock sets norm_1.bias = None)",
    )
    block_norms: int = Field(
        2,
        ge=1,
        le=4,
        description="norms per block (Falcon-7B's parallel block: 1; Gemma 2 adds pre/post-feedforward norms: 4)",
    )
    embedding_norm: bool = Field(False, description="LayerNorm right after the token embedding (BLOOM)")
    embed_proj_dim: int | None = Field(
        None,
        gt=0,
        description="OPT's word_embed_proj_dim when it differs from hidden (opt-350m: 512): the token embedding "
        "(and the tied head) is [V, d], with project_in [hidden, d] after it and project_out [d, hidden] at the end",
    )
    final_norm: bool = Field(
        True, description="false: no norm after the last block (OPT's post-norm opt-350m)"
    )
    fused_qkv: bool = Field(False, description="q, k, v as one tensor (Phi-3, Falcon, GPT-2, BLOOM)")
    fused_gate_up: bool = Field(False, description="gate and up as one tensor (Phi-3)")
    qk_norm: bool = Field(
        False, description="RMSNorm over each head's q and k (weights [head_dim] each: Qwen3, Gemma 3)"
    )
    qk_norm_per_head: bool = Field(
        True, description="false: one RMSNorm over all heads' q [H·d] and one over k [Hkv·d] (OLMo 2)"
    )
    attention_sinks: bool = Field(False, description="a learned sink logit per head, [H] (gpt-oss)")
    router_bias: bool = Field(False, description="bias on the MoE router [E] (gpt-oss)")
    qkv_bias: bool = False
    out_bias: bool = Field(False, description="bias on the attention output projection")
    mlp_bias: bool = False
    head_bias: bool = Field(False, description="bias on lm_head [V] (Phi-1/1.5/2's PhiForCausalLM)")

    position: Literal["rope", "learned", "alibi", "relative"]
    max_positions: int | None = Field(None, gt=0, description="context length; the size of learned positions")
    position_offset: int = Field(
        0, ge=0, description="rows a learned position table has beyond max_positions (OPT: 2)"
    )
    relative_attention_buckets: int | None = Field(None, gt=0, description="T5 only")

    # What autograd keeps in training, beyond the shapes (zerotune.model.activations reads them via ModelSpec)
    activation: str | None = Field(
        None,
        description="the MLP's activation as the config names it (hidden_act, activation_function: relu, gelu, "
        "gelu_new, silu, ...); default: the family's (FAMILY_ACTIVATION)",
    )
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="dropout on each block's attention and MLP outputs in training (OPT dropout, GPT-2/GPT-J/Phi "
        "resid_pdrop, BLOOM/Falcon/GPT-NeoX hidden_dropout, StarCoder2 residual_dropout, T5 dropout_rate)",
    )
    attention_dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="dropout on the attention probabilities in training (attention_dropout, GPT-2/GPT-J attn_pdrop)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Architecture:
        if self.heads % self.n_kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.n_kv_heads})")
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(
                f"hidden ({self.hidden}) is not divisible by heads ({self.heads}); give head_dim"
            )
        if self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) > experts ({self.experts})")
        if self.position == "learned" and self.max_positions is None:
            raise ValueError("learned positions need max_positions")
        if self.family == "t5" and (self.decoder_layers is None or self.relative_attention_buckets is None):
            raise ValueError("t5 needs decoder_layers and relative_attention_buckets")
        if self.dense_layers and (
            self.dense_ffn is None or self.dense_layers > self.layers or self.experts == 1
        ):
            raise ValueError("dense_layers needs dense_ffn, at most `layers` blocks and an MoE model")
        return self

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        """Per-head size of queries and keys (MLA: the no-position and rotary parts together)."""
        if self.mla:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        return self.head_dim or self.hidden // self.heads


FAMILY_ACTIVATION = {family: "silu" for family in FAMILIES} | {
    "gemma": "gelu_pytorch_tanh",  # GemmaMLP: ACT2FN[config.hidden_activation], GemmaConfig's default
    "gemma2": "gelu_pytorch_tanh",
    "gemma3_text": "gelu_pytorch_tanh",
    "gemma3": "gelu_pytorch_tanh",
    "phi": "gelu_new",  # PhiConfig.hidden_act
    "falcon": "gelu",  # FalconConfig.activation
    "gpt2": "gelu_new",  # GPT2Config.activation_function
    "gpt_neox": "gelu",  # GPTNeoXConfig.hidden_act
    "gptj": "gelu_new",  # GPTJConfig.activation_function
    "starcoder2": "gelu_pytorch_tanh",  # Starcoder2Config.hidden_act
    "opt": "relu",  # OPTConfig.activation_function
    "mpt": "gelu",  # MptMLP: nn.GELU(approximate="none")
    "bloom": "gelu",  # BloomGelu: a custom autograd function that keeps its input, as one GELU kernel does
    "t5": "relu",  # T5Config.feed_forward_proj "relu" (v1.1's "gated-gelu" is gelu_new: T5Config.__init__)
}
"""Each family's MLP activation when the profile or config.json names none: its configuration class's default
(transformers/models/<family>/configuration_<family>.py, v5.24) or, where the modeling code fixes it, that."""


def build_model(arch: Architecture) -> ModelSpec:
    """The ModelSpec of an architecture: every parameter tensor's numel, in forward order."""
    layers = _t5_layers(arch) if arch.family == "t5" else _decoder_layers(arch)
    return ModelSpec(
        name=arch.name,
        family=arch.family,
        source=arch.source,
        num_layers=arch.layers + (arch.decoder_layers or 0),
        hidden_size=arch.hidden,
        num_heads=arch.heads,
        num_kv_heads=arch.n_kv_heads,
        head_dim=arch.d_head,
        v_head_dim=arch.mla.v_head_dim if arch.mla else None,
        attention_activation_width=_mla_activation_width(arch, arch.mla) if arch.mla else None,
        ffn_size=arch.ffn,
        vocab_size=arch.vocab,
        tied_embeddings=arch.tied_embeddings,
        gated_mlp=arch.gated_mlp,
        num_experts=arch.experts,
        experts_per_token=arch.experts_per_token,
        max_seq_len=arch.max_positions,
        activation=arch.activation or FAMILY_ACTIVATION[arch.family],
        shared_block_norm=arch.block_norms == 1,
        qk_norm=arch.qk_norm,
        block_norms=arch.block_norms,
        dropout=arch.dropout,
        attention_dropout=arch.attention_dropout,
        layers=tuple(layers),
    )


def _norm(arch: Architecture) -> list[int]:
    return [arch.hidden, arch.hidden] if arch.norm == "layernorm" and arch.norm_bias else [arch.hidden]


def _linear(n_in: int, n_out: int, bias: bool) -> list[int]:
    return [n_in * n_out, n_out] if bias else [n_in * n_out]


def _mla(arch: Architecture, m: MLA) -> list[int]:
    """DeepseekV3Attention: attention_bias on q_a, kv_a and o only; q_proj, q_b and kv_b never biased."""
    h, heads, bias = arch.hidden, arch.heads, arch.qkv_bias
    q_size = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
    if m.q_lora_rank is None:
        q = _linear(h, q_size, False)
    else:
        q = _linear(h, m.q_lora_rank, bias) + [m.q_lora_rank] + _linear(m.q_lora_rank, q_size, False)
    kv = _linear(h, m.kv_lora_rank + m.qk_rope_head_dim, bias) + [m.kv_lora_rank]
    kv += _linear(m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim), False)
    return q + kv + _linear(heads * m.v_head_dim, h, bias)


def _mla_activation_width(arch: Architecture, m: MLA) -> int:
    """Elements per token DeepseekV3Attention's forward keeps for backward: the input norm's input and the
    projections' shared input (2h); q_a's output and its RMSNorm's (2 r_q, when queries are low-rank);
    kv_a's output (r_kv + d_rope) and its RMSNorm's (r_kv); kv_b's output, alive through the value view
    (H·(d_nope + d_v)); the concatenated queries and keys the kernel gets (2 H·d_qk); the output
    projection's input (H·d_v). Rotary embedding multiplies by cos/sin, which keep nothing of the input."""
    heads, qk = arch.heads, m.qk_nope_head_dim + m.qk_rope_head_dim
    q_latent = 2 * m.q_lora_rank if m.q_lora_rank else 0
    kv_latent = m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank
    return (
        2 * arch.hidden
        + q_latent
        + kv_latent
        + heads * (m.qk_nope_head_dim + m.v_head_dim)
        + heads * (2 * qk + m.v_head_dim)
    )


def _attention(arch: Architecture) -> list[int]:
    if arch.mla:
        return _mla(arch, arch.mla)
    h, d = arch.hidden, arch.d_head
    q, kv = arch.heads * d, arch.n_kv_heads * d
    if arch.fused_qkv:
        qkv = _linear(h, q + 2 * kv, arch.qkv_bias)
    else:
        qkv = _linear(h, q, arch.qkv_bias) + 2 * _linear(h, kv, arch.qkv_bias)
    qk_norm = []
    if arch.qk_norm:  # Qwen3/Gemma 3: q_norm, k_norm of [head_dim]; OLMo 2: of [H·d] and [Hkv·d]
        qk_norm = [d, d] if arch.qk_norm_per_head else [q, kv]
    sinks = [arch.heads] if arch.attention_sinks else []  # GptOssAttention.sinks
    return qkv + qk_norm + _linear(q, h, arch.out_bias) + sinks


def _mlp(arch: Architecture, ffn: int | None = None) -> list[int]:
    h, f, bias = arch.hidden, ffn or arch.ffn, arch.mlp_bias
    if not arch.gated_mlp:
        return _linear(h, f, bias) + _linear(f, h, bias)
    gate_up = _linear(h, 2 * f, bias) if arch.fused_gate_up else 2 * _linear(h, f, bias)
    return gate_up + _linear(f, h, bias)


def _decoder_layers(arch: Architecture) -> list[LayerSpec]:
    h, norm = arch.hidden, _norm(arch)
    embed = [arch.vocab * (arch.embed_proj_dim or h)]
    if arch.position == "learned":
        embed.append((arch.max_positions + arch.position_offset) * h)  # type: ignore[operator]  # validated
    if arch.embedding_norm:
        embed += norm
    if arch.embed_proj_dim:  # OPT: project_in [h, d] (project_out [d, h] ends the model), no biases
        embed.append(arch.embed_proj_dim * h)
    mlp = _mlp(arch)
    # MoE: router [E, h] (no bias; DeepSeek-V3's e_score_correction_bias is a buffer), then E experts
    if arch.experts > 1:
        mlp = _linear(h, arch.experts, arch.router_bias) + mlp * arch.experts
    if arch.shared_expert_ffn:  # shared expert (gated MLP, no bias); Qwen2-MoE adds its sigmoid gate [1, h]
        mlp += 3 * _linear(h, arch.shared_expert_ffn, False) + ([h] if arch.family == "qwen2_moe" else [])
    attention = _attention(arch)

    def block(mlp: list[int]) -> tuple[int, ...]:
        if arch.block_norms == 4:  # Gemma 2/3: input, post-attention, pre-feedforward, post-feedforward norms
            return tuple(norm + attention + norm + norm + mlp + norm)
        return tuple(norm + attention + (norm if arch.block_norms == 2 else []) + mlp)

    dense = block(_mlp(arch, arch.dense_ffn))  # DeepSeek's first_k_dense_replace blocks
    sparse = block(mlp)
    layers = _vision_layers(arch, arch.vision) if arch.vision else []
    layers.append(LayerSpec(name="embed", kind="embedding", tensors=tuple(embed)))
    layers += [
        LayerSpec(name=f"layers.{i}", kind="block", tensors=dense)
        if i < arch.dense_layers
        else LayerSpec(name=f"layers.{i}", kind="block", tensors=sparse, experts=arch.experts)
        for i in range(arch.layers)
    ]
    final = (norm if arch.final_norm else []) + ([h * arch.embed_proj_dim] if arch.embed_proj_dim else [])
    if final:  # OPT-350m: no final LayerNorm, only project_out
        layers.append(LayerSpec(name="norm", kind="norm", tensors=tuple(final)))
    if not arch.tied_embeddings:
        head = (arch.vocab * (arch.embed_proj_dim or h),) + ((arch.vocab,) if arch.head_bias else ())
        layers.append(LayerSpec(name="lm_head", kind="head", tensors=head))
    return layers


def _vision_layers(arch: Architecture, v: VisionTower) -> list[LayerSpec]:
    """Gemma 3's vision_tower (SiglipVisionModel: patch Conv2d with bias, learned positions, encoder
    layers of LayerNorm, q/k/v/out and fc1/fc2 with biases, LayerNorm; then post_layernorm) and
    multi_modal_projector (a [vision hidden, text hidden] weight and an RMSNorm [vision hidden]), in
    module order: transformers lists them before the language model."""
    h, f = v.hidden, v.ffn
    layer_norm = [h, h]
    embeddings = (v.channels * v.patch_size**2 * h, h, (v.image_size // v.patch_size) ** 2 * h)
    encoder = tuple(
        layer_norm + 4 * _linear(h, h, True) + layer_norm + _linear(h, f, True) + _linear(f, h, True)
    )
    layers = [LayerSpec(name="vision_tower.embeddings", kind="vision", tensors=embeddings)]
    layers += [
        LayerSpec(name=f"vision_tower.layers.{i}", kind="vision", tensors=encoder) for i in range(v.layers)
    ]
    layers.append(LayerSpec(name="vision_tower.post_layernorm", kind="vision", tensors=tuple(layer_norm)))
    layers.append(LayerSpec(name="multi_modal_projector", kind="vision", tensors=(h * arch.hidden, h)))
    return layers


def _t5_layers(arch: Architecture) -> list[LayerSpec]:
    h, inner = arch.hidden, arch.heads * arch.d_head
    attention = [h * inner] * 4 + [h]  # q, k, v, o (no biases), then the sub-layer's norm
    ff = [h * arch.ffn] * (3 if arch.gated_mlp else 2) + [h]  # wi (wi_0, wi_1 if gated), wo, norm
    rel_bias = [arch.relative_attention_buckets * arch.heads]  # type: ignore[operator]  # validated for t5

    def block(i: int, cross: bool) -> tuple[int, ...]:
        self_attn = attention[:4] + (rel_bias if i == 0 else []) + attention[4:]
        return tuple(self_attn + (attention if cross else []) + ff)

    layers = [LayerSpec(name="shared", kind="embedding", tensors=(arch.vocab * h,))]
    for stack, n, cross in (("encoder", arch.layers, False), ("decoder", arch.decoder_layers or 0, True)):
        kind = "decoder_block" if cross else "encoder_block"
        layers += [LayerSpec(name=f"{stack}.block.{i}", kind=kind, tensors=block(i, cross)) for i in range(n)]
        layers.append(LayerSpec(name=f"{stack}.final_layer_norm", kind="norm", tensors=(h,)))
    if not arch.tied_embeddings:
        layers.append(LayerSpec(name="lm_head", kind="head", tensors=(arch.vocab * h,)))
    return layers
