"""FLOP counts of zerotune.model.compute against the published formulas.

Independent references: Kaplan et al. 2020 (arXiv 2001.08361) §2.1, C_fwd ~ 2N per token;
PaLM (Chowdhery et al. 2022, arXiv 2204.02311) App. B, 6N + 12·L·H·Q·T per token for forward +
backward; Korthikanti et al. 2022 (arXiv 2205.05198) §5, full recompute adds one forward.
"""

from __future__ import annotations

import pytest

from zerotune.catalog.models import load_model
from zerotune.model.compute import (
    achieved_flops,
    forward_flops_per_token,
    model_flops,
    training_flops_per_token,
)
from zerotune.schema.hardware import ComputeSpec, GpuSpec, HardwareProfile


@pytest.fixture(scope="module")
def llama7b():
    return load_model("llama-7b")


def test_llama7b_forward_is_2n_plus_attention(llama7b):
    s = 2048
    # the matmul parameters a token passes through: every block matrix and the head; the
    # embedding (a lookup) and the RMSNorm vectors do no matmul
    embedding = llama7b.layers[0].params
    norms = sum(t for layer in llama7b.layers for t in layer.tensors if t == llama7b.hidden_size)
    n_matmul = llama7b.params - embedding - norms
    attention = 4 * llama7b.num_layers * llama7b.num_heads * llama7b.head_dim * s
    assert forward_flops_per_token(llama7b, s) == pytest.approx(2 * n_matmul + attention, rel=1e-12)


def test_llama7b_training_flops_match_palm_appendix_b(llama7b):
    s = 2048
    L, H, Q = llama7b.num_layers, llama7b.num_heads, llama7b.head_dim
    palm = 6 * llama7b.params + 12 * L * H * Q * s
    ours = training_flops_per_token(llama7b, s)
    # PaLM's N counts every parameter; the embedding lookup (131M of 6.74B) does no matmul
    assert ours == pytest.approx(palm, rel=0.03)
    assert ours < palm
    # attention is the 12·L·H·Q·T share over 6N: ~7.8% at 2k tokens for llama-7b
    attention_share = ours / training_flops_per_token(llama7b, 1) - 1
    assert attention_share == pytest.approx(12 * L * H * Q * (s - 1) / (6 * 6.607e9), rel=0.02)
    assert 0.06 < attention_share < 0.09


def test_kaplan_2n_holds_when_attention_is_negligible(llama7b):
    # at a 1-token context the forward is ~2N (Kaplan et al. 2020 §2.1), again minus the lookup
    assert forward_flops_per_token(llama7b, 1) == pytest.approx(2 * llama7b.params, rel=0.03)


def test_recompute_adds_exactly_one_block_forward(llama7b):
    s = 1024
    blocks = sum(
        f.matmul_flops + f.attention_flops_per_seq * s for f in model_flops(llama7b) if f.kind == "block"
    )
    plain = training_flops_per_token(llama7b, s)
    assert training_flops_per_token(llama7b, s, recompute=True) - plain == pytest.approx(blocks)
    # Korthikanti et al. 2022: ~33% more work (8 vs 6 matmul passes) for the blocks
    assert 1.25 < (plain + blocks) / plain < 1.34


def test_moe_counts_only_active_experts():
    mixtral = load_model("mixtral-8x7b")
    # forward per token at a tiny context ~ 2 x active params (router/embedding/norms aside)
    assert forward_flops_per_token(mixtral, 1) == pytest.approx(2 * mixtral.active_params, rel=0.03)
    assert forward_flops_per_token(mixtral, 1) < 0.35 * 2 * mixtral.params


def test_achieved_flops_prefers_measured_then_peak_times_mfu():
    gpu = GpuSpec(name="x", peak_bf16_flops=1e15)
    measured = HardwareProfile(
        name="m", gpus_per_node=1, gpu=gpu, compute=ComputeSpec(achieved_flops={"bf16": 4e14})
    )
    assumed = HardwareProfile(name="a", gpus_per_node=1, gpu=gpu, compute=ComputeSpec(mfu_assumption=0.5))
    assert achieved_flops(measured, "bf16")[0] == 4e14
    assert achieved_flops(assumed, "bf16")[0] == 5e14
    cpu = HardwareProfile(name="c", gpus_per_node=0, compute=ComputeSpec(achieved_flops={"fp32": 3e10}))
    assert achieved_flops(cpu, "fp32")[0] == 3e10
    with pytest.raises(ValueError):
        achieved_flops(HardwareProfile(name="none", gpus_per_node=0), "fp32")


