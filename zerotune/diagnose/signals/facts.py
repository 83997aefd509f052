"""Facts about the job that the log states: world size, nodes and ranks per node, the model, library
versions, the config DeepSpeed prints key by key, and single engine/Trainer/PEFT figures (ZeRO
stage, buckets, sizes, batch).

Sources, as printed at 0.19.8 / transformers 4.x / torch 2.x:
- DeepSpeedConfig.print (deepspeed/runtime/config.py): `  world_size ................... 4`, one
  `name ..... value` line per attribute (zero_config is the pydantic model's `key=value` repr); ds_report
  prints its versions the same way (`torch version ........ 2.1.0`).
- the DeepSpeed launcher (deepspeed/launcher/launch.py, runner.py): `WORLD INFO DICT: {'host': [0, 1]}`,
  `nnodes=1, num_local_procs=4, node_rank=0`, `dist_world_size=4`, `--world_info=<base64 JSON>`.
- torchrun/torch elastic: `--nproc_per_node=8`, `--nnodes=2`, the rendezvous result
  (`group_world_size=2`, `global_world_sizes=[16, ...]`); accelerate: `Num processes: 4`.
- HF scripts: `--model_name_or_path X`, `ModelArguments(model_name_or_path='X', ...)`, `loading
  configuration file X/config.json`, the model config dump (`Model config LlamaConfig {` ... `}`), and
  TrainingArguments' repr, one field a line (`per_device_train_batch_size=4,`, `gradient_accumulation_steps=8,`,
  `gradient_checkpointing=True,`).
- the training script's own arguments, as the DeepSpeed launcher echoes them: the runner's
  `cmd = python -u -m deepspeed.launcher.launch --world_info=... train.py --per_device_train_batch_size 4 ...`
  (runner.py) and launch.py's `process N spawned with command: [...]` and
  `sigkill_handler] [...] exits with return code = -9` (the argv as a Python list); read as a launch
  line is (zerotune.schema.launch_line): micro-batch, accumulation, sequence length, precision,
  checkpointing, the model.
- `zerotune bench`: the job its ranks ran (BENCH_JOB).
"""

from __future__ import annotations

import ast
import base64
import json
import re
import shlex
from dataclasses import dataclass

from zerotune.diagnose.records import LogLine, Scan
from zerotune.diagnose.signals.signal import Hit, Signal
from zerotune.errors import InputError
from zerotune.schema.launch_line import parse_launch

MAX_PRINT_KEYS = 600
"""DeepSpeedConfig.print writes ~150 attributes, ds_report ~40: more names than this are not a config."""
MAX_MODEL_CONFIG_LINES = 400
"""An HF model config dump is 30-150 lines."""


@dataclass(frozen=True)
class FactRow:
    name: str
    trigger: bytes
    pattern: re.Pattern[str]
    cast: type


def _row(name: str, trigger: bytes, pattern: str, cast: type) -> FactRow:
    return FactRow(name, trigger, re.compile(pattern), cast)


