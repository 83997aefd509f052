"""Issue 18's physics: one global overhead prior (no per-profile constants), CPU Adam from the host CPU,
causal attention at the attention kernel's own rate."""

from __future__ import annotations

import pytest

from zerotune.catalog.hardware import list_profiles, load_profile
from zerotune.catalog.models import load_model
from zerotune.dsconfig.settings import resolve
from zerotune.model.compute import attention_flops_rate, executed_attention_share
from zerotune.model.offload import host_cpu_adam, node_cpu_adam
from zerotune.model.overheads import GLOBAL_PRIOR, PRIOR_TERMS
from zerotune.model.step import predict_step
from zerotune.schema.workload import Workload


def test_every_gpu_catalog_profile_takes_the_one_global_prior():
    for name in list_profiles():
        profile = load_profile(name)
        if not profile.has_gpus:
            continue
        for term in PRIOR_TERMS:
            assert getattr(profile.overheads, term) == getattr(GLOBAL_PRIOR, term), (name, term)


def test_cpu_adam_per_core_reproduces_its_anchor_and_halves_on_avx2():
    rate, _ = host_cpu_adam("2x Intel Xeon Platinum 8168", 48)  # the DGX-2 tutorial log: 1.6e9
    assert rate == pytest.approx(1.6e9)
    avx2, why = host_cpu_adam("2x AMD EPYC 7742", 128)
    assert avx2 == pytest.approx(128 / 48 * 1.6e9 / 2) and "AVX2" in why
    assert host_cpu_adam(None, 64) is None and host_cpu_adam("Xeon", None) is None


def test_gpu_box_without_host_cpu_takes_its_reference_host_else_the_fallback():
    h200 = load_profile("h200-node")
    assert h200.host.cpu_model is None
    rate, why = node_cpu_adam(h200)
    assert rate == pytest.approx(112 * 1.6e9 / 48) and "reference host" in why
    assert node_cpu_adam(load_profile("2xtitan-rtx"))[1] == "fallback"


