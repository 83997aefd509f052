"""Hugging Face config.json <-> Architecture, without transformers.

`parse_hf_config` reads the fields that decide parameter shapes, applying the defaults that
transformers' configuration classes apply when a field is absent
(transformers/models/<family>/configuration_<family>.py, v5.23). `to_hf_config` goes the other way;
it is what scripts/evidence/record_hf_counts.py and the live test hand to transformers, so the catalog is
checked against transformers' own modules. The tests check that the two are inverses for every
catalog entry.

One deliberate difference: transformers 5 always ties T5's lm_head to the shared embedding, even for
T5 v1.1 configs saying `tie_word_embeddings: false`; the v1.1 checkpoints do store a separate
lm_head, so we honour the config's value (transformers 4 did the same).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from zerotune.catalog.architectures import FAMILIES, Architecture
from zerotune.catalog.hf_families import (
    DEEPSEEK,
    DROPOUT_FIELDS,
    GEMMA3_TEXT_DEFAULTS,
    LLAMA_LIKE,
    PARSERS,
    Getter,
    t5_fields,
    training_fields,
)
from zerotune.errors import InputError

# `model_type` values handled by each family's parser ("RefinedWeb*" are Falcon's pre-transformers names).
_MODEL_TYPES = {family: family for family in FAMILIES} | {"RefinedWeb": "falcon", "RefinedWebModel": "falcon"}


def closest_family(config: dict[str, Any]) -> str:
    """The supported model_type nearest to an unknown config: by its model_type and class names' spelling
    (difflib), else by shape (`num_local_experts`/`num_experts` -> an MoE family; gated MLP fields -> llama)."""
    import difflib

    names = [str(config.get("model_type") or "")] + [str(a) for a in config.get("architectures") or []]
    for name in names:
        stem = name.lower().removesuffix("forcausallm").removesuffix("lmheadmodel")
        match = difflib.get_close_matches(stem, FAMILIES, n=1, cutoff=0.6)
        if match:
            return match[0]
    if config.get("num_local_experts") or config.get("num_experts") or config.get("n_routed_experts"):
        return "mixtral"
    return "llama"


def _mapping_hint(config: dict[str, Any]) -> str:
    closest = closest_family(config)
    return (
        f"if its layers are {closest}'s (the same tensors), pass a copy of config.json with "
        f"\"model_type\": \"{closest}\" to --model, else give --params/--layers/--hidden"
    )


def parse_hf_config(config: dict[str, Any], name: str, **meta: Any) -> Architecture:
    """Architecture of a config.json dict. `meta` adds hf_class/source/aliases.

    Raises InputError for an unsupported `model_type` (naming the supported ones) or a missing field.
    """
    model_type = config.get("model_type")
    family = _MODEL_TYPES.get(str(model_type))
    if family is None:
        raise InputError(  # one line, no hint: what is unknown, the nearest family, how to map to it
            f"{name}: unsupported architecture (model_type {model_type!r}"
            + (", remote code" if config.get("auto_map") else "")
            + f"); closest supported: {closest_family(config)}; {_mapping_hint(config)}"
        )
    get = Getter(config, name, GEMMA3_TEXT_DEFAULTS if family == "gemma3_text" else {})
    fields = t5_fields(get) if family == "t5" else PARSERS[family](get, family)
    text = Getter(get("text_config", default={}), name, GEMMA3_TEXT_DEFAULTS) if family == "gemma3" else get
    fields |= training_fields(text, "gemma3_text" if family == "gemma3" else family)
    hf_class = meta.pop("hf_class", None) or (config.get("architectures") or [_DEFAULT_CLASS[family]])[0]
    try:
        return Architecture(name=name, family=family, hf_class=hf_class, **fields, **meta)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"{name}: inconsistent config: {first['msg']}") from None


_DEFAULT_CLASS = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "gptj": "GPTJForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM",
    "opt": "OPTForCausalLM",
    "mpt": "MptForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "phi": "PhiForCausalLM",
    "falcon": "FalconForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "bloom": "BloomForCausalLM",
    "t5": "T5ForConditionalGeneration",
}


def to_hf_config(arch: Architecture) -> dict[str, Any]:
    """The config.json fields (with model_type) from which transformers builds this architecture, with its
    activation and dropout under the family's names (hf_families.DROPOUT_FIELDS)."""
    cfg = _shape_config(arch)
    text = cfg["text_config"] if arch.family == "gemma3" else cfg
    out_key, _, attn_key, _ = DROPOUT_FIELDS.get(arch.family, ("", 0.0, "attention_dropout", 0.0))
    if arch.activation and arch.family not in ("t5", "mpt"):
        key = {"gpt2": "activation_function", "gptj": "activation_function", "opt": "activation_function"}
        text[key.get(arch.family, "activation" if arch.family == "falcon" else "hidden_act")] = arch.activation
    if arch.family != "mpt":
        text[attn_key] = arch.attention_dropout
        if out_key:
            text[out_key] = arch.dropout
    return cfg