def test_shape_points_interpolate_log_log_in_tokens_at_the_nearest_hidden():
    from zerotune.schema.hardware import ShapePoint

    points = [
        ShapePoint(tokens=512, hidden=4096, flops=1e14),
        ShapePoint(tokens=8192, hidden=4096, flops=4e14),
        ShapePoint(tokens=512, hidden=1024, flops=1e13),
    ]
    hw = HardwareProfile(
        name="s",
        gpus_per_node=1,
        gpu=GpuSpec(name="x", peak_bf16_flops=1e15),
        compute=ComputeSpec(achieved_flops={"bf16": 9e14}, shape_points={"bf16": points}),
    )
    at = lambda tokens, hidden: achieved_flops(hw, "bf16", tokens=tokens, hidden=hidden)[0]  # noqa: E731
    assert at(512, 4096) == pytest.approx(1e14)
    assert at(8192, 4096) == pytest.approx(4e14)
    # 2048 is halfway in log(tokens) from 512 to 8192: the geometric mean of the two rates
    assert at(2048, 4096) == pytest.approx(2e14)
    assert at(64, 4096) == pytest.approx(1e14) and at(10**6, 4096) == pytest.approx(4e14)  # held flat
    assert at(512, 5120) == pytest.approx(1e14)  # nearest hidden in log distance: 4096
    assert at(512, 1500) == pytest.approx(1e13)  # 1024
    # shape points win over the single number; without a shape the single number is used
    assert achieved_flops(hw, "bf16")[0] == 9e14


def test_peak_times_published_mfu_of_the_gpu_generation():
    v100 = GpuSpec(name="V100", peak_fp16_flops=125e12, compute_capability="7.0")
    hw = HardwareProfile(name="v", gpus_per_node=8, gpu=v100)
    value, source = achieved_flops(hw, "fp16")
    assert value == pytest.approx(0.30 * 125e12)  # Shoeybi et al. 2019: 39 of 125 TFLOP/s
    assert "V100" in source
    stated = hw.model_copy(update={"compute": ComputeSpec(mfu_assumption=0.2)})
    assert achieved_flops(stated, "fp16")[0] == pytest.approx(25e12)  # the profile's own wins
    unknown = HardwareProfile(name="u", gpus_per_node=1, gpu=GpuSpec(name="y", peak_bf16_flops=1e15))
    assert achieved_flops(unknown, "bf16")[0] == pytest.approx(0.4e15)  # DEFAULT_MFU


def test_sibling_mfu_is_the_anchor_on_the_anchor_and_rises_with_bandwidth():
    from zerotune.model.compute import MATMUL_CEILING, sibling_mfu

    ceiling = MATMUL_CEILING["H100 SXM"][0]
    h100 = 989.4 / 3.35
    assert sibling_mfu(0.40, ceiling, h100, h100) == pytest.approx(0.40)
    # more bandwidth per FLOP: closer to the matmul ceiling, never past it; less: further below
    assert 0.40 < sibling_mfu(0.40, ceiling, h100, h100 / 8) < ceiling
    assert sibling_mfu(0.40, ceiling, h100, h100 * 2) < 0.40


@pytest.mark.parametrize(
    ("profile", "anchor_mfu", "ceiling", "anchor", "flops_per_byte"),
    [
        ("8xh20", 0.40, "H100 SXM", 989.4 / 3.35, 148 / 4.0),
        ("h200-node", 0.40, "H100 SXM", 989.4 / 3.35, 989.4 / 4.8),
        ("8xh100-pcie", 0.40, "H100 SXM", 989.4 / 3.35, 756 / 2.0),
        ("dgx-a100-40g", 0.50, "A100 SXM", 312 / 2.039, 312 / 1.555),
    ],
)
def test_derived_profile_mfu_is_the_sibling_rule(profile, anchor_mfu, ceiling, anchor, flops_per_byte):
    # the profiles state the derived MFU with its arithmetic; it must be what the rule gives, from the
    # profile's own peak and bandwidth
    from zerotune.catalog.hardware import load_profile
    from zerotune.model.compute import MATMUL_CEILING, sibling_mfu

    hw = load_profile(profile)
    assert hw.gpu.peak_flops("bf16") / hw.gpu.hbm_bandwidth_Bps == pytest.approx(flops_per_byte, rel=1e-3)
    expected = sibling_mfu(anchor_mfu, MATMUL_CEILING[ceiling][0], anchor, flops_per_byte)
    assert hw.compute.mfu_assumption == pytest.approx(expected, abs=0.005)


