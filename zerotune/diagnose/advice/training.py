"""The fix for causes in the training: bf16 for fp16 overflow (where the GPU has it), the checkpoint
setting that applies, gathering ZeRO-3 parameters."""

from __future__ import annotations

import re

from zerotune.diagnose.advice.unchecked import unchecked
from zerotune.diagnose.explain import Job
from zerotune.diagnose.records import Scan
from zerotune.diagnose.report import Change, Diagnosis, FixOut

BF16_GPUS = re.compile(
    r"\b(?:A100|A800|A30|A40|A10G?|A16|A2\b|A[456]000|RTX A\d000|L4|L40S?|L20|H100|H800|H200|H20|GH200|B100|B200|GB200"
    r"|RTX [345]0\d0|RTX 6000 Ada|RTX 5000 Ada)",
    re.I,
)


NO_BF16_GPUS = re.compile(r"\b(?:V100|T4|P100|P40|P4|K80|M60|RTX 20\d0|TITAN|Quadro RTX|GTX)", re.I)
"""bf16 needs compute capability 8.0 (Ampere) or newer: NVIDIA's table of compute capabilities,
https://developer.nvidia.com/cuda-gpus (A100/A30 8.0, A10/A40/RTX 30xx/A6000 8.6, L4/L40/RTX 40xx 8.9,
H100/H200 9.0, B200 10.0; V100 7.0, T4/RTX 20xx/TITAN RTX 7.5, P100 6.0)."""


def _bf16_gpu(scan: Scan) -> bool | None:
    name = str(scan.facts["gpu_name"].value) if "gpu_name" in scan.facts else ""
    if BF16_GPUS.search(name):
        return True
    if NO_BF16_GPUS.search(name):
        return False
    return None


def fp16_overflow(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    bf16 = _bf16_gpu(scan)
    gpu = str(scan.facts["gpu_name"].value) if "gpu_name" in scan.facts else None
    if bf16 is False:
        return unchecked(
            [
                Change(
                    key="fp16.enabled",
                    old=True,
                    new=False,
                    reason=f"{gpu} has no bf16 (compute capability < 8.0): train in fp32, or keep fp16 with a lower "
                    "learning rate and gradient_clipping 1.0",
                )
            ],
            "The loss scale cannot go lower: the gradients overflow fp16 itself.",
        )
    where = (
        f"{gpu} supports bf16" if bf16 else "bf16 needs an Ampere or newer GPU (A100, H100, RTX 30/40xx, L40)"
    )
    return unchecked(
        [
            Change(key="fp16.enabled", old=True, new=False, reason="fp16's range is what overflows"),
            Change(
                key="bf16.enabled",
                old=None,
                new=True,
                reason=f"bf16 has fp32's exponent range: no loss scaling, no overflow ({where}); with HF use --bf16",
            ),
        ],
        "bf16 fixed this in the threads where the GPU had it; on older GPUs train in fp32 instead.",
    )


_CHECKPOINT_FIX: dict[str, tuple[str, object, object, str]] = {
    "empty_weights_saved": (
        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
        False,
        True,
        "gather the partitioned ZeRO-3 weights when saving the model (or convert the checkpoint with zero_to_fp32.py)",
    ),
    "not_gathered_on_save": (
        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
        False,
        True,
        "save_16bit_model / HF save_model write the weights only with this on under ZeRO-3",
    ),
    "resume_world_size": (
        "checkpoint.load_universal",
        None,
        True,
        "convert the checkpoint with deepspeed/checkpoint/ds_to_universal.py, then load it at the new world size",
    ),
    "universal": (
        "(script) ds_to_universal.py",
        None,
        "run on the complete global_step folder",
        "a universal checkpoint is made from every rank's files of one save",
    ),
    "convert": (
        "(script) zero_to_fp32.py",
        None,
        "run on one complete global_stepN folder",
        "the converter needs every rank's *_optim_states.pt of the same save (and the same DeepSpeed version's script)",
    ),
    "shape_mismatch": (
        "(script) model definition",
        None,
        "the checkpoint's own config",
        "build the model from the config the checkpoint was saved with (hidden size, vocabulary) before loading it",
    ),
    "copy_meta": (
        "(script) model construction",
        None,
        "parameters with storage before the load",
        "build the model with real storage before loading: under ZeRO-3 through from_pretrained inside zero.Init (a "
        "transformers release whose ZeRO-3 loading does so), never on the meta device or with an empty/skip init",
    ),
    "copy_failed": (
        "(script) state dict load",
        None,
        "tensors the model's parameters accept",
        "load the checkpoint into the model it was saved from (dtype, device and tensor type as saved)",
    ),
    "folder_as_file": (
        "(script) checkpoint path",
        None,
        "the folder, loaded by the same DeepSpeed strategy",
        "resume through DeepSpeed's load_checkpoint (the strategy that saved it), or convert the folder to one "
        "file with zero_to_fp32.py (convert_zero_checkpoint_to_fp32_state_dict) before loading it elsewhere",
    ),
    "files_missing": (
        "(script) checkpoint folder",
        None,
        "every rank's files of one save",
        "each rank writes its own shard: all ranks must call save_checkpoint, and the folder must be shared or gathered",
    ),
    "unwritable": (
        "(environment) checkpoint output directory",
        None,
        "a file system with room for every checkpoint",
        "the writer stopped short of the file: free space or quota (keep fewer with save_total_limit), or save "
        "to a larger volume",
    ),
    "unreadable": (
        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
        None,
        True,
        "write complete 16-bit weights at save under ZeRO-3 (or convert the ZeRO checkpoint with zero_to_fp32.py)",
    ),
    "exception": (
        "(script) checkpoint",
        None,
        "saved and loaded by every rank",
        "save_checkpoint and load_checkpoint are collective: call them on all ranks with the same tag",
    ),
}


def checkpoint(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    kinds = {e.kind for e in scan.checkpoint_errors}
    kind = next((k for k in _CHECKPOINT_FIX if k in kinds), "exception")
    key, old, new, reason = _CHECKPOINT_FIX[kind]
    if key.startswith("zero_optimization.") and job.config is not None:
        z = job.config.get("zero_optimization")
        if isinstance(z, dict):
            old = z.get(
                "stage3_gather_16bit_weights_on_model_save", z.get("gather_16bit_weights_on_model_save", old)
            )
    return unchecked([Change(key=key, old=old, new=new, reason=reason)], "The training itself is not at fault.")  # type: ignore[arg-type]


def zero3_param(d: Diagnosis, scan: Scan, job: Job) -> FixOut:
    return unchecked(
        [
            Change(
                key="(script) deepspeed.zero.GatheredParameters",
                old=None,
                new="around the code that reads or changes the parameters",
                reason="gathers the full parameter (modifier_rank=0 to write it back); resize embeddings before "
                "deepspeed.initialize, and give a second model (reference, reward) its own engine",
            )
        ],
        "Or use ZeRO stage 2 if the model states fit without partitioning the parameters.",
    )
