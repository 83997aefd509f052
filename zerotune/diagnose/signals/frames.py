"""Where a failure happened, for the failures no message names: the family of the code in each
traceback frame (the module path and function), and of the exception type.

A failure's message varies with versions and wrappers, and logs are often cut (the exception line
lost, a notebook or rich traceback instead of Python's), but the code it fails in does not: a frame in
torch's cpp_extension is an op build, one in DeepSpeed's swap_tensor an NVMe swap, one under
load_checkpoint a checkpoint. diagnose reads these only as a fallback (zerotune.diagnose.causes), when
no message-specific signal explains a failed run.

Frame formats: Python's `File "PATH", line N, in FUNC`; rich's boxed `PATH:N in FUNC`; pytest's short
traceback `PATH:N: in FUNC` (_pytest/_code/code.py: `--tb=short` entries are ReprFileLocation's `PATH:LINENO: MESSAGE`
with the message `in NAME`, the source line after it; DeepSpeed#6656); IPython's `PATH in FUNC(ARGS)`, since IPython 8
`File PATH:N, in FUNC(ARGS)` (ultratb's frame header, as ipykernel's traceback test spells it; axolotl#705, wrapped). The launcher's own frames (torch/distributed/run.py, elastic/) are in every
torchrun failure whatever its cause, so they name no family.
"""

from __future__ import annotations

import re

from zerotune.diagnose.records import Event, LogLine, Scan, normalise
from zerotune.diagnose.signals.process import EXCEPTION_LINE
from zerotune.diagnose.signals.signal import Hit, Signal

_FRAME = re.compile(
    r'(?:File )?"(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>.]+)'  # Python (its `File ` lost when a paste starts mid-line)
    r"|(?P<rpath>\S+\.py):\d+[:,]? in (?P<rfunc>[\w<>.]+)"  # rich; pytest's short traceback (`:N: in`); IPython 8 (`:N, in`)
    r"|(?P<npath>\S+\.py) in (?P<nfunc>[\w<>.]+)\("  # IPython
)

CHECKPOINT_FUNCTIONS = (
    r"\w*(?:load|save)\w*_checkpoint\w*|save_16bit_model|_load_optimizer_and_scheduler|_load_rng_state"
    r"|get_fp32_state_dict_from_zero_checkpoint|convert_zero_checkpoint_to_fp32_state_dict|_load_pretrained_model"
)
"""Functions that save or load a checkpoint: any whose name says it loads or saves one (DeepSpeed's engine
`load_checkpoint`, `_load_zero_checkpoint`, `save_checkpoint`; transformers' `_load_from_checkpoint` and
integrations/deepspeed.py `deepspeed_load_checkpoint`, LlamaFactory#8098; accelerate's
`load_checkpoint_in_model`), and those of zero_to_fp32 and the Trainer that do without saying so (0.19.8,
transformers 4.5x), and transformers' `PreTrainedModel._load_pretrained_model` (modeling_utils.py), which reads a
saved model's state dict into the model `from_pretrained` built (axolotl#705: a ZeRO-3 save of placeholders, its
load refused there). Activation checkpointing's functions (`checkpoint`, `CheckpointFunction.forward`)
neither load nor save. IPython 8 names a method with its class (`PreTrainedModel._load_pretrained_model`), so the
families match the name after a `.` as after a space."""

FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cause, re.compile(pattern))
    for cause, pattern in (
        ("op_build", r"torch/utils/cpp_extension\.py|deepspeed/ops/op_builder/"),
        ("nvme_aio", r"deepspeed/runtime/swap_tensor/|deepspeed/ops/aio/|deepspeed/nvme/"),
        # the loss scaler's update after an overflow: DynamicLossScaler.update_scale (runtime/fp16/
        # loss_scaler.py) raises at the minimum scale; stage3.py `_overflow_check_and_loss_scale_update`,
        # and `_update_scale` of stage3.py, stage_1_and_2.py and fp16/(un)fused_optimizer.py call it. The
        # scaler's `backward` is no such place: it only scales the loss and calls torch's backward, so every
        # fp16 ZeRO backward passes it, whatever fails below (DeepSpeed#4505: a bare ZeRO-3 bucket assert
        # under `loss_scaler.py ... in backward` / `scaled_loss.backward(...)`)
        (
            "fp16_overflow",
            r"deepspeed/runtime/fp16/loss_scaler\.py (?!backward$)|[\s.](?:_overflow_check_and_loss_scale_update|_update_scale)$",
        ),
        (
            # runtime/state_dict_factory.py is DeepSpeed's reader of the mp_rank_*_model_states.pt files
            # (SDLoaderFactory; `check_ckpt_list` asserts it was given some: DeepSpeed PR 1322's report)
            "checkpoint",
            r"deepspeed/checkpoint/|checkpoint_engine/|zero_to_fp32\.py|ds_to_universal\.py|torch/serialization\.py"
            r"|deepspeed/runtime/state_dict_factory\.py|safetensors/|[\s.](?:" + CHECKPOINT_FUNCTIONS + r")$",
        ),
        (
            "zero3_param",
            r"deepspeed/runtime/zero/(?:partition_parameters|partitioned_param_coordinator|parameter_offload"
            r"|mics|linear)\.py",
        ),
        ("config_rejected", r"deepspeed/runtime/(?:zero/)?config(?:_utils)?\.py|pydantic/"),
        (
            "version_mismatch",
            r"transformers/utils/versions\.py|transformers/utils/import_utils\.py|importlib/metadata|pkg_resources/",
        ),
        ("nccl_error", r"torch/distributed/distributed_c10d\.py|deepspeed/comm/"),
    )
)
"""(cause, the frame `PATH FUNC` it shows), most specific first: a frame of a DeepSpeed module that does
one thing. zero/linear.py is ZeRO-3's linear over gathered parameters (LinearFunctionForZeroStage3, which
saves the gathered weight for backward): a failure in it is a partitioned parameter's state (ArcticTraining
PR 265: parameters gathered under torch.inference_mode reach training as inference tensors). deepspeed/runtime/zero/stage3.py and engine.py are left out: every ZeRO failure passes them."""

RAISED_IN: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "config_rejected",
        re.compile(
            r"accelerate/accelerator\.py _prepare_deepspeed$|accelerate/utils/deepspeed\.py "
            r"|transformers/integrations/deepspeed\.py (?:trainer_config_process|trainer_config_finalize|fill_match)$"
        ),
    ),
    ("unclassified", re.compile(r"deepspeed/(?:comm/comm|utils/distributed)\.py mpi_discovery$")),
)
"""(cause, the frame `PATH FUNC`) of code whose own raise is that cause, though a failure deeper under it
is not: accelerate's and transformers' DeepSpeed integrations check the config before they call
deepspeed.initialize (accelerate/accelerator.py `_prepare_deepspeed`, transformers/integrations/
deepspeed.py `trainer_config_finalize`), so they count only as the last frame before the exception. DeepSpeed's
`mpi_discovery` (deepspeed/comm/comm.py at 0.19.8, deepspeed/utils/distributed.py before the comm layer) runs only when
init_distributed finds no launcher's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT or LOCAL_RANK ("Not using the
DeepSpeed or dist launchers, attempting to detect MPI environment..."), and opens with `from mpi4py import MPI`: what
it raises is a launch without the distributed environment (axolotl#1211: accelerate's simple launcher, fixed by
`--use_deepspeed`), neither a collective (nccl_error, as deepspeed/comm/ frames are) nor a release (an ImportError's
version_mismatch). No cause in the table is a launch's missing environment, so it is `unclassified`, the import its
evidence."""

EXCEPTION_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nccl_error", re.compile(r"DistBackendError|DistNetworkError|NCCL")),
    ("checkpoint", re.compile(r"UnpicklingError|SafetensorError")),
    ("version_mismatch", re.compile(r"^\s*(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError)\b")),
)
"""(cause, the exception line it shows) when no frame names a family."""


def _where(text: str) -> str | None:
    """`PATH FUNC` of a traceback frame line, or None."""
    m = _FRAME.search(text)
    if m is None:
        return None
    path = (m.group("path") or m.group("rpath") or m.group("npath")).replace("\\", "/")
    return f"{path} {m.group('func') or m.group('rfunc') or m.group('nfunc')}"


