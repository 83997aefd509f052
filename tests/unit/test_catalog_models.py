"""The model catalog: computed counts equal Hugging Face's, per-layer facts, parsing, errors, proxies.

Counts are checked against tests/golden/hf_param_counts.json (recorded from transformers on the meta
device by scripts/evidence/record_hf_counts.py) and, when transformers is installed, against transformers live.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotune.catalog.architectures import build_model
from zerotune.catalog.hf_config import parse_hf_config, to_hf_config
from zerotune.catalog.models import (
    adhoc_model,
    catalog_dir,
    default_seq_len,
    derive,
    list_models,
    load_architecture,
    load_model,
    model_from_hf_config,
    position_warning,
)
from zerotune.errors import InputError

REPO = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((REPO / "tests" / "golden" / "hf_param_counts.json").read_text())
FIXTURES = REPO / "tests" / "fixtures" / "hf_configs"

REQUIRED = {
    "llama-7b", "llama-13b", "llama-70b", "llama3-8b", "llama3-70b", "llama3.1-405b", "mistral-7b",
    "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b", "gemma-7b", "phi-3-mini", "falcon-40b", "gpt2",
    "gpt2-xl", "bloom-176b", "t5-3b",
}  # fmt: skip


def test_catalog_holds_the_required_models_and_each_is_recorded() -> None:
    names = set(list_models())
    assert REQUIRED <= names
    assert names == set(GOLDEN["catalog"]), "re-run scripts/evidence/record_hf_counts.py after adding a profile"
    assert catalog_dir().resolve() == REPO / "profiles" / "models"


HF_CLASS = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM", "gemma": "GemmaForCausalLM", "phi3": "Phi3ForCausalLM",
    "falcon": "FalconForCausalLM", "gpt2": "GPT2LMHeadModel", "bloom": "BloomForCausalLM",
    "t5": "T5ForConditionalGeneration",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_profile_cites_its_config_and_class(name: str) -> None:
    arch = load_architecture(name)
    assert arch.source.startswith("https://huggingface.co/") and arch.source.endswith("/config.json")
    assert arch.hf_class == HF_CLASS[arch.family]


@pytest.mark.parametrize("name", sorted(GOLDEN["catalog"]))
def test_computed_count_equals_hugging_face(name: str) -> None:
    assert load_model(name).params == GOLDEN["catalog"][name]


@pytest.mark.parametrize("fixture", sorted(GOLDEN["fixtures"]))
def test_config_json_count_equals_hugging_face(fixture: str) -> None:
    model = load_model(str(FIXTURES / fixture))
    assert model.params == GOLDEN["fixtures"][fixture]
    assert model.name == fixture.removesuffix(".json")


def test_published_counts() -> None:
    """Numbers stated outside transformers: the brief's anchors, Mistral AI's and DeepSpeed's docs."""
    assert load_model("llama-7b").params == 6_738_415_616
    assert load_model("gpt2").params == 124_439_808
    # Mixtral 8x7B: "46.7B total parameters but only uses 12.9B parameters per token" (mistral.ai, 2023-12-11)
    mixtral = load_model("mixtral-8x7b")
    assert round(mixtral.params / 1e9, 1) == 46.7 and round(mixtral.active_params / 1e9, 1) == 12.9
    # DeepSpeed's memory-estimator docs: t5-3b has 2851M params and a 32M "largest layer", which
    # DeepSpeed measures per leaf module (stage3.py model_to_params): here the shared embedding.
    t5 = load_model("t5-3b")
    assert t5.params // 10**6 == 2851 and t5.largest_tensor // 10**6 == 32


def test_llama_7b_layer_facts() -> None:
    m = load_model("llama-7b")
    assert m.largest_tensor == 32000 * 4096
    assert m.block_params == 202_383_360 == 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert m.largest_layer == m.block_params
    assert len(m.blocks) == 32 and [layer.kind for layer in m.layers[:2]] == ["embedding", "block"]
    assert [layer.name for layer in m.layers[-2:]] == ["norm", "lm_head"]
    assert m.active_params == m.params


def test_gqa_shrinks_key_and_value() -> None:
    m = load_model("llama-70b")
    q, k, v = m.blocks[0].tensors[1:4]
    assert (q, k, v) == (8192 * 8192, 8192 * 8 * 128, 8192 * 8 * 128)


