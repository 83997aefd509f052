"""Round 27 (2026-11-28, h-diag27): forms `diagnose` missed on fresh thread logs, checked here on wordings other than
the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose


def test_ranks_waiting_in_the_store_based_barrier_are_a_start_up_hang() -> None:
    """s-JoL/Open-Llama#47: torch's store-based barrier lines (7 of 8 ranks joined, rank 0 held in wandb's start) read
    as no failure at exit 0. Here torch 2.1+'s wording (`num_workers_joined=`) through Python's logging after
    DeepSpeed's process-group start: still a hang at start-up, exit 1."""
    log = (
        "[2024-02-01 10:00:00,000] [INFO] [comm.py:637:init_distributed] cdb=None\n"
        "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group for "
        "rank: 3, key: store_based_barrier_key:1 (world_size=4, num_workers_joined=3, timeout=0:30:00)\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "hang"


def test_deepspeed_comm_backend_never_set_is_code_older_than_the_comm_layer() -> None:
    """THUDM/Chinese-Transformer-XL#17: the bare 'DeepSpeed backend not set' line (a Megatron-era script under a
    DeepSpeed with its own comm layer) read as no failure at exit 0. Here the assertion as a rank's traceback ends,
    raised from DeepSpeed's broadcast: code that never called deepspeed.init_distributed, version_mismatch."""
    log = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/usr/lib/python3/site-packages/deepspeed/comm/comm.py", line 224, in broadcast\n'
        "[rank1]: AssertionError: DeepSpeed backend not set, please initialize it using init_process_group()\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "version_mismatch"
    assert report.fix is not None and [c.key for c in report.fix.changes] == ["deepspeed.init_distributed()"]


def test_the_shell_finding_no_launcher_is_a_failed_run() -> None:
    """zai-org/VisualGLM-6B#54: bash's 'deepspeed: command not found' read as no failure at exit 0. Here zsh's
    wording for torchrun: the run never started (exit 1). A helper tool missing in a setup script is not the run."""
    assert diagnose(b"zsh: command not found: torchrun\n").exit_code == 1
    healthy = (
        "bash: nvidia-smi: command not found\n"
        "[2024-03-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[1e-05]\n"
        "{'loss': 1.2, 'learning_rate': 1e-05, 'epoch': 0.1}\n"
    )
    assert diagnose(healthy.encode()).exit_code == 0


def test_deepspeeds_mpi_discovery_failing_is_a_launch_without_its_environment() -> None:
    """axolotl#1211: mpi4py missing in DeepSpeed's MPI discovery (accelerate's simple launcher set no RANK/WORLD_SIZE)
    read as an NCCL error by its deepspeed/comm frame. Here `python train.py` reaching deepspeed.initialize, with
    DeepSpeed's own log line before it: neither nccl_error nor version_mismatch (an ImportError's), but unclassified."""
    log = (
        "[2024-04-20 10:00:00,000] [INFO] [comm.py:652:init_distributed] Not using the DeepSpeed or dist launchers, "
        "attempting to detect MPI environment...\n"
        "Traceback (most recent call last):\n"
        '  File "/home/user/train.py", line 40, in <module>\n'
        "    engine, *_ = deepspeed.initialize(model=model, config=cfg)\n"
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/__init__.py", line 143, in initialize\n'
        "    dist.init_distributed(dist_backend=dist_backend,\n"
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/comm/comm.py", line 658, in init_distributed\n'
        "    mpi_discovery(distributed_port=distributed_port, verbose=verbose)\n"
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/comm/comm.py", line 677, in mpi_discovery\n'
        "    from mpi4py import MPI\n"
        "ModuleNotFoundError: No module named 'mpi4py'\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "unclassified"


def test_ipython_8_frames_are_frames_and_qualified_names_keep_their_family() -> None:
    """axolotl#705: IPython 8's `File PATH:N, in Class.method(ARGS)` frame of transformers' _load_pretrained_model,
    cut at the raise, read as no failure at exit 0. Here the same notebook form in DeepSpeed's engine loading a
    checkpoint: a frame (exit 1) whose qualified method name still places it in a checkpoint load."""
    log = (
        "File /opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py:2890, in "
        "DeepSpeedEngine.load_checkpoint(self, load_dir, tag, load_module_strict, load_optimizer_states)\n"
        "   2888     if tag is None:\n"
        "-> 2890     load_path, client_states = self._load_checkpoint(load_dir, tag)\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "checkpoint"
