"""Round 23 (2026-11-28, h-diag23): forms `diagnose` missed on fresh thread logs, checked here on wordings other
than the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_zero3s_cross_rank_parameter_check_is_ranks_out_of_step_in_every_wording() -> None:
    """LlamaFactory#4428, DeepSpeed#1960: ZeRO-3's check that every rank fetches the same parameters, in its wording
    before DeepSpeed 0.17.6 ("disagreement between rank0 and rankN: rank0: [...]"), read as unclassified. Here the
    wording since 0.17.6 for the list's contents behind a `[rankN]:` prefix, and the old one behind torch elastic's
    `[defaultN]:` prefix: both are ranks out of step, with the ZeRO-3 leaf-module fix."""
    contents = (
        "[rank3]:   File \"/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/zero/utils.py\", line 117, in "
        "assert_ints_same_as_other_ranks\n"
        "[rank3]: RuntimeError: Detected a disagreement on list contents between rank0 and rank3: \n"
        "[rank3]:  list length: 4\n[rank3]:  rank0: [11, 12, 13, 14] \n[rank3]:  rank3: [11, 12, 15, 16]\n"
    )
    report = diagnose(contents.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "nccl_desync"
    assert any("set_z3_leaf_modules" in c.key for c in report.fix.changes)
    old = "[default1]:RuntimeError: disagreement between rank0 and rank1: rank0: [4, 5, 6], rank1: [4, 7, 8]\n"
    report = diagnose(old.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "nccl_desync"
    # the source line DeepSpeed shows in the traceback names no ranks: not a finding by itself
    source = '    raise RuntimeError(f"disagreement between rank0 and rank{dist.get_rank()}: "\n'
    assert diagnose(source.encode()).diagnosis.cause != "nccl_desync"


def test_nccls_own_cuda_failure_line_is_an_nccl_error() -> None:
    """NeMo-RL#1683: NCCL's `Cuda failure 217 'peer access is not supported ...'` alone read as no failure at exit 0.
    Here NCCL's older wording without the code on its `NCCL WARN` line (host:pid:tid prefix), and another CUDA error
    after torch's "Last error:": NCCL errors, the first with the P2P/SHM fix; NCCL's out-of-memory failure stays an
    OOM."""
    peer = (
        "gpu-node-3:41022:41190 [1] include/alloc.h:99 NCCL WARN Cuda failure 'peer access is not supported "
        "between these two devices'\n"
    )
    report = diagnose(peer.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "nccl_error"
    assert any("NCCL_P2P_DISABLE" in c.key and "NCCL_SHM_DISABLE" in c.key for c in report.fix.changes)
    illegal = "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 700 'an illegal memory access was encountered'\n"
    report = diagnose(illegal.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "nccl_error"
    assert not any("NCCL_SHM_DISABLE" in c.key for c in report.fix.changes)
    assert diagnose(b"Last error:\nCuda failure 2 'out of memory'\n").diagnosis.cause == "gpu_oom"


def test_a_missing_attribute_raised_in_library_code_is_a_version_mismatch() -> None:
    """axolotl#2191: accelerate reading `optim_bits` from a bitsandbytes optimizer whose release dropped it read as a
    config refusal (its frame is accelerate's DeepSpeed preparation). Here peft's object read by transformers'
    code in Python 3.12's wording (with its "Did you mean"): library code written against another release. Raised in
    the script's own frame, or on a `NoneType`, it is no release to align."""
    lib = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/transformers/integrations/peft.py", line 311, in load_adapter\n'
        "    if peft_config.use_dora:\n"
        "AttributeError: 'LoraConfig' object has no attribute 'use_dora'. Did you mean: 'use_rslora'?\n"
    )
    report = diagnose(lib.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "version_mismatch"
    script = lib.replace("/opt/venv/lib/python3.12/site-packages/transformers/integrations/peft.py", "train.py")
    assert diagnose(script.encode()).diagnosis.cause != "version_mismatch"
    none = lib.replace("'LoraConfig' object", "'NoneType' object")
    assert diagnose(none.encode()).diagnosis.cause != "version_mismatch"


def test_an_oom_while_the_engine_places_the_whole_model_is_set_up() -> None:
    """PrimeIntellect-ai/verifiers#106: an OOM under DeepSpeed's engine moving the 72B model to the GPU, its message cut
    ("torch.OutOfMemoryError: CUDA o"), read as an OOM "at a point the traceback does not show". Here the engine's
    mixed-precision cast in the same function (DeepSpeed 0.19.8 `_configure_distributed_model`): the set-up phase."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/deepspeed/runtime/engine.py", line 1762, in '
        "_configure_distributed_model\n"
        "    self._cast_module_mixed_precision(param_dtype, buffer_dtype, is_zero_init_model)\n"
        '  File "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", line 1355, in convert\n'
        "    return t.to(device, dtype)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.02 GiB is free.\n"
    )
    report = diagnose(log.encode())
    assert report.diagnosis.cause == "gpu_oom" and "set up" in report.diagnosis.title