def test_qwen2_has_qkv_biases_only() -> None:
    m = load_model("qwen2.5-7b")
    d = 128  # 3584 / 28
    assert m.blocks[0].tensors[1:8] == (
        3584 * 28 * d,
        28 * d,
        3584 * 4 * d,
        4 * d,
        3584 * 4 * d,
        4 * d,
        3584 * 3584,
    )


def test_gemma_head_dim_and_tied_vocab() -> None:
    m = load_model("gemma-7b")
    assert m.head_dim == 256 and m.tied_embeddings and m.layers[-1].kind == "norm"
    assert m.blocks[0].tensors[1] == 3072 * 16 * 256
    assert m.largest_tensor == 256000 * 3072


def test_phi3_fuses_qkv_and_gate_up() -> None:
    m = load_model("phi-3-mini")
    assert m.blocks[0].tensors == (3072, 3072 * 3 * 3072, 3072 * 3072, 3072, 3072 * 2 * 8192, 8192 * 3072)


def test_falcon_40b_new_decoder_architecture() -> None:
    m = load_model("falcon-40b")
    ln = (8192, 8192)
    attn = (8192 * (128 + 2 * 8) * 64, 8192 * 8192)  # fused query_key_value, dense; no biases
    assert m.blocks[0].tensors == ln + attn + ln + (8192 * 32768, 32768 * 8192)
    assert m.num_kv_heads == 8 and m.tied_embeddings


def test_falcon_7b_multi_query_single_norm() -> None:
    m = load_model(str(FIXTURES / "falcon-7b.json"))
    assert m.num_kv_heads == 1
    assert m.blocks[0].tensors[:3] == (4544, 4544, 4544 * (4544 + 2 * 64))


def test_gpt2_learned_positions_and_biases() -> None:
    m = load_model("gpt2")
    assert m.layers[0].tensors == (50257 * 768, 1024 * 768)
    assert len(m.blocks[0].tensors) == 12  # 2 LayerNorms (w, b) + 4 Conv1D (w, b)
    assert m.layers[-1].name == "norm"  # lm_head tied to wte


def test_bloom_embedding_layernorm() -> None:
    m = load_model("bloom-176b")
    assert m.layers[0].tensors == (250880 * 14336, 14336, 14336)
    assert m.max_seq_len == 2048


def test_t5_encoder_decoder_structure() -> None:
    m = load_model("t5-3b")
    enc = [layer for layer in m.layers if layer.kind == "encoder_block"]
    dec = [layer for layer in m.layers if layer.kind == "decoder_block"]
    assert len(enc) == len(dec) == 24 and m.num_layers == 48
    rel_bias = 32 * 32  # buckets x heads, first block of each stack only
    assert enc[0].params - enc[1].params == rel_bias == dec[0].params - dec[1].params
    cross = 4 * 1024 * 4096 + 1024  # q, k, v, o + its layer norm
    assert dec[1].params - enc[1].params == cross
    assert [layer.name for layer in m.layers if layer.kind == "norm"] == [
        "encoder.final_layer_norm",
        "decoder.final_layer_norm",
    ]


def test_t5_v1_1_gated_and_untied() -> None:
    config = json.loads((FIXTURES / "t5-small.json").read_text())
    config |= {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False, "d_ff": 1024}
    m = model_from_hf_config(config, "t5-v1_1-small")
    v1_0 = load_model(str(FIXTURES / "t5-small.json"))
    assert m.gated_mlp and m.layers[-1].name == "lm_head"
    ff_delta = 12 * 512 * (3 * 1024 - 2 * 2048)  # 12 blocks, 3 matrices of d_ff 1024 vs 2 of 2048
    assert m.params - v1_0.params == ff_delta + 32128 * 512


@pytest.mark.parametrize("name", sorted(REQUIRED | {"opt-350m", "opt-1.3b", "gpt-j-6b", "mpt-7b", "starcoder2-15b"}))
def test_hf_config_round_trip(name: str) -> None:
    """to_hf_config (what transformers was given) parses back to the same tensors."""
    arch = load_architecture(name)
    again = parse_hf_config(to_hf_config(arch), name, hf_class=arch.hf_class, source=arch.source)
    assert build_model(again) == build_model(arch)


