"""Round 19 (2026-11-28, h-diag19): forms `diagnose` missed on fresh thread logs, checked here on wordings other
than the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_a_master_port_another_process_holds_is_its_own_cause() -> None:
    """Six launches that failed on a master port already in use (Megatron-LM#343, accelerate#74, LlamaFactory#162,
    VLM-R1#289, gpt-neox#849, kohya_ss#2498) read as unclassified or, by their distributed_c10d frames, as an NCCL
    error. Here torch 2.x's DistNetworkError behind a rank prefix (`useIpv6: false`, another port), under torchrun's
    failure summary: the port, named in the title and the fix, and a launch fix, not an NCCL one."""
    log = (
        "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29400 (errno: 98 - Address already in use).\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/opt/conda/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1520, in init_process_group\n'
        "[rank0]: torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29400, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n"
        "E0412 10:00:01.123000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 77) of binary: /usr/bin/python\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    )
    report = diagnose(log.encode())
    d = report.diagnosis
    assert report.exit_code == 1
    assert d.cause == "port_in_use" and "29400" in d.title and d.line == 1
    assert report.fix is not None and report.fix.changes[0].old == 29400
    assert "MASTER_PORT" in report.fix.changes[0].key
    # accelerate's own check, another port
    acc = "ConnectionError: Tried to launch distributed communication on port `29144`, but another process is utilizing it. Please specify a different port\n"
    assert diagnose(acc.encode()).diagnosis.title == "Master port 29144 already in use"
    # torch 1.x's bare TCPStore error behind a rank prefix: no port in the text
    bare = "[rank3]: RuntimeError: Address already in use\n"
    assert diagnose(bare.encode()).diagnosis.cause == "port_in_use"


def test_ports_that_are_not_the_master_port_are_not_read_as_one() -> None:
    """gloo's own transport ports, a web server's port and a privileged port (errno 13) are other failures."""
    gloo = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:176] bind: Address already in use\n"
    flask = "Address already in use\nPort 5000 is in use by another program. Either identify and stop that program, or start the server with a different port.\nOSError: [Errno 98] Address already in use\n"
    denied = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "The server socket has failed to bind to [::]:98 (errno: 13 - Permission denied).\n"
    )
    for log in (gloo, flask, denied):
        assert diagnose(log.encode()).diagnosis.cause != "port_in_use", log
    # c10d's warning for one address while the other binds (socket.cpp tries IPv6, then IPv4): the run goes on
    one = (
        "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).\n"
        "{'loss': 1.25, 'learning_rate': 2e-05, 'epoch': 0.1}\n"
    )
    assert diagnose(one.encode()).diagnosis.cause == "none"


def test_ranks_timing_out_at_different_collective_numbers_with_different_sizes_are_out_of_step() -> None:
    """Qwen-VL-Series-Finetune#17 (mixed text-only and image batches) read as a plain collective timeout: rank 0's
    watchdog at #959 in a 545M-element ALLREDUCE, ranks 1-5 at #963 in a 2,560-element one. A collective finishes
    on all its ranks together, so ranks issuing the same calls time out at the same number. Here torch 2.4's
    wording of an _ALLGATHER_BASE under ZeRO-3, three ranks ahead of one."""
    line = (
        "[rank{r}]:[E1102 10:11:12.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum={seq}, OpType=_ALLGATHER_BASE, NumelIn={n}, NumelOut={m}, "
        "Timeout(ms)=1800000) ran for 1800083 milliseconds before timing out.\n"
    )
    log = line.format(r=2, seq=4410, n=9437184, m=37748736) + "".join(
        line.format(r=r, seq=4412, n=131072, m=524288) for r in (0, 1, 3)
    )
    d = diagnose(log.encode()).diagnosis
    assert d.cause == "nccl_desync" and d.collective is not None
    assert d.collective.seq == 4410 and d.collective.ranks == [0, 1, 2, 3]
    # the same number everywhere (one slow rank's peers waiting) stays a timeout
    same = "".join(line.format(r=r, seq=4410, n=131072, m=524288) for r in (0, 1, 3))
    assert diagnose(same.encode()).diagnosis.cause == "nccl_timeout"
    # different numbers of one size (another process group's counter) are no sign of other calls
    groups = line.format(r=0, seq=4410, n=131072, m=524288) + line.format(r=1, seq=77, n=131072, m=524288)
    assert diagnose(groups.encode()).diagnosis.cause == "nccl_timeout"


def test_the_trainers_optimizer_and_scheduler_pairing_refusals_are_config_rejections() -> None:
    """DeepSpeedExamples#600: transformers 4.30-4.33 refusing a DeepSpeed optimizer without a DeepSpeed scheduler
    read as unclassified. Here accelerate's refusals of the same family, pasted without their ValueError: an
    optimizer both in the config and in the code, a Dummy scheduler without the Dummy optimizer."""
    both = (
        "You cannot specify an optimizer in the config file and in the code at the same time. Please remove the "
        "optimizer from the config file or create `accelerate.utils.DummyOptim` in the code.\n"
    )
    report = diagnose(both.encode())
    assert report.diagnosis.cause == "config_rejected" and report.exit_code == 1
    assert report.fix is not None and report.fix.changes[0].key == "optimizer"
    assert "Remove the optimizer section" in report.fix.text
    only = "ValueError: You can only specify `accelerate.utils.DummyScheduler` in the code when using `accelerate.utils.DummyOptim`.\n"
    fix = diagnose(only.encode()).fix
    assert diagnose(only.encode()).diagnosis.cause == "config_rejected" and fix is not None
    assert fix.changes[0].key == "scheduler"
    # a trainer's hint that merely starts with the same words is no refusal
    hint = "You can disable this warning by setting `use_cache=False`.\n"
    assert diagnose(hint.encode()).diagnosis.cause == "none"


def test_an_nccl_system_error_points_at_the_containers_shared_memory() -> None:
    """DEKR#18 and BELLE#136: ncclSystemError ("unhandled system error") from a container without --ipc=host got
    the generic NCCL advice. Here torch 2.x's DistBackendError with NCCL 2.19's longer ncclSystemError text: the
    class stays nccl_error, the fix names the failing call's usual place in a container."""
    log = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
    )
    report = diagnose(log.encode())
    assert report.diagnosis.cause == "nccl_error"
    assert report.fix is not None and "--ipc=host" in report.fix.text
    # a CUDA error inside NCCL is no system call: no container advice
    cuda = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled cuda error, NCCL version 2.14.3\n"
    fix = diagnose(cuda.encode()).fix
    assert fix is not None and "--ipc=host" not in fix.text