def _shape_config(arch: Architecture) -> dict[str, Any]:
    common = {
        "model_type": arch.family,
        "vocab_size": arch.vocab,
        "tie_word_embeddings": arch.tied_embeddings,
    }
    if arch.family == "gemma3":
        text = _shape_config(arch.model_copy(update={"family": "gemma3_text", "vision": None}))
        v = arch.vision
        assert v is not None  # a gemma3 architecture is parsed or profiled with its vision tower
        vision = {
            "model_type": "siglip_vision_model",
            "hidden_size": v.hidden,
            "intermediate_size": v.ffn,
            "num_hidden_layers": v.layers,
            "num_attention_heads": 16 if v.hidden % 16 == 0 else 1,  # no parameter depends on it
            "image_size": v.image_size,
            "patch_size": v.patch_size,
            "num_channels": v.channels,
            "vision_use_head": False,
        }
        return {"model_type": "gemma3", "tie_word_embeddings": arch.tied_embeddings, "text_config": text} | {
            "vision_config": vision
        }
    if arch.family in DEEPSEEK:
        m = arch.mla
        assert m is not None  # a DeepSeek architecture is parsed or profiled with its MLA
        return common | {
            "hidden_size": arch.hidden,
            "num_hidden_layers": arch.layers,
            "num_attention_heads": arch.heads,
            "num_key_value_heads": arch.heads,
            "intermediate_size": arch.dense_ffn or arch.ffn,
            "moe_intermediate_size": arch.ffn,
            "n_routed_experts": arch.experts,
            "n_shared_experts": (arch.shared_expert_ffn or 0) // arch.ffn,
            "num_experts_per_tok": arch.experts_per_token,
            "first_k_dense_replace": arch.dense_layers,
            "n_group": 1,  # expert groups and top-k groups route tokens; no parameter depends on them
            "topk_group": 1,
            "q_lora_rank": m.q_lora_rank,
            "kv_lora_rank": m.kv_lora_rank,
            "qk_nope_head_dim": m.qk_nope_head_dim,
            "qk_rope_head_dim": m.qk_rope_head_dim,
            "v_head_dim": m.v_head_dim,
            "attention_bias": arch.qkv_bias,
            "max_position_embeddings": arch.max_positions or 4096,
        }
    if arch.family == "gpt_oss":
        return common | _decoder_dims(arch) | {
            "num_local_experts": arch.experts,
            "num_experts_per_tok": arch.experts_per_token,
            "attention_bias": arch.qkv_bias,
            "max_position_embeddings": arch.max_positions or 131072,
        }
    if arch.family in LLAMA_LIKE:
        cfg = common | _decoder_dims(arch)
        if arch.max_positions:
            cfg["max_position_embeddings"] = arch.max_positions
        if arch.family == "llama":
            cfg |= {"attention_bias": arch.qkv_bias, "mlp_bias": arch.mlp_bias}
        if arch.family in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2"):
            cfg |= {"attention_bias": arch.qkv_bias}
        if arch.family == "qwen3_moe":
            cfg |= {
                "num_experts": arch.experts,
                "num_experts_per_tok": arch.experts_per_token,
                "moe_intermediate_size": arch.ffn,
            }
        if arch.family == "mixtral":
            cfg |= {"num_local_experts": arch.experts, "num_experts_per_tok": arch.experts_per_token}
        if arch.family == "qwen2_moe":
            cfg |= {
                "num_experts": arch.experts,
                "num_experts_per_tok": arch.experts_per_token,
                "moe_intermediate_size": arch.ffn,
                "shared_expert_intermediate_size": arch.shared_expert_ffn,
            }
        return cfg
    if arch.family == "falcon":
        grouped = arch.n_kv_heads not in (1, arch.heads) or arch.block_norms == 2
        return common | {
            "hidden_size": arch.hidden,
            "num_hidden_layers": arch.layers,
            "num_attention_heads": arch.heads,
            "num_kv_heads": arch.n_kv_heads,
            "new_decoder_architecture": grouped,
            "multi_query": arch.n_kv_heads == 1,
            "parallel_attn": True,
            "num_ln_in_parallel_attn": arch.block_norms,
            "bias": arch.qkv_bias,
            "alibi": arch.position == "alibi",
            "ffn_hidden_size": arch.ffn,
            "max_position_embeddings": arch.max_positions or 2048,
        }
    if arch.family == "phi":
        return common | _decoder_dims(arch) | {"max_position_embeddings": arch.max_positions or 2048}
    if arch.family == "gpt2":
        return common | {
            "n_embd": arch.hidden,
            "n_layer": arch.layers,
            "n_head": arch.heads,
            "n_inner": arch.ffn,
            "n_positions": arch.max_positions,
        }
    if arch.family == "gpt_neox":
        return common | {
            "hidden_size": arch.hidden,
            "num_hidden_layers": arch.layers,
            "num_attention_heads": arch.heads,
            "intermediate_size": arch.ffn,
            "attention_bias": arch.qkv_bias,
            "max_position_embeddings": arch.max_positions or 2048,
        }
    if arch.family == "gptj":
        return common | {
            "n_embd": arch.hidden,
            "n_layer": arch.layers,
            "n_head": arch.heads,
            "n_inner": arch.ffn,
            "rotary_dim": arch.d_head // 4,  # 64 of 256 in gpt-j-6b; no parameter depends on it
            "n_positions": arch.max_positions or 2048,
        }
    if arch.family == "starcoder2":
        return common | _decoder_dims(arch) | {
            "use_bias": arch.qkv_bias,
            "max_position_embeddings": arch.max_positions or 4096,
        }
    if arch.family == "opt":
        return common | {
            "hidden_size": arch.hidden,
            "num_hidden_layers": arch.layers,
            "num_attention_heads": arch.heads,
            "ffn_dim": arch.ffn,
            "word_embed_proj_dim": arch.embed_proj_dim or arch.hidden,
            "do_layer_norm_before": arch.final_norm,
            "enable_bias": arch.qkv_bias,
            "max_position_embeddings": arch.max_positions,
        }
    if arch.family == "mpt":
        return common | {
            "d_model": arch.hidden,
            "n_layers": arch.layers,
            "n_heads": arch.heads,
            "max_seq_len": arch.max_positions or 2048,
        }
    if arch.family == "bloom":
        cfg = common | {"hidden_size": arch.hidden, "n_layer": arch.layers, "n_head": arch.heads}
        return cfg | ({"seq_length": arch.max_positions} if arch.max_positions else {})
    return common | {
        "d_model": arch.hidden,
        "num_layers": arch.layers,
        "num_decoder_layers": arch.decoder_layers,
        "num_heads": arch.heads,
        "d_kv": arch.d_head,
        "d_ff": arch.ffn,
        "feed_forward_proj": "gated-gelu" if arch.gated_mlp else "relu",
        "relative_attention_num_buckets": arch.relative_attention_buckets,
        "n_positions": arch.max_positions,
    }


def _decoder_dims(arch: Architecture) -> dict[str, int | None]:
    """The dimension fields Llama-style configs (and gpt-oss's) share under the same names."""
    return {
        "hidden_size": arch.hidden,
        "num_hidden_layers": arch.layers,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.n_kv_heads,
        "head_dim": arch.d_head,
        "intermediate_size": arch.ffn,
    }
