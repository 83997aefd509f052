"""Our model states against DeepSpeed 0.19.8's own estimators, term by term.

DeepSpeed's `estimate_zero2_model_states_mem_needs` / `estimate_zero3_model_states_mem_needs`
(stage_1_and_2.py, stage3.py; docs/deepspeed-facts.md §5) count, per GPU, with mixed-precision Adam:

- 2P: 16-bit parameters (replicated in ZeRO-2, 2P/N in ZeRO-3)        -> ours `params`
- 16 B per partitioned parameter: fp32 master + momentum + variance (12) -> ours `optimizer`
  and the fp32 gradient partition (4)                                  -> ours `grads_fp32`
- ZeRO-2 also 2 B for the 16-bit gradient partition ("18 = 2 + 4 + 4 + 8") -> ours `grads`
- ZeRO-3 `4L`: the largest layer gathered, 16-bit parameters and gradients. Ours sizes the gathered
  set from prefetch/max_live instead (comm buffers), so the tests subtract 4L and check that our
  gathered set holds at least the 2L of parameters.
- CPU with offload: the same 16 B (+2 B of 16-bit parameters with ZeRO-3 parameter offload)
  per partitioned parameter, summed over a node, times `additional_buffer_factor` (1.5).

What DeepSpeed allocates but its estimators omit, and ours counts (the only differences):
ZeRO-3's 16-bit gradient partition `grad_partitions_flat_buffer` (2P/N, on the host under
optimizer offload) and, with optimizer offload, the host's 16-bit partition copy in ZeRO-2.
Parameter counts are chosen divisible by the GPU count: DeepSpeed truncates 18P/N with int(),
we round partitions up as DeepSpeed pads them.
"""

from __future__ import annotations

import os

import pytest

from zerotune.dsconfig.settings import OffloadOptimizer, OffloadParam, ZeroSettings
from zerotune.model.memory import estimate_memory
from zerotune.model.states import model_states, state_bytes
from zerotune.schema.workload import Workload

os.environ.setdefault("DS_ACCELERATOR", "cpu")
stage_1_and_2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")

F = 1.5  # DeepSpeed's default additional_buffer_factor (host side only)
FULL = 10**18  # sub_group_size: DeepSpeed's estimator counts the fp32 gradient of the whole partition;
# the ZeRO-3 optimizer itself builds it one sub-group (default 1e9 elements) at a time.
SB = state_bytes("bf16", "adamw", 2)

# (P, largest layer L, GPUs per node g, nodes n)
CASES = [
    (1_000_000_000, 50_000_000, 8, 2),
    (6_738_415_616, 131_072_000, 8, 1),
    (2_783_000_000, 65_000_000, 1, 1),
    (70_000_000_000, 1_050_000_000, 4, 1),
    (175_000_000_000, 1_207_959_552, 8, 4),
]


@pytest.mark.parametrize(("p", "big", "g", "n"), CASES)
def test_zero2_no_offload_gpu_matches_deepspeed(p: int, big: int, g: int, n: int) -> None:
    _, ds_gpu = stage_1_and_2.estimate_zero2_model_states_mem_needs(p, g, n, cpu_offload=False)
    ms = model_states(p, g * n, 2, SB)
    assert ms.params + ms.grads + ms.grads_fp32 + ms.optimizer == ds_gpu