_MODEL_PATH = r"""['"]?([\w./~:-]+?)['"]?(?=[\s,)]|$)"""
FACTS = (
    _row("deepspeed_version", rb"DeepSpeed", r"DeepSpeed info: version=([\w.+-]+)", str),
    _row(
        "deepspeed_version", rb"DeepSpeed", r"[Dd]eep[Ss]peed version(?: ==|:)?\s*v?(\d+\.\d+(?:\.\d+)?)", str
    ),
    _row("torch_version", rb"PyTorch version", r"PyTorch version(?: \(GPU\?\))?:\s*(\d+\.\d+[\w.+]*)", str),
    _row("torch_version", rb"Torch version", r"[Tt]orch version:?\s*(\d+\.\d+[\w.+]*)", str),
    _row(
        "transformers_version", rb"`transformers` version", r"`transformers` version:\s*(\d+\.\d+[\w.]*)", str
    ),
    _row("transformers_version", rb"Transformers version", r"Transformers version:?\s*(\d+\.\d+[\w.]*)", str),
    _row("cuda_version", rb"CUDA Version", r"CUDA Version:?\s*(\d+\.\d+)", str),  # nvidia-smi: the driver's
    _row("world_size", rb"world_size", r"\bworld_size\s*[=:]\s*(\d+)", int),
    _row("world_size", rb"world_size", r"\bdp_world_size=(\d+)", int),
    _row("world_size", rb"_world_size=", r"\bdist_world_size=(\d+)", int),
    _row("world_size", rb"Num processes", r"Num processes: (\d+)", int),
    _row("world_size", rb"_world_sizes=\[", r"\bglobal_world_sizes=\[(\d+)", int),
    _row("nodes", rb"_local_procs=", r"\bnnodes[= ](\d+)", int),  # the launcher: nnodes=1, num_local_procs=4
    _row("nodes", rb"_per_node", r"--nnodes[= ](\d+)", int),  # torchrun: --nnodes=2 --nproc_per_node=8
    _row("nodes", rb"_world_size=", r"\bgroup_world_size=(\d+)", int),
    _row("nodes", rb"Num machines", r"num_machines:?\s*(\d+)", int),
    _row("ranks_per_node", rb"_local_procs=", r"\bnum_local_procs=(\d+)", int),
    _row("ranks_per_node", rb"_per_node", r"nproc[_-]per[_-]node[= ]+(\d+)", int),
    _row("ranks_per_node", rb"_gpus", r"--num_gpus[= ](\d+)", int),
    _row(
        "gpus_listed", rb"-include", r"--include[= ]\w+:([\d,]+)", str
    ),  # deepspeed --include localhost:0,1,2,3
    _row("model_name", rb"_name_or_path", r"model_name_or_path['\"]?(?:[= :]+|,\s*)" + _MODEL_PATH, str),
    _row("model_name", rb"MODEL=", r"\bMODEL(?:_NAME(?:_OR_PATH)?|_PATH)?=" + _MODEL_PATH, str),
    _row("model_name", rb"_name_or_path", r'"_name_or_path":\s*"([^"]+)"', str),
    _row("model_config_file", rb"\|configuration_utils", r"loading configuration file (\S+)", str),
    _row("building_op", rb"Building extension module", r"Building extension module (\w+)", str),
    _row("zero_stage", rb"ZeRO stage", r"ZeRO stage (\d) optimizer", int),
    _row("zero_stage", rb"Initializing ZeRO Stage", r"Initializing ZeRO Stage (\d)", int),
    _row("precision", rb"ZeRO stage", r"Creating (?:torch\.)?(\w+) ZeRO stage", str),
    _row("reduce_bucket_size", rb"Reduce bucket size", r"Reduce bucket size (\d+)", int),
    _row("allgather_bucket_size", rb"Allgather bucket size", r"Allgather bucket size (\d+)", int),
    _row("prefetch_bucket_size", rb"Prefetch bucket size", r"Prefetch bucket size (\d+)", int),
    _row("persistent_params", rb"Total ", r"Total persistent parameters: (\d+)", int),
    _row("params", rb"\|\| all params", r"all params: ([\d,]+)", int),  # PEFT's print_trainable_parameters
    _row("trainable_params", rb"\|\| all params", r"trainable params: ([\d,]+)", int),
    _row("trainable_params", rb"Number of trainable", r"Number of trainable parameters = ([\d,]+)", int),
    _row("params", rb"Total ", r"Total number of elements in model: (\d+)", int),
    _row(
        "params", rb"_elems = ", r"num_elems = (\d+(?:\.\d+)?)B", float
    ),  # zero.Init's "finished initializing model"
    _row(
        "micro_batch", rb"Instantaneous batch", r"batch size per device = (\d+)", int
    ),  # HF Trainer's header
    _row("train_batch_size", rb"Total ", r"Total train batch size.*?= (\d+)", int),
    _row("grad_accum", rb"Gradient Accumulation steps", r"Gradient Accumulation steps = (\d+)", int),
    # TrainingArguments' repr, one `name=value,` per line (transformers' "Training/evaluation parameters"
    # log; huggingface/transformers#17607): the whole line is the field, so a Namespace repr is not read
    _row("micro_batch", rb"_train_batch_size=", r"(?:^|\s)per_device_train_batch_size=(\d+),?\s*$", int),
    _row("grad_accum", rb"_accumulation_steps=", r"(?:^|\s)gradient_accumulation_steps=(\d+),?\s*$", int),
    _row("checkpointing", rb"_checkpointing=True", r"(?:^|\s)gradient_checkpointing=(True),?\s*$", bool),
    _row(
        "gpu_name",
        rb"NVIDIA ",
        r"(NVIDIA (?:[A-Z][\w-]*)(?: [\w-]+){0,3}?(?: \d+GB| PCIe| SXM\d?| \w+GB)*)(?=[,;)\]]|\s*$)",
        str,
    ),
    _row("gpu_name", rb"Tesla ", r"(Tesla [A-Z]\d+\w*(?:-\w+)*)", str),
)
"""One fact per name: the first line that states it, by the first row that matches that line."""

