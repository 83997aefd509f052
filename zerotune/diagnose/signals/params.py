"""Parameter and checkpoint signals: ZeRO checkpoints that fail to save, load or convert, and ZeRO-3
partitioned parameters used outside the engine.

Checkpoints (deepspeed/runtime/engine.py load_checkpoint/save_16bit_model, deepspeed/utils/
zero_to_fp32.py, deepspeed/checkpoint/ds_to_universal.py at 0.19.8): a resume at another data-parallel
world size ("The checkpoint being loaded used a DP world size of 8 but the current world size is 4"),
a model saved under ZeRO-3 without gathering (every weight `torch.Size([0])` in the file, or "Did not
save the model ... because stage3_gather_16bit_weights_on_model_save is False"), the converter
failing, the per-rank files missing; and any exception raised under a checkpoint function.

ZeRO-3 parameters (deepspeed/runtime/zero/partition_parameters.py): outside a forward the engine
runs, a partitioned parameter is an empty tensor (`ds_tensor` holds this rank's shard), so a script
that reads it (an embedding resize after init, a `state_dict()` load into the model, a metric on the
weights) sees shape [0]: "'weight' must be 2-D", "the shape in current model is torch.Size([0])".
"""

from __future__ import annotations

import re

from zerotune.diagnose.records import Event, LogLine
from zerotune.diagnose.signals.frames import frame_family
from zerotune.diagnose.signals.signal import Hit, Signal

_WORLD = re.compile(r"used a DP world size of (\d+) but the current world size is (\d+)")
_CHECKPOINT_LINES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("resume_world_size", _WORLD),
    (
        "empty_weights_saved",
        re.compile(
            r"copying a param with shape torch\.Size\(\[0\]\) from checkpoint"
            r"|^[\w.]+\s*[:=]\s*torch\.Size\(\[0\]\)\s*$"
            r"|'[\w.]+'(?:, |: )tensor\(\[\], device="  # a saved state dict printed with empty tensors
        ),
    ),
    ("not_gathered_on_save", re.compile(r"stage3_gather_16bit_weights_on_model_save")),
    (
        # torch's load_state_dict row with a real shape on both sides (a [0] on either side is ZeRO-3's
        # placeholder: empty_weights_saved above, zero3_param's current_model_empty)
        "shape_mismatch",
        re.compile(
            r"copying a param with shape torch\.Size\(\[[1-9][\d, ]*\]\) from checkpoint, "
            r"the shape in current model is torch\.Size\(\[[1-9]"
        ),
    ),
    (
        # torch's load_state_dict row for a parameter whose copy raised (torch/nn/modules/module.py
        # `_load_from_state_dict`: 'While copying the parameter named "K", whose dimensions in the model are S and whose
        # dimensions in the checkpoint are S, an exception occurred : (...)', or the checkpoint's value was no tensor):
        # the load failed though the shapes agree; `_checkpoint` tells a meta-tensor copy apart (copy_meta)
        "copy_failed",
        re.compile(
            r'While copying the parameter named "[^"]*", (?:whose dimensions in the model are .*an exception occurred'
            r"|expected torch\.Tensor or Tensor-like object from checkpoint)"
        ),
    ),
    ("universal", re.compile(r"ds_to_universal|load_universal|[Uu]niversal checkpoint")),
    (
        "convert",
        re.compile(
            r"zero_to_fp32|_optim_states\.pt' under|numels out of \d+ - something is wrong"
            r"|No ZeRO files found|unknown zero stage"
        ),
    ),
    (
        # a checkpoint that is a folder opened as one file: DeepSpeed saves a folder of per-rank files (and
        # Lightning's DeepSpeed strategies name that folder `*.ckpt`), which torch.load/open cannot read as a
        # file (lightning-thunder#1942: "Is a directory: '.../last.ckpt'")
        "folder_as_file",
        re.compile(
            r"IsADirectoryError: .*Is a directory: '[^']*(?:\.(?:ckpt|pt|pth|bin|safetensors)|checkpoint[^'/]*"
            r"|global_step\d+)/?'"
        ),
    ),
    (
        "files_missing",
        re.compile(r"(?:mp_rank_\d+_model_states|_optim_states)\.pt|Unable to find latest file at"),
    ),
    (
        # the writer of torch.save's zip container (caffe2/serialize/inline_container.cc: "PytorchStreamWriter
        # failed writing file", "unexpected pos N vs M" when a write came up short) or safetensors' serializer
        # ("Error while serializing: IoError(... StorageFull ...)"): the file system refused the file, usually a
        # full disk or quota (LlamaFactory#5155, DeepSpeedExamples#384)
        "unwritable",
        re.compile(r"PytorchStreamWriter|inline_container\.cc:\d+\] \. unexpected pos|Error while serializing"),
    ),
    (
        "unreadable",
        re.compile(
            r"SafetensorError|Error while deserializing header|PytorchStreamReader failed"
            r"|invalid load key|not a zip archive|Unable to load weights from"
        ),
    ),
)
"""(kind, message) of checkpoint failures, most specific first."""

_NOT_CHECKPOINT = ("out of memory", "NCCL", "Timeout", "timed out", "OutOfMemory")


