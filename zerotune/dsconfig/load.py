"""Read a DeepSpeed config the way DeepSpeed does, keeping where every key sits in the text.

DeepSpeed 0.19.8 opens config files with `hjson.load(..., object_pairs_hook=dict_raise_error_on_duplicate_keys)`
(deepspeed/runtime/config.py, `DeepSpeedConfig.__init__`): comments, trailing commas and quoteless values load,
duplicate keys are rejected. Hugging Face Trainer and accelerate read the same file with `json.load`, which
rejects the hjson-only syntax. So a file is tried with `json` first (fast, and what HF sees), then with `hjson`
(what DeepSpeed sees); the difference becomes a finding, never an exception.

Numbers are read as hjson reads them, because that is what DeepSpeed gets from a config *path*: a number with
a fraction or exponent that is whole and below 1e10 becomes an int (`1000.0` → 1000, hjson/decoder.py
`scantfnns`), and one that overflows to infinity (`1e400`) is a syntax error there (OverflowError), where
`json` would read inf. Hugging Face passes DeepSpeed a `json.load` dict instead, in which `1000.0` stays a
float; rules that care (ZT612 under `--hf`) look at the number's text.

Positions come from a small scanner over the text (`_Scanner`): it maps each RFC 6901 JSON pointer to the
span of its key and value, notes quoteless values (hjson reads `CONFIG_BATCH_SIZE,` as the string
'CONFIG_BATCH_SIZE,') and duplicate keys. The data itself always comes from json/hjson, so a scanner gap can
only cost a line number, never a wrong value.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from zerotune.errors import InputError
from zerotune.files import is_readable_file

IssueKind = Literal["syntax", "hjson_only", "placeholder", "duplicate"]


@dataclass(frozen=True)
class Node:
    """Where one value sits: its key span (None for array items and the root) and its value span."""

    pointer: str
    key_start: int | None
    key_end: int | None
    value_start: int
    value_end: int
    quoted: bool = True


@dataclass(frozen=True)
class LoadIssue:
    """Something wrong with the text itself; lint turns each into a ZT0xx diagnostic."""

    kind: IssueKind
    message: str
    pointer: str
    offset: int | None


@dataclass
class LoadedConfig:
    """A parsed config file: the data DeepSpeed would get, plus where things are in the text."""

    path: str
    text: str
    data: Any = None
    parsed: bool = False
    strict_json: bool = False
    nodes: dict[str, Node] = field(default_factory=dict)
    issues: list[LoadIssue] = field(default_factory=list)
    accelerate: dict[str, Any] | None = None
    """The file as written when it is an HF accelerate config (dsconfig/accelerate.py); `data` is then the
    DeepSpeed config accelerate builds from it, or None when it names a DeepSpeed file or does not use
    DeepSpeed."""
    accelerate_path: str | None = None
    """The accelerate config this file was read through (it names this file as deepspeed_config_file)."""
    trainer_args: dict[str, Any] | None = None
    """The file as written when it is a trainer's arguments file (dsconfig/trainer_args.py); `data` is then
    None: the DeepSpeed config is the JSON its `deepspeed` argument names. Or the HF TrainingArguments of a
    launcher file that hands them the `deepspeed` section as a dict (`trainer_args_section`)."""
    trainer_args_section: str | None = None
    """JSON pointer of those TrainingArguments in this launcher file ("" its top level): HF Trainer gets the
    `deepspeed` section as a dict and fills its "auto" values (`_as_launcher_section`)."""
    trainer_args_path: str | None = None
    """The trainer's arguments file this file was read through (its `deepspeed` argument names this file)."""
    section: str = ""
    """JSON pointer of the DeepSpeed config inside a launcher config that nests it (`/deepspeed`, see
    `_as_launcher_section`); `data` is then that section, and `locate` looks under it."""
    neox_args: tuple[str, ...] = ()
    """The GPT-NeoX arguments of a NeoX config file (`_as_neox_args`), as written: NeoX keeps them, and
    `data` is then the rest, what NeoX hands DeepSpeed."""
    _line_starts: list[int] = field(default_factory=list, repr=False)

    def position(self, offset: int | None) -> tuple[int | None, int | None]:
        """1-based (line, column) of a character offset."""
        if offset is None:
            return None, None
        if not self._line_starts:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def locate(self, pointer: str) -> tuple[int | None, int | None]:
        """Line and column for `pointer`: its key, else the nearest ancestor that exists in the text."""
        probe = self.section + pointer
        while True:
            node = self.nodes.get(probe)
            if node is not None:
                return self.position(node.key_start if node.key_start is not None else node.value_start)
            if not probe or probe == self.section:
                return (1, 1) if self.text else (None, None)
            probe = probe.rsplit("/", 1)[0]


