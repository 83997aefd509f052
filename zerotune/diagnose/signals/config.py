"""Config signals: the config DeepSpeed prints at start (`json = {`), configs rejected (pydantic
v1/v2 validation errors, DeepSpeed's batch assertions and DeepSpeedConfigError, transformers'
`trainer_config_finalize` mismatch check), library version checks, offload in use, and ZeRO-Offload
refusing a client optimizer. The single facts about the job are signals.facts'.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from zerotune.diagnose.records import FieldError, LogLine, Rejection, Scan
from zerotune.diagnose.signals import frames
from zerotune.diagnose.signals.signal import Hit, Signal

MAX_CONFIG_LINES = 4000
"""DeepSpeed's config dump is ~100-300 lines; a capture longer than this is abandoned."""

# ---- the config dump ------------------------------------------------------------------------------------------


_NON_FINITE = re.compile(r"(?<=[:\[,])(\s*)(-?)(inf|nan)(?=\s*[,\]}]|\s*$)", re.M)
"""A float DeepSpeed's dump prints as Python does: its ScientificNotationEncoder writes a float above 1e3 as
f"{o:e}" and others as f"{o}" (deepspeed/runtime/config_utils.py), so float("inf") comes out `inf`, which JSON
lacks (accelerate's default "steps_per_print": inf, huggingface/accelerate#910). Read as JSON's Infinity/NaN."""


def _finite_json(text: str) -> str:
    return _NON_FINITE.sub(lambda m: m.group(1) + m.group(2) + ("Infinity" if m.group(3) == "inf" else "NaN"), text)


def _config_done(scan: Scan, texts: list[str], depth: int) -> None:
    if depth > 0:
        scan.config_error = "the config dump did not close"
        return
    try:
        value = json.loads(_finite_json("\n".join(texts)))
    except (ValueError, RecursionError) as exc:
        scan.config_error = f"the config dump is not JSON: {exc}"
        return
    if isinstance(value, dict) and scan.config is None:
        scan.config = value


@dataclass
class _ConfigDump:
    """The lines of a multi-line dump, until its braces balance."""

    scan: Scan
    texts: list[str]
    depth: int

    def feed(self, line: LogLine) -> bool:
        self.texts.append(line.text)
        self.depth += line.text.count("{") - line.text.count("}")
        if self.depth <= 0 or len(self.texts) > MAX_CONFIG_LINES:
            _config_done(self.scan, self.texts, self.depth)
            return False
        return True

    def close(self) -> None:
        _config_done(self.scan, [], 1)


def _config_dump(hit: Hit) -> None:
    """DeepSpeedConfig.print_user_config: `json = {` then the config, indented, over many lines."""
    first = hit.line.text.split("json = ", 1)[1]
    depth = first.count("{") - first.count("}")
    hit.scan.config_line = hit.scan.config_line or hit.line
    if depth <= 0:  # the whole dump on one line
        _config_done(hit.scan, [first], depth)
    else:
        hit.follower = _ConfigDump(hit.scan, [first], depth)


# ---- rejected configs -----------------------------------------------------------------------------------------

_VALIDATION = re.compile(r"(\d+) validation errors? for (\w+)")
_FIELD_LINE = re.compile(r"^([A-Za-z_]\w*(?:(?: -> |\.)[\w]+)*)\s*$")
_INPUT_VALUE = re.compile(r"input_value=([^,\]]+)")
_HF_ROW = re.compile(r"^(?:-\s+)?ds\s+(\S+?)=(.*?)\s+vs\s+hf\s+([^=]+?)(?:=(.*))?$")
"""A row; its hf side may be cut after the argument's name (a post that ends mid-row, LlamaFactory#201)."""
_HF_HEADER = "Please correct the following DeepSpeed config values that mismatch"
"""transformers' message (integrations/deepspeed.py trainer_config_finalize); the terminal may wrap it
before its last words, "TrainingArguments values:" (LlamaFactory#201)."""


@dataclass
class _PydanticFields:
    """pydantic's multi-line form: field names on their own line, messages indented or free text."""

    rejection: Rejection
    budget: int

    def feed(self, line: LogLine) -> bool:
        text, fields = line.text.strip(), self.rejection.fields
        fm = _FIELD_LINE.match(text)
        if fm and not text.startswith(("Input", "extra", "Extra", "value", "field")):
            fields.append(FieldError(fm.group(1).replace(" -> ", ".")))
        elif fields and text and not text.startswith(("Traceback", "File ")):
            f = fields[-1]
            f.message = f"{f.message} {text}".strip()
            v = _INPUT_VALUE.search(text)
            if v:
                f.value = v.group(1)
        self.budget -= 1
        return not (self.budget <= 0 or text.startswith(("Traceback", "File ")))

    def close(self) -> None:
        pass


