"""Per-family readers of a Hugging Face config.json: which fields decide each family's parameter shapes,
under all the names transformers' configuration classes accept, with those classes' defaults where a field
is absent (transformers/models/<family>/configuration_<family>.py, v5.23). zerotune/catalog/hf_config.py
dispatches to them by `model_type` and builds the Architecture."""

from __future__ import annotations

from typing import Any

from zerotune.errors import InputError

LLAMA_LIKE = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text", "phi3",
    "olmo2",
)  # fmt: skip
DEEPSEEK = ("deepseek_v2", "deepseek_v3")
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "tie_word_embeddings": True,
}
"""Gemma3TextConfig's class defaults (configuration_gemma3.py): the multimodal checkpoints' text_config
leaves most of them out (google/gemma-3-4b-it gives only hidden, intermediate and layer counts)."""
SIGLIP_VISION_DEFAULTS = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_channels": 3,
    "image_size": 224,
    "patch_size": 16,
    "vision_use_head": True,
}
"""SiglipVisionConfig's class defaults (configuration_siglip.py), which Gemma3Config's vision_config starts from."""
_MISSING = object()


class Getter:
    """Reads config fields by any of their names (GPT-2's n_embd is BLOOM's n_embed is hidden_size)."""

    def __init__(self, config: dict[str, Any], name: str, defaults: dict[str, Any] | None = None):
        self.config, self.name, self.defaults = config, name, defaults or {}

    def __call__(self, *keys: str, default: Any = _MISSING) -> Any:
        for key in keys:
            if self.config.get(key) is not None:
                return self.config[key]
        if default is _MISSING:
            default = self.defaults.get(keys[0], _MISSING)
        if default is _MISSING:
            raise InputError(
                f"{self.name}: config.json has no '{keys[0]}'", hint="is it a model config.json?"
            )
        return default