@pytest.mark.parametrize(("p", "big", "g", "n"), CASES)
def test_zero2_offload_matches_deepspeed(p: int, big: int, g: int, n: int) -> None:
    ds_cpu, ds_gpu = stage_1_and_2.estimate_zero2_model_states_mem_needs(p, g, n, cpu_offload=True)
    ms = model_states(p, g * n, 2, state_bytes("bf16", "adamw", 2, offload=True), offload_optimizer="cpu")
    assert ms.params + ms.grads + ms.grads_fp32 + ms.optimizer == ds_gpu == 2 * p
    if g * n <= 4:
        # max(4N, 16) = 16 B/param: the offloaded states of all N ranks (DeepSpeed sizes the host
        # for the whole job; for N > 4 it switches to 4N·P, the fp32 model loaded by every rank).
        host_states = (ms.cpu - (p // (g * n)) * SB.param) * g * n
        assert host_states * F == ds_cpu


@pytest.mark.parametrize(("p", "big", "g", "n"), CASES)
def test_zero3_no_offload_gpu_matches_deepspeed(p: int, big: int, g: int, n: int) -> None:
    _, ds_gpu, four_l = stage3.estimate_zero3_model_states_mem_needs(
        p, big, g, n, cpu_offload=False, cpu_offload_params=False
    )
    assert four_l == 4 * big
    ms = model_states(p, g * n, 3, SB, sub_group_size=FULL)
    assert ms.params + ms.grads_fp32 + ms.optimizer == ds_gpu - four_l
    assert ms.grads == 2 * p // (g * n)  # grad_partitions_flat_buffer: allocated, not in DeepSpeed's sum


@pytest.mark.parametrize(("p", "big", "g", "n"), CASES)
@pytest.mark.parametrize("offload_params", [False, True])
def test_zero3_offload_matches_deepspeed(p: int, big: int, g: int, n: int, offload_params: bool) -> None:
    ds_cpu, ds_gpu, four_l = stage3.estimate_zero3_model_states_mem_needs(
        p, big, g, n, cpu_offload=True, cpu_offload_params=offload_params, zero_init=True
    )
    sb = state_bytes("bf16", "adamw", 3, offload=True)
    ms = model_states(
        p, g * n, 3, sb, offload_optimizer="cpu", offload_param="cpu" if offload_params else "none"
    )
    assert ms.params + ms.grads + ms.grads_fp32 + ms.optimizer == ds_gpu - four_l
    part = p // (g * n)
    per_node_without_grad_buffer = (ms.cpu - part * sb.grad) * g
    assert per_node_without_grad_buffer * F == pytest.approx(ds_cpu, rel=1e-12, abs=2)


def test_estimate_memory_uses_the_same_terms() -> None:
    """Through the public API: a 7B-class model's ZeRO-2 model states equal DeepSpeed's GPU figure."""
    from tests.unit.test_memory import llama
    from zerotune.model.live_bytes import BLAS_WORKSPACES

    model = llama(layers=32, h=4096, ffn=11008, vocab=32000)
    assert model.params % 8 == 0
    est = estimate_memory(model, Workload(gpus_per_node=8), ZeroSettings(stage=2))
    _, ds_gpu = stage_1_and_2.estimate_zero2_model_states_mem_needs(model.params, 8, 1, cpu_offload=False)
    # DeepSpeed's estimator sums the states (16-bit gradient partition, its fp32 copy, master and
    # moments); at the step's gradient copy we hold those plus the 16-bit flattened partition that
    # `step()` builds before casting it to fp32 (stage_1_and_2.py), the one term by which we differ
    part = model.params // 8
    step = est.phase("optimizer step (gradient copy)")
    assert step.total - step.terms_named(BLAS_WORKSPACES) == ds_gpu + 2 * part
    z3 = ZeroSettings(
        stage=3,
        overlap_comm=True,
        offload_optimizer=OffloadOptimizer(device="cpu"),
        offload_param=OffloadParam(device="cpu"),
        param_persistence_threshold=0,
    )
    est3 = estimate_memory(model, Workload(gpus_per_node=8), z3)
    _, ds_gpu3, four_l = stage3.estimate_zero3_model_states_mem_needs(model.params, model.largest_layer, 8, 1)
    # between steps only the contiguous reduce bucket stays on the GPU (states and gradient partitions
    # are on the host), with the cuBLAS workspaces every CUDA rank keeps
    after = est3.phase("after step")
    assert ds_gpu3 == four_l and after.total - after.terms_named(BLAS_WORKSPACES) == 2 * z3.reduce_bucket_size
    # our gathered working set holds at least DeepSpeed's 2L of gathered 16-bit parameters
    assert est3.phase("end of forward (gathered)").terms_named("gathered parameters") >= four_l // 2


@pytest.mark.parametrize("name", ["opt-1.3b", "opt-350m", "gpt-j-6b", "internlm2-7b", "mpt-7b", "starcoder2-3b"])
def test_added_families_model_states_match_deepspeed(name: str) -> None:
    """The catalog's OPT (DeepSpeed-Chat's actor and critic), GPT-J, InternLM2, MPT and StarCoder2 entries: ZeRO-2 states on 8 GPUs
    equal DeepSpeed's estimator for their parameter count, plus the 16-bit partition `step()` flattens."""
    from zerotune.catalog.models import load_model
    from zerotune.model.live_bytes import BLAS_WORKSPACES

    model = load_model(name)
    assert model.params % 8 == 0
    est = estimate_memory(model, Workload(gpus_per_node=8, seq_len=1024), ZeroSettings(stage=2))
    _, ds_gpu = stage_1_and_2.estimate_zero2_model_states_mem_needs(model.params, 8, 1, cpu_offload=False)
    step = est.phase("optimizer step (gradient copy)")
    assert step.total - step.terms_named(BLAS_WORKSPACES) == ds_gpu + 2 * (model.params // 8)