def _pydantic(hit: Hit) -> None:
    text = hit.line.text
    m = _VALIDATION.search(text)
    if not m:
        return
    rej = Rejection(hit.line, "pydantic", model=m.group(2))
    hit.scan.add(hit.scan.rejections, rej)
    inline = text[m.end() :].split("; ")[1:]
    if inline:  # one-line form (zerotune's own launcher): "for Model; field; message; ..."
        for part in inline:
            fm = _FIELD_LINE.match(part.strip())
            if fm:
                rej.fields.append(FieldError(fm.group(1).replace(" -> ", ".")))
            elif rej.fields and not rej.fields[-1].message:
                rej.fields[-1].message = part.strip()
                v = _INPUT_VALUE.search(part)
                rej.fields[-1].value = v.group(1) if v else None
    elif text[m.end() :].strip():  # the error folded onto one line: "for Model field message"
        field_name, _, message = text[m.end() :].strip().partition(" ")
        if _FIELD_LINE.match(field_name):
            rej.fields.append(FieldError(field_name, message))
    else:
        hit.follower = _PydanticFields(rej, 3 * int(m.group(1)) + 2)


@dataclass
class _HfRows:
    """transformers' "- ds KEY=VALUE vs hf ARG=VALUE" rows under the mismatch message."""

    rejection: Rejection
    budget: int

    def feed(self, line: LogLine) -> bool:
        text = line.text.strip()
        m = _HF_ROW.match(text)
        if m:
            self.rejection.fields.append(_hf_field(m))
        if (
            text.startswith("The easiest method")
            or self.budget <= 1
            or (m is None and text and not text.startswith(("-", "TrainingArguments values")))
        ):
            return False
        self.budget -= 1
        return True

    def close(self) -> None:
        pass


def _hf_field(m: re.Match[str]) -> FieldError:
    hf = m.group(3) if m.group(4) is None else f"{m.group(3)}={m.group(4)}"
    return FieldError(m.group(1), f"hf {hf}", m.group(2))


def _hf_mismatch(hit: Hit) -> None:
    """The mismatch message and its rows; rows pasted without the message line (it is often cut
    off, or wrapped into the traceback) are the same rejection."""
    text = hit.line.text.strip()
    if "mismatch TrainingArguments" in text or _HF_HEADER in text:
        rej = Rejection(hit.line, "hf_mismatch", model="TrainingArguments")
    elif (m := _HF_ROW.match(text)) is not None:
        rej = Rejection(hit.line, "hf_mismatch", model="TrainingArguments")
        rej.fields.append(_hf_field(m))
    else:
        return
    hit.scan.add(hit.scan.rejections, rej)
    hit.follower = _HfRows(rej, 40)


_BATCH_ASSERT = re.compile(
    r"Check batch related parameters|(?:Train batch size|Micro batch size per gpu|Gradient accumulation steps): "
    r"-?\d+ has to be greater than 0"
)
_BATCH_NUMBERS = re.compile(r"world_size\s+(-?\d+)\s*!=\s*(-?\d+)\s*\*\s*(-?\d+)\s*\*\s*(-?\d+)")
_BATCH_KEYS = {
    "Train batch size": "train_batch_size",
    "Micro batch size per gpu": "train_micro_batch_size_per_gpu",
    "Gradient accumulation steps": "gradient_accumulation_steps",
}


def _batch_assert(hit: Hit) -> None:
    """DeepSpeed's batch-size assertions (runtime/config.py `_batch_assertion`), with the numbers
    they print; the message may wrap over the next lines (rich tracebacks). Its source line
    (`assert ...`, an f-string) on a traceback is not the message."""
    text = hit.line.text
    if not _BATCH_ASSERT.search(text) or 'f"' in text or "assert " in text:
        return
    joined = hit.wrapped(1024)
    fields: list[FieldError] = []
    m = _BATCH_NUMBERS.search(joined)
    if m:
        message = "train_batch_size != micro_batch_per_gpu * gradient_acc_step * world_size"
        fields = [
            FieldError("train_batch_size", message, m.group(1)),
            FieldError("train_micro_batch_size_per_gpu", "", m.group(2)),
            FieldError("gradient_accumulation_steps", "", m.group(3)),
            FieldError("world_size", "the world size DeepSpeed saw", m.group(4)),
        ]
        if int(m.group(4)) > 0:
            hit.scan.fact("world_size", int(m.group(4)), hit.line)
    else:
        for label, key in _BATCH_KEYS.items():
            v = re.search(re.escape(label) + r": (-?\d+) has to be greater than 0", joined)
            if v:
                fields.append(FieldError(key, f"{label} has to be greater than 0", v.group(1)))
    if not fields:
        fields = [FieldError("train_batch_size", text.strip())]
    hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model="DeepSpeedConfig", fields=fields))


