"""Issue 18 item 5: Gemma 3, DeepSeek-V2/V3 (MLA + MoE), Llama 3.x, Qwen3 and other current families.

Exact counts are checked against transformers in test_catalog_models.py (tests/golden/hf_param_counts.json);
here against the totals their authors publish, and the memory/compute the model derives from them.
"""

from __future__ import annotations

import json

import pytest

from zerotune.catalog.models import load_model
from zerotune.model.compute import forward_flops_per_token, layer_flops

# (catalog name, published total, published activated, tolerance): the authors' rounded figures
PUBLISHED = [
    ("deepseek-v3", 671e9, 37e9, 0.6e9),  # "671B total parameters with 37B activated" (arXiv 2412.19437, abstract)
    ("deepseek-v2", 236e9, 21e9, 0.6e9),  # "236B total parameters, of which 21B are activated" (arXiv 2405.04434)
    ("qwen3-235b-a22b", 235e9, 22e9, 0.6e9),  # Qwen3-235B-A22B model card: 235B total, 22B activated
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.06e9),  # Qwen3-30B-A3B model card: 30.5B, 3.3B activated
    ("llama3.2-1b", 1.23e9, None, 0.006e9),  # Llama 3.2 model card: 1.23B
    ("llama3.2-3b", 3.21e9, None, 0.006e9),  # Llama 3.2 model card: 3.21B
    ("gemma-3-27b", 27.4e9, None, 0.06e9),  # google/gemma-3-27b-it: 27.4B params (LM + SigLIP tower)
    ("mistral-nemo-12b", 12.2e9, None, 0.06e9),  # Mistral-Nemo-Base-2407: 12.2B
    ("phi-4", 14.7e9, None, 0.06e9),  # microsoft/phi-4 model card: 14B dense, 14.7B on the Hub page
    ("olmo-2-1124-13b", 13.7e9, None, 0.06e9),  # allenai/OLMo-2-1124-13B: 13.7B
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [("gpt-oss-20b", 21e9, 3.6e9), ("gpt-oss-120b", 117e9, 5.1e9)],
)
def test_gpt_oss_matches_openai_s_figures(name, total, active):
    """gpt-oss model card: 21B / 117B parameters, 3.6B / 5.1B active per token; OpenAI's active count
    leaves out the embedding lookup (the unembedding is counted)."""
    model = load_model(name)
    assert abs(model.params - total) <= 0.5e9  # the card rounds to whole billions
    assert abs(model.active_params - model.vocab_size * model.hidden_size - active) <= 0.1e9


@pytest.mark.parametrize(("name", "total", "active", "tolerance"), PUBLISHED)
def test_totals_and_activated_match_the_published_figures(name, total, active, tolerance):
    model = load_model(name)
    assert abs(model.params - total) <= tolerance
    if active:
        assert abs(model.active_params - active) <= tolerance


def test_deepseek_v3_blocks_dense_then_moe_and_mla():
    v3 = load_model("deepseek-v3")
    assert [b.experts for b in v3.blocks[:4]] == [1, 1, 1, 256]  # first_k_dense_replace = 3
    assert (v3.head_dim, v3.v_head_dim, v3.num_heads) == (192, 128, 128)
    # MLA attention: scores over 192-wide q/k heads, A.V over 128-wide v heads: 2·H·(192 + 128) per position
    assert layer_flops(v3, v3.blocks[0]).attention_flops_per_seq == 2 * 128 * (192 + 128)
    # a dense block is costed whole; an MoE block without its 248 idle experts
    dense, moe = layer_flops(v3, v3.blocks[0]), layer_flops(v3, v3.blocks[3])
    norms = 2 * 7168 + 1536 + 512  # input and post-attention norms, q_a and kv_a norms: no matmul
    assert dense.matmul_flops == 2 * (v3.blocks[0].params - norms)
    expert = 3 * 7168 * 2048
    assert moe.matmul_flops == 2 * (v3.blocks[3].params - 248 * expert - norms)
    # forward matmul FLOPs per token = 2 x (activated params - embedding - norm vectors), within 0.1%
    matmuls = forward_flops_per_token(v3, 0)
    assert matmuls == pytest.approx(2 * (v3.active_params - v3.vocab_size * v3.hidden_size), rel=1e-3)