def frame_family(text: str, families: tuple[tuple[str, re.Pattern[str]], ...] = FAMILIES) -> str | None:
    """The cause family of a traceback frame line, or None (not a frame, or code of no family)."""
    where = _where(text)
    if where is None:
        return None
    return next((cause for cause, pattern in families if pattern.search(where)), None)


LIBRARY_CODE = re.compile(r"(?:site|dist)-packages/|/(?:deepspeed|torch|transformers|accelerate)/")
"""A frame in an installed package, or in a source tree of the libraries diagnose reads (`…/DeepSpeed/deepspeed/…`),
rather than in the training script."""


def raised_in_library(hit: Hit) -> bool:
    """Whether the exception line of `hit` was raised in library code: the nearest frame before it (its rank's
    lines, back to the `Traceback` header) is LIBRARY_CODE."""
    for line in reversed(hit.before(hit.line.rank)):  # in log order: the nearest frame last
        where = _where(line.text)
        if where is not None:
            return LIBRARY_CODE.search(where) is not None
    return False


_IMPORT_SOURCE = re.compile(r"^\s*(?:from\s+[\w.]+\s+import\s|import\s+[\w.]+\s*(?:$|,|\sas\s))")
"""Python's source line under a frame that is an import statement (`from transformers.deepspeed import
HfDeepSpeedConfig`, `import deepspeed`), read without its line prefixes (records.normalise: `[rankN]:`, a
timestamp)."""


_IMPORT_MACHINERY = re.compile(r"^(?:<frozen importlib\._bootstrap(?:_external)?>|\S*importlib/__init__\.py) ")
"""Frames of Python's import system (`<frozen importlib._bootstrap>` `_find_and_load`, `_call_with_frames_removed`,
`importlib/__init__.py` `import_module`): a stack passes them only while a module is being imported, including the
lazy imports of transformers' and trl's `_LazyModule._get_module`."""


def _last_frame(hit: Hit) -> None:
    """Any traceback frame, of a family or not: with no `Traceback` header or exception line in the log
    (an excerpt cut on both sides), the frames alone still show that the run failed. A frame inside an import
    is remembered: a traceback cut right after it failed importing (located). That is a frame whose source
    line (the next line, Python's format) is an import statement, a frame of the import system, or the body of
    the module the frame before imports (`in <module>` right after an import: ds_report's `from
    deepspeed.env_report import cli_main`, then deepspeed/__init__.py's `<module>`, DeepSpeed#5603)."""
    where = _where(hit.line.text)
    if where is not None:
        s = hit.scan
        previous_imports = s.last_frame is not None and s.last_frame is s.last_frame_import
        s.last_frame = hit.line
        source = hit.data[hit.end + 1 : hit.end + 1 + 512].split(b"\n", 1)[0].decode("utf-8", "replace")
        if (
            _IMPORT_SOURCE.match(normalise(source)[0])
            or _IMPORT_MACHINERY.match(where)
            or (previous_imports and where.endswith(" <module>"))
        ):
            s.last_frame_import = hit.line


def _frame(hit: Hit) -> None:
    if _where(hit.line.text) is None:
        return
    s = hit.scan
    cause = frame_family(hit.line.text)
    if cause is not None:
        s.add(s.frame_causes, Event(hit.line, cause, "frame"))
        s.last_frame_cause = Event(hit.line, cause, "frame")


_NOT_IMPLEMENTED = re.compile(r"^\s*NotImplementedError\b")
_DEEPSPEED_RUNTIME = re.compile(r"deepspeed/runtime/")
"""DeepSpeed's runtime raises NotImplementedError for an option, or a combination of options, it does not implement
(0.19.8: engine.py `_do_optimizer_sanity_check`'s "unsupported mix of model_dtype and grad_accum_dtype" and amp with
fp16/bf16, "ZeRO stage N not implemented", coalesce_grad_reduction outside ZeRO 1-3 or under pipeline parallelism;
pipe/module.py's partitioning method; stage3.py's elastic checkpointing; config.py's sparsity mode). Before the BF16
optimizer took bf16 with pipeline parallelism, pipe/engine.py `_exec_reduce_grads` raised it bare for bf16 with a ZeRO
stage (gpt-neox#963, fixed by that project's config: gpt-neox PR 1032). The message, when there is one, names the
option; the fix is the config, so `config_rejected`."""