_DS_CONFIG_ASSERTS = re.compile(
    r"zero stage (\d) requires an optimizer|ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    r"|bfloat16 and fp16 modes cannot be simultaneously enabled|MoE is not supported with ZeRO Stage 3"
    r"|is not supported with ZeRO stage \d"
)
"""DeepSpeed's config assertions in the engine and DeepSpeedConfig (runtime/engine.py
_configure_zero_optimizer, _configure_optimizer; runtime/config.py _do_error_check; pipe/engine.py at
0.19.8): the config asks for a combination DeepSpeed refuses."""


_CONFIG_SOURCE = re.compile(
    r"Not sure how to proceed, we were given both a deepscale_config and deepspeed_config"
    r"|DeepSpeed requires --deepspeed_config to specify configuration file"
)
CONFIG_SOURCE = "deepspeed.initialize's config"
"""deepspeed.initialize taking its config from exactly one place (deepspeed/__init__.py initialize at 0.19.8): it
refuses both the deprecated --deepscale_config and --deepspeed_config, and no config at all ("DeepSpeed requires
--deepspeed_config to specify configuration file")."""

CONFIG_GIVEN_TWICE = re.compile(
    r"Not sure how to proceed, we were given deepspeed configs in the deepspeed arguments and deepspeed\.initialize"
)
"""deepspeed.initialize refusing a config given both as `args.deepspeed_config` and as `config=`/`config_params=`: a
check DeepSpeed 0.9.0 added (PR 3186, deepspeed/__init__.py), where earlier releases took one silently. Scripts
written before it pass both (GPT-NeoX, whose thread's fix was DeepSpeed 0.8.x: EleutherAI/gpt-neox#885 and #1043;
bigscience Megatron-DeepSpeed's `args=args`, #386): a script and a DeepSpeed release that do not go together, fixed
by the release the script pins or by passing the config once."""


COMM_BACKEND_UNSET = re.compile(r"DeepSpeed backend not set, please initialize it using init_process_group")
"""DeepSpeed's communication layer asserting its own backend exists before a collective (deepspeed/comm/comm.py at
0.19.8: `assert cdb is not None and cdb.is_initialized()` in new_group, broadcast, all_reduce and the others).
deepspeed.initialize and zero.Init set it up themselves (deepspeed.init_distributed), so the assertion meets code that
calls DeepSpeed's collectives or activation checkpointing before either, having initialised torch.distributed itself:
code written before the comm layer existed (deepspeed/comm, PR 1985, in DeepSpeed 0.6.6 and later), when DeepSpeed
used torch.distributed directly (THUDM/Chinese-Transformer-XL#17, Megatron-based: "does not support newer DeepSpeed",
fixed by DeepSpeed 0.5.9 or a deepspeed.init_distributed call)."""


_STAGE_ONLY = re.compile(
    r"\bonly (?:supported|makes sense|works|available|allowed) (?:with|for|in|under) (?:DeepSpeed )?"
    r"ZeRO[- ]?(?:[Ss]tage[- ]?)?(\d(?:(?:,\s*(?:or\s+)?|\s+or\s+|\s+and\s+)\d)*)",
)
"""A feature that one ZeRO stage alone provides, refused at another: DeepSpeed's own checks (runtime/config.py
_do_error_check: "Fp16_master_weights_and_grads is only supported with ZeRO Stage 2"), transformers' ZeRO inference
(integrations/deepspeed.py deepspeed_init: "ZeRO inference only makes sense with ZeRO Stage 3 - please adjust your
config", raised when the Trainer evaluates or predicts through DeepSpeed under a stage-2 config: ChatGLM3#864, fixed by
the stage-3 config), and the frameworks' "Parameter offloading is only supported with ZeRO stage 3". The stage it
names is in the message; a logger's warning that falls back (a `WARNING` line) is no refusal."""
ZERO_STAGE_FEATURE = "a ZeRO-stage check"


def _deepspeed_config_error(hit: Hit) -> None:
    if (m := _STAGE_ONLY.search(hit.line.text)) is not None and not re.search(
        r"warn", hit.line.text[: m.start()], re.I
    ):
        if 'f"' in hit.line.text or ".format(" in hit.line.text:
            return  # the check's source line quoted by a traceback
        field = FieldError("zero_optimization.stage", hit.line.text.strip()[:200], m.group(1))
        hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model=ZERO_STAGE_FEATURE, fields=[field]))
        return
    if (src := _CONFIG_SOURCE.search(hit.line.text)) is not None and "assert " not in hit.line.text:
        field = FieldError("config", src.group(0), "none" if "requires" in src.group(0) else "both flags")
        hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model=CONFIG_SOURCE, fields=[field]))
        return
    m = _DS_CONFIG_ASSERTS.search(hit.line.text)
    if m and 'f"' not in hit.line.text and "assert " not in hit.line.text and ".format(" not in hit.line.text:
        key = "optimizer" if "requires an optimizer" in m.group(0) else "zero_optimization.stage"
        rej = Rejection(
            hit.line, "assert", model="DeepSpeedConfig", fields=[FieldError(key, m.group(0), m.group(1))]
        )
        hit.scan.add(hit.scan.rejections, rej)
        return
    if "DeepSpeedConfigError" in hit.line.text:
        rej = Rejection(
            hit.line, "assert", model="DeepSpeedConfig", fields=[FieldError("", hit.line.text.strip())]
        )
        hit.scan.add(hit.scan.rejections, rej)