def test_a_printed_config_with_non_finite_floats_is_read_and_gives_the_data_parallel_size() -> None:
    """accelerate#910's healthy run: DeepSpeed's dump prints float("inf") as `inf` (its ScientificNotationEncoder
    formats floats with f-strings), so the JSON failed and the precision came out fp32 from the engine lines, and
    the world size stayed the assumed 1, which made the config's own batch identity a ZT101 error. Here `-inf`
    and `nan` values and another batch triple: 48 = 6 x 2 x 4 ranks."""
    log = (
        "[2024-01-01 00:00:00,000] [INFO] [config.py:1009:print_user_config]   json = {\n"
        '    "train_batch_size": 48, \n'
        '    "train_micro_batch_size_per_gpu": 6, \n'
        '    "gradient_accumulation_steps": 2, \n'
        '    "steps_per_print": inf, \n'
        '    "gradient_clipping": nan, \n'
        '    "prescale_gradients": false, \n'
        '    "bf16": {\n'
        '        "enabled": true\n'
        "    }, \n"
        '    "zero_optimization": {\n'
        '        "stage": 2, \n'
        '        "reduce_bucket_size": -inf\n'
        "    }\n"
        "}\n"
    )
    report = diagnose(log.encode())
    facts = {f.name: f for f in report.facts}
    assert facts["precision (config)"].value == "bf16"
    assert facts["world_size (used)"].value == 4 and "printed config" in facts["world_size (used)"].source
    assert not [n for n in report.notes if "not JSON" in n]
    assert not [x for x in report.lint if x.code in ("ZT003", "ZT101")]
    # "auto" batch values (the Trainer fills them later) give no size
    auto = log.replace('"train_batch_size": 48', '"train_batch_size": "auto"')
    assert {f.name: f for f in diagnose(auto.encode()).facts}["world_size (used)"].value == 1
