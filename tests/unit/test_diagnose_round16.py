"""Round 16 (2026-11-28, h-logs11): forms `diagnose` missed on fresh thread logs, each checked here on a
wording other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_checkpoint_folder_opened_as_a_file_is_a_checkpoint_failure() -> None:
    """A DeepSpeed checkpoint is a folder of per-rank files; opening it as one file fails with IsADirectoryError
    (lightning-thunder#1942's `last.ckpt`, read as unclassified). Here torch.load on a `global_stepN` folder under
    a rank prefix, after its frames."""
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/opt/env/lib/python3.11/site-packages/torch/serialization.py", line 1319, in load\n'
        "[rank0]:     with _open_file_like(f, \"rb\") as opened_file:\n"
        "[rank0]: IsADirectoryError: [Errno 21] Is a directory: 'out/run1/global_step500'\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "checkpoint"
    assert "folder" in report.diagnosis.explanation
    assert report.fix is not None and "zero_to_fp32" in str(report.fix.changes[0])
    # a directory that is no checkpoint (a data path) is not read as one
    data = log.replace("out/run1/global_step500", "data/train_shards")
    assert "folder was opened" not in diagnose(data.encode()).diagnosis.explanation


def test_frames_in_deepspeeds_model_states_reader_place_a_cut_traceback_at_checkpoint_loading() -> None:
    """DeepSpeed's runtime/state_dict_factory.py reads the mp_rank_*_model_states.pt files; a traceback cut to
    its frames (DeepSpeed PR 1322's bare `assert len(self.ckpt_list) > 0`) read as unclassified. Here its
    factory's frame alone, without the engine's caller, the assertion's source line or the exception."""
    log = (
        '  File "/opt/env/lib/python3.9/site-packages/deepspeed/runtime/state_dict_factory.py", line 43, in get_sd_loader\n'
        "    return MegatronSDLoader(ckpt_list, version, checkpoint_engine)\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "checkpoint"