_INDIVISIBLE = re.compile(
    r"(?:AssertionError|ValueError|RuntimeError)\b.*?(?:\b([a-z_]*(?:size|layers|experts|heads|degree)\w*)\b[^,]*?)?"
    r"\b(?:is not|isn't|should be|must be|has to be|not) (?:evenly )?divisible by\b(?:[^a-z]*(?:the )?([\w-]+))?",
    re.I,
)
"""A size the parallel layout must divide, refused when the run starts: DeepSpeed's `_ensure_divisibility`
("4 is not divisible by 8": the world size against ep_size/tp/pp, deepspeed/utils/groups.py), Megatron's
"num_layers should be divisible by pipeline_model_parallel_size" (megatron/core/transformer) and "Number of layers
should be divisible by the pipeline-model-parallel size" (megatron/training/arguments.py). The fix is a setting
(a parallel size, the layer or expert count, the GPU count), as for DeepSpeed's batch assertion."""

_ZERO3_LOADING = re.compile(r"DeepSpeed Zero-3 is not compatible with (?:`?low_cpu_mem_usage|passing a `?device_map)")
"""transformers' `from_pretrained` refusing `low_cpu_mem_usage=True` or a `device_map` while ZeRO-3 is active
(modeling_utils.py: ZeRO-3 builds the model under zero.Init and places the weights itself; its later releases name the
device_map alone, "... not compatible with passing a `device_map`."): the loading call asks for what ZeRO-3 does
(LLamaTuner#69: the script's device_map; removing it ran)."""

_QUANTIZED_UNDER_ZERO3 = re.compile(
    r"DeepSpeed ZeRO-?3 (?:or FSDP )?is (?:incompatible|not compatible) with (?:[\w-]*quantiz(?:ation|ed models?))", re.I
)
"""A training framework refusing a quantized model under ZeRO-3 before loading it (transformers'
`is_deepspeed_zero3_enabled()` checked where the model is loaded): LLaMA-Factory's model/model_utils/quantization.py
`configure_quantization` ("DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models." for a checkpoint that
carries a quantization_config; "DeepSpeed ZeRO-3 is incompatible with quantization." for its bitsandbytes
`quantization_bit` in the older loader, copied by scripts derived from it). ZeRO-3 cuts every parameter into 1-D shards across
the ranks (DeepSpeed 0.19.8 runtime/zero/partition_parameters.py `_partition_param`: `param.contiguous().view(-1)` into
`param.ds_tensor`), while a quantized weight's packed layout and block scales belong to the whole tensor; the ZeRO
stage (or the quantization) is the setting to change (LlamaFactory#6898: DeepSeek-R1's FP8 checkpoint under
ds_z3_offload_config.json)."""


_TENSOR_PARALLEL_LOAD = re.compile(r"found no DeviceMesh from dtensor args for c10d\.\w+")
"""torch's DTensor dispatcher refusing a c10d collective called on DTensors (torch/distributed/tensor/_dispatch.py
`unwrap_to_op_info`: a plain collective has no device mesh to run a DTensor op on): the model handed to DeepSpeed or DDP
holds DTensor parameters, i.e. it was loaded tensor-parallel, and their broadcast of the parameters at start-up fails.
transformers' from_pretrained loaded with its tensor-parallel plan whenever device_map="auto" met a distributed launch,
from its TP support (PR 34184) until PR 38942 decoupled the two (huggingface/transformers#38771, pytorch#155463: "If
they set device_map='cuda', the model is loaded as plain module"; ms-swift PR 4424 for transformers 4.52): the loading
call asks for a parallelism DeepSpeed does not take (pytorch#150401 under accelerate's DeepSpeed)."""


def _loading_or_layout(hit: Hit) -> None:
    text = hit.line.text
    if 'f"' in text or ".format(" in text:
        return  # the assert's source line quoted by a rich traceback, not its message
    if _QUANTIZED_UNDER_ZERO3.search(text):
        if text.strip().startswith("raise "):
            return  # the raise statement a traceback quotes; its exception line follows
        field = FieldError("zero_optimization.stage / quantization", text.strip()[:200])
        hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model=QUANTIZED_UNDER_ZERO3, fields=[field]))
    elif _ZERO3_LOADING.search(text):
        field = FieldError("(from_pretrained) device_map / low_cpu_mem_usage", text.strip()[:200])
        hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model=ZERO3_LOADING, fields=[field]))
    elif _TENSOR_PARALLEL_LOAD.search(text):
        field = FieldError("(from_pretrained) device_map / tp_plan", text.strip()[:200])
        hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model=TENSOR_PARALLEL_LOAD, fields=[field]))
    elif (m := _INDIVISIBLE.search(text)) is not None:
        names = [g for g in m.groups() if g and not g.isdigit()]
        field = FieldError(" / ".join(names) or "parallel sizes", text.strip()[:200])
        hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model=PARALLEL_LAYOUT, fields=[field]))


