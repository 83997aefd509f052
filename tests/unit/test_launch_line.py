"""The job a launch line says (zerotune.schema.launch_line) and the workload options every modelling
command takes (JobInputs -> resolve_job -> Workload).

Argument names are the real ones: transformers `TrainingArguments` (per_device_train_batch_size,
gradient_accumulation_steps, gradient_checkpointing, bf16, deepspeed, use_liger_kernel, optim), TRL
`SFTConfig` (max_length / max_seq_length, packing, padding_free, activation_offloading) and `ModelConfig`
(model_name_or_path, attn_implementation); launchers' `--num_gpus` (deepspeed), `--nproc_per_node`
(torchrun), `--num_processes` (accelerate launch: over all machines)."""

from __future__ import annotations

import json
import typing

import pytest
from typer.testing import CliRunner

from zerotune.cli.app import app
from zerotune.errors import InputError
from zerotune.job import inputs_from_launch, resolve_job
from zerotune.schema import job as job_schema
from zerotune.schema.job import JobInputs
from zerotune.schema.launch_line import parse_launch
from zerotune.schema.workload import Attention, CrossEntropy, Kernel, LogitsHeld, MoeImpl

ISSUE_LINE = (
    "accelerate launch train.py --deepspeed ds.json --model_name_or_path llama3-8b --bf16 "
    "--per_device_train_batch_size 4 --gradient_accumulation_steps 8 --gradient_checkpointing "
    "--use_liger_kernel --attn_implementation flash_attention_2 --max_seq_length 8192"
).split()


def test_the_issue_launch_line_reads_every_job_option():
    line = parse_launch(ISSUE_LINE)
    assert line.config == "ds.json"
    assert line.script == "train.py"
    assert line.inputs == {
        "model": "llama3-8b",
        "precision": "bf16",
        "micro_batch": 4,
        "grad_accum": 8,
        "checkpointing": True,
        "liger": True,
        "attention": "flash",
        "seq_len": 8192,
        "hf": True,
        "omp_threads": 1,
    }
    assert line.unknown == [] and line.ignored == []


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ("deepspeed --num_gpus 4 --num_nodes 2 --master_port 29501", {"gpus": 4, "nodes": 2}),
        ("torchrun --nproc_per_node=8 --nnodes 2 --rdzv_backend c10d", {"gpus": 8, "nodes": 2, "omp_threads": 1}),
        ("python -m torch.distributed.run --nproc-per-node 2", {"gpus": 2, "omp_threads": 1}),
        ("accelerate launch --num_processes 16 --num_machines 2 --mixed_precision bf16",
         {"world_size": 16, "nodes": 2, "precision": "bf16", "omp_threads": 1}),
    ],
)  # fmt: skip
def test_launchers_size_the_job(head, expected):
    line = parse_launch([*head.split(), "sft.py", "--max_length", "4096"])
    assert line.script == "sft.py"
    assert line.inputs == expected | {"seq_len": 4096}


def test_unknown_arguments_are_listed_not_guessed():
    line = parse_launch(
        "deepspeed train.py --learning_rate 2e-5 --my_flag 3 --attn_implementation flex_attention "
        "--optim adafactor --output_dir out".split()
    )
    assert line.unknown == ["--my_flag", "--attn_implementation flex_attention", "--optim adafactor"]
    assert line.ignored == ["--learning_rate", "--output_dir"]
    assert "attention" not in line.inputs and "optimizer" not in line.inputs


def test_hf_booleans_take_values_and_trl_flags_map():
    line = parse_launch(
        "torchrun train.py --gradient_checkpointing False --bf16 True --packing --padding_free true "
        "--activation_offloading=true --optim adamw_torch_fused".split()
    )
    assert line.inputs == {
        "checkpointing": False,
        "precision": "bf16",
        "packing": True,
        "activation_offloading": True,
        "optimizer": "adamw",
    }
    with pytest.raises(InputError, match="not a boolean"):
        parse_launch("torchrun t.py --gradient_checkpointing maybe".split())


def test_training_arguments_file_and_line_precedence(tmp_path):
    args = tmp_path / "sft.json"
    args.write_text(json.dumps({"per_device_train_batch_size": 2, "max_length": 2048, "use_liger_kernel": True}))
    line = parse_launch(
        ["torchrun", "sft.py", str(args), "--per_device_train_batch_size", "8"],
        read=lambda p: json.loads(open(p).read()),
    )
    assert line.inputs["micro_batch"] == 8  # the line wins over the file
    assert line.inputs["seq_len"] == 2048 and line.inputs["liger"] is True
    # explicit CLI options win over the launch line
    inputs, config, notices = inputs_from_launch({"seq_len": 1024, "micro_batch": None}, ISSUE_LINE, str(args))
    assert inputs.seq_len == 1024 and inputs.micro_batch == 4 and config == "ds.json"
    assert any("launch line" in n for n in notices)


