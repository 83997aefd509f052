"""The memory terms a CUDA rank has and a CPU rank does not, and the first GPU run's allocated peaks.

The first GPU run (one H200, torch 2.11, DeepSpeed 0.19.8: data/gpu/2026-11-28-NVIDIA-H200) peaked in
every bench at the optimizer step, where three things differ from the CPU engine the timeline was
checked on (data/evidence/memory_engine.json): torch's AdamW runs its multi-tensor update on CUDA,
stage 3 steps DeepSpeed's sub-groups, and each thread that ran a matmul holds a cuBLAS workspace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerotune.bench.predicted import predict_memory, ran_torch_optimizer
from zerotune.bench.result import BenchResult
from zerotune.catalog.hardware import load_profile
from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model.live_bytes import BLAS_WORKSPACES, CUBLAS_WORKSPACES, cublas_workspace_bytes
from zerotune.model.memory import estimate_memory
from zerotune.model.memory_facts import facts_of, largest_sub_group
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import Workload

RUN = Path(__file__).resolve().parents[2] / "data" / "gpu" / "2026-11-28-NVIDIA-H200"
BENCHES = sorted(p.stem for p in (RUN / "bench").glob("*.json"))
MiB = 2**20


def _bench(name: str) -> BenchResult:
    return BenchResult.model_validate(json.loads((RUN / "bench" / f"{name}.json").read_text()))


def _tinyllama() -> ModelSpec:
    return ModelSpec.model_validate(_bench("tinyllama-1.1b-L22-z3-mb1").proxy.model)


def test_cublas_workspace_is_torchs_default_for_the_architecture() -> None:
    # torch v2.11.0 aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize: ":4096:8" KiB
    # from Hopper on, ":4096:2:16:8" before
    assert cublas_workspace_bytes("9.0") == cublas_workspace_bytes("10.0") == 4096 * 1024 * 8 == 32 * MiB
    assert cublas_workspace_bytes("8.0") == cublas_workspace_bytes("7.0") == 8_519_680
    assert cublas_workspace_bytes(None) == 32 * MiB  # unknown: the larger


def test_cuda_ranks_hold_two_workspaces_from_the_first_forward_cpu_ranks_none() -> None:
    spec, w = _tinyllama(), Workload(seq_len=512)
    cuda = estimate_memory(spec, w, ZeroSettings(stage=2))
    assert cuda.timeline[0].name == "after init" and cuda.timeline[0].terms_named(BLAS_WORKSPACES) == 0
    assert all(p.terms_named(BLAS_WORKSPACES) == CUBLAS_WORKSPACES * 32 * MiB for p in cuda.timeline[1:])
    assert cuda.per_gpu.overhead > CUBLAS_WORKSPACES * 32 * MiB  # the framework's own, with the context
    cpu = estimate_memory(spec, w, ZeroSettings(stage=2), gloo=True)
    assert all(p.terms_named(BLAS_WORKSPACES) == 0 for p in cpu.timeline)


def test_stage3_sub_groups_close_once_they_reach_sub_group_size() -> None:
    """DeepSpeed 0.19.8 stage3.py `_create_fp16_sub_groups`, counted by hand on TinyLlama's tensors:
    the embedding, 21 blocks (44,044,288 each) and the 22nd block up to its gate projection, whose
    11,534,336 elements take the group past 1e9; the rest is a second, smaller sub-group."""
    facts = facts_of(_tinyllama())
    by_hand = 65_536_000 + 21 * 44_044_288 + (2048 + 4_194_304 + 524_288 + 524_288 + 4_194_304 + 2048 + 11_534_336)
    assert by_hand == 1_011_441_664
    assert largest_sub_group(facts, 1, 10**9) == by_hand
    # a rank's partition of at most sub_group_size elements is one sub-group: its ceil(numel / N) each
    assert largest_sub_group(facts, 2, 10**9) == sum(-(-t // 2) for t in facts.tensors)
    one_gpu = Workload(gpus_per_node=1)
    est = estimate_memory(_tinyllama(), one_gpu, ZeroSettings(stage=3), torch_optimizer=True)
    assert est.phase("optimizer step (update)").terms_named("fp32 gradient copy") == 4 * by_hand


@pytest.mark.parametrize("stage", [0, 2])
def test_multi_tensor_adamw_makes_one_temporary_of_all_it_steps(stage: int) -> None:
    """torch/optim/adam.py: `_multi_tensor_adam` (CUDA's default) makes `_foreach_sqrt` of every moment
    at once; `_single_tensor_adam` (CPU's) makes sqrt and quotient of one tensor at a time. On one GPU,
    the step's peak above the steady state: stage 0 with DeepSpeed's fused Adam (FP16_Optimizer)
    flattens the 16-bit gradients and casts them to fp32 (2+2+4 B per parameter); with a torch one
    (FP16_UnfusedOptimizer) it casts each gradient (2+4) and steps those fp32 copies. Stage 2 first
    holds the partition, its flattened copy and the fp32 cast (2+2+4), then the fp32 gradients and the
    update's temporaries of the one flat partition."""
    spec = _tinyllama()
    facts = facts_of(spec)
    psi, largest = facts.psi, facts.largest_tensor

    def above_steady(**kw: object) -> int:
        est = estimate_memory(spec, Workload(gpus_per_node=1), ZeroSettings(stage=stage), **kw)
        return max(p.total for p in est.timeline if p.group == "step") - est.phase("after step").total

    if stage == 0:
        fused, foreach, single = 8 * psi, 6 * psi + 4 * psi, 6 * psi + 2 * 4 * largest
    else:
        fused, foreach, single = 8 * psi, max(8 * psi, 4 * psi + 4 * psi), max(8 * psi, 4 * psi + 2 * 4 * psi)
    assert above_steady() == fused
    assert above_steady(torch_optimizer=True, foreach=True) == above_steady(torch_optimizer=True) == foreach
    assert above_steady(torch_optimizer=True, foreach=False) == single
    # CPU ranks run the single-tensor update by default
    cpu = estimate_memory(spec, Workload(gpus_per_node=1), ZeroSettings(stage=stage), torch_optimizer=True, gloo=True)
    temps = max(p.terms_named("optimizer temporaries") for p in cpu.timeline)
    assert temps == 2 * 4 * (largest if stage == 0 else psi)


@pytest.mark.parametrize("name", BENCHES)
def test_h200_benches_allocated_peak(name: str) -> None:
    """Each bench's torch.cuda.max_memory_allocated against the prediction as that counter reads it
    (torch AdamW, the probe's H200): all five peaked at the optimizer step, where the model before
    these terms was off by -5.5..+4.2% (and compared a total with the CUDA context in it)."""
    result = _bench(name)
    assert result.memory_method == "torch.cuda.max_memory_allocated" and ran_torch_optimizer(result)
    measured = max(result.peak_memory_bytes)
    predicted = predict_memory(result, load_profile(str(RUN / "probe.yaml")))
    assert predicted is not None and abs(predicted - measured) / measured < 0.001