PARALLEL_LAYOUT = "the parallel layout"
ZERO3_LOADING = "transformers' ZeRO-3 loading"
QUANTIZED_UNDER_ZERO3 = "a quantized model under ZeRO-3"
TENSOR_PARALLEL_LOAD = "a tensor-parallel model load"


_ACCELERATE_IGNORED = re.compile(r"When using `deepspeed_config_file`, the following accelerate config variables will be ignored:\s*\[([^\]]*)\]")
ACCELERATE_PLUGIN = "DeepSpeedPlugin"
"""accelerate's DeepSpeed plugin (accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__, since
accelerate PR 941) refuses DeepSpeed settings in the accelerate config (gradient_accumulation_steps,
zero_stage, offload devices, mixed_precision, ...) next to a `deepspeed_config_file`: the file alone sets
them (yuvalkirstain/PickScore#2, a stale default accelerate config left in the cache)."""


_ACCELERATE_CONFIG_CHECK = re.compile(
    r"Please specify the ZeRO optimization config in the DeepSpeed config"
    r"|(gradient_accumulation_steps) cannot be set to 'auto' in the DeepSpeed config"
)
ACCELERATE_CONFIG_CHECK = "accelerate's DeepSpeed config check"
"""accelerate's DeepSpeed plugin (accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__) reading the DeepSpeed
config it is given (a deepspeed_config_file, or the Trainer's --deepspeed through transformers' TrainingArguments)
refuses one without a `zero_optimization` section ("Please specify the ZeRO optimization config in the DeepSpeed
config." / "... config file." in older releases: zjunlp/KnowLM#87) and an "auto" gradient_accumulation_steps
(transformers' Trainer fills its "auto" values before it builds the plugin; a script accelerate launches with a
deepspeed_config_file has nothing to fill it); both before DeepSpeed sees the config."""


_ACCELERATE_NO_MICRO_BATCH = re.compile(
    r"When using DeepSpeed,? `accelerate\.prepare\(\)` requires you to pass at least one of training or evaluation"
)
ACCELERATE_PREPARE = "accelerate.prepare"
"""accelerate's DeepSpeed preparation (accelerator.py `_prepare_deepspeed`) fills an "auto" or missing
train_micro_batch_size_per_gpu from the batch_size of the dataloaders passed to prepare(); with none that has an
integer one it refuses before deepspeed.initialize. Its wording changed ("... or alternatively set an integer
value in `train_micro_batch_size_per_gpu`", 0.2x; "... dataloaders with `batch_size` attribute returning an
integer value", 1.x: kohya-ss/musubi-tuner#44), its opening did not."""


_OPTIMIZER_PAIRING = re.compile(
    r"Found `optimizer` configured in the DeepSpeed config, but no `scheduler`"
    r"|You cannot (?:specify an? (optimizer|scheduler) in the config file and in the code"
    r"|create a `Dummy(Optim|Scheduler)` without specifying)"
    r"|You can only specify `accelerate\.utils\.DummyScheduler` in the code"
)
OPTIMIZER_PAIRING = "the optimizer/scheduler pairing"
"""The trainer refusing how the DeepSpeed config and the code share the optimizer and the scheduler, before
deepspeed.initialize: accelerate's `_prepare_deepspeed` (accelerate/accelerator.py) takes each from the config or
from the code, never both ("You cannot specify an optimizer in the config file and in the code at the same time"),
and its DummyOptim/DummyScheduler stand in only for a section the config has; transformers 4.30 to 4.33 refused a
DeepSpeed optimizer with an HF scheduler ("Found `optimizer` configured in the DeepSpeed config, but no
`scheduler`": huggingface/transformers#24359, where the maintainer confirms a later release accepts it; LMFlow
PR 616's notes date the change to 4.30.0). The fix is in the config's optimizer and scheduler sections."""


def _optimizer_pairing(hit: Hit) -> None:
    m = _OPTIMIZER_PAIRING.search(hit.line.text)
    if m is None or 'f"' in hit.line.text:
        return
    named = m.group(1) or (m.group(2) or "").lower().replace("optim", "optimizer")
    key = named or "scheduler"
    field = FieldError(key, hit.line.text.strip()[:200])
    hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model=OPTIMIZER_PAIRING, fields=[field]))