@pytest.mark.parametrize(
    "ref", ["llama-7b", "LLAMA-7B", "llama2-7b", "Llama-2-7b", "Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"]
)
def test_names_and_aliases(ref: str) -> None:
    assert load_model(ref).name == "llama-7b"


@pytest.mark.parametrize(
    ("ref", "name"),
    [
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),  # v0.3's 32768-token vocabulary
        ("mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b"),  # v0.2 keeps v0.1's shapes
        ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mixtral-8x22b-instruct"),
        ("mistralai/Mixtral-8x22B-v0.1", "mixtral-8x22b"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("codellama/CodeLlama-7b-Instruct-hf", "codellama-7b"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-r1-distill-qwen-1.5b"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "qwen2.5-7b"),
        ("01-ai/Yi-34B-200K", "yi-34b-200k"),
        ("01-ai/Yi-34B-Chat", "yi-34b"),
    ],
)
def test_a_variant_named_as_written_wins_over_its_base(ref: str, name: str) -> None:
    assert load_model(ref).name == name


@pytest.mark.parametrize(
    ("ref", "name"),
    [
        ("facebook/opt-125m", "opt-125m"),
        ("facebook/opt-350m", "opt-350m"),  # DeepSpeed-Chat's default critic/reward model
        ("facebook/opt-1.3b", "opt-1.3b"),  # DeepSpeed-Chat's default actor model
        ("facebook/opt-66b", "opt-66b"),
        ("deepseek-ai/deepseek-llm-7b-base", "deepseek-llm-7b"),
        ("deepseek-ai/deepseek-llm-67b-chat", "deepseek-llm-67b"),
        ("internlm/internlm2-7b", "internlm2-7b"),
        ("internlm/internlm2-chat-20b", "internlm2-20b"),
        ("HuggingFaceTB/SmolLM2-135M", "smollm2-135m"),
        ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "smollm2-1.7b"),
        ("lmsys/vicuna-7b-v1.5", "llama-7b"),
        ("lmsys/vicuna-13b-v1.5", "llama-13b"),
        ("meta-llama/Llama-2-70b-chat-hf", "llama-70b"),
        ("Qwen/Qwen1.5-0.5B", "qwen1.5-0.5b"),
        ("Qwen/Qwen1.5-72B-Chat", "qwen1.5-72b"),
        ("tiiuae/falcon-180B", "falcon-180b"),
        ("EleutherAI/gpt-j-6b", "gpt-j-6b"),
        ("mosaicml/mpt-7b-instruct", "mpt-7b"),
        ("bigcode/starcoder2-3b", "starcoder2-3b"),
        ("bigcode/starcoder2-15b", "starcoder2-15b"),
    ],
)
def test_models_deepspeed_users_train_resolve(ref: str, name: str) -> None:
    assert load_model(ref).name == name


def test_opt_350m_projects_a_512_wide_embedding_and_has_no_final_norm() -> None:
    """modeling_opt.py: embed_tokens [V, word_embed_proj_dim], embed_positions [2048 + 2, h], project_in [h, 512]
    and, post-norm (do_layer_norm_before false), no final_layer_norm but project_out [512, h]; lm_head tied."""
    m = load_model("opt-350m")
    h, v = 1024, 50272
    assert m.layers[0].tensors == (v * 512, 2050 * h, 512 * h)
    assert m.layers[-1].tensors == (512 * h,) and m.tied_embeddings
    ln, attn = (h, h), (h * h, h) * 4  # q/k/v/out_proj with biases
    assert m.blocks[0].tensors == ln + attn + ln + (h * 4096, 4096, 4096 * h, h)
    opt = load_model("opt-1.3b")
    assert opt.layers[0].tensors == (v * 2048, 2050 * 2048) and opt.layers[-1].tensors == (2048, 2048)


def test_opt_positions_are_a_learned_table() -> None:
    """OPT's embed_positions has no row past 2048 + 2: a longer sequence fails in the forward."""
    m = load_model("opt-1.3b")
    assert default_seq_len(m)[0] == 2048 and position_warning(m, 2048) is None
    assert "its learned position table has no row past that" in position_warning(m, 4096)