_FACT_TRIGGERS = tuple(dict.fromkeys(row.trigger for row in FACTS))


def _cast(row: FactRow, value: str) -> object:
    if row.cast is bool:
        return value == "True"
    if row.cast is int:
        return int(value.replace(",", ""))
    if row.cast is float:
        return float(value) * 1e9  # num_elems = 6.74B
    return value.strip()


def _facts(hit: Hit) -> None:
    for row in FACTS:
        if row.name in hit.scan.facts:
            continue
        m = row.pattern.search(hit.line.text)
        if m:
            hit.scan.fact(row.name, _cast(row, m.group(1)), hit.line)


# ---- the launchers' world -------------------------------------------------------------------------------------


def _world_info(hit: Hit) -> None:
    """{'host': [local ranks]} from WORLD INFO DICT or the runner's base64 --world_info."""
    text, s = hit.line.text, hit.scan
    info = None
    m = re.search(r"WORLD INFO DICT: (\{.*\})", text)
    if m:
        try:
            info = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return
    else:
        m = re.search(r"--world_info=([A-Za-z0-9+/=]+)", text)
        if m:
            try:
                info = json.loads(base64.urlsafe_b64decode(m.group(1) + "=" * (-len(m.group(1)) % 4)))
            except (ValueError, UnicodeDecodeError):
                return
    if not isinstance(info, dict) or not info or not all(isinstance(v, list) for v in info.values()):
        return
    s.fact("world_size", sum(len(v) for v in info.values()), hit.line)
    s.fact("nodes", len(info), hit.line)
    s.fact("ranks_per_node", max(len(v) for v in info.values()), hit.line)


# ---- the script arguments the launcher echoes ------------------------------------------------------------------

_ARGV_LIST = re.compile(r"(?:sigkill_handler\]|spawned with command:) (\[.*\])")
_RUNNER_CMD = re.compile(r"\bcmd = (.*-m deepspeed\.launcher\.launch .*)$")
_LAUNCHER_MODULES = ("deepspeed.launcher.launch", "torch.distributed.run", "torch.distributed.launch")
LAUNCH_FACTS = {
    "micro_batch": "micro_batch",
    "grad_accum": "grad_accum",
    "seq_len": "seq_len",
    "precision": "precision",
    "checkpointing": "checkpointing",
    "model": "model_name",
}
"""LaunchLine inputs -> the facts they state (only what the line says: a flag left out states nothing)."""


def _script_argv(tokens: list[str]) -> list[str] | None:
    """`python [-u] [-m launcher [--its-options]] script args...` -> [script, args...]."""
    i = 1 if tokens and tokens[0].rsplit("/", 1)[-1].startswith("python") else 0
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
        i += 1  # the interpreter's own options (-u)
    if tokens[i : i + 1] == ["-m"] and i + 1 < len(tokens):
        if tokens[i + 1] not in _LAUNCHER_MODULES:
            return tokens[i + 1 :]  # `python -m training.trainer args` (dolly)
        i += 2
        while i < len(tokens) and tokens[i].startswith("-"):
            i += 1  # the launcher's options: the runner writes them all as --name=value or bare
    return tokens[i:] if i < len(tokens) else None


def _launched(hit: Hit) -> None:
    """The job the launcher's echo of the training command states (facts, first line wins)."""
    text, s = hit.line.text, hit.scan
    if "launch_args" in s.facts:
        return
    tokens: list[str] | None = None
    if m := _ARGV_LIST.search(text):
        try:
            value = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return
        if isinstance(value, list) and all(isinstance(t, str) for t in value):
            tokens = value
    elif m := _RUNNER_CMD.search(text):
        try:
            tokens = shlex.split(m.group(1))
        except ValueError:
            return
    script = _script_argv(tokens or [])
    if not script:
        return
    try:
        line = parse_launch(["python", *script])
    except InputError:
        return
    s.fact("launch_args", " ".join(script)[:200], hit.line)
    for key, fact in LAUNCH_FACTS.items():
        if key in line.inputs:
            s.fact(fact, line.inputs[key], hit.line)