def test_gemma3_vision_tower_has_states_but_no_flops():
    g = load_model("gemma-3-4b")
    vision = [layer for layer in g.layers if layer.kind == "vision"]
    assert len(vision) == 27 + 3  # embeddings, 27 encoder layers, post_layernorm, projector
    assert sum(layer.params for layer in vision) == 4_300_079_472 - load_model_text_only(g)
    assert all(layer_flops(g, layer).matmul_flops == 0 for layer in vision)
    assert g.num_layers == 34 and len(g.blocks) == 34


def load_model_text_only(model):
    return sum(layer.params for layer in model.layers if layer.kind != "vision")


@pytest.mark.parametrize(
    ("name", "gpus"), [("deepseek-v2-lite", 8), ("qwen3-30b-a3b", 8), ("gemma-3-27b", 4)]
)
def test_memory_states_follow_the_zero_paper(cli, name, gpus):
    """ZeRO paper (Rajbhandari et al. 2019, §5): 2Ψ bf16 params, KΨ = 12Ψ Adam states (fp32 master,
    momentum, variance); stage 1-3 partition the optimizer states over N_d, stage 3 the params too."""
    model = load_model(name)
    psi = model.params
    rows = json.loads(cli("memory", "--model", name, "--gpus", gpus, "--json").stdout)["rows"]
    plain = {
        r["stage"]: r["breakdown"] for r in rows if r["offload_optimizer"] == r["offload_param"] == "none"
    }
    assert plain[0]["params"] == 2 * psi and plain[0]["optimizer_states"] == 12 * psi
    for stage in (1, 2, 3):
        assert plain[stage]["optimizer_states"] == pytest.approx(12 * psi / gpus, rel=1e-3)
    # stage 3: the 1/N_d partition plus what is gathered at once (persistent small tensors, the blocks being
    # fetched: at most a few layers' worth, the embedding being the largest for Gemma's 262K vocabulary)
    assert 2 * psi / gpus <= plain[3]["params"] <= 2 * psi / gpus + 3 * 2 * model.largest_layer


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "gemma-3-4b", "qwen3-30b-a3b", "llama3.2-1b"])
def test_predict_runs_and_is_physical(cli, tmp_path, name):
    """A stage-3 job predicts a positive step whose model FLOPs, at the predicted time, are under the GPUs'
    peak (MFU in (0, 1)); for an MoE model the FLOPs are the activated ones."""
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True},
                                  "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4}))  # fmt: skip
    res = cli(
        "predict", "--config", config, "--model", name, "--profile", "dgx-h100", "--seq-len", "4096", "--json"
    )
    assert res.code == 0, res.stderr
    out = json.loads(res.stdout)
    print(json.dumps(out)[:600])
    assert 0 < out["mfu"] < 1


def test_mla_attention_activations_count_the_latent_path_and_wide_heads():
    """DeepSeek-V3, per token: 2h (norm input, projections' input) + 2·1536 (q_a out, its norm) + 576 + 512
    (kv_a out, its norm) + 128·256 (kv_b out) + 2·128·192 (q, k as the kernel gets them) + 128·128 (o input):
    2.7x the 6h a q/k/v of H·d = h would keep. Other families keep the Llama layout (None)."""
    from zerotune.model.activations import layer_activation_bytes

    v3 = load_model("deepseek-v3")
    width = 2 * 7168 + 2 * 1536 + 576 + 512 + 128 * 256 + 2 * 128 * 192 + 128 * 128
    assert v3.attention_activation_width == width == 116_800
    assert load_model("qwen3-8b").attention_activation_width is None
    s, b, h = 4096, 1, 7168
    common = dict(kv_heads=128, ffn=2048, gated=True, experts_per_token=8)
    mla = layer_activation_bytes(s, b, h, 128, attention_width=width, **common)
    plain = layer_activation_bytes(s, b, h, 128, **common)
    assert mla - plain == 2 * s * b * (width - 6 * h)


def test_memory_takes_deepspeed_chat_s_default_actor(cli):
    """`zerotune memory --model facebook/opt-1.3b` (DeepSpeed-Chat's default actor) exits 0 with the ZeRO paper's
    2Ψ bf16 parameters and 12Ψ Adam states unpartitioned."""
    res = cli("memory", "--model", "facebook/opt-1.3b", "--gpus", "8", "--json")
    assert res.code == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    plain = [
        r["breakdown"]
        for r in rows
        if r["stage"] == 0 and r["offload_optimizer"] == r["offload_param"] == "none"
    ]
    psi = 1_315_758_080
    assert plain and plain[0]["params"] == 2 * psi and plain[0]["optimizer_states"] == 12 * psi