def _llama_like(get: Getter, family: str) -> dict[str, Any]:
    """Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Gemma, Gemma 2, Phi-3: RMSNorm, RoPE, SwiGLU/GeGLU MLP.
    Defaults are the configuration classes' (Gemma2Config: 4 kv heads, head_dim 256, tied;
    Qwen2MoeConfig: 60 experts, 4 per token, expert size 1408, shared expert 5632, untied)."""
    moe = _qwen2_moe(get) if family == "qwen2_moe" else _qwen3_moe(get) if family == "qwen3_moe" else {}
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    kv_default = {"mistral": 8, "mixtral": 8, "gemma": 16, "gemma2": 4, "gemma3_text": 4}.get(family, heads)
    head_dim = get("head_dim", default=256 if family in ("gemma", "gemma2", "gemma3_text") else None)
    # Llama: attention_bias also on o_proj; Qwen3, Gemma 3: on q/k/v/o alike (Qwen3Attention,
    # Gemma3Attention, default False)
    biased = ("llama", "qwen3", "qwen3_moe", "gemma3_text", "olmo2")
    attention_bias = family in biased and get("attention_bias", default=False)
    return dict(
        layers=get("num_hidden_layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=get("num_key_value_heads", default=kv_default),
        head_dim=None if head_dim == hidden // heads else head_dim,
        ffn=moe.get("ffn") or get("intermediate_size"),
        vocab=get("vocab_size"),
        tied_embeddings=get("tie_word_embeddings", default=family in ("gemma", "gemma2", "gemma3_text")),
        gated_mlp=True,
        experts=get("num_local_experts", default=8) if family == "mixtral" else moe.get("experts", 1),
        experts_per_token=get("num_experts_per_tok", default=2)
        if family == "mixtral"
        else moe.get("experts_per_token", 1),
        shared_expert_ffn=moe.get("shared_expert_ffn"),
        norm="rmsnorm",
        block_norms=4 if family in ("gemma2", "gemma3_text") else 2,
        fused_qkv=family == "phi3",
        fused_gate_up=family == "phi3",
        qkv_bias=family in ("qwen2", "qwen2_moe") or attention_bias,
        qk_norm=family in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2"),
        qk_norm_per_head=family != "olmo2",  # Olmo2Attention: q_norm [H·d], k_norm [Hkv·d]
        out_bias=attention_bias,
        mlp_bias=family == "llama" and get("mlp_bias", default=False),
        position="rope",
        max_positions=get("max_position_embeddings", default=None),
    )


def _gemma3(get: Getter, family: str) -> dict[str, Any]:
    """Gemma 3's multimodal checkpoints (Gemma3ForConditionalGeneration, what AutoModelForCausalLM loads
    for them): the language model from text_config (a gemma3_text config, Gemma3TextConfig's defaults),
    lm_head tied to its embedding unless the top-level config says otherwise, plus the SigLIP vision
    tower and projector, which are counted: the Trainer trains (and ZeRO partitions) them unless frozen."""
    text = get("text_config", default={})
    vision = Getter(get("vision_config", default={}), f"{get.name} vision_config", SIGLIP_VISION_DEFAULTS)
    if vision("vision_use_head"):
        raise InputError(
            f"{get.name}: a Gemma 3 vision tower with a pooling head (vision_use_head) is not supported",
            hint="the released Gemma 3 checkpoints set vision_use_head false",
        )
    fields = _llama_like(Getter(text, f"{get.name} text_config", GEMMA3_TEXT_DEFAULTS), "gemma3_text")
    return fields | dict(
        tied_embeddings=get("tie_word_embeddings", default=True),
        vision=dict(
            hidden=vision("hidden_size"),
            ffn=vision("intermediate_size"),
            layers=vision("num_hidden_layers"),
            image_size=vision("image_size"),
            patch_size=vision("patch_size"),
            channels=vision("num_channels"),
        ),
    )


def _deepseek(get: Getter, family: str) -> dict[str, Any]:
    """DeepSeek-V2/V3 (DeepseekV2Config/DeepseekV3Config defaults): MLA attention, the first
    `first_k_dense_replace` blocks with a dense MLP, the others a router, `n_routed_experts` routed experts
    and `n_shared_experts` shared ones (one MLP of n_shared x moe_intermediate_size). The checkpoint's
    multi-token-prediction block (num_nextn_predict_layers) is not part of transformers' model, so it is
    not counted; V3's e_score_correction_bias is a buffer in transformers (DeepseekV3TopkRouter), not a
    parameter (the checkpoint's own remote code, MoEGate under trust_remote_code, makes it an nn.Parameter:
    58 x 256 = 14,848 more for V3, 2e-8 of the total)."""
    v3 = family == "deepseek_v3"
    if get("mlp_bias", default=False) or get("moe_layer_freq", default=1) != 1:
        raise InputError(
            f"{get.name}: DeepSeek with mlp_bias or moe_layer_freq != 1 is not supported",
            hint="the released DeepSeek-V2/V3 checkpoints have neither; `zerotune memory` also takes --params",
        )
    ffn = get("moe_intermediate_size", default=2048 if v3 else 1407)
    shared = get("n_shared_experts", default=1 if v3 else 2)
    dense = get("first_k_dense_replace", default=3 if v3 else 0)
    layers = get("num_hidden_layers", default=61 if v3 else 32)
    return dict(
        layers=layers,
        hidden=get("hidden_size", default=7168 if v3 else 4096),
        heads=get("num_attention_heads", default=128 if v3 else 32),
        ffn=ffn,
        vocab=get("vocab_size", default=129280 if v3 else 102400),
        tied_embeddings=get("tie_word_embeddings", default=False),
        gated_mlp=True,
        experts=get("n_routed_experts", "num_local_experts", "num_experts", default=256 if v3 else 64),
        experts_per_token=get("num_experts_per_tok", default=8 if v3 else 1),
        shared_expert_ffn=shared * ffn or None,
        dense_layers=min(dense, layers),
        dense_ffn=get("intermediate_size", default=18432 if v3 else 11008) if dense else None,
        mla=dict(
            q_lora_rank=get("q_lora_rank", default=None) if "q_lora_rank" in get.config else 1536,
            kv_lora_rank=get("kv_lora_rank", default=512),
            qk_nope_head_dim=get("qk_nope_head_dim", default=128),
            qk_rope_head_dim=get("qk_rope_head_dim", default=64),
            v_head_dim=get("v_head_dim", default=128),
        ),
        norm="rmsnorm",
        qkv_bias=get("attention_bias", default=False),
        out_bias=get("attention_bias", default=False),
        position="rope",
        max_positions=get("max_position_embeddings", default=4096 if v3 else 2048),
    )


def _gpt_oss(get: Getter, family: str) -> dict[str, Any]:
    """gpt-oss (GptOssConfig defaults): biased q/k/v/o and a sink logit per head; every block an MoE of
    `num_local_experts` experts of `intermediate_size`, each with biased gate/up/down (transformers fuses them
    into gate_up_proj [E, h, 2f] + bias and down_proj [E, f, h] + bias, the same numbers), and a biased
    router. Counted in bf16 as fine-tuning loads it (the MXFP4 checkpoint dequantized)."""
    bias = get("attention_bias", default=True)
    return dict(
        layers=get("num_hidden_layers", default=36),
        hidden=get("hidden_size", default=2880),
        heads=get("num_attention_heads", default=64),
        kv_heads=get("num_key_value_heads", default=8),
        head_dim=get("head_dim", default=64),
        ffn=get("intermediate_size", default=2880),
        vocab=get("vocab_size", default=201088),
        tied_embeddings=get("tie_word_embeddings", default=False),
        gated_mlp=True,
        experts=get("num_local_experts", default=128),
        experts_per_token=get("num_experts_per_tok", default=4),
        norm="rmsnorm",
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=True,
        router_bias=True,
        attention_sinks=True,
        position="rope",
        max_positions=get("max_position_embeddings", default=131072),
    )


def _qwen3_moe(get: Getter) -> dict[str, Any]:
    """Qwen3-MoE's sparse block (Qwen3MoeSparseMoeBlock): router and experts, no shared expert; every
    layer sparse as in the released checkpoints (other layouts refused, as for Qwen2-MoE)."""
    if get("decoder_sparse_step", default=1) != 1 or get("mlp_only_layers", default=[]):
        raise InputError(
            f"{get.name}: Qwen3-MoE with dense layers (decoder_sparse_step/mlp_only_layers) is not supported",
            hint="every layer must be sparse; `zerotune memory` also takes --params/--layers/--hidden",
        )
    return {
        "ffn": get("moe_intermediate_size"),
        "experts": get("num_experts"),
        "experts_per_token": get("num_experts_per_tok"),
    }


def _qwen2_moe(get: Getter) -> dict[str, Any]:
    """Qwen2-MoE's sparse block: every layer sparse (decoder_sparse_step 1, no mlp_only_layers), as in
    every released Qwen1.5/Qwen2 MoE checkpoint; other layouts are refused rather than miscounted."""
    if get("decoder_sparse_step", default=1) != 1 or get("mlp_only_layers", default=[]):
        raise InputError(
            f"{get.name}: Qwen2-MoE with dense layers (decoder_sparse_step/mlp_only_layers) is not supported",
            hint="every layer must be sparse; `zerotune memory` also takes --params/--layers/--hidden",
        )
    return {
        "ffn": get("moe_intermediate_size", default=1408),
        "experts": get("num_experts", default=60),
        "experts_per_token": get("num_experts_per_tok", default=4),
        "shared_expert_ffn": get("shared_expert_intermediate_size", default=5632),
    }


def _gpt_neox(get: Getter, family: str) -> dict[str, Any]:
    """GPT-NeoX (Pythia, GPT-NeoX-20B): fused qkv with bias, biased dense and MLP, LayerNorm, rotary
    positions, untied embed_out (GPTNeoXConfig defaults: attention_bias true, untied, 2048 positions)."""
    bias = get("attention_bias", default=True)
    return dict(
        layers=get("num_hidden_layers"),
        hidden=get("hidden_size"),
        heads=get("num_attention_heads"),
        ffn=get("intermediate_size", default=24576),
        vocab=get("vocab_size"),
        tied_embeddings=get("tie_word_embeddings", default=False),
        gated_mlp=False,
        norm="layernorm",
        fused_qkv=True,
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=True,
        position="rope",
        max_positions=get("max_position_embeddings", default=2048),
    )


def _phi(get: Getter, family: str) -> dict[str, Any]:
    """Phi-1/1.5/2 (PhiConfig defaults): one LayerNorm per block feeding the parallel attention and MLP, q/k/v and
    dense with biases, a biased GELU MLP (fc1/fc2), a final LayerNorm and a biased, untied lm_head. qk_layernorm
    (a LayerNorm over each head's q and k, off in the released checkpoints) is refused rather than miscounted."""
    if get("qk_layernorm", default=False):
        raise InputError(
            f"{get.name}: Phi with qk_layernorm is not supported",
            hint="microsoft/phi-1, phi-1_5 and phi-2 set it false; `zerotune memory` also takes --params",
        )
    heads = get("num_attention_heads", default=32)
    return dict(
        layers=get("num_hidden_layers", default=24),
        hidden=get("hidden_size", default=2048),
        heads=heads,
        kv_heads=get("num_key_value_heads", default=heads),
        ffn=get("intermediate_size", default=8192),
        vocab=get("vocab_size", default=51200),
        tied_embeddings=get("tie_word_embeddings", default=False),
        gated_mlp=False,
        norm="layernorm",
        block_norms=1,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        head_bias=True,
        position="rope",
        max_positions=get("max_position_embeddings", default=2048),
    )


def _falcon(get: Getter, family: str) -> dict[str, Any]:
    """Falcon: fused qkv; 40B's new_decoder_architecture has kv groups and two parallel LayerNorms."""
    hidden, heads = get("hidden_size", "n_embed"), get("num_attention_heads", "n_head")
    new_arch = get("new_decoder_architecture", default=False)
    if new_arch:
        kv_heads = get("num_kv_heads", default=heads)
    else:
        kv_heads = 1 if get("multi_query", default=True) else heads
    n_ln = get("num_ln_in_parallel_attn", default=2 if new_arch else None)
    bias = get("bias", default=False)
    return dict(
        layers=get("num_hidden_layers", "n_layer"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn=get("ffn_hidden_size", default=4 * hidden),
        vocab=get("vocab_size"),
        tied_embeddings=get("tie_word_embeddings", default=True),
        gated_mlp=False,
        norm="layernorm",
        block_norms=2 if not get("parallel_attn", default=True) or n_ln == 2 else 1,
        fused_qkv=True,
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        position="alibi" if get("alibi", default=False) else "rope",
        max_positions=get("max_position_embeddings", default=2048),
    )


def _gpt2(get: Getter, family: str) -> dict[str, Any]:
    """GPT-2: learned positions, Conv1D layers with biases, LayerNorm, tied head."""
    hidden = get("n_embd", "hidden_size")
    return dict(
        layers=get("n_layer", "num_hidden_layers"),
        hidden=hidden,
        heads=get("n_head", "num_attention_heads"),
        ffn=get("n_inner", default=4 * hidden),
        vocab=get("vocab_size"),
        tied_embeddings=get("tie_word_embeddings", default=True),
        gated_mlp=False,
        norm="layernorm",
        fused_qkv=True,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        position="learned",
        max_positions=get("n_positions", "max_position_embeddings", default=1024),
    )


def _gptj(get: Getter, family: str) -> dict[str, Any]:
    """GPT-J (GPTJConfig defaults; modeling_gptj.py): one LayerNorm (ln_1) per block feeding the parallel attention
    and MLP, q/k/v/out_proj without biases, fc_in/fc_out with them (n_inner, else 4h), a final LayerNorm and an
    untied, biased lm_head. Rotary positions on the first rotary_dim of each head: no parameters."""
    hidden = get("n_embd", "hidden_size", default=4096)
    return dict(
        layers=get("n_layer", "num_hidden_layers", default=28),
        hidden=hidden,
        heads=get("n_head", "num_attention_heads", default=16),
        ffn=get("n_inner", default=4 * hidden),
        vocab=get("vocab_size", default=50400),
        tied_embeddings=get("tie_word_embeddings", default=False),
        gated_mlp=False,
        norm="layernorm",
        block_norms=1,
        mlp_bias=True,
        head_bias=True,
        position="rope",
        max_positions=get("n_positions", "max_position_embeddings", default=2048),
    )


def _starcoder2(get: Getter, family: str) -> dict[str, Any]:
    """StarCoder2 (Starcoder2Config defaults; modeling_starcoder2.py): Llama's layout with LayerNorms (weight and
    bias), q/k/v/o and a plain MLP (c_fc, c_proj) all biased when use_bias, GQA, rotary positions, tied head."""
    heads = get("num_attention_heads", default=24)
    bias = get("use_bias", default=True)
    return dict(
        layers=get("num_hidden_layers", default=30),
        hidden=get("hidden_size", default=3072),
        heads=heads,
        kv_heads=get("num_key_value_heads", default=2),
        ffn=get("intermediate_size", default=12288),
        vocab=get("vocab_size", default=49152),
        tied_embeddings=get("tie_word_embeddings", default=True),
        gated_mlp=False,
        norm="layernorm",
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        position="rope",
        max_positions=get("max_position_embeddings", default=4096),
    )


def _opt(get: Getter, family: str) -> dict[str, Any]:
    """OPT (OPTConfig defaults; modeling_opt.py): a learned position table of max_position_embeddings + 2 rows
    (OPTLearnedPositionalEmbedding's offset), per block a LayerNorm before (or, do_layer_norm_before false, after)
    attention and MLP, q/k/v/out_proj and a ReLU MLP fc1/fc2 biased when enable_bias; a final LayerNorm only when
    do_layer_norm_before; a head tied to the token embedding. When word_embed_proj_dim differs from hidden
    (opt-350m: 512) the embedding is [V, word_embed_proj_dim], with project_in and project_out between it and the
    blocks. Non-affine LayerNorms (layer_norm_elementwise_affine false, no released checkpoint) are refused."""
    if not get("layer_norm_elementwise_affine", default=True):
        raise InputError(
            f"{get.name}: OPT without affine LayerNorms (layer_norm_elementwise_affine false) is not supported",
            hint="the released facebook/opt-* checkpoints keep them; `zerotune memory` also takes --params",
        )
    hidden = get("hidden_size", default=768)
    proj = get("word_embed_proj_dim", default=hidden)
    pre_norm = get("do_layer_norm_before", default=True)
    bias = get("enable_bias", default=True)
    return dict(
        layers=get("num_hidden_layers", default=12),
        hidden=hidden,
        heads=get("num_attention_heads", default=12),
        ffn=get("ffn_dim", default=3072),
        vocab=get("vocab_size", default=50272),
        tied_embeddings=get("tie_word_embeddings", default=True),
        gated_mlp=False,
        norm="layernorm",
        embed_proj_dim=None if proj == hidden else proj,
        final_norm=pre_norm and not get("_remove_final_layer_norm", default=False),
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        position="learned",
        max_positions=get("max_position_embeddings", default=2048),
        position_offset=2,
    )


def _mpt(get: Getter, family: str) -> dict[str, Any]:
    """MPT (MptConfig defaults; modeling_mpt.py): wte, per block norm_1, a fused Wqkv [3h, h] and out_proj, norm_2,
    up_proj [4h, h] and down_proj, all without biases (MptBlock drops the LayerNorms' biases too), norm_f, ALiBi
    positions, head tied to wte. transformers' MptMLP is 4 x hidden and its attention multi-head whatever the config
    says, so configs its modules cannot load (expansion_ratio != 4, multi-query or grouped kv heads, q/k LayerNorms,
    biases, no ALiBi) are refused rather than miscounted."""
    attn = get("attn_config", default={}) or {}
    heads = get("n_heads", "num_attention_heads", default=16)
    unsupported = (
        get("expansion_ratio", default=4) != 4
        or not get("no_bias", default=True)
        or attn.get("attn_type", "multihead_attention") != "multihead_attention"
        or attn.get("kv_n_heads", heads) != heads
        or attn.get("qk_ln", False)
        or not attn.get("alibi", True)
    )
    if unsupported:
        raise InputError(
            f"{get.name}: this MPT variant (expansion_ratio != 4, biases, multi-query/grouped kv heads, qk_ln or no "
            "ALiBi) is not what transformers' MptForCausalLM builds",
            hint="mosaicml/mpt-7b and mpt-30b are supported; `zerotune memory` also takes --params",
        )
    hidden = get("d_model", "hidden_size", default=2048)
    return dict(
        layers=get("n_layers", "num_hidden_layers", default=24),
        hidden=hidden,
        heads=heads,
        ffn=4 * hidden,
        vocab=get("vocab_size", default=50368),
        tied_embeddings=get("tie_word_embeddings", default=True),
        gated_mlp=False,
        norm="layernorm",
        norm_bias=False,
        fused_qkv=True,
        position="alibi",
        max_positions=get("max_seq_len", default=2048),
    )


def _bloom(get: Getter, family: str) -> dict[str, Any]:
    """BLOOM: ALiBi, LayerNorm after the word embedding, fused qkv, biases, MLP 4h."""
    hidden = get("hidden_size", "n_embed")
    return dict(
        layers=get("n_layer", "num_hidden_layers"),
        hidden=hidden,
        heads=get("n_head", "num_attention_heads"),
        ffn=4 * hidden,
        vocab=get("vocab_size"),
        tied_embeddings=get("tie_word_embeddings", default=True),
        gated_mlp=False,
        norm="layernorm",
        embedding_norm=True,
        fused_qkv=True,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        position="alibi",
        max_positions=get("seq_length", default=None),
    )


def t5_fields(get: Getter) -> dict[str, Any]:
    """T5: encoder-decoder, relative position buckets, no biases; v1.1 has a gated MLP."""
    hidden, heads, d_kv = get("d_model"), get("num_heads"), get("d_kv", default=64)
    layers = get("num_layers")
    return dict(
        layers=layers,
        decoder_layers=get("num_decoder_layers", default=layers),
        hidden=hidden,
        heads=heads,
        head_dim=None if d_kv * heads == hidden else d_kv,
        ffn=get("d_ff"),
        vocab=get("vocab_size"),
        tied_embeddings=get("tie_word_embeddings", default=True),
        gated_mlp=str(get("feed_forward_proj", default="relu")).startswith("gated-"),
        norm="rmsnorm",
        position="relative",
        max_positions=get("n_positions", default=None),
        relative_attention_buckets=get("relative_attention_num_buckets", default=32),
    )


DROPOUT_FIELDS: dict[str, tuple[str, float, str, float]] = {
    "opt": ("dropout", 0.1, "attention_dropout", 0.0),
    "gpt2": ("resid_pdrop", 0.1, "attn_pdrop", 0.1),
    "gptj": ("resid_pdrop", 0.0, "attn_pdrop", 0.0),
    "phi": ("resid_pdrop", 0.0, "attention_dropout", 0.0),
    "bloom": ("hidden_dropout", 0.0, "attention_dropout", 0.0),
    "falcon": ("hidden_dropout", 0.0, "attention_dropout", 0.0),
    "gpt_neox": ("hidden_dropout", 0.0, "attention_dropout", 0.0),
    "starcoder2": ("residual_dropout", 0.0, "attention_dropout", 0.0),
    "t5": ("dropout_rate", 0.1, "dropout_rate", 0.1),
}
"""Per family, the config fields of its block's output dropout and its attention-probability dropout, with the
configuration class's defaults (configuration_<family>.py, v5.24: OPTConfig dropout 0.1, GPT2Config resid_pdrop and
attn_pdrop 0.1, T5Config dropout_rate 0.1, the others 0.0). Families not listed (Llama's and the MoE families) have
no output dropout and an `attention_dropout` of 0.0 by default; MPT's sit in attn_config and default to 0."""
ACTIVATION_FIELDS = ("hidden_act", "activation_function", "hidden_activation", "activation")
"""The names configs give the MLP's activation (Llama's hidden_act, GPT-2/OPT's activation_function, Gemma 2's
hidden_activation, Falcon's activation); absent, the family's default (architectures.FAMILY_ACTIVATION)."""


def training_fields(get: Getter, family: str) -> dict[str, Any]:
    """The activation and dropout probabilities a config gives (what autograd keeps in training depends on them)."""
    out_key, out_default, attn_key, attn_default = DROPOUT_FIELDS.get(family, ("", 0.0, "attention_dropout", 0.0))
    if family == "t5":
        proj = str(get("feed_forward_proj", default="relu"))
        activation = "gelu_new" if proj == "gated-gelu" else proj.removeprefix("gated-")  # T5Config.__init__
    else:
        activation = get(*ACTIVATION_FIELDS, default=None)
    return dict(
        activation=activation,
        dropout=float(get(out_key, default=out_default)) if out_key else 0.0,
        attention_dropout=float(get(attn_key, default=attn_default)),
    )


PARSERS = {family: _llama_like for family in LLAMA_LIKE} | {
    "gemma3": _gemma3,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gpt_oss": _gpt_oss,
    "falcon": _falcon,
    "phi": _phi,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "gptj": _gptj,
    "starcoder2": _starcoder2,
    "opt": _opt,
    "mpt": _mpt,
    "bloom": _bloom,
}
