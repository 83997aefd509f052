"""Round 11 (2026-11-28, h-logs6): forms `diagnose` missed on 15 fresh thread logs, each checked here on a
wording, number or source other than the fixture's (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_torch_elastic_terminating_the_workers_is_a_failed_run() -> None:
    """torch elastic sends SIGTERM to the remaining workers only after one failed: its line alone is a failed
    run (axolotl#1268, the old `WARNING:torch.distributed...` logger form: read as no failure at exit 0). Here
    torch >= 2.2's glog form; with no Python error it is a kill from outside."""
    glog = (
        "W1103 08:12:40.117000 139811 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 5120 closing signal SIGTERM\n"
        "W1103 08:12:40.118000 139811 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 5122 closing signal SIGTERM\n"
    )
    report = diagnose(glog.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "host_oom" and report.fix is not None
    # a rank's own error before it stays the cause: the SIGTERMs are its consequence
    failed_first = "[rank1]: ValueError: labels and logits differ in length\n" + glog
    assert diagnose(failed_first.encode()).diagnosis.cause == "unclassified"
    # a run that received SIGTERM from a scheduler is no worker failure of torch elastic
    assert diagnose(b"wandb: Received SIGTERM, finishing run\n").exit_code == 0


def test_a_traceback_quoted_from_pytest_keeps_its_exception_line() -> None:
    """pytest marks the caught error's lines with `E` and spaces: the exception behind it is the failure
    (ArcticTraining PR 265: read as frames without an exception line). Here an error of no family: diagnose
    names it rather than frames without one."""
    log = (
        '  File "/work/tests/test_collate.py", line 31, in test_collate\n'
        "    batch = collate(samples)\n"
        "E       KeyError: 'labels'\n"
    )
    report = diagnose(log.encode())
    assert report.diagnosis.cause == "unclassified" and report.exit_code == 1
    assert "KeyError: 'labels'" in report.diagnosis.explanation
    # a glog error line (`E1103 ...`) keeps its text: no spaces follow its E
    assert diagnose(b"E1103 08:12:40.117000 1 api.py:826] failed (exitcode: 1) local_rank: 0\n").exit_code == 1


def test_a_failure_in_zero3_linear_is_a_partitioned_parameter() -> None:
    """ZeRO-3's linear (deepspeed/runtime/zero/linear.py) runs over gathered parameters: an error raised in it
    is a parameter's partitioned state (ArcticTraining PR 265, inference tensors saved for backward: read as
    unclassified). Here a weight used while still partitioned (its placeholder of 0 elements)."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 80, in <module>\n'
        "    loss = engine(batch)\n"
        '  File "/usr/lib/python3/dist-packages/deepspeed/runtime/zero/linear.py", line 64, in forward\n'
        "    output = input.matmul(weight.t())\n"
        "RuntimeError: size mismatch, got input (8), mat (8x1024), vec (0)\n"
    )
    report = diagnose(log.encode())
    assert report.diagnosis.cause == "zero3_param" and report.exit_code == 1 and report.fix is not None


def test_accelerate_without_a_micro_batch_to_read_is_a_rejected_config() -> None:
    """accelerate's DeepSpeed preparation refuses when no prepared dataloader gives the per-GPU batch and the
    config leaves it to accelerate (musubi-tuner#44's 1.x wording: unclassified). Here the older wording, cut
    from its traceback; the fix names the key."""
    old = (
        "ValueError: When using DeepSpeed `accelerate.prepare()` requires you to pass at least one of training or "
        "evaluation dataloaders or alternatively set an integer value in `train_micro_batch_size_per_gpu` in the "
        "deepspeed config file\n"
    )
    report = diagnose(old.encode())
    assert report.diagnosis.cause == "config_rejected" and report.exit_code == 1
    assert report.fix is not None and report.fix.changes[0].key == "train_micro_batch_size_per_gpu"


def test_a_checkpoint_the_disk_refused_is_a_write_failure() -> None:
    """torch.save's zip writer stopping short (DeepSpeedExamples#384, "unexpected pos": unclassified) and
    safetensors' serializer failing on the file system (LlamaFactory#5155, StorageFull: given the ZeRO-3
    gather fix of an unreadable file) are a checkpoint the disk refused. Here other positions and a quota."""
    cut = b"RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 9152 vs 9040\n"
    report = diagnose(cut)
    assert report.diagnosis.cause == "checkpoint" and report.exit_code == 1
    assert report.fix is not None and "output directory" in report.fix.changes[0].key
    quota = (
        b"safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 122, kind: "
        b'FilesystemQuotaExceeded, message: "Disk quota exceeded" })\n'
    )
    report = diagnose(quota)
    assert report.diagnosis.cause == "checkpoint"
    assert report.fix is not None and "output directory" in report.fix.changes[0].key
    # a file that cannot be read back keeps its own fix
    unreadable = b"safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge\n"
    report = diagnose(unreadable)
    assert report.fix is not None and "output directory" not in report.fix.changes[0].key