def escape(key: str) -> str:
    """One JSON-pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def pointer_of(*keys: str | int) -> str:
    return "".join(f"/{escape(str(k))}" for k in keys)


def load_path(path: str | Path) -> LoadedConfig:
    """Read a file (or "-" for stdin). Unreadable input is an InputError (exit 2); bad syntax is a finding."""
    loaded = _read(path)
    if loaded.trainer_args is not None:
        return _through_trainer_args(loaded, path)
    named = _followed(loaded)
    if named is None:
        return loaded
    # an accelerate config naming its DeepSpeed JSON: that file is what DeepSpeed gets (accelerate reads it
    # from the launch folder, as here); the findings and positions are that file's
    target = _read(named)
    if target.accelerate is not None:
        # followed once only: accelerate reads the named file with json.load (HfDeepSpeedConfig.__init__,
        # huggingface/accelerate src/accelerate/utils/deepspeed.py), so an accelerate YAML there (or the
        # file naming itself) never starts; following it again would loop
        raise InputError(
            f"{path}: its deepspeed_config_file {named} is itself an accelerate config, not a DeepSpeed config",
            hint="name the DeepSpeed JSON in deepspeed_config_file",
        )
    target.accelerate = loaded.accelerate
    target.accelerate_path = loaded.path
    return target


def _through_trainer_args(loaded: LoadedConfig, path: str | Path) -> LoadedConfig:
    """The DeepSpeed JSON a trainer's arguments file names, read from the launch folder as HF Trainer reads
    it; the arguments file itself when that JSON is not found from here."""
    from zerotune.dsconfig import trainer_args

    named = trainer_args.config_file(loaded.trainer_args or {})
    if named is None or not is_readable_file(named):
        return loaded
    target = _read(named)
    if target.trainer_args is not None or target.accelerate is not None:
        raise InputError(  # HF Trainer json.loads the named file: a YAML of arguments there never starts
            f"{path}: its deepspeed argument {named} is not a DeepSpeed config",
            hint="name the DeepSpeed JSON in `deepspeed`",
        )
    target.trainer_args = loaded.trainer_args
    target.trainer_args_path = loaded.path
    return target


def _read(path: str | Path) -> LoadedConfig:
    """One file (or stdin) as written: an accelerate config is recognised here, not followed."""
    if str(path) == "-":
        import sys

        raw = sys.stdin.buffer.read()
        name = "<stdin>"
    else:
        target = Path(path)
        if not is_readable_file(target):
            raise InputError(f"{path}: no such file", hint="check the path or the glob")
        try:
            raw = target.read_bytes()
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror})") from None
        name = str(path)
    return load_bytes(raw, name)


def _followed(loaded: LoadedConfig) -> str | None:
    """The DeepSpeed file an accelerate config names, when it can be read from here."""
    if loaded.accelerate is None:
        return None
    from zerotune.dsconfig import accelerate

    named = accelerate.config_file(loaded.accelerate)
    if named is None or not accelerate.uses_deepspeed(loaded.accelerate) or not is_readable_file(named):
        return None
    return named


YAML_SUFFIXES = (".yaml", ".yml")
"""A config kept as YAML (launch scripts that dump it to JSON for DeepSpeed) is read as YAML: through
hjson it would be one string. A .yaml file whose text is a JSON object is read as JSON: DeepSpeed opens a
config path with hjson.load whatever its name (deepspeed/runtime/config.py:443-444 in 0.19.8) and accelerate's
deepspeed_config_file with json.load (HfDeepSpeedConfig, huggingface/accelerate
src/accelerate/utils/deepspeed.py), while PyYAML (YAML 1.1) would read `5e8` as the string "5e8" and keep
the last of duplicate keys (THUDM/CogVideo finetune/configs/zero2.yaml)."""


def load_bytes(raw: bytes, name: str) -> LoadedConfig:
    """A config from the bytes of a file: UTF-8, with or without a byte-order mark."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        loaded = LoadedConfig(path=name, text="")
        loaded.issues.append(LoadIssue("syntax", f"not UTF-8 text (byte {exc.start})", "", None))
        return loaded
    loaded = load_text(text, name)
    if name.lower().endswith(YAML_SUFFIXES) and not (loaded.strict_json and isinstance(loaded.data, dict)):
        return _as_accelerate(_load_yaml(text, name))
    if raw.startswith(codecs.BOM_UTF8) and loaded.parsed:
        # hjson skips a BOM; json.load on an open() text file (HF, accelerate) fails "Unexpected UTF-8 BOM".
        loaded.issues.insert(0, LoadIssue("hjson_only", "starts with a UTF-8 byte-order mark", "", 0))
    # `accelerate launch --config_file` takes a .json config as well as YAML (load_config_from_file,
    # huggingface/accelerate src/accelerate/commands/config/config_args.py)
    return _as_accelerate(loaded)