def test_eager_attention_pays_the_score_round_trips_the_fused_kernels_do_not():
    # FlashAttention (arXiv 2205.14135) Algorithm 0 / App. B.2: S and P written and read in forward (4 passes),
    # P read twice, dP and dS written and read in backward (7): on a 2 TB/s GPU, 8 heads of a 1024-token
    # sequence hold 8 * 1024 * 1024 scores per layer
    from zerotune.model.compute import eager_score_seconds, layer_flops

    model = load_model("llama-7b")
    gpu = GpuSpec(name="g", memory_bytes=80 * 2**30, peak_bf16_flops=312e12, hbm_bandwidth_Bps=2e12)
    hw = HardwareProfile(name="h", gpus_per_node=1, gpu=gpu)
    block = layer_flops(model, next(layer for layer in model.layers if layer.kind == "block"))
    fwd, bwd = eager_score_seconds(hw, block, model, 1024, 1024, "eager")
    scores = 1024 * 1024 * model.num_heads
    assert fwd == pytest.approx(4 * 2 * scores / 2e12)
    assert bwd == pytest.approx(7 * 2 * scores / 2e12)
    for fused in ("sdpa", "flash", "flash3"):
        assert eager_score_seconds(hw, block, model, 1024, 1024, fused) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("profile", "precision", "matmul_tflops"),
    [
        # largest measured torch matmul, zzc0721/torch-performance-test-data database.md (TITAN RTX: its issue #127)
        ("8xrtx3090", "bf16", 76.68),
        ("4xrtx4090", "bf16", 173.31),
        ("8xa6000", "bf16", 123.34),
        ("8xl40s-pcie", "bf16", 269.15),
        ("2xtitan-rtx", "fp16", 66.32),
    ],
)
def test_workstation_profile_mfu_is_half_the_measured_matmul_ceiling(profile, precision, matmul_tflops):
    # the rule the T4/A10G/L4/RTX 5090 profiles state: MFU = 0.50 x (largest measured matmul / rated peak), the
    # ceiling capped at the rated peak where a card boosts past it (RTX 3090, RTX 4090); the measured matmuls
    # also show torch runs these GeForce cards at the FP32-accumulate rate the catalog stores (3090: 76.7, not 142)
    from zerotune.catalog.hardware import load_profile

    hw = load_profile(profile)
    peak = hw.gpu.peak_flops(precision)
    assert matmul_tflops * 1e12 < 1.1 * peak  # not the FP16-accumulate rate (2x on GeForce)
    expected = 0.50 * min(matmul_tflops * 1e12 / peak, 1.0)
    assert hw.compute.mfu_assumption == pytest.approx(expected, abs=0.005)


def test_tied_head_still_does_its_logits_matmul():
    # bloom-560m ties its head to the embedding (one tensor, counted once), yet the forward still
    # multiplies every token by the [V, h] matrix: 2·V·h FLOPs per token, as an untied head would.
    # Independent count: 2 x (params - embedding lookups - norm/bias vectors) + 2·V·h, with attention off (s=0).
    bloom = load_model("bloom-560m")
    assert bloom.tied_embeddings and not any(layer.kind == "head" for layer in bloom.layers)
    vectors = sum(t for layer in bloom.layers for t in layer.tensors if t <= 4 * bloom.hidden_size)
    embedding = bloom.vocab_size * bloom.hidden_size
    head = 2 * bloom.vocab_size * bloom.hidden_size
    assert forward_flops_per_token(bloom, 0) == pytest.approx(2 * (bloom.params - embedding - vectors) + head, rel=1e-9)
    # the logits matmul runs after the final norm: on the last layer, never recomputed
    last = model_flops(bloom)[-1]
    assert bloom.layers[-1].kind == "norm" and last.matmul_flops == head
    assert training_flops_per_token(bloom, 0, recompute=True) - training_flops_per_token(bloom, 0) == pytest.approx(
        sum(f.matmul_flops for f in model_flops(bloom) if f.kind == "block")
    )
