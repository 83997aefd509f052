"""Round 30 (2026-11-28, h-diag30): forms `diagnose` missed on fresh thread logs, checked here on wordings other than
the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_framework_refusing_a_quantized_model_under_zero3_is_the_config() -> None:
    """hiyouga/LlamaFactory#6898: LLaMA-Factory's "DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models."
    (a quantized checkpoint under ZeRO-3) was read as unclassified. Here the wording of its older loader and of the
    scripts derived from it, for on-the-fly bitsandbytes quantization, behind a traceback: the ZeRO stage is the fault."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/MedicalGPT/supervised_finetuning.py", line 1410, in <module>\n'
        "    main()\n"
        '  File "/home/user/MedicalGPT/supervised_finetuning.py", line 1012, in main\n'
        '    raise ValueError("DeepSpeed ZeRO-3 is incompatible with quantization.")\n'
        "ValueError: DeepSpeed ZeRO-3 is incompatible with quantization.\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "config_rejected"
    assert "quantiz" in report.diagnosis.explanation


def test_transformers_refusing_a_device_map_alone_under_zero3_is_the_loading_call() -> None:
    """transformers' later from_pretrained wording names the device_map alone ("DeepSpeed Zero-3 is not compatible
    with passing a `device_map`.", modeling_utils.py), the same refusal as its older low_cpu_mem_usage form."""
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/home/user/train.py", line 30, in <module>\n'
        '[rank0]:     model = AutoModelForCausalLM.from_pretrained(path, device_map="auto")\n'
        "[rank0]: ValueError: DeepSpeed Zero-3 is not compatible with passing a `device_map`.\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "config_rejected"
    assert "device_map" in report.diagnosis.explanation
