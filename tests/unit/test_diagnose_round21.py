"""Round 21 (2026-11-28, h-diag21): forms `diagnose` missed on fresh thread logs, checked here on wordings other
than the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_pytests_short_traceback_behind_ci_timestamps_is_a_traceback() -> None:
    """DeepSpeed#6656: a CI log of pytest's short traceback (`PATH:N: in FUNC`, each line behind a bracketed ISO
    timestamp) cut right after `from deepspeed import comm as dist` read as no failure at exit 0. Here another
    timestamp offset, a cut after `import deepspeed.ops.op_builder`: the cut import failed (version_mismatch, as
    round 20's Python-format cut); with pytest's exception line the message decides."""
    frames = (
        "[2025-03-01T10:00:00.120+01:00] tests/test_train.py:12: in <module>\n"
        "[2025-03-01T10:00:00.121+01:00]     from mylib.engine import build\n"
        "[2025-03-01T10:00:00.121+01:00] mylib/engine.py:4: in <module>\n"
        "[2025-03-01T10:00:00.122+01:00]     import deepspeed.ops.op_builder\n"
    )
    report = diagnose(frames.encode())
    assert report.exit_code == 1
    assert report.diagnosis.cause == "version_mismatch" and report.diagnosis.line == 3
    # the same frames with pytest's exception line: the message decides (a CUDA OOM here)
    oom = frames + "[2025-03-01T10:00:00.130+01:00] E   torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    assert diagnose(oom.encode()).diagnosis.cause == "gpu_oom"
    # pytest's short frame whose statement is a call, not an import, is still a failed run, with no cause
    call = "tests/test_train.py:40: in test_step\n    engine.step()\n"
    cut = diagnose(call.encode())
    assert cut.exit_code == 1 and cut.diagnosis.cause == "unclassified"
    # Python's warnings print `PATH:N: Category: message`: no frame, no failure
    warn = "/opt/venv/lib/python3.11/site-packages/torch/cuda/__init__.py:61: FutureWarning: pynvml is deprecated\n"
    assert diagnose(warn.encode()).exit_code == 0


def test_a_library_class_missing_methods_its_interface_requires_is_a_version_mismatch() -> None:
    """intel-extension-for-deepspeed#46/#81: DeepSpeed's get_accelerator could not instantiate the plug-in's
    XPU_Accelerator ("Can't instantiate abstract class ... with abstract methods ..."; methods DeepSpeed's
    accelerator interface gained after the plug-in's release) and read as unclassified. Here Python 3.12's wording for
    an HPU plug-in behind a rank prefix: a library instantiating a class from another package that lacks the
    interface's methods is two releases that do not go together."""
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 5, in <module>\n'
        "[rank0]:     engine = build()\n"
        '[rank0]:   File "/usr/lib/python3.12/site-packages/deepspeed/accelerator/real_accelerator.py", line 248, in get_accelerator\n'
        "[rank0]:     ds_accelerator = HPU_Accelerator()\n"
        "[rank0]: TypeError: Can't instantiate abstract class HPU_Accelerator without an implementation for abstract "
        "methods 'get_compile_backend', 'visible_devices_envs'\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1
    assert report.diagnosis.cause == "version_mismatch" and report.diagnosis.line == 6
    # the user's own subclass missing a method (raised in the script's frame) is the script's error, not a release's
    own = (
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 30, in <module>\n'
        "    cb = MyCallback()\n"
        "TypeError: Can't instantiate abstract class MyCallback with abstract method on_step\n"
    )
    assert diagnose(own.encode()).diagnosis.cause == "unclassified"