def test_causal_flash_attention_executes_half_at_the_kernel_rate():
    spec = load_model("llama3-8b")
    h100 = load_profile("dgx-h100")
    assert executed_attention_share(spec, "flash") == 0.5 and executed_attention_share(spec, "eager") == 1.0
    rate, why = attention_flops_rate(h100, "bf16", "flash")
    assert rate == pytest.approx(328e12) and "2307.08691" in why and "causal" in why
    assert attention_flops_rate(h100, "bf16", "eager") is None
    assert attention_flops_rate(load_profile("dgx1-v100-16g"), "fp16", "flash") is None  # no FA2 on sm70
    zero = resolve({"zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}).zero
    steps = {
        kernel: predict_step(spec, Workload(seq_len=32768, attention=kernel), zero, h100).compute_s
        for kernel in ("flash", "eager")
    }
    # at 32K tokens attention is about half of the FLOPs: skipping half of it saves well over 10%
    assert steps["flash"] < 0.85 * steps["eager"]


def test_flash_attention_3_runs_faster_only_on_hopper():
    h100, a100 = load_profile("dgx-h100"), load_profile("dgx-a100-80g")
    fa3, why = attention_flops_rate(h100, "bf16", "flash3")
    fa2, _ = attention_flops_rate(h100, "bf16", "flash")
    # the FA3 paper's forward and backward figures (arXiv 2407.08608): inside its stated 1.5-2.0x over FA2,
    # under its 740 TFLOP/s forward peak
    assert 1.5 * fa2 < fa3 < 2.0 * fa2 and fa3 < 740e12 and "2407.08608" in why
    # no sm80 kernel of its own: an A100 runs flash3 at FlashAttention-2's rate
    assert attention_flops_rate(a100, "bf16", "flash3") == attention_flops_rate(a100, "bf16", "flash")


def test_flash_attention_4_is_blackwells_kernel_and_flash_attention_2_is_slow_there():
    b200, h100 = load_profile("8xb200"), load_profile("dgx-h100")
    fa4, why = attention_flops_rate(b200, "bf16", "flash4")
    fa2, why2 = attention_flops_rate(b200, "bf16", "flash")
    # FA4's forward peak is 1613 TFLOP/s (arXiv 2603.05451); forward+backward sits below it
    assert 1000e12 < fa4 < 1613e12 and "2603.05451" in why
    # FA2 has no Blackwell kernel: ~346 TFLOP/s measured on a B200 (flash-attention#1589), a quarter of FA4
    assert fa2 < 0.3 * fa4 and "1589" in why2
    # on Hopper flash4 falls back to FlashAttention-3's rate
    assert attention_flops_rate(h100, "bf16", "flash4") == attention_flops_rate(h100, "bf16", "flash3")


def test_attention_on_a_capped_sibling_keeps_its_softmax_cost():
    """The H20 (GH100, tensor rate capped to 148 TFLOP/s, fp32 44): the kernel's matmuls slow with the tensor
    cap, its softmax only with fp32, so FA2 there reaches a larger share of peak than on the H100; a GPU with
    the anchor's own peaks gets the published figure unchanged."""
    h20, h100, h200 = load_profile("8xh20"), load_profile("dgx-h100"), load_profile("h200-node")
    on_h20, why = attention_flops_rate(h20, "bf16", "flash")
    on_h100, _ = attention_flops_rate(h100, "bf16", "flash")
    assert on_h100 == pytest.approx(328e12)
    assert 0.34 * 148e12 < on_h20 < 0.801 * 148e12 and "fp32" in why
    assert attention_flops_rate(h200, "bf16", "flash3")[0] == pytest.approx(
        attention_flops_rate(h100, "bf16", "flash3")[0], rel=0.01
    )


def test_hf_moe_expert_loop_exposes_the_blocks_host_work():
    """The loop's .nonzero()/torch.where syncs: a block's host time adds to its kernels instead of
    hiding under them, so at small per-GPU work the loop is slower than a grouped kernel by about
    the blocks' host time, and the gap vanishes with no host terms."""
    spec = load_model("mixtral-8x7b")
    h100 = load_profile("dgx-h100")
    zero = resolve({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}).zero
    times = {
        impl: predict_step(spec, Workload(seq_len=512, moe_impl=impl), zero, h100).step_time_s
        for impl in ("grouped", "loop")
    }
    assert times["loop"] > times["grouped"]
    bare = h100.model_copy(
        update={"overheads": h100.overheads.model_copy(update={"per_module_hook_s": 0.0, "per_layer_launch_s": 0.0})}
    )
    same = {
        impl: predict_step(spec, Workload(seq_len=512, moe_impl=impl), zero, bare).step_time_s
        for impl in ("grouped", "loop")
    }
    assert same["loop"] == pytest.approx(same["grouped"])


def test_ethernet_links_run_nccl_sockets_below_rdma_efficiency():
    from zerotune.model.comm import LINK_EFFICIENCY, TCP_ALPHA_S, TCP_SOCKET_EFFICIENCY, link_model
    from zerotune.schema.hardware import LinkClass

    tcp = LinkClass(kind="tcp", backend="nccl", ranks=8, nominal_Bps=12.5e9)
    ib = LinkClass(kind="ib-hdr200", backend="nccl", ranks=8, nominal_Bps=12.5e9)
    slow, _ = link_model(tcp)
    fast, _ = link_model(ib)
    assert slow.busbw_Bps["all_reduce"] == pytest.approx(12.5e9 * TCP_SOCKET_EFFICIENCY)
    assert fast.busbw_Bps["all_reduce"] == pytest.approx(12.5e9 * LINK_EFFICIENCY)
    assert slow.alpha_s["all_reduce"] == TCP_ALPHA_S
    # 4-6 GB/s measured on 100 Gbps TCP (NVIDIA/nccl#450)
    assert 4e9 <= slow.busbw_Bps["all_reduce"] <= 6e9


def test_logits_memory_per_cross_entropy_implementation():
    """Per logit: HF's upcast loss 12 B, torch's loss on 16-bit logits 3 x 2 B, a fused in-place loss 2 B,
    fused linear + CE none (its fp32 input gradient instead, 4 B per hidden unit)."""
    from zerotune.model.activations import head_activation_bytes

    s, b, h, v = 4096, 2, 4096, 128256
    base = 2 * 2 * s * b * h  # the final norm's and the head's inputs
    per = {ce: head_activation_bytes(s, b, h, v, elem_bytes=2, cross_entropy=ce) - base
           for ce in ("fp32", "native", "fused", "fused_linear")}  # fmt: skip
    assert per["fp32"] == 12 * s * b * v
    assert per["native"] == 6 * s * b * v
    assert per["fused"] == 2 * s * b * v
    assert per["fused_linear"] == 4 * s * b * h