def _load_yaml(text: str, name: str) -> LoadedConfig:
    import yaml

    loaded = LoadedConfig(path=name, text=text)
    try:
        loaded.data = _omegaconf_yaml(text) if _INTERPOLATION.search(text) else yaml.safe_load(text)
        loaded.parsed = True
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        loaded.issues.append(
            LoadIssue("syntax", f"not valid YAML: {problem}", "", mark.index if mark else None)
        )
    return loaded


def _as_accelerate(loaded: LoadedConfig) -> LoadedConfig:
    """An HF accelerate config file: kept as written, `data` the DeepSpeed config it builds (if any)."""
    from zerotune.dsconfig import accelerate

    if loaded.parsed and accelerate.is_accelerate_config(loaded.data):
        loaded.accelerate = loaded.data
        usable = accelerate.uses_deepspeed(loaded.data) and accelerate.config_file(loaded.data) is None
        loaded.data = accelerate.built_config(loaded.data) if usable else None
        return loaded
    return _as_trainer_args(_as_neox_args(_as_launcher_section(loaded)))


def _as_trainer_args(loaded: LoadedConfig) -> LoadedConfig:
    """A trainer's arguments file (dsconfig/trainer_args.py): kept as written, no DeepSpeed data of its own."""
    from zerotune.dsconfig import trainer_args

    if (
        loaded.parsed
        and not loaded.section
        and not loaded.neox_args
        and trainer_args.is_trainer_args(loaded.data)
    ):
        loaded.trainer_args = loaded.data
        loaded.data = None
    return loaded


# GPT-NeoX (EleutherAI/gpt-neox@ea7aefd8 megatron/neox_arguments): a config file holds NeoX's own arguments
# (model shape, data, logging) next to DeepSpeed's keys, `-` and `_` alike (arguments.py `from_ymls`
# replaces "-" with "_"); NeoX hands DeepSpeed only the fields of NeoXArgsDeepspeedConfig
# (deepspeed_args.py:29-282) plus the items of `deepspeed_extra_args` (arguments.py
# `get_parent_class_value_dict_extra_ds`). A file is NeoX's when it names two of its model-shape arguments,
# which no DeepSpeed config has.
NEOX_SHAPE_ARGS = frozenset({"num_layers", "hidden_size", "num_attention_heads", "seq_length"})
NEOX_DEEPSPEED_KEYS = frozenset(
    {
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
        "scheduler", "fp32_allreduce", "prescale_gradients", "gradient_predivide_factor", "sparse_gradients",
        "fp16", "bf16", "amp", "gradient_clipping", "zero_optimization", "curriculum_learning",
        "steps_per_print", "wall_clock_breakdown", "dump_state", "flops_profiler", "communication_data_type",
        "autotuning", "activation_checkpointing", "sparse_attention", "data_efficiency", "tensorboard",
        "wandb", "csv_monitor", "elasticity", "comms_logger", "compression_training", "checkpoint",
        "data_types",
    }
)  # fmt: skip


