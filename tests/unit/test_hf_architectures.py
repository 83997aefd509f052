"""Gemma 2, GPT-NeoX, Qwen2-MoE and Phi-3 config.json files (issue 11 item 13): exact parameter counts.

transformers is not installed here, so each count was derived by hand from the modeling file's module
shapes (catalog/architectures.py docstring) and is checked against the count the checkpoint itself
publishes (safetensors metadata on the Hugging Face model page, or the model's paper):

- google/gemma-2-9b: 9,241,705,984 (safetensors metadata); its non-embedding part 8,324,201,984 is the
  Gemma 2 report's Table 1 figure (arXiv 2408.00118; the report's embedding count uses a 256,128 vocab).
- EleutherAI/pythia-160m: 162,322,944 total, 85,056,000 non-embedding (Pythia model card table).
- EleutherAI/gpt-neox-20b: 20,554,567,680 (model card; Black et al. 2022, arXiv 2204.06745).
- Qwen/Qwen1.5-MoE-A2.7B: 14,315,784,192 (safetensors metadata), 2,689,173,504 active per token
  ("A2.7B": all but 56 of 60 routed experts in each of 24 layers).
- microsoft/Phi-3-medium-4k-instruct: 13,960,238,080 (model size reported for the checkpoint).
- microsoft/phi-2: 2,779,683,840 (safetensors metadata, "2.78B params" on the model page; the model card's
  "2.7 billion parameters").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zerotune.catalog.hf_config import parse_hf_config, to_hf_config
from zerotune.catalog.models import load_model
from zerotune.errors import InputError

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"

COUNTS = {
    "gemma-2-9b.json": 9_241_705_984,
    "pythia-160m.json": 162_322_944,
    "gpt-neox-20b.json": 20_554_567_680,
    "qwen1.5-moe-a2.7b.json": 14_315_784_192,
    "phi-3-medium.json": 13_960_238_080,
    "phi-2.json": 2_779_683_840,
}


@pytest.mark.parametrize(("name", "params"), sorted(COUNTS.items()))
def test_parameter_counts_match_the_published_checkpoints(name, params):
    assert load_model(str(HF / name)).params == params


def test_non_embedding_and_active_counts():
    pythia = load_model(str(HF / "pythia-160m.json"))
    assert pythia.params - 2 * 50304 * 768 == 85_056_000
    gemma = load_model(str(HF / "gemma-2-9b.json"))
    assert gemma.params - 256_000 * 3584 == 8_324_201_984
    assert all(len(block.tensors) == 4 + 4 + 3 for block in gemma.blocks)  # 4 norms, q k v o, gate up down
    qwen = load_model(str(HF / "qwen1.5-moe-a2.7b.json"))
    assert qwen.active_params == 2_689_173_504


def test_phi_2_one_norm_per_block_and_a_biased_head():
    phi = load_model(str(HF / "phi-2.json"))
    h, f = 2560, 10240
    ln, linear = (h, h), (h * h, h)
    assert phi.blocks[0].tensors == ln + 4 * linear + (h * f, f, f * h, h)  # LN, q k v dense, fc1 fc2
    assert phi.layers[-1].name == "lm_head" and phi.layers[-1].tensors == (51200 * h, 51200)
    with pytest.raises(InputError, match="qk_layernorm"):
        parse_hf_config({"model_type": "phi", "qk_layernorm": True}, name="x")


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_config_round_trips(name):
    import json

    arch = parse_hf_config(json.loads((HF / name).read_text()), name=name)
    assert parse_hf_config(to_hf_config(arch), name=name).model_dump(exclude={"hf_class"}) == arch.model_dump(
        exclude={"hf_class"}
    )


def test_unsupported_moe_layouts_and_types_say_what_is_supported():
    with pytest.raises(InputError, match="dense layers"):
        parse_hf_config({"model_type": "qwen2_moe", "mlp_only_layers": [0], "hidden_size": 8}, name="x")
    with pytest.raises(InputError, match="moe_layer_freq"):
        parse_hf_config({"model_type": "deepseek_v2", "moe_layer_freq": 2}, name="x")
    with pytest.raises(InputError, match="vision_use_head"):
        parse_hf_config({"model_type": "gemma3", "vision_config": {"vision_use_head": True}}, name="x")
    with pytest.raises(InputError, match="closest supported: llama"):
        parse_hf_config({"model_type": "mamba"}, name="x")


@pytest.mark.parametrize(
    ("ref", "base"),
    [
        ("meta-llama/Llama-2-7b-chat-hf", "llama-7b"),
        ("meta-llama/Llama-2-13b-chat-hf", "llama-13b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama3-8b"),
        ("mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b"),
        ("google/gemma-7b-it", "gemma-7b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ],
)
def test_hf_ids_with_chat_and_instruct_suffixes_resolve_to_the_base(ref, base):
    assert load_model(ref).params == load_model(base).params
    assert load_model(ref).name == base