# ---- DeepSpeedConfig.print / ds_report ---------------------------------------------------------------------------

_DOTS = re.compile(
    r"(?:^|[\]|]\s*|^\s*)([A-Za-z_][\w()/+-]*(?: [A-Za-z_][\w()/+.-]*){0,3}) \.{3,}(?: (.*))?$"
)


_PRINT = re.compile(r":print\]\s+(\w+) (?:\.* )?(.*)$")
"""DeepSpeedConfig.print pads each name with 29 - len(name) dots: names of 29+ characters
(train_micro_batch_size_per_gpu) get none, only the separating spaces."""


def _printed(hit: Hit) -> None:
    m = _PRINT.search(hit.line.text) or _DOTS.search(hit.line.text)
    if m is None:
        return
    name, value = m.group(1).strip(), (m.group(2) or "").strip()
    table = hit.scan.ds_print
    if name not in table and len(table) < MAX_PRINT_KEYS:
        table[name] = (value, hit.line)
    fact = _PRINTED_FACTS.get(name)
    if fact is not None and value.isdigit():
        hit.scan.fact(fact, int(value), hit.line)
    elif name in ("torch version", "deepspeed info", "torch cuda version", "nvcc version") and value:
        hit.scan.fact(_REPORT_FACTS[name], value.split(",")[0].strip(), hit.line)


_PRINTED_FACTS = {
    "world_size": "world_size",
    "train_batch_size": "train_batch_size",
    "train_micro_batch_size_per_gpu": "micro_batch",
    "gradient_accumulation_steps": "grad_accum",
    "zero_optimization_stage": "zero_stage",
}
"""DeepSpeedConfig.print names that are single facts (the rest only rebuild the config)."""
_REPORT_FACTS = {
    "torch version": "torch_version",
    "deepspeed info": "deepspeed_version",
    "torch cuda version": "cuda_version",
    "nvcc version": "cuda_version",
}
"""ds_report's version lines."""


# ---- the HF model config dump ----------------------------------------------------------------------------------


@dataclass
class _ModelConfigDump:
    scan: Scan
    texts: list[str]
    depth: int
    line: LogLine

    def feed(self, line: LogLine) -> bool:
        self.texts.append(line.text)
        self.depth += line.text.count("{") - line.text.count("}")
        if self.depth <= 0 or len(self.texts) > MAX_MODEL_CONFIG_LINES:
            self.close()
            return False
        return True

    def close(self) -> None:
        if self.depth > 0 or self.scan.model_config is not None:
            return
        try:
            value = json.loads("\n".join(self.texts))
        except (ValueError, RecursionError):
            return
        if isinstance(value, dict):
            self.scan.model_config, self.scan.model_config_line = value, self.line
            name = value.get("_name_or_path")
            if isinstance(name, str) and name:
                self.scan.fact("model_name", name, self.line)


def _model_config(hit: Hit) -> None:
    """transformers' PretrainedConfig repr after "Model config XConfig {" (configuration_utils.py)."""
    m = re.search(r"Model config \w+ (\{.*)$", hit.line.text)
    if m and hit.scan.model_config is None:
        first = m.group(1)
        hit.follower = _ModelConfigDump(hit.scan, [first], first.count("{") - first.count("}"), hit.line)


# ---- the job a `zerotune bench` run ran ----------------------------------------------------------------------

BENCH_JOB = "ZEROTUNE BENCH JOB "
"""What rank 0 of `zerotune bench` prints first (zerotune/bench/step_worker.py): one JSON object with the
proxy model (a ModelSpec), the DeepSpeed config, world size, sequence length, checkpointing and device
(cpu or cuda) the ranks ran. The proxy is no catalog model, so its log says it for `calibrate --from-log`."""


def _bench_job(hit: Hit) -> None:
    _, _, text = hit.line.text.partition(BENCH_JOB)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return
    if isinstance(value, dict) and hit.scan.bench_job is None:
        hit.scan.bench_job, hit.scan.bench_job_line = value, hit.line