def _as_neox_args(loaded: LoadedConfig) -> LoadedConfig:
    """A GPT-NeoX config file: `data` the DeepSpeed config NeoX builds from it (see NEOX_DEEPSPEED_KEYS; a
    key DeepSpeed itself reads is kept too), `neox_args` the keys NeoX keeps. Read whole, each NeoX argument
    (`num-layers`, `vocab-file`, ...) looks like a key DeepSpeed silently ignores."""
    from zerotune.dsconfig import schema

    data = loaded.data
    if not (loaded.parsed and not loaded.section and isinstance(data, dict)):
        return loaded
    names = {str(k).replace("-", "_"): k for k in data}
    if len(NEOX_SHAPE_ARGS & set(names)) < 2:
        return loaded
    top = set(schema.SECTIONS[""].keys)
    passed = {name: data[key] for name, key in names.items() if name in NEOX_DEEPSPEED_KEYS or name in top}
    extra = data.get("deepspeed_extra_args")
    if isinstance(extra, dict):
        passed.update(extra)
    loaded.neox_args = tuple(str(key) for name, key in names.items() if name not in passed)
    loaded.data = passed
    return loaded


def _as_launcher_section(loaded: LoadedConfig) -> LoadedConfig:
    """A launcher config that keeps the DeepSpeed config in a `deepspeed` mapping: SwissArmyTransformer's
    YAML (THUDM/CogVideo sat/arguments.py `process_config_to_args`: args.deepspeed_config =
    config["deepspeed"]) next to `args:` and `data:`, or snowflakedb/ArcticTraining's trainer YAML
    (arctic_training/config/trainer.py `deepspeed: Dict`, completed by build_deepspeed_config), whose own
    `optimizer`, `scheduler`, `checkpoint` and `wandb` settings share DeepSpeed's section names. Read as a
    whole, most keys look unknown and the batch size missing, which is not what DeepSpeed gets. DeepSpeed
    reads its top-level keys by name and never looks at the others (deepspeed/runtime/config.py:482
    `_initialize_params`, 0.19.8), so when fewer top-level keys are DeepSpeed's than not and the `deepspeed`
    mapping has one of DeepSpeed's, that mapping is the config. Beside HF TrainingArguments (the top level
    or a mapping next to `deepspeed`), HF Trainer gets that mapping as a dict and fills it
    (dsconfig/trainer_args.py `arguments_beside`)."""
    from zerotune.dsconfig import schema, trainer_args

    data = loaded.data
    if not (loaded.parsed and isinstance(data, dict) and isinstance(data.get("deepspeed"), dict)):
        return loaded
    top = set(schema.SECTIONS[""].keys)
    known = len(top & set(data))
    if known < len(data) - known and top & set(data["deepspeed"]):
        loaded.section = "/deepspeed"
        if not loaded.strict_json:
            data = _omegaconf_yaml(loaded.text)
        loaded.data = data["deepspeed"]
        beside = trainer_args.arguments_beside(data)
        if beside is not None:
            loaded.trainer_args_section, loaded.trainer_args = beside
    return loaded


# A float as OmegaConf's YAML loader resolves it (omry/omegaconf omegaconf/_utils.py `get_yaml_loader`): YAML
# 1.1's rule plus an exponent without a dot (`1e-8`, `5e8`), which PyYAML alone leaves a string.
_OMEGACONF_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+)$")


# An OmegaConf interpolation (`${learning_rate}`, `${oc.env:X}`) marks a YAML that Hydra/OmegaConf loads
# (microsoft/unilm PFPO conf/deepspeed/*.yaml, composed by Hydra): no other YAML reader resolves it, and that
# loader reads `1e-4` as a float (see _OMEGACONF_FLOAT), where PyYAML alone keeps the string "1e-4".
_INTERPOLATION = re.compile(r"\$\{[^}\n]+\}")


