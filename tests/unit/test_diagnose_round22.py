"""Round 22 (2026-11-28, h-diag21): forms `diagnose` missed on fresh thread logs, checked here on wordings other
than the fixtures' (tests/fixtures/logs/threads.yaml, `first_sight`)."""

from __future__ import annotations

from tests.unit.test_diagnose import diagnose
from zerotune.diagnose.records import normalise


def test_rays_worker_output_prefix_is_a_line_prefix() -> None:
    """OpenRLHF#1001: a Ray actor's traceback behind Ray's `(TemporaryActor pid=6490)` prefix read as unclassified: the
    ImportError line was not seen as an exception line. Here a Ray task with the node's ip in its prefix, and
    SkyPilot's `(worker1, rank=1, pid=N, ip=A)` form."""
    log = (
        '(_train_fn pid=911, ip=172.31.5.9)   File "/opt/conda/lib/python3.11/site-packages/deepspeed/ops/__init__.py", line 8, in <module>\n'
        "(_train_fn pid=911, ip=172.31.5.9)     from .adam import FusedAdam\n"
        "(_train_fn pid=911, ip=172.31.5.9) ImportError: cannot import name 'FusedAdam' from partially initialized module "
        "'deepspeed.ops.adam' (most likely due to a circular import)\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1
    assert report.diagnosis.cause == "version_mismatch" and report.diagnosis.line == 3
    assert normalise("(worker1, rank=1, pid=22249, ip=10.31.0.9) RuntimeError: boom")[0] == "RuntimeError: boom"
    # a parenthesised remark that is not Ray's prefix stays
    assert normalise("(note: pid=3 was slow) done")[0] == "(note: pid=3 was slow) done"


def test_torchs_weights_only_refusal_is_a_version_mismatch() -> None:
    """ms-swift#5808, open-instruct#673: torch 2.6's `torch.load` default (weights_only=True) refusing a trusted
    checkpoint whose loader predates it read as `checkpoint` (UnpicklingError) or unclassified. Here the transformers
    Trainer's rng-state load in torch's other wording (an unsupported opcode, no global to allowlist): the releases of
    torch and the loading library do not go together; a file that is not a checkpoint at all stays `checkpoint`."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/transformers/trainer.py", line 3120, in _load_rng_state\n'
        "    checkpoint_rng_state = torch.load(rng_file)\n"
        '  File "/opt/venv/lib/python3.12/site-packages/torch/serialization.py", line 1470, in load\n'
        "    raise pickle.UnpicklingError(_get_wo_message(str(e))) from None\n"
        "_pickle.UnpicklingError: Weights only load failed. In PyTorch 2.6, we changed the default value of the "
        "`weights_only` argument in `torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only` "
        "set to `False` will likely succeed, but it can result in arbitrary code execution. Do it only if you got the "
        "file from a trusted source.\n"
        "Please file an issue with the following so that we can make `weights_only=True` compatible with your use "
        "case: WeightsUnpickler error: Unsupported operand 149\n"
    )
    report = diagnose(log.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "version_mismatch"
    assert "weights_only" in report.diagnosis.explanation
    corrupt = (
        'Traceback (most recent call last):\n  File "/opt/venv/lib/python3.12/site-packages/torch/serialization.py", '
        "line 1470, in load\n_pickle.UnpicklingError: invalid load key, 'v'.\n"
    )
    assert diagnose(corrupt.encode()).diagnosis.cause == "checkpoint"


def test_a_state_dict_row_whose_copy_raised_is_a_failed_load() -> None:
    """transformers#37300: torch's load_state_dict rows "While copying the parameter named ..., an exception occurred"
    behind transformers' test harness `stderr: ` label read as no failure at exit 0. Here the harness's `stdout: `
    label and a shape-mismatched copy's error: the load failed (checkpoint, exit 1); a meta-tensor copy is explained as
    parameters never materialised."""
    rows = (
        "stdout: [rank1]: RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:\n"
        'stdout: [rank1]: \tWhile copying the parameter named "lm_head.weight", whose dimensions in the model are '
        "torch.Size([32000, 4096]) and whose dimensions in the checkpoint are torch.Size([32000, 4096]), an exception "
        "occurred : ('The size of tensor a (4096) must match the size of tensor b (2048) at non-singleton dimension 1',).\n"
    )
    report = diagnose(rows.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "checkpoint"
    meta = (
        '       While copying the parameter named "embed.weight", whose dimensions in the model are '
        "torch.Size([8, 8]) and whose dimensions in the checkpoint are torch.Size([8, 8]), an exception occurred : "
        "('Cannot copy out of meta tensor; no data!',).\n"
    )
    report = diagnose(meta.encode())
    assert report.exit_code == 1 and report.diagnosis.cause == "checkpoint"
    assert "meta" in report.diagnosis.explanation