def test_gpt_j_parallel_block_and_biased_head() -> None:
    """modeling_gptj.py: ln_1 only, q/k/v/out_proj without biases, fc_in/fc_out with them; lm_head [V, h] + [V]."""
    m = load_model("gpt-j-6b")
    h, f = 4096, 16384
    assert m.blocks[0].tensors == (h, h) + (h * h,) * 4 + (h * f, f, f * h, h)
    assert m.layers[-1].tensors == (50400 * h, 50400)
    assert m.params == 6_050_882_784


def test_mpt_has_no_biases_even_in_its_layer_norms() -> None:
    """modeling_mpt.py: norm_1, Wqkv [3h, h], out_proj, norm_2, up/down of 4h, no biases anywhere (MptBlock sets the
    LayerNorms' bias to None); norm_f; head tied to wte; ALiBi, so no position table."""
    m = load_model("mosaicml/mpt-7b")
    h = 4096
    assert m.blocks[0].tensors == (h, 3 * h * h, h * h, h, 4 * h * h, 4 * h * h)
    assert m.layers[0].tensors == (50432 * h,) and m.layers[-1].tensors == (h,)
    assert m.params == 6_649_286_656


@pytest.mark.parametrize(
    "change",
    [{"expansion_ratio": 8}, {"no_bias": False}, {"attn_config": {"attn_type": "multiquery_attention"}},
     {"attn_config": {"kv_n_heads": 8}}, {"attn_config": {"alibi": False}}],
)  # fmt: skip
def test_mpt_variants_transformers_cannot_build_are_refused(change: dict) -> None:
    config = {"model_type": "mpt", "d_model": 4096, "n_layers": 32, "n_heads": 32, "vocab_size": 50432} | change
    with pytest.raises(InputError, match="MPT variant"):
        model_from_hf_config(config, "mpt")


def test_internlm2_fuses_qkv_with_eight_kv_heads() -> None:
    """InternLM2's wqkv [(32 + 2·8)·128, 4096] (remote code), w1/w3/w2 of 14336."""
    m = load_model("internlm2-7b")
    assert m.blocks[0].tensors[:3] == (4096, 4096 * (32 + 2 * 8) * 128, 4096 * 4096)


def test_vocabulary_tells_the_variants_apart() -> None:
    """The instruct releases that changed the tokenizer differ by exactly the two [vocab, hidden] tables."""
    assert load_model("mistral-7b-v0.3").params - load_model("mistral-7b").params == 2 * 768 * 4096
    assert load_model("mixtral-8x22b-instruct").params - load_model("mixtral-8x22b").params == 2 * 768 * 6144


def test_profile_and_directory_paths(tmp_path: Path) -> None:
    assert load_model(str(catalog_dir() / "gpt2.yaml")).params == 124_439_808
    snapshot = tmp_path / "my-model"
    snapshot.mkdir()
    (snapshot / "config.json").write_text((FIXTURES / "qwen2.5-0.5b.json").read_text())
    m = load_model(str(snapshot))
    assert m.name == "my-model" and m.params == GOLDEN["fixtures"]["qwen2.5-0.5b.json"]


def test_profiles_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models").mkdir()
    text = (catalog_dir() / "gpt2.yaml").read_text()
    (tmp_path / "models" / "tiny.yaml").write_text(text.replace("layers: 12", "layers: 1"))
    monkeypatch.setenv("ZEROTUNE_PROFILES", str(tmp_path))
    assert list_models() == ["tiny"]
    assert load_model("tiny").params == 124_439_808 - 11 * 7_087_872


def test_unknown_name_suggests_close_names() -> None:
    with pytest.raises(InputError) as err:
        load_model("lama-7b")
    assert err.value.message == "unknown model 'lama-7b'"
    assert err.value.hint.startswith("did you mean: llama-7b")
    assert "\n" not in err.value.hint
    with pytest.raises(InputError, match="unknown model 'zzz'"):
        load_model("zzz")


