"""An unsupported or remote-code config.json gets one line naming the closest supported model_type and
how to map it (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerotune.catalog.hf_config import closest_family, parse_hf_config
from zerotune.errors import InputError


@pytest.mark.parametrize(
    ("config", "closest"),
    [
        # Kimi K2 ships DeepSeek-V3's blocks under its own model_type and remote code
        ({"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"],
          "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}}, "deepseek_v3"),
        ({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]}, "qwen3_moe"),
        ({"model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"],
          "auto_map": {"AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"}}, "llama"),
        ({"model_type": "minimax", "num_local_experts": 32}, "mixtral"),
        ({"model_type": "olmo3", "architectures": ["Olmo3ForCausalLM"]}, "olmo2"),  # same tensors as OLMo 2
    ],
)  # fmt: skip
def test_closest_supported_family(config, closest):
    assert closest_family(config) == closest
    with pytest.raises(InputError) as err:
        parse_hf_config(config, "config.json")
    message = err.value.message
    assert f"closest supported: {closest}" in message
    assert f'"model_type": "{closest}"' in message and "--params" in message  # how to map it, same line
    assert "\n" not in message and err.value.hint is None
    assert ("remote code" in message) == ("auto_map" in config)


def test_remote_code_config_is_one_line_and_exit_2(cli, tmp_path):
    remote = {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}
    config = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "auto_map": remote}
    (tmp_path / "config.json").write_text(json.dumps(config))
    res = cli("memory", "--model", tmp_path, "--gpus", "8")
    assert res.code == 2
    assert res.stderr.strip().count("\n") == 0, res.stderr
    assert "remote code" in res.stderr and '"model_type": "deepseek_v3"' in res.stderr


CHATGLM3 = {  # THUDM/chatglm3-6b config.json (https://huggingface.co/THUDM/chatglm3-6b/blob/main/config.json)
    "model_type": "chatglm", "architectures": ["ChatGLMModel"],
    "auto_map": {"AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration"},
    "num_layers": 28, "hidden_size": 4096, "ffn_hidden_size": 13696, "kv_channels": 128, "num_attention_heads": 32,
    "multi_query_group_num": 2, "padded_vocab_size": 65024, "add_qkv_bias": True, "add_bias_linear": False,
}  # fmt: skip


def test_a_remote_code_config_the_catalog_describes_names_the_entry(cli, tmp_path):
    """ChatGLM's fields are not Llama's (num_layers, padded_vocab_size): renaming model_type would not map it, the
    catalog entry does; a config of the same class but another shape gets the generic line."""
    (tmp_path / "config.json").write_text(json.dumps(CHATGLM3))
    res = cli("memory", "--model", tmp_path, "--gpus", "8")
    assert res.code == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "remote code" in res.stderr and "--model chatglm3-6b" in res.stderr
    (tmp_path / "config.json").write_text(json.dumps(CHATGLM3 | {"padded_vocab_size": 151552}))
    res = cli("memory", "--model", tmp_path, "--gpus", "8")
    assert "chatglm3-6b" not in res.stderr and "closest supported" in res.stderr


INTERNLM2_7B = {  # internlm/internlm2-7b config.json's shape fields (remote code: modeling_internlm2.py)
    "model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"],
    "auto_map": {"AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"},
    "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "intermediate_size": 14336, "vocab_size": 92544, "bias": False,
}  # fmt: skip


def test_an_internlm2_config_names_its_catalog_entry(cli, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(INTERNLM2_7B))
    res = cli("memory", "--model", tmp_path, "--gpus", "8")
    assert res.code == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "remote code" in res.stderr and "--model internlm2-7b" in res.stderr


def test_a_known_model_type_with_remote_code_is_parsed():
    """DeepSeek-V2-Lite's config.json has auto_map (its own modeling code) but transformers' deepseek_v2
    builds the same tensors: a known model_type wins over auto_map."""
    from zerotune.catalog.models import load_model

    path = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs" / "deepseek-v2-lite-chat.json"
    assert "auto_map" in json.loads(path.read_text())
    assert load_model(str(path)).params == load_model("deepseek-v2-lite").params


# Qwen3 config.json values (https://huggingface.co/Qwen/Qwen3-8B, Qwen3-0.6B, Qwen3-30B-A3B: config.json) and
# the counts their model cards publish ("Number of Parameters" / "Non-Embedding" / "Activated").
QWEN3 = dict(model_type="qwen3", num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936)


@pytest.mark.parametrize(
    ("config", "total", "non_embedding", "active"),
    [
        (QWEN3 | dict(hidden_size=4096, num_hidden_layers=36, intermediate_size=12288, tie_word_embeddings=False),
         8.2e9, 6.95e9, None),
        (QWEN3 | dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, intermediate_size=3072,
                      tie_word_embeddings=True), 0.6e9, 0.44e9, None),
        (QWEN3 | dict(model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48, num_key_value_heads=4,
                      intermediate_size=6144, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                      tie_word_embeddings=False), 30.5e9, 29.9e9, 3.3e9),
    ],
)  # fmt: skip
def test_qwen3_counts_match_the_model_cards(config, total, non_embedding, active):
    from zerotune.catalog.architectures import build_model

    model = build_model(parse_hf_config(config, "config.json"))
    embeddings = config["vocab_size"] * config["hidden_size"] * (1 if config["tie_word_embeddings"] else 2)
    digits = 0.05e9 if total < 1e9 else 0.05e9 * 2  # the cards round to 0.01B / 0.1B
    assert abs(model.params - total) <= digits
    assert abs(model.params - embeddings - non_embedding) <= 0.01e9
    if active:
        assert abs(model.active_params - active) <= 0.06e9  # the card's "3.3B": 3.35B at one decimal