def _accelerate_ignored(hit: Hit) -> None:
    """accelerate's refusals: a DeepSpeed config it cannot take (ACCELERATE_CONFIG_CHECK), DeepSpeed keys in its own
    config next to a deepspeed_config_file (the list of keys possibly wrapped over the next lines), or no per-GPU
    micro-batch it can read."""
    if (check := _ACCELERATE_CONFIG_CHECK.search(hit.line.text)) is not None and 'f"' not in hit.line.text:
        field = FieldError(check.group(1) or "zero_optimization", hit.line.text.strip()[:200])
        rej = Rejection(hit.line, "assert", model=ACCELERATE_CONFIG_CHECK, fields=[field])
        hit.scan.add(hit.scan.rejections, rej)
        return
    if _ACCELERATE_NO_MICRO_BATCH.search(hit.line.text):
        field = FieldError("train_micro_batch_size_per_gpu", hit.line.text.strip()[:200])
        hit.scan.add(hit.scan.rejections, Rejection(hit.line, "assert", model=ACCELERATE_PREPARE, fields=[field]))
        return
    if "deepspeed_config_file" not in hit.line.text:
        return
    m = _ACCELERATE_IGNORED.search(hit.wrapped(1024))
    if m is None:
        return
    keys = [k.strip(" '\"") for k in m.group(1).split(",") if k.strip(" '\"")]
    message = "set in the deepspeed_config_file; accelerate refuses it in its own config too"
    rej = Rejection(hit.line, "assert", model=ACCELERATE_PLUGIN, fields=[FieldError(k, message) for k in keys])
    hit.scan.add(hit.scan.rejections, rej)


_FRACTION = re.compile(
    r"Input should be a valid integer, got a number with a fractional part.*?input_value=(\d+(?:\.\d+)?)"
)


def _fraction(hit: Hit) -> None:
    """pydantic's int_from_float message pasted without its "validation error for" header."""
    m = _FRACTION.search(hit.line.text)
    if m and not _VALIDATION.search(hit.line.text):
        rej = Rejection(hit.line, "pydantic", model="DeepSpeedZeroConfig", fields=[
            FieldError("stage3_prefetch_bucket_size" if hf_auto_fraction(m.group(1)) else "", hit.line.text.strip(), m.group(1))
        ])  # fmt: skip
        hit.scan.add(hit.scan.rejections, rej)


def hf_auto_fraction(value: str | None) -> bool:
    """Whether `value` is what transformers' DeepSpeed integration writes for an "auto"
    stage3_prefetch_bucket_size: 0.9 * hidden_size**2 (transformers/integrations/deepspeed.py,
    HfTrainerDeepSpeedConfig.trainer_config_process), a fraction until transformers 4.46 made it an int.
    DeepSpeed >= 0.15 (pydantic v2) refuses it: the two releases do not go together."""
    try:
        v = float(value or "")
    except ValueError:
        return False
    if v <= 0 or v.is_integer():
        return False
    from zerotune.dsconfig.hf_auto import HF_PREFETCH_SHARE

    hidden = round((v / HF_PREFETCH_SHARE) ** 0.5)
    return hidden >= 64 and hidden % 64 == 0 and abs(HF_PREFETCH_SHARE * hidden * hidden - v) < 0.5


def known_zero_keys(rej: Rejection) -> list[str]:
    """Fields DeepSpeed 0.19.8 defines that an (older) DeepSpeed rejected as unknown."""
    from zerotune.dsconfig import schema

    if rej.model != "DeepSpeedZeroConfig":
        return []
    return [
        f.field
        for f in rej.fields
        if ("extra" in f.message.lower() or "not permitted" in f.message)
        and schema.zero_field(f.field) is not None
    ]


# ---- versions, offload --------------------------------------------------------------------------------------


WEIGHTS_ONLY_REFUSAL = r"Weights only load failed|types accepted by default with weights_only"
"""torch.load refusing a file under weights_only=True (torch/serialization.py `_get_wo_message`, whose every wording
starts "Weights only load failed" and ends with DOCS_MESSAGE's "... types accepted by default with weights_only"):
torch 2.6 made weights_only=True the default (pytorch PR 137602, its UNSAFE_MESSAGE says so), so a trusted checkpoint
holding pickled objects (DeepSpeed's LossScaler and ZeroStageEnum, numpy rng states) loads only through a loader
that opts out for its own files: DeepSpeed's checkpoint engine does since PR 7000 (axolotl#2610: "deepspeed version
must be bumped"), transformers' since PR 34632 (ms-swift#4319). The file is fine; torch and the loading library are
releases that do not go together (ms-swift#5808, open-instruct#673)."""