SIGNALS = (
    Signal("bench_job", (BENCH_JOB.encode(),), (_bench_job,), claims=BENCH_JOB),
    Signal(
        "facts",
        (*_FACT_TRIGGERS, rb"WORLD INFO DICT", rb"_info=", rb"_handler\] \['", rb"with command: \['"),
        (_facts, _world_info, _launched),
    ),
    Signal("ds_print", (rb"\.\. \S", rb"_size_per_gpu  \S"), (_printed,)),
    Signal("model_config", (rb"Model config \w+ \{",), (_model_config,), claims="Model config "),
)


# ---- the config rebuilt from DeepSpeedConfig.print ---------------------------------------------------------------


def _split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside (), [], {} and quotes."""
    parts, depth, quote, cur = [], 0, "", []
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if not quote and depth == 0 and text.startswith(sep, i):
            parts.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return [p for p in (p.strip() for p in parts) if p]


def _repr_value(text: str) -> object:
    """A value of a pydantic repr: `500,000,000`, `True`, `'cpu'`, `<ZeroStageEnum.weights: 3>`,
    `DeepSpeedZeroOffloadOptimizerConfig(device='cpu', pin_memory=True)`."""
    text = text.strip()
    enum = re.fullmatch(r"<[\w.]+: (.+)>", text)
    if enum:
        return _repr_value(enum.group(1))
    nested = re.fullmatch(r"\w+\((.*)\)", text, re.S)
    if nested:
        return _repr_fields(nested.group(1), ", ")
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    number = text.replace(",", "")
    if re.fullmatch(r"-?\d+", number):
        return int(number)
    if re.fullmatch(r"-?\d+\.\d*(?:e-?\d+)?|-?\d+e-?\d+", number):
        return float(number)
    return text.strip("'\"")


def _repr_fields(text: str, sep: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for part in _split_top(text, sep):
        key, eq, value = part.partition("=")
        if eq and re.fullmatch(r"\w+", key):
            out[key] = _repr_value(value)
    return out


_PRINTED_KEYS = {
    "train_batch_size": "train_batch_size",
    "train_micro_batch_size_per_gpu": "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
}


def printed_config(scan: Scan) -> dict | None:
    """The DeepSpeed config as DeepSpeedConfig.print showed it (batch, precision, zero_optimization
    from the zero_config repr, else zero_optimization_stage), or None when the log has no such print."""
    printed = {name: value for name, (value, _) in scan.ds_print.items()}
    if "zero_config" not in printed and "zero_optimization_stage" not in printed:
        return None
    config: dict[str, object] = {}
    for name, key in _PRINTED_KEYS.items():
        value = _repr_value(printed[name]) if name in printed else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            config[key] = value
    if printed.get("bfloat16_enabled") == "True" or "enabled=True" in printed.get("bfloat16_config", ""):
        config["bf16"] = {"enabled": True}
    elif printed.get("fp16_enabled") == "True":
        config["fp16"] = {"enabled": True}
    zero: dict[str, object] = {}
    if "zero_config" in printed:
        fields = _repr_fields(printed["zero_config"], " ")
        from zerotune.dsconfig import schema

        def kept(key: str, value: object) -> bool:
            # DeepSpeed's repr lists deprecated aliases next to their replacements; it refuses both together
            known = schema.zero_field(key)
            return (
                known is not None
                and not known.deprecated
                and value is not None
                and not isinstance(value, str)
            )

        zero = {k: v for k, v in fields.items() if k == "stage" or kept(k, v)}
        for section in ("offload_param", "offload_optimizer"):
            value = fields.get(section)
            if isinstance(value, dict) and value.get("device") not in (None, "none"):
                zero[section] = {k: v for k, v in value.items() if v is not None}
            else:
                zero.pop(section, None)
    stage = zero.get("stage", _repr_value(printed.get("zero_optimization_stage", "0")))
    zero["stage"] = stage if isinstance(stage, int) else 0
    config["zero_optimization"] = zero
    return config


def printed_line(scan: Scan) -> LogLine | None:
    entry = scan.ds_print.get("zero_config") or scan.ds_print.get("zero_optimization_stage")
    return entry[1] if entry else None
