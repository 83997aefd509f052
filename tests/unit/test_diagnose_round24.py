"""Round 24 (2026-11-28, h-diag23): forms `diagnose` missed on fresh thread logs, checked here on wordings other
than the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_compilers_located_error_in_an_op_source_is_a_failed_build() -> None:
    """DeepSpeed#4552: hipcc's `FILE:LINE:COL: error:` lines alone (a bdist_wheel cut to the compiler's output) read as no
    failure at exit 0. Here nvcc's `FILE(LINE): error:` format in a .cu source; a type checker's error in a Python file
    is not a build."""
    nvcc = (
        "/tmp/pip-install-x/deepspeed/csrc/adam/multi_tensor_adam.cu(87): error: identifier \"__hfma2\" is undefined\n"
        "1 error detected in the compilation of \"csrc/adam/multi_tensor_adam.cu\".\n"
    )
    report = diagnose(nvcc.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "op_build"
    mypy = "src/train.py:12:5: error: Incompatible types in assignment\n"
    assert diagnose(mypy.encode()).diagnosis.cause != "op_build"


def test_an_install_time_op_build_with_a_compiler_error_is_a_failed_build() -> None:
    """DeepSpeed#6795: setuptools building a DeepSpeed op at install, with the compiler's error copied out of the log
    (no location), read as no failure at exit 0. Here a compiler driver's error after the cpu_adam build line: a failed
    build whose fix leaves the op to the JIT build; the build line alone is no failure."""
    log = (
        "      INFO:root:building 'deepspeed.ops.adam.cpu_adam_op' extension\n"
        "      INFO:root:/opt/rocm/bin/hipcc -O3 -std=c++17 -c csrc/adam/cpu_adam.cpp -o build/cpu_adam.o\n"
        "      error: option 'cf-protection=return' cannot be specified on this target\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "op_build"
    assert any(c.key == "(environment) DS_BUILD_CPU_ADAM" for c in report.fix.changes)
    assert diagnose(log.splitlines(keepends=True)[0].encode()).exit_code == 0


def test_dtensor_parameters_reaching_a_collective_are_a_tensor_parallel_load() -> None:
    """pytorch#150401: torch's DTensor dispatcher finding no device mesh for DeepSpeed's parameter broadcast read as
    unclassified. Here DDP's all-reduce on the same model behind torch elastic's `[default1]:` prefix: the model was
    loaded tensor-parallel (device_map="auto" in a distributed launch), a loading call to change."""
    log = "[default1]:AssertionError: found no DeviceMesh from dtensor args for c10d.allreduce_.default!\n"
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "config_rejected"
    assert any("device_map" in c.key for c in report.fix.changes)


def test_missing_attributes_of_stand_ins_and_builtins_are_no_release_mismatch() -> None:
    """DeepSpeed#3867: accelerate's DummyOptim stepped by the Trainer (DeepSpeed never set up: a single-process run)
    read as version_mismatch by round 23's missing-attribute rule. Here its DummyScheduler, and a builtin `dict` handed
    to library code: neither is a release to align."""
    frame = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2480, in _inner_training_loop\n'
        "    self.lr_scheduler.step()\n"
    )
    dummy = frame + "AttributeError: 'DummyScheduler' object has no attribute 'step'\n"
    assert diagnose(dummy.encode()).diagnosis.cause != "version_mismatch"
    builtin = frame + "AttributeError: 'dict' object has no attribute 'step'\n"
    assert diagnose(builtin.encode()).diagnosis.cause != "version_mismatch"