def test_unknown_architecture_names_the_supported_ones(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba", "hidden_size": 768}))
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert "unsupported architecture (model_type 'mamba')" in err.value.message
    assert "closest supported: llama" in err.value.message and '"model_type": "llama"' in err.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"model_type": "llama", "hidden_size": 64}', "has no 'num_attention_heads'"),
        ("{not json", "cannot read"),
        ("[1, 2]", "must hold a JSON object"),
        (
            '{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3,'
            ' "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 10}',
            "inconsistent config: .*multiple of kv_heads",
        ),
    ],
)
def test_bad_config_json(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_model(str(path))


def test_bad_profile_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text((catalog_dir() / "gpt2.yaml").read_text().replace("heads: 12", "heads: -1"))
    with pytest.raises(InputError, match=r"broken.yaml: invalid model profile: heads:"):
        load_model(str(path))
    with pytest.raises(InputError, match="model file not found"):
        load_model(str(tmp_path / "absent.json"))


# --- ad-hoc models -----------------------------------------------------------------------------


def test_adhoc_from_layers_and_hidden_is_llama_2_7b() -> None:
    m = adhoc_model(layers=32, hidden=4096)
    assert (m.ffn_size, m.num_heads, m.vocab_size, m.family) == (11008, 32, 32000, "custom")
    assert m.params == 6_738_415_616


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=2e7, max_value=2e12))
def test_adhoc_params_within_one_percent(params: float) -> None:
    m = adhoc_model(params=params)
    assert abs(m.params - params) <= 0.01 * params
    assert m.hidden_size == 128 * m.num_heads and m.ffn_size % 256 == 0


@pytest.mark.parametrize(("layers", "hidden"), [(32, None), (None, 4096), (20, 5120), (80, 8192)])
def test_adhoc_params_with_pinned_dimensions(layers: int | None, hidden: int | None) -> None:
    params = 7.5e9 if layers != 80 else 70e9
    m = adhoc_model(params=params, layers=layers, hidden=hidden)
    assert abs(m.params - params) <= 0.01 * params
    assert layers in (None, m.num_layers) and hidden in (None, m.hidden_size)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params": -1.0}, "--params must be positive"),
        ({"params": 7e9, "layers": 0}, "--layers must be positive"),
        ({"hidden": -64}, "--hidden must be positive"),
        ({"hidden": 100}, "--hidden must be a multiple of 64"),
        ({}, "give --params"),
        ({"params": 1e6}, "cannot be reached within 1%"),
        ({"params": 7e9, "layers": 2, "hidden": 128}, "with --layers 2 --hidden 128"),
        ({"params": math.nan}, "--params must be positive"),
        # each block is listed in the spec: absurd sizes are refused, not built until memory runs out
        ({"params": 1e20}, "--params must be at most"),
        ({"layers": 10**9}, "--layers must be at most"),
        ({"hidden": 64 * 10**6}, "more than 10000"),
        ({"params": 1e14, "hidden": 128}, "with --hidden 128"),
    ],
)
def test_adhoc_rejects_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        adhoc_model(**kwargs)


# --- bench proxies -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama-7b", "llama3-8b", "mistral-7b", "llama-70b"])
def test_derive_full_size_llama_is_exact(name: str) -> None:
    model = load_model(name)
    proxy = derive(model)
    assert proxy.params == model.params and proxy.largest_tensor == model.largest_tensor
    assert proxy.family == "llama-proxy" and proxy.name == f"{name}/{model.num_layers}L/w1"


def test_derive_shrinks_width_and_depth() -> None:
    proxy = derive(load_model("llama-7b"), num_layers=2, width_scale=0.125)
    assert proxy.name == "llama-7b/2L/w0.125"
    h, f, v = 512, 1376, 4000
    assert (proxy.hidden_size, proxy.num_heads, proxy.num_kv_heads, proxy.head_dim) == (h, 4, 4, 128)
    assert (proxy.ffn_size, proxy.vocab_size, len(proxy.blocks)) == (f, v, 2)
    assert proxy.params == 2 * v * h + 2 * (4 * h * h + 3 * h * f + 2 * h) + h


def test_derive_keeps_gqa_ratio_and_one_kv_head() -> None:
    llama3 = derive(load_model("llama3-8b"), width_scale=0.25, vocab_size=1000)
    assert (llama3.num_kv_heads, llama3.num_heads, llama3.hidden_size, llama3.vocab_size) == (
        2,
        8,
        1024,
        1000,
    )
    tiny = derive(load_model("llama-70b"), num_layers=1, width_scale=0.01)
    assert (tiny.num_kv_heads, tiny.num_heads, tiny.hidden_size) == (1, 8, 1024)