@cache
def _omegaconf_loader() -> Any:
    """A SafeLoader subclass with OmegaConf's float resolver, built once (a resolver added to a class stays)."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_implicit_resolver("tag:yaml.org,2002:float", _OMEGACONF_FLOAT, list("-+0123456789"))
    return _Loader


def _omegaconf_yaml(text: str) -> Any:
    """The YAML as SwissArmyTransformer reads it (OmegaConf.load): `1e-8` is a float there."""
    import yaml

    return yaml.load(text, Loader=_omegaconf_loader())  # noqa: S506 - a SafeLoader subclass


def read_config(path: str | Path) -> dict[str, Any]:
    """The data DeepSpeed would get from a config file (JSON, or hjson's comments and trailing commas).
    A missing file, bad syntax or a non-object is a one-line InputError naming path:line:col."""
    if str(path) != "-" and not is_readable_file(path):
        raise InputError(f"DeepSpeed config {path} not found", hint="check the path")
    return config_data(load_path(path))


def config_data(loaded: LoadedConfig) -> dict[str, Any]:
    """The config object of a loaded file (read_config), for a caller that also lints it: a fifo or
    stdin can be read only once."""
    path = loaded.path
    if not loaded.parsed:
        issue = loaded.issues[0]
        line, col = loaded.position(issue.offset)
        where = f"{path}:{line}:{col}" if line is not None else str(path)
        what = "" if issue.message.startswith("not valid") else "not valid JSON/hjson: "
        raise InputError(f"{where}: {what}{issue.message}")
    if loaded.accelerate is not None and loaded.data is None:
        from zerotune.dsconfig import accelerate

        named = accelerate.config_file(loaded.accelerate)
        if named is not None:
            raise InputError(
                f"{path} is an accelerate config whose DeepSpeed config {named} is not found from here",
                hint="run from the launch folder, or pass --config with that file's path",
            )
        kind = loaded.accelerate.get("distributed_type")
        raise InputError(
            f"{path} is an accelerate config with distributed_type {kind}: it does not use DeepSpeed"
        )
    if loaded.trainer_args is not None and loaded.data is None:
        from zerotune.dsconfig import trainer_args

        named = trainer_args.config_file(loaded.trainer_args)
        if named is not None:
            raise InputError(
                f"{path} is a trainer's arguments file whose DeepSpeed config {named} is not found from here",
                hint="run from the launch folder, or pass --config with that file's path",
            )
        raise InputError(
            f"{path} is a trainer's arguments file with an empty `deepspeed`: it does not use DeepSpeed"
        )
    if not isinstance(loaded.data, dict):
        kind = type(loaded.data).__name__
        raise InputError(f"{path}: a DeepSpeed config must be a JSON object, got {kind}")
    return loaded.data


class _Duplicates:
    """object_pairs_hook that records duplicate keys instead of failing (DeepSpeed raises on them)."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                self.keys.append(key)
            out[key] = value
        return out


def load_text(text: str, path: str = "<text>") -> LoadedConfig:
    loaded = LoadedConfig(path=path, text=text)
    dups = _Duplicates()
    try:
        loaded.data = json.loads(
            text, object_pairs_hook=dups, parse_constant=_reject_constant, parse_float=_hjson_float
        )
        loaded.parsed = loaded.strict_json = True
    except (json.JSONDecodeError, ValueError) as exc:
        json_error = exc
        dups = _Duplicates()
        import hjson  # only for files that are not JSON: recommend and predict never need it (~30 M instructions)

        try:
            loaded.data = hjson.loads(text, object_pairs_hook=dups)
            loaded.parsed = True
        except (hjson.HjsonDecodeError, ValueError, RecursionError, IndexError, OverflowError) as hexc:
            pos = getattr(hexc, "pos", None)
            msg = getattr(hexc, "msg", None) or str(hexc)
            if isinstance(json_error, _NumberOverflow):
                pos, msg = text.find(json_error.literal), str(json_error)
            elif isinstance(hexc, OverflowError):
                msg = "a number is out of range (hjson, which DeepSpeed uses, cannot read it)"
            loaded.issues.append(LoadIssue("syntax", msg, "", pos if isinstance(pos, int) else None))
            return loaded
        pos = getattr(json_error, "pos", None)
        msg = getattr(json_error, "msg", str(json_error))
        loaded.issues.append(LoadIssue("hjson_only", msg, "", pos if isinstance(pos, int) else None))
    except RecursionError:
        loaded.issues.append(LoadIssue("syntax", "nesting too deep", "", None))
        return loaded
    scanner = _Scanner(text)
    try:
        scanner.document()
    except (_ScanError, IndexError, RecursionError):
        pass  # positions are best effort: the data came from json/hjson
    loaded.nodes = scanner.nodes
    for pointer, offset in scanner.duplicates:
        loaded.issues.append(LoadIssue("duplicate", pointer.rsplit("/", 1)[-1], pointer, offset))
    if dups.keys and not scanner.duplicates:
        for key in dups.keys:
            loaded.issues.append(LoadIssue("duplicate", key, "", None))
    if not loaded.strict_json:
        for node in scanner.nodes.values():
            if not node.quoted:
                raw = text[node.value_start : node.value_end]
                loaded.issues.append(LoadIssue("placeholder", raw.strip(), node.pointer, node.value_start))
    return loaded


class _NumberOverflow(ValueError):
    def __init__(self, literal: str) -> None:
        super().__init__(f"number {literal} is out of range (hjson, which DeepSpeed uses, cannot read it)")
        self.literal = literal


def _hjson_float(literal: str) -> int | float:
    """A JSON number with a fraction or exponent, as hjson returns it (hjson/decoder.py `scantfnns`)."""
    value = float(literal)
    if math.isinf(value):
        raise _NumberOverflow(literal)
    return int(value) if value.is_integer() and abs(value) < 1e10 else value


def _reject_constant(name: str) -> Any:
    # NaN/Infinity are not JSON: json.load in HF would accept them, hjson reads them as strings.
    raise ValueError(f"{name} is not valid JSON")


class _ScanError(Exception):
    pass


_LITERAL = re.compile(
    r"(-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)(?=\s*(?:[,}\]]|#|//|/\*|$))", re.M
)
_WS = re.compile(r"(?:\s+|#[^\n]*|//[^\n]*|/\*.*?\*/)*", re.S)
_STRING = {'"': re.compile(r'"(?:[^"\\\n]|\\.)*"'), "'": re.compile(r"'(?:[^'\\\n]|\\.)*'")}
_BARE_KEY = re.compile(r"[^\s:,{}\[\]]+")


class _Scanner:
    """JSON plus the hjson forms seen in real configs (comments, trailing commas, quoteless values)."""

    def __init__(self, text: str) -> None:
        self.t = text
        self.i = 0
        self.nodes: dict[str, Node] = {}
        self.duplicates: list[tuple[str, int]] = []

    def ws(self) -> None:
        self.i = _WS.match(self.t, self.i).end()

    def document(self) -> None:
        self.ws()
        if self.i < len(self.t) and self.t[self.i] in "{[":
            self.value("", None, None)

    def value(self, pointer: str, key_start: int | None, key_end: int | None) -> None:
        self.ws()
        start = self.i
        c = self.t[self.i]
        quoted = True
        if c == "{":
            self.obj(pointer)
        elif c == "[":
            self.arr(pointer)
        elif c in _STRING:
            m = _STRING[c].match(self.t, self.i)
            if not m:
                raise _ScanError
            self.i = m.end()
        else:
            m = _LITERAL.match(self.t, self.i)
            if m:
                self.i = m.end()
            else:  # hjson quoteless string: everything up to the end of the line
                end = self.t.find("\n", self.i)
                self.i = len(self.t) if end < 0 else end
                quoted = False
        end = self.i
        if not quoted:
            end = start + len(self.t[start:end].rstrip())
        self.nodes[pointer] = Node(pointer, key_start, key_end, start, end, quoted)

    def obj(self, pointer: str) -> None:
        self.i += 1
        seen: set[str] = set()
        while True:
            self.ws()
            c = self.t[self.i]
            if c == "}":
                self.i += 1
                return
            if c == ",":
                self.i += 1
                continue
            key_start = self.i
            if c in _STRING:
                m = _STRING[c].match(self.t, self.i)
                if not m:
                    raise _ScanError
                raw = m.group()
                key = json.loads(raw) if c == '"' and "\\" in raw else raw[1:-1]
            else:
                m = _BARE_KEY.match(self.t, self.i)
                if not m:
                    raise _ScanError
                key = m.group()
            self.i = m.end()
            child = f"{pointer}/{escape(key)}"
            if key in seen:
                self.duplicates.append((child, key_start))
            seen.add(key)
            self.ws()
            if self.t[self.i] != ":":
                raise _ScanError
            self.i += 1
            self.value(child, key_start, m.end())

    def arr(self, pointer: str) -> None:
        self.i += 1
        index = 0
        while True:
            self.ws()
            c = self.t[self.i]
            if c == "]":
                self.i += 1
                return
            if c == ",":
                self.i += 1
                continue
            self.value(f"{pointer}/{index}", None, None)
            index += 1