_VERSION = re.compile(
    r"CUDAMismatchException|does not match the version torch was compiled|is required for a normal functioning"
    r"|mismatches the version that was used to compile PyTorch|cannot import name '\w+' from '(?:torch|deepspeed"
    r"|transformers|accelerate|peft|trl)\b|No module named '(?:torch|deepspeed|transformers|accelerate|peft|trl)\.(?![\w.]*_op')"
    r"|module '(?:torch|deepspeed|transformers|accelerate)[\w.]*' has no attribute"
    r"|[Pp]lease (?:upgrade|update|install) (?:to )?(?:torch|deepspeed|transformers|accelerate)\S*\s*>="
    r"|requires (?:torch|deepspeed|transformers|accelerate)\s*>="
    r"|require_version\(\"(?:torch|deepspeed|transformers|accelerate|peft|trl)\s*>="
    r"|'\w*(?:DeepSpeed|Trainer|Accelerator|Optimizer_Stage\d|Zero\w*Optimizer)\w*' object has no attribute '(?!ds_opt_)\w+'"
    r"|no_sync context manager is incompatible with gradient partitioning"
    r"|TypeError: [\w.]*\(\) got (?:an unexpected keyword argument|multiple values for keyword argument) '\w+'"
    r"|^\s*(?:[\w.]+\.)?\w*(?:Error|Exception): .*\b[Vv]ersion mismatch"
    r"|ProcessGroup nccl ?does not support \w+"
    r"|properly initialize your accelerator via"
    r"|" + WEIGHTS_ONLY_REFUSAL
)
"""A library object without an attribute its caller uses, or a call with a keyword the callee does not
take (an API that moved between the releases of DeepSpeed, transformers, accelerate or the training
framework installed together: e.g. Megatron-DeepSpeed PR 316, LLaMA-Factory issues 2552 and 5334) is a
version mismatch too. So is torch's c10d refusing a collective its NCCL process group does not implement
("ProcessGroup nccl does not support _reduce_scatter_base"): the DeepSpeed installed calls a collective
the installed torch lacks (huggingface/accelerate#1098: torch 1.11 with a newer DeepSpeed; upgrading the
pair fixed it). accelerate's "Please make sure to properly initialize your accelerator via `accelerator =
Accelerator()` ..." is its AcceleratorState built outside an Accelerator (state.py `_from_accelerator`): the trainer
of another release (transformers, trl) reaching for a state the installed accelerate sets up otherwise
(huggingface/accelerate#3428 and trl#2555: accelerate 1.4.0 with DeepSpeed 0.16.4, fixed by accelerate 0.34.2), or a
script using accelerate before creating its Accelerator."""
"""CUDA toolkit vs torch (DeepSpeed's CUDAMismatchException, torch.utils.cpp_extension's check), a
library too old or too new for its caller (transformers' dependency checks, a name or submodule that
moved between releases)."""


ABSTRACT_REFUSAL = re.compile(r"Can't instantiate abstract class \w+ with(?:out an implementation for)? abstract method")
"""Python refusing to instantiate a class that lacks methods its abstract base declares (CPython Objects/typeobject.c
`object_new`: "... with abstract methods a, b" before 3.12, "... without an implementation for abstract methods 'a',
'b'" since). Raised where library code instantiates a class of another package, it is an interface one release
extended and the other's class predates: DeepSpeed's get_accelerator (accelerator/real_accelerator.py) instantiates
the platform's accelerator, which must implement every abstract method of DeepSpeedAccelerator
(accelerator/abstract_accelerator.py), and intel-extension-for-deepspeed's XPU_Accelerator lacked those later
DeepSpeed releases added (intel-extension-for-deepspeed#46, fixed by an extension matching the DeepSpeed; #81).
Raised in the training script's own frame, it is the script's subclass (no release to align)."""


MISSING_ATTRIBUTE = re.compile(
    r"AttributeError: '(?!(?:NoneType|str|bytes|int|float|bool|dict|list|tuple|set|Dummy(?:Optim|Scheduler))')\w+' "
    r"object has no attribute '(?!ds_)\w+'"
)
"""Python's AttributeError for an attribute an object's class does not define (Objects/object.c
PyObject_GenericGetAttr: "'%.100s' object has no attribute '%U'"). Raised in library code, it is code written against
another release of the object's library: accelerate's map_pytorch_optim_to_deepspeed reading `optim_bits` from a
bitsandbytes optimizer whose latest release dropped it (axolotl#2191, fixed by accelerate PR 3311), transformers'
Trainer reading an Accelerator attribute of another accelerate (accelerate#2181), DeepSpeed's ZeRO-Offload hooks renamed
under trl (trl#2962). Left out: `NoneType` (an object never built, not a release: DeepSpeed's unset NVMe swapper,
signals.memory), Python's builtin types (a value of the wrong type handed to the library: the caller's), accelerate's
DummyOptim/DummyScheduler (accelerate/utils/deepspeed.py: stand-ins that present the parameters until DeepSpeed's engine
replaces them, with no `step` of their own: stepping one means DeepSpeed was never set up, a DeepSpeed config run as one
process: DeepSpeed#3867, where the Trainer fell back to DataParallel; ms-swift#1775: "ZeRO2/3 on a single GPU"), ZeRO-3's
own `ds_*` attributes (a parameter or module ZeRO-3 never partitioned or hooked, signals.params: the line cannot tell a
release from a script), and the same error raised in the script's own frame (its own bug)."""