def test_derive_keeps_tying_and_has_the_bench_tensor_layout() -> None:
    gemma = derive(load_model("gemma-7b"), num_layers=1, width_scale=0.5)
    assert gemma.tied_embeddings and gemma.layers[-1].kind == "norm"
    h, d, heads, kv, f = (
        gemma.hidden_size,
        gemma.head_dim,
        gemma.num_heads,
        gemma.num_kv_heads,
        gemma.ffn_size,
    )
    assert h == heads * d == 8 * 256
    assert gemma.blocks[0].tensors == (
        h,
        h * heads * d,
        h * kv * d,
        h * kv * d,
        heads * d * h,
        h,
        h * f,
        h * f,
        f * h,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_layers": 0}, "num_layers"),
        ({"width_scale": 0}, "width_scale"),
        ({"width_scale": 2}, "width_scale"),
    ],
)
def test_derive_rejects_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        derive(load_model("gpt2"), **kwargs)


# --- live transformers (skipped where it is not installed) -------------------------------------

LIVE = [
    "gpt2",
    "llama-70b",
    "qwen2.5-7b",
    "gemma-7b",
    "phi-3-mini",
    "falcon-40b",
    "bloom-176b",
    "t5-3b",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "gemma-3-4b",
    "gemma-3-1b",
    "deepseek-v2-lite",
    "gpt-oss-20b",
    "olmo-2-1124-7b",
    "phi-2",
    "gemma-2-27b",
    "pythia-70m",
    "chatglm3-6b",
    "opt-350m",
    "opt-1.3b",
    "gpt-j-6b",
    "qwen1.5-0.5b",
    "smollm2-135m",
    "mpt-7b",
    "starcoder2-3b",
]
FUSED_EXPERTS = {"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite", "gpt-oss-20b"}


@pytest.fixture(scope="module")
def recorder():
    pytest.importorskip("transformers", exc_type=ImportError)
    pytest.importorskip("torch", exc_type=ImportError)
    from scripts.evidence import record_hf_counts

    return record_hf_counts


@pytest.mark.parametrize("name", LIVE)
def test_live_transformers_tensors(recorder, name: str) -> None:
    """Same total and, except for MoE models (transformers 5 fuses each layer's experts into 3-D
    tensors; we list the checkpoint's per-expert matrices), the same multiset of tensor sizes."""
    arch = load_architecture(name)
    numels = recorder.hf_param_numels(to_hf_config(arch), arch.hf_class)
    ours = [n for layer in build_model(arch).layers for n in layer.tensors]
    assert sum(ours) == sum(numels)
    if name not in FUSED_EXPERTS:
        assert sorted(ours) == sorted(numels)


@pytest.mark.parametrize("tied", [True, False])
def test_live_transformers_starcoder2(recorder, tied: bool) -> None:
    """StarCoder2 configs parse to transformers' tensors with the head tied (the 3B) or not (the 15B):
    Starcoder2Config's defaults, the 3B's shapes."""
    config = {"model_type": "starcoder2", "tie_word_embeddings": tied}
    numels = recorder.hf_param_numels(config, "Starcoder2ForCausalLM")
    ours = [n for layer in model_from_hf_config(config, "sc2").layers for n in layer.tensors]
    assert sorted(ours) == sorted(numels)


def test_live_transformers_fixture(recorder) -> None:
    config = json.loads((FIXTURES / "falcon-7b.json").read_text())
    numels = recorder.hf_param_numels(config, "FalconForCausalLM")
    assert sorted(n for layer in model_from_hf_config(config, "f").layers for n in layer.tensors) == sorted(
        numels
    )


def test_a_catalog_name_is_itself_under_the_alias_table() -> None:
    """load_architecture reads a catalog name's own file without building the alias table (recommend's
    start-up): that shortcut is right only while no other entry's alias claims a catalog name."""
    from zerotune.catalog.models import _aliases, _catalog, _key, catalog_dir

    catalog = _catalog(catalog_dir())
    table = _aliases(catalog)
    assert {name: table[_key(name, strip=False)] for name in catalog} == {name: name for name in catalog}