def _exception(hit: Hit) -> None:
    if EXCEPTION_LINE.match(hit.line.text):
        s = hit.scan
        if (
            _NOT_IMPLEMENTED.match(hit.line.text)
            and s.last_frame is not None
            and _DEEPSPEED_RUNTIME.search(_where(s.last_frame.text) or "")
        ):
            s.add(s.frame_causes, Event(hit.line, "config_rejected", "raised"))
            return
        raised = frame_family(s.last_frame.text, RAISED_IN) if s.last_frame is not None else None
        if raised is not None:
            s.add(s.frame_causes, Event(hit.line, raised, "raised"))
            return
        for cause, pattern in EXCEPTION_FAMILIES:
            if pattern.search(hit.line.text):
                hit.scan.add(hit.scan.frame_causes, Event(hit.line, cause, "exception"))
                return


DTYPE_MISMATCH = re.compile(
    r"expected scalar type \w+ but found \w+|[Ff]ound dtype \w+ but expected \w+"
    r"|mat1 and mat2 (?:to have|must have) the same dtype|must have the same type as input tensor"
    r"|dtypes match, got \w+ for the destination|Input type \(.+\) and weight type \(.+\) should be the same"
)
"""torch refusing to mix tensor dtypes (aten's "expected scalar type BFloat16 but found Float", matmul's "expected
mat1 and mat2 to have the same dtype", c10d's all-gather "output tensor must have the same type as input tensor",
index_put's "dtypes match, got Float for the destination"): the message names the failure, a precision mismatch
between the model, its inputs and the config, so where it was raised says nothing of the cause. ZeRO-3's linear
(DeepSeek-MoE#35: a gate computed in float32 against bf16 weights), ZeRO-3's parameter all-gather (Firefly#127:
a bf16 model under an fp16 config) and the loss scaler's backward all raise it."""


def located(scan: Scan) -> Event | None:
    """The family of the failure: the first exception raised in code of a family (RAISED_IN), else the
    deepest family frame before the first exception line (its stack), else the last family frame in
    the log (a traceback cut before its exception line), else the first exception of a family. A traceback
    cut inside an import (no exception line in the log) failed importing. None when
    the first exception is a dtype mismatch (DTYPE_MISMATCH): its message, not its place, says what failed."""
    first: LogLine | None = scan.exceptions[0] if scan.exceptions else None
    if first is not None and DTYPE_MISMATCH.search(first.text):
        return None
    if first is None and scan.last_frame is not None and scan.last_frame_import is scan.last_frame:
        # a traceback cut inside an import (_last_frame): the import raised (an ImportError or
        # ModuleNotFoundError the cut lost, as EXCEPTION_FAMILIES reads them; LMFlow#913's `from
        # transformers.deepspeed import HfDeepSpeedConfig`, a module transformers 4.46 removed; torch 2.4's
        # removals under `import deepspeed`, DeepSpeed#5603 and alignment-handbook#180)
        return Event(scan.last_frame, "version_mismatch", "import")
    raised = [e for e in scan.frame_causes if e.value == "raised" and first is not None and e.line == first]
    if raised:
        return raised[0]
    frames = [e for e in scan.frame_causes if e.value == "frame"]
    if scan.last_frame_cause is not None and scan.last_frame_cause not in frames:
        frames.append(scan.last_frame_cause)
    if frames:
        before = [e for e in frames if first is None or e.line.number < first.number]
        return before[-1] if before else frames[-1]
    return next((e for e in scan.frame_causes if e.value == "exception"), None)


SIGNALS = (
    Signal(
        "last_frame",
        (rb'File "', rb"\.py:\d+ in \w", rb"\.py:\d+: in [\w<]", rb"\.py:\d+, in [\w<]", rb"\.py in \w+\("),
        (_last_frame,),
    ),
    Signal(
        "frame_causes",
        (
            rb'File "',
            rb"\.py:\d+ in \w",
            rb"\.py:\d+: in [\w<]",
            rb"\.py:\d+, in [\w<]",
            rb"\.py in \w+\(",
            rb"Error:",
            rb"Exception:",
        ),
        (_frame, _exception),
    ),
)