def test_liger_sets_its_kernels_and_each_kernel_option_wins():
    said = JobInputs(liger=True, swiglu="plain").workload_options()
    assert said == {"cross_entropy": "fused_linear", "swiglu": "plain", "rmsnorm": "fused", "rotary": "fused"}
    assert JobInputs(liger=False).workload_options()["cross_entropy"] == "fp32"
    with pytest.raises(InputError, match="--attention must be one of"):
        JobInputs(attention="flash2").check()


def test_choices_match_the_workload_literals():
    assert set(job_schema.ATTENTIONS) == set(typing.get_args(Attention))
    assert set(job_schema.CROSS_ENTROPIES) == set(typing.get_args(CrossEntropy))
    assert set(job_schema.KERNELS) == set(typing.get_args(Kernel))
    assert set(job_schema.MOE_IMPLS) == set(typing.get_args(MoeImpl))
    assert set(job_schema.LOGITS_HELD) == set(typing.get_args(LogitsHeld))


def test_liger_shrinks_the_memory_of_a_long_context_job():
    """Fused linear cross-entropy keeps no logits: at 16K tokens of a 128K-vocabulary model HF's fp32
    loss holds 12 B x 16384 x 128256 = 25.2 GB more than Liger's path."""
    base = dict(model="llama3-8b", profile="dgx-h100", seq_len=16384, micro_batch=1)
    plain = resolve_job(JobInputs(**base))
    liger = resolve_job(JobInputs(**base, liger=True, attention="flash"))
    assert liger.workload.cross_entropy == "fused_linear" and plain.workload.cross_entropy == "fp32"
    from zerotune.dsconfig.settings import resolve
    from zerotune.model.memory import estimate_memory

    zero = resolve({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}).zero
    saved = (
        estimate_memory(plain.spec, plain.workload, zero, hardware=plain.hardware).per_gpu.total
        - estimate_memory(liger.spec, liger.workload, zero, hardware=liger.hardware).per_gpu.total
    )
    assert saved > 12 * 16384 * 128256 * 0.9


def test_activation_offloading_moves_checkpoints_to_the_host():
    job = resolve_job(JobInputs(model="llama3-8b", profile="dgx-h100", activation_offloading=True))
    assert job.workload.activation_offloading and job.workload.checkpoint_in_cpu


def test_every_modelling_command_takes_the_workload_options():
    runner = CliRunner()
    for command in ("memory", "predict", "recommend", "validate", "diagnose"):
        result = runner.invoke(app, [command, "--help"], terminal_width=200, env={"COLUMNS": "200"})
        for flag in ("--attention", "--liger", "--cross-entropy", "--packing", "--activation-offloading", "--zero-init", "--moe-impl", "--omp-threads", "--lora-rank", "--lora-targets"):
            assert flag in result.output, (command, flag)


def test_predict_reads_the_launch_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
                                                  "train_micro_batch_size_per_gpu": "auto",
                                                  "gradient_accumulation_steps": "auto"}))  # fmt: skip
    result = CliRunner().invoke(
        app, ["predict", "--profile", "dgx-h100", "--json", "--", *ISSUE_LINE, "--my_flag"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout[result.stdout.index("{") :])
    w = doc["workload"]
    assert (w["seq_len"], w["micro_batch"], w["grad_accum"], w["attention"], w["cross_entropy"]) == (
        8192, 4, 8, "flash", "fused_linear",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("head", "threads"),
    [
        ("deepspeed --num_gpus 8", None),  # each rank's OpenMP pool spans the node
        ("deepspeed --num_gpus 8 --bind_cores_to_rank", None),  # cores / ranks: the node's share again
        ("torchrun --nproc_per_node 1", None),  # torchrun sets OMP_NUM_THREADS=1 only for nproc_per_node > 1
        ("torchrun --nproc_per_node 4", 1),
        ("accelerate launch --num_processes 8", 1),  # --num_cpu_threads_per_process defaults to 1 on GPUs
        ("accelerate launch --num_processes 8 --num_cpu_threads_per_process 12", 12),
    ],
)  # fmt: skip
def test_the_launcher_sets_the_openmp_threads_per_rank(head, threads):
    """torch/distributed/run.py exports OMP_NUM_THREADS=1 when nproc_per_node > 1; accelerate launch exports
    --num_cpu_threads_per_process (default 1 on a GPU job); the deepspeed launcher leaves it unset unless it
    binds cores (zerotune/model/offload.py cpu_adam_rate)."""
    line = parse_launch([*head.split(), "train.py"])
    assert line.inputs.get("omp_threads") == threads


def test_omp_threads_reaches_the_workload():
    job = resolve_job(JobInputs(model="llama3-8b", profile="dgx-h100", omp_threads=1))
    assert job.workload.omp_threads == 1
    assert resolve_job(JobInputs(model="llama3-8b", profile="dgx-h100")).workload.omp_threads is None