def _version(hit: Hit) -> None:
    if "accepting this combination" in hit.line.text:
        return  # DeepSpeed accepts a CUDA minor-version difference: a warning, not the failure
    if _VERSION.search(hit.line.text) or (
        (CONFIG_GIVEN_TWICE.search(hit.line.text) or COMM_BACKEND_UNSET.search(hit.line.text))
        and "assert " not in hit.line.text
    ):
        hit.scan.add(hit.scan.version_errors, hit.line)
    elif (
        ABSTRACT_REFUSAL.search(hit.line.text) or MISSING_ATTRIBUTE.search(hit.line.text)
    ) and frames.raised_in_library(hit):
        hit.scan.add(hit.scan.version_errors, hit.line)


_OFFLOAD = re.compile(r"DeepSpeedCPUAdam|offload_optimizer|offload_param|cpu_adam")


def _offload(hit: Hit) -> None:
    if _OFFLOAD.search(hit.line.text):
        hit.scan.add(hit.scan.offload_hints, hit.line)


def _client_optimizer(hit: Hit) -> None:
    """DeepSpeedEngine._configure_optimizer refusing a client optimizer under ZeRO-Offload
    (ZeRORuntimeException, engine.py at 0.19.8); the message is long and often wrapped."""
    if hit.scan.client_optimizer:
        return
    joined = " ".join(hit.wrapped(2048).split())
    if re.search(
        r"ZeRO-Offload with a client\s*provided optimizer|client provided optimizer .*ZeRO-Offload", joined
    ):
        hit.scan.add(hit.scan.client_optimizer, hit.line)
    elif "ZeRO Offload can only work with DeepSpeed optimizers" in joined:  # transformers < 4.9 (PR 12690)
        hit.scan.add(hit.scan.client_optimizer, hit.line)
    elif "zero_force_ds_cpu_optimizer" in joined and ("Exception" in joined or "poor performance" in joined):
        hit.scan.add(hit.scan.client_optimizer, hit.line)


SIGNALS = (
    Signal("config", (rb"json = \{",), (_config_dump,), claims="json = {"),
    Signal(
        "rejections",
        (
            rb"validation error",
            rb"TrainingArguments",
            rb"vs hf ",  # a mismatch row ("- ds KEY=VALUE vs hf ARG=VALUE")
            rb"Check batch related parameters",
            rb"Micro batch size per gpu",  # DeepSpeed's _batch_assertion: "... has to be greater than 0"
            rb"Train batch size:",
            rb"Gradient accumulation steps:",
            rb"DeepSpeed",
            rb"AssertionError",
            rb"DeviceMesh from dtensor args",  # torch's DTensor dispatcher (_TENSOR_PARALLEL_LOAD), its line cut
            rb"Input should be a valid integer, got a number with a fractional",
            rb"ZeRO-2 and ZeRO-3 are incompatible",
            rb"MoE is not supported",
            rb"ValueError",
            rb"`deepspeed_config_file`",  # accelerate's DeepSpeedPlugin refusal (its ValueError may be cut)
            rb"Please specify the ZeRO optimization",  # ... of a config without its ZeRO section (the same)
            rb"RuntimeError",
            rb"You can",  # accelerate's optimizer/scheduler refusals, pasted without their ValueError
        ),
        (
            _pydantic,
            _hf_mismatch,
            _batch_assert,
            _deepspeed_config_error,
            _fraction,
            _accelerate_ignored,
            _optimizer_pairing,
            _loading_or_layout,
        ),
    ),
    Signal(
        "version_errors",
        (
            rb"CUDA",
            rb"ImportError",
            rb"ModuleNotFoundError",
            rb"No module named '",
            rb'version\("',  # require_version("...": cut to start on a rarer byte (scan.py)
            rb"TypeError: ",
            rb"AttributeError: ",
            rb"version ==",
            rb"PyTorch \(",
            rb"does not support _",  # c10d: "ProcessGroup nccl does not support _reduce_scatter_base"
            rb"Please (?:upgrade|update|install)",
            rb"your accelerator via",  # accelerate's AcceleratorState built outside an Accelerator
            rb"Weights only load failed",  # torch.load's weights-only refusal (WEIGHTS_ONLY_REFUSAL) and its tail:
            rb"Check the documentation of torch\.load",
            rb"Not sure how to proceed, we were given deepspeed",  # CONFIG_GIVEN_TWICE
            rb"DeepSpeed backend not set",  # COMM_BACKEND_UNSET
            rb"_sync context manager is incompatible",  # DeepSpeed 0.16.0's no_sync assertion vs the HF Trainer of its time
        ),
        (_version,),
    ),
    Signal(
        "client_optimizer",
        (
            rb"ZeRO-Offload with",
            rb"ZeRORuntimeException",
            rb"_force_ds_cpu_optimizer",
            rb"ZeRO Offload can only",
        ),
        (_client_optimizer,),
    ),
    Signal(
        "offload_hints", (rb'"offload_', rb"DeepSpeed"), (_offload,)
    ),  # a printed config's offload sections
)