def _checkpoint(hit: Hit) -> None:
    text, s = hit.line.text, hit.scan
    for kind, pattern in _CHECKPOINT_LINES:
        m = pattern.search(text)
        if m:
            if (
                kind == "files_missing"
                and ".pt" in m.group(0)
                and not hit.says("Error", "No such file", "not found", "exist")
            ):
                return
            if kind == "copy_failed" and "meta tensor" in hit.wrapped(1024):
                kind = "copy_meta"  # the message wrapped by the terminal: "('Ca" / "nnot copy out of meta tensor"
            value = f"{m.group(1)} -> {m.group(2)}" if kind == "resume_world_size" else None
            if kind == "resume_world_size":
                s.fact("world_size", int(m.group(2)), hit.line)  # the run's own world size
            if not any(e.kind == kind for e in s.checkpoint_errors):
                s.add(s.checkpoint_errors, Event(hit.line, kind, value))
            return
    # an exception raised under a checkpoint function (not an OOM or NCCL failure: those have their own cause)
    if hit.says("Error:", "Exception:") and not hit.says(*_NOT_CHECKPOINT) and not s.checkpoint_errors:
        frames = [line for line in hit.before(hit.line.rank) if line.text.lstrip().startswith("File ")]
        if frames and any(_checkpoint_frame(f) for f in frames[-6:]):
            s.add(s.checkpoint_errors, Event(hit.line, "exception"))


def _checkpoint_frame(frame: LogLine) -> bool:
    return frame_family(frame.text) == "checkpoint"


_ZERO3: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "current_model_empty",
        re.compile(r"(?:the shape in current model is|\(which has shape) torch\.Size\(\[0\]\)"),
    ),
    # torch.utils.checkpoint's recompute check: a tensor saved in the forward came back empty in the
    # recompute, a parameter ZeRO-3 re-partitioned in place while the recompute ran (frozen LoRA base
    # weights under non-reentrant checkpointing: transformers#47254, DeepSpeed PR 8148)
    ("recomputed_empty", re.compile(r"recomputed (?:metadata: )?\{'shape': (?:torch\.Size\()?\[0\]")),
    ("weight_not_2d", re.compile(r"must be 2-D|must be a matrix")),
    (
        "empty_tensor_shape",
        re.compile(
            r"size mismatch, got \d+, \d+x0|must match the size of tensor b \(0\)"
            r"|\(0\) must match the size|shape '\[(?:[^\]]*, )?0(?:, [^\]]*)?\]' is invalid"
            r"|mat2 must be a matrix, got 1-D tensor|invalid for input of size 0"
        ),
    ),
    ("ds_attribute", re.compile(r"has no attribute '(?:ds_id|ds_tensor|ds_status|ds_numel|ds_shape)'")),
    (
        "not_available",
        re.compile(r"ZeroParamStatus\.NOT_AVAILABLE|GatheredParameters|'status': '(?:NOT_AVAILABLE|INFLIGHT)'"),
    ),
    (
        "not_compatible",
        re.compile(r"ZeRO-3 is enabled and is not compatible with|not compatible with (?:DeepSpeed )?ZeRO-3"),
    ),
)
"""(kind, message) of a partitioned parameter read outside the engine."""


_SUMMARY = re.compile(r"'status': '(?:NOT_AVAILABLE|INFLIGHT)', 'numel': \d+, 'ds_numel'")
"""A parameter's ds_summary() (deepspeed/runtime/zero/partition_parameters.py) with a status other than
AVAILABLE: the message of ZeRO-3's availability assertions (`assert param.ds_status ==
ZeroParamStatus.AVAILABLE, param.ds_summary()`), a failure even when interleaved ranks part it from its
"AssertionError" (Qwen-VL#103)."""


def _zero3(hit: Hit) -> None:
    text, s = hit.line.text, hit.scan
    for kind, pattern in _ZERO3:
        if pattern.search(text):
            if kind == "not_available" and not (hit.says("Error", "error", "assert") or _SUMMARY.search(text)):
                return
            if not any(e.kind == kind for e in s.zero3_errors):
                s.add(s.zero3_errors, Event(hit.line, kind))
            return


SIGNALS = (
    Signal(
        "checkpoint_errors",
        (
            rb"DP world size of",
            rb"Size\(\[0\]\) from checkpoint",
            rb"from checkpoint, the shape in current model",
            rb"While copying the parameter named",
            rb"_gather_16bit_weights_on_model_save",
            rb"_to_universal",
            rb"_universal",
            rb"Universal checkpoint",
            rb"_to_fp32",
            rb"_optim_states\.pt",
            rb"_model_states\.pt",
            rb"No ZeRO files found",
            rb"Unable to find latest file",
            rb"Is a directory",
            rb"SafetensorError",
            rb"Error while deserializing",
            rb"PytorchStreamReader",
            rb"PytorchStreamWriter",
            rb"Error while serializing",
            rb"Unable to load weights",
            rb"Size\(\[0\]\)\s*$",
            rb"', tensor\(\[\], device=",
            rb"': tensor\(\[\], device=",
            rb"Error:",
            rb"Exception:",
        ),
        (_checkpoint,),
    ),
    Signal(
        "zero3_errors",
        (
            rb"Size\(\[0\]\)",
            rb"recomputed ",
            rb"Error: shape '",
            rb"AttributeError: ",
            rb"ZeroParamStatus",
            rb"NOT_AVAILABLE'",
            rb"INFLIGHT'",
            rb"GatheredParameters",
            rb"ZeRO-3 is enabled and",
            rb"RuntimeError: ",
        ),
        (_zero3,),
    ),
)
