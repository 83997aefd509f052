"""Build the differential corpus (issue 12) and record DeepSpeed's parser verdict on every file and mutant.

    python scripts/evidence/differential_corpus.py extract --deepspeed-git /path/to/DeepSpeed/.git
    python scripts/evidence/differential_corpus.py record            # needs deepspeed (0.19.8) importable
    python scripts/evidence/differential_corpus.py record --check 25 # re-run DeepSpeed on 25 recorded entries

`extract` writes tests/fixtures/differential/configs/*.json and MANIFEST.tsv (source repo, path, commit,
line, how it was extracted): config dicts from DeepSpeed's unit tests (Python dict literals; entries whose
value is computed at run time are dropped), ```json blocks of its docs, and its JSON config files.
The public-project configs of tests/fixtures/corpus (116 files, with their own manifest; ids "shared/…",
where they were first recorded) are read from there.

`record` runs `deepspeed.runtime.config.DeepSpeedConfig(path)` — the path form, so hjson loading,
duplicate keys and number reading are DeepSpeed's own — at data-parallel world sizes 1 and 8 (world size
patched into deepspeed.comm as tests/unit/test_lint_differential.py does, docs/deepspeed-facts.md §0 "[run]") on
every corpus file and on seeded mutants of each (`mutate_text` below), and
writes verdicts.json and mutants.jsonl.gz. tests/unit/test_lint_differential_corpus.py asserts from these
records that every rejection carries a zerotune error, without re-running DeepSpeed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gzip
import hashlib
import io
import json
import logging
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "differential"
CORPUS = REPO / "tests" / "fixtures" / "corpus"
sys.path.insert(0, str(REPO))

WORLDS = (1, 8)
MUTANTS_PER_CONFIG = 8
SEED = 20261123
CONFIG_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}


# ---- extraction -------------------------------------------------------------------------------------------------

_DROP = object()


def _literal(node: ast.AST) -> Any:
    """A JSON value for a literal expression; _DROP for anything computed at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _literal(node.operand)
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else _DROP
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Pow, ast.Add, ast.Sub, ast.Div)):
        a, b = _literal(node.left), _literal(node.right)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
            return _DROP
        if isinstance(node.op, ast.Pow) and abs(b) > 64:
            return _DROP
        try:
            return (
                {ast.Mult: a * b, ast.Add: a + b, ast.Sub: a - b}.get(type(node.op))
                if not isinstance(node.op, (ast.Pow, ast.Div))
                else (a**b if isinstance(node.op, ast.Pow) else a / b)
            )
        except (ZeroDivisionError, OverflowError):
            return _DROP
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e) for e in node.elts]
        return _DROP if any(i is _DROP for i in items) else items
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                continue
            value = _literal(v)
            if value is not _DROP:
                out[k.value] = value
        return out
    return _DROP


def _python_configs(source: str) -> list[tuple[int, dict]]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found, inner = [], set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict) or id(node) in inner:
            continue
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if keys & CONFIG_KEYS:
            for child in ast.walk(node):
                if child is not node and isinstance(child, ast.Dict):
                    inner.add(id(child))
            value = _literal(node)
            if isinstance(value, dict) and value:
                found.append((node.lineno, value))
    return found


_FENCE = re.compile(r"```(?:json|JSON|hjson)?\s*\n(.*?)```", re.S)


def _markdown_configs(text: str) -> list[tuple[int, str]]:
    import hjson

    out = []
    for m in _FENCE.finditer(text):
        body = m.group(1).strip()
        line = text.count("\n", 0, m.start()) + 2
        for candidate in (body, "{" + body.rstrip(",") + "}"):
            try:
                data = hjson.loads(candidate)
            except Exception:  # noqa: BLE001 - docs hold fragments and pseudo-code: skip what hjson cannot read
                continue
            if isinstance(data, dict) and data and any(isinstance(k, str) for k in data):
                out.append((line, json.dumps(data, indent=2)))
                break
    return out


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=True
    ).stdout


def extract(git_dir: str) -> None:
    commit = _git(git_dir, "rev-parse", "HEAD").strip()
    files = _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    configs_dir = OUT / "configs"
    configs_dir.mkdir(parents=True, exist_ok=True)
    for old in configs_dir.glob("*.json"):
        old.unlink()
    seen: set[str] = set()
    rows = []

    def add(path: str, line: int, how: str, text: str) -> None:
        digest = hashlib.sha256(json.dumps(json.loads(text), sort_keys=True).encode()).hexdigest()
        if digest in seen:
            return
        seen.add(digest)
        stem = re.sub(r"[^A-Za-z0-9]+", "_", path.rsplit(".", 1)[0]).strip("_")[-60:]
        name = f"ds__{stem}__L{line}.json"
        (configs_dir / name).write_text(text if text.endswith("\n") else text + "\n")
        rows.append((name, "deepspeedai/DeepSpeed", path, commit, str(line), how, "Apache-2.0"))

    for path in files:
        if path.startswith("tests/") and path.endswith(".py"):
            for line, config in _python_configs(_git(git_dir, "show", f"HEAD:{path}")):
                add(path, line, "python dict literal (computed values dropped)", json.dumps(config, indent=2))
        elif path.startswith("docs/") and path.endswith(".md"):
            for line, text in _markdown_configs(_git(git_dir, "show", f"HEAD:{path}")):
                data = json.loads(text)
                if set(data) & (CONFIG_KEYS | {"zero_optimization", "fp16", "bf16", "optimizer"}):
                    add(path, line, "docs json block", text)
        elif path.endswith(".json") and ("config" in path or path.startswith("tests/")):
            raw = _git(git_dir, "show", f"HEAD:{path}")
            try:
                data = json.loads(raw)
            except ValueError:
                continue
            if isinstance(data, dict) and set(data) & (CONFIG_KEYS | {"zero_optimization"}):
                add(path, 1, "json file", raw)
    with (OUT / "MANIFEST.tsv").open("w") as fh:
        fh.write("file\trepo\tpath\tcommit\tline\thow\tlicense\n")
        for row in sorted(rows):
            fh.write("\t".join(row) + "\n")
    print(f"{len(rows)} configs from deepspeedai/DeepSpeed@{commit[:12]} -> {configs_dir}")


# ---- the seeded mutator -----------------------------------------------------------------------------------------
# Each mutant is one edit of a real config, aimed at what issue 12 found: number forms (hjson overflow, whole
# floats, int64 bounds, pydantic's int strings), nulls and booleans, "auto", typos, misplaced and removed keys,
# optimizer/scheduler params, type changes, and text-level changes (BOM, duplicate keys, comments).

ODD: list[Any] = [None, True, False, 0, -1, 1.5, 2.5, "auto", "true", "yes", "abc", [], {}, "8", 7, 1e9]
NUMBERS = [
    "@1e400",
    "@-1e400",
    1e19,
    1e308,
    1000.0,
    2.0,
    "3",
    "3.0",
    "+3",
    "3e0",
    "3.",
    "2.000000e+00",
    "\u0663",
    2**63,
    -5,
]
SECTIONS = [
    "zero_optimization",
    "fp16",
    "bf16",
    "optimizer",
    "scheduler",
    "aio",
    "checkpoint",
    "tensorboard",
    "data_types",
    "torch_autocast",
    "activation_checkpointing",
    "flops_profiler",
    "comms_logger",
]
TOP_KEYS = [
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "steps_per_print",
    "prescale_gradients",
    "wall_clock_breakdown",
    "communication_data_type",
    "zero_allow_untested_optimizer",
    "gradient_predivide_factor",
]
ZERO_KEYS = [
    "stage",
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_prefetch_bucket_size",
    "stage3_max_live_parameters",
    "sub_group_size",
    "overlap_comm",
    "contiguous_gradients",
    "offload_optimizer",
    "offload_param",
    "round_robin_gradients",
    "zero_quantized_weights",
    "zero_hpz_partition_size",
    "cpu_offload",
    "elastic_checkpoint",
]
OPTIMIZERS = ["Adam", "AdamW", "adamw", "Lamb", "SGD", "Muon", "OneBitAdam", None, "Adafactor", "lion"]
OPT_PARAMS = {
    "lr": [1e-3, "1.000000e-03", None, {}, "auto"],
    "lrs": [1e-3],
    "ns_method": ["x"],
    "betas": [[0.9, 0.95], "auto"],
    "eps": [1e-8],
    "weight_decay": [0.1, "0.1"],
    "torch_adam": [True],
    "adam_w_mode": [True],
    "momentum": [0.9],
}
SCHED = {
    "WarmupLR": ["warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"],
    "WarmupDecayLR": ["warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"],
    "WarmupCosineLR": ["total_num_steps", "warmup_num_steps", "cos_min_ratio"],
    "OneCycle": ["cycle_min_lr", "cycle_max_lr", "cycle_first_step_size"],
}


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(node, dict):
        for key, child in node.items():
            out.append(prefix + (key,))
            out.extend(_paths(child, prefix + (key,)))
    return out


def _parent(config: dict, path: tuple) -> dict:
    for key in path[:-1]:
        config = config[key]
    return config


def _section(c: dict, key: str) -> dict:
    if not isinstance(c.get(key), dict):
        c[key] = {}
    return c[key]


def _mutate_data(c: dict, rng: random.Random) -> str:
    paths = _paths(c)
    kind = rng.randrange(14)
    if kind == 0 and paths:
        path = rng.choice(paths)
        _parent(c, path)[path[-1]] = rng.choice(ODD)
        return f"value {'/'.join(map(str, path))}"
    if kind == 1 and paths:
        path = rng.choice(paths)
        del _parent(c, path)[path[-1]]
        return f"remove {'/'.join(map(str, path))}"
    if kind == 2 and paths:
        path = rng.choice(paths)
        parent, key = _parent(c, path), str(path[-1])
        i = rng.randrange(max(1, len(key) - 1))
        parent[rng.choice([key + "s", key[:i] + key[i + 1 :], key.upper()])] = parent.pop(path[-1])
        return f"typo {'/'.join(map(str, path))}"
    if kind in (3, 4):
        where = rng.choice(["top", "zero", "zero", "fp16", "offload"])
        if where == "top":
            target, key = c, rng.choice(TOP_KEYS)
        elif where == "fp16":
            target, key = (
                _section(c, "fp16"),
                rng.choice(["initial_scale_power", "loss_scale_window", "hysteresis"]),
            )
        elif where == "offload":
            target = _section(_section(c, "zero_optimization"), "offload_optimizer")
            key = rng.choice(["buffer_count", "device", "pin_memory", "ratio"])
        else:
            target, key = _section(c, "zero_optimization"), rng.choice(ZERO_KEYS)
        target[key] = rng.choice(NUMBERS + ODD)
        return f"number {where}/{key}"
    if kind == 5:
        key = rng.choice(
            ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"]
        )
        c[key] = rng.choice([None, True, False, 1.5, 2.0, "4", 0, 3, 16, 30])
        return f"batch {key}"
    if kind == 6:
        c[rng.choice(SECTIONS)] = rng.choice([None, True, "auto", 5, [], {}])
        return "section value"
    if kind == 7:
        opt = _section(c, "optimizer")
        opt["type"] = rng.choice(OPTIMIZERS)
        if rng.random() < 0.3:
            opt.pop("type")
        params = opt.setdefault("params", {}) if rng.random() < 0.8 else opt
        if isinstance(params, dict):
            key = rng.choice(list(OPT_PARAMS))
            params[key] = rng.choice(OPT_PARAMS[key])
        return "optimizer"
    if kind == 8:
        name = rng.choice([*SCHED, None])
        sched = _section(c, "scheduler")
        sched["type"] = name
        params = sched.setdefault("params", {})
        if isinstance(params, dict):
            for key in rng.sample(sum(SCHED.values(), []), 2):
                params[key] = rng.choice([10, 1000.0, 0.001, "auto", -1, 100])
        return f"scheduler {name}"
    if kind == 9:
        z = _section(c, "zero_optimization")
        z["stage"] = rng.choice([0, 1, 2, 3, 4, 5, "3", 2.0, True])
        off = rng.choice(["offload_optimizer", "offload_param", None])
        if off:
            z[off] = {"device": rng.choice(["cpu", "nvme", "none"])}
        return "stage"
    if kind == 10:
        from zerotune.dsconfig import schema

        if rng.random() < 0.5:
            c[rng.choice(list(schema.REMOVED_TOP))] = rng.choice([None, {}, True])
        else:
            _section(c, "zero_optimization")[rng.choice(list(schema.REMOVED_ZERO))] = 1
        return "removed key"
    if kind == 11:
        c["torch_autocast"] = {
            "enabled": True,
            "lower_precision_safe_modules": rng.choice(
                [["Linear"], "torch.nn.Linear", ["torch.nn.Linear"], ["torch.nn.NotAThing"], [1]]
            ),
        }
        if rng.random() < 0.5:
            c["data_types"] = {"param_dtype": rng.choice(["float64", 32, "bf16", "fp32", None])}
        return "autocast/data_types"
    if kind == 12:
        c["prescale_gradients"] = rng.choice(["yes", True, "false", 1, None])
        c["gradient_predivide_factor"] = rng.choice([1.0, 2.0, "2"])
        return "prescale"
    c["fp16"] = {"enabled": rng.choice([True, False, "auto", "true"])}
    c[rng.choice(["bf16", "bfloat16"])] = {"enabled": rng.choice([True, False, "auto"])}
    return "precision"


def mutate_text(text: str, rng: random.Random) -> tuple[str, str]:
    """One mutant of a config file's text and what was changed."""
    import hjson

    if rng.random() < 0.08:  # text-level: what json.dumps cannot produce
        kind = rng.randrange(4)
        if kind == 0:
            return "\ufeff" + text, "bom"
        if kind == 1 and "{" in text:
            i = text.index("{") + 1
            return text[:i] + ' "train_batch_size": 8,' + text[i:], "duplicate key"
        if kind == 2:
            return text.replace("\n", "  // comment\n", 1), "comment"
        return re.sub(r"(\d)(\s*[,}])", r"\1e400\2", text, count=1), "overflow"
    try:
        data = hjson.loads(text)
        data = json.loads(json.dumps(data))
    except Exception:  # noqa: BLE001 - an unreadable base stays unreadable
        return text, "unchanged"
    if not isinstance(data, dict):
        return text, "unchanged"
    how = _mutate_data(data, rng)
    out = json.dumps(data, indent=2, ensure_ascii=False)
    return re.sub(r'"@(-?1e400)"', r"\1", out), how


# ---- DeepSpeed's verdict ----------------------------------------------------------------------------------------


def corpus_files() -> list[tuple[str, Path]]:
    """(corpus id, path): our extracted configs, then the public-project corpus."""
    out = [(f"differential/{p.name}", p) for p in sorted((OUT / "configs").glob("*.json"))]
    out += [(f"shared/{p.name}", p) for p in sorted((CORPUS / "configs").iterdir())]
    return out


class DeepSpeedParser:
    """DeepSpeedConfig(path) at a patched data-parallel world size; None = accepted, else the exception."""

    def __init__(self) -> None:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import deepspeed
            import deepspeed.comm as dscomm
            from deepspeed.runtime.config import DeepSpeedConfig
        logging.getLogger("DeepSpeed").setLevel(logging.CRITICAL)
        self.version = deepspeed.__version__
        self._cls = DeepSpeedConfig
        self._comm = dscomm
        self.world = 1
        dscomm.get_rank = lambda *a, **k: 0
        dscomm.get_world_size = lambda *a, **k: self.world

    def verdict(self, path: str, world: int) -> str | None:
        self.world = world
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                self._cls(path)
        except Exception as exc:  # noqa: BLE001 - DeepSpeed raises many types: the point is that it refuses
            return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return None


def record(check: int) -> int:
    """Record every verdict; with `check`, re-run DeepSpeed on that many recorded entries instead and
    return how many verdicts changed."""
    parser = DeepSpeedParser()
    if check:
        return _recheck(parser, check)
    verdicts: dict[str, dict[str, str | None]] = {}
    mutants = []
    rng = random.Random(SEED)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp) / "mutant.json"
        for cid, path in corpus_files():
            verdicts[cid] = {str(w): parser.verdict(str(path), w) for w in WORLDS}
            text = path.read_text(encoding="utf-8", errors="replace")
            for i in range(MUTANTS_PER_CONFIG):
                mutant, how = mutate_text(text, rng)
                tmp_path.write_text(mutant, encoding="utf-8")
                v = {str(w): parser.verdict(str(tmp_path), w) for w in WORLDS}
                mutants.append({"id": f"{cid}#{i}", "how": how, "text": mutant, "verdict": v})
    doc = {
        "deepspeed": parser.version,
        "loader": "DeepSpeedConfig(path): hjson.load with duplicate keys rejected",
        "worlds": list(WORLDS),
        "seed": SEED,
        "files": verdicts,
    }
    (OUT / "verdicts.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    with gzip.open(OUT / "mutants.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as fh:
        for m in mutants:
            fh.write(json.dumps(m, sort_keys=True) + "\n")
    rejected = sum(v is not None for d in verdicts.values() for v in d.values())
    m_rejected = sum(v is not None for m in mutants for v in m["verdict"].values())
    print(
        f"deepspeed {parser.version}: {len(verdicts)} files ({rejected} rejections over worlds {WORLDS}), "
        f"{len(mutants)} mutants ({m_rejected} rejections) in {time.perf_counter() - start:.0f} s"
    )
    return 0


def _recheck(parser: DeepSpeedParser, n: int) -> int:
    """Re-run DeepSpeed on a seeded sample of n recorded files and mutants; the number of changed verdicts."""
    doc = json.loads((OUT / "verdicts.json").read_text())
    paths = dict(corpus_files())
    entries = [
        (cid, paths[cid].read_text(encoding="utf-8"), v) for cid, v in doc["files"].items() if cid in paths
    ]
    with gzip.open(OUT / "mutants.jsonl.gz", "rt", encoding="utf-8") as fh:
        entries += [(m["id"], m["text"], m["verdict"]) for m in map(json.loads, fh)]
    sample = random.Random(n).sample(sorted(entries), min(n, len(entries)))
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        for cid, text, recorded in sample:
            path.write_text(text, encoding="utf-8")
            for w in WORLDS:
                now = parser.verdict(str(path), w)
                if (now is None) != (recorded[str(w)] is None):
                    bad += 1
                    print(f"changed: {cid} world {w}: recorded {recorded[str(w)]!r}, now {now!r}")
    print(f"re-checked {len(sample)} files and mutants: {bad} verdicts changed")
    return bad


# ---- DeepSpeed's initialize() verdict ----------------------------------------------------------------------------
# For the parser-accepted configs zerotune calls errors (and a sample of clean ones as a control):
# deepspeed.initialize() on a tiny model (Linear-ReLU-Linear, 8 wide, fp32 on DS_ACCELERATOR=cpu, gloo,
# world size 1, no client optimizer) and two forward/backward/step rounds.

INIT_WORKER = """
import contextlib, io, json, logging, os, signal, sys
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
import torch, deepspeed, deepspeed.ops
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
logging.getLogger("DeepSpeed").setLevel(logging.CRITICAL)
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    deepspeed.init_distributed("gloo")
def alarm(*_):
    raise TimeoutError("initialize() took over 120 s")
signal.signal(signal.SIGALRM, alarm)
out = open(sys.argv[2], "a")
for line in open(sys.argv[1]):
    item = json.loads(line)
    out.write(json.dumps({"id": item["id"], "started": True}) + "\\n"); out.flush()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    verdict = None
    signal.alarm(120)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=item["path"])
            for _ in range(2):  # a second step: fp16's first step may be skipped on a loss-scale overflow
                x = torch.randn(2, 8, dtype=next(engine.module.parameters()).dtype)
                engine.backward(engine(x).float().mean())
                engine.step()
    except BaseException as exc:
        verdict = type(exc).__name__ + ": " + " ".join(str(exc).split())[:200]
    signal.alarm(0)
    out.write(json.dumps({"id": item["id"], "verdict": verdict}) + "\\n"); out.flush()
"""


def record_init(controls: int) -> None:
    """initialize() verdicts for accepted configs with zerotune errors, plus `controls` clean ones."""
    from zerotune.dsconfig.load import load_bytes
    from zerotune.lint.context import LintOptions
    from zerotune.lint.diagnostic import Severity
    from zerotune.lint.runner import lint

    doc = json.loads((OUT / "verdicts.json").read_text())
    paths = dict(corpus_files())
    candidates: list[tuple[str, str]] = [
        (cid, paths[cid].read_text(errors="replace"))
        for cid in doc["files"]
        if cid in paths and doc["files"][cid]["1"] is None
    ]
    with gzip.open(OUT / "mutants.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            m = json.loads(line)
            if m["verdict"]["1"] is None and (m["id"].split("#")[0] in paths):
                candidates.append((m["id"], m["text"]))
    flagged, clean = [], []
    for cid, text in candidates:
        found = lint(load_bytes(text.encode(), "x.json"), LintOptions(world_size=1))
        (flagged if any(d.severity is Severity.ERROR for d in found) else clean).append((cid, text))
    chosen = flagged + random.Random(SEED).sample(clean, min(controls, len(clean)))
    with tempfile.TemporaryDirectory() as tmp:
        todo = Path(tmp) / "todo.jsonl"
        done = Path(tmp) / "done.jsonl"
        with todo.open("w") as fh:
            for i, (cid, text) in enumerate(chosen):
                path = Path(tmp) / f"{i}.json"
                path.write_text(text, encoding="utf-8")
                fh.write(json.dumps({"id": cid, "path": str(path)}) + "\n")
        results: dict[str, str | None] = {}
        port = 29600
        while len(results) < len(chosen):
            remaining = [json.loads(x) for x in todo.read_text().splitlines()]
            remaining = [r for r in remaining if r["id"] not in results]
            todo.write_text("".join(json.dumps(r) + "\n" for r in remaining))
            done.write_text("")
            subprocess.run(
                [sys.executable, "-c", INIT_WORKER, str(todo), str(done), str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            port += 1
            last = None
            for line in done.read_text().splitlines():
                rec = json.loads(line)
                if "verdict" in rec:
                    results[rec["id"]] = rec["verdict"]
                    last = None
                else:
                    last = rec["id"]
            if last is not None:  # the worker died inside this one
                results[last] = "crash: the process died in initialize()"
            print(f"{len(results)}/{len(chosen)}", flush=True)
    import deepspeed
    import torch

    out = {
        "deepspeed": deepspeed.__version__,
        "torch": torch.__version__,
        "how": "deepspeed.initialize(model=Linear-ReLU-Linear(8), model_parameters, config=path) on "
        "DS_ACCELERATOR=cpu, gloo, world 1, no client optimizer; then two forward/backward/step rounds",
        "flagged": sorted(c for c, _ in flagged),
        "results": dict(sorted(results.items())),
    }
    (OUT / "initialize.json").write_text(json.dumps(out, indent=1) + "\n")
    failed = sum(v is not None for v in results.values())
    print(f"{len(results)} configs through initialize(): {failed} failed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("--deepspeed-git", required=True, help="git dir of a deepspeedai/DeepSpeed clone")
    rec = sub.add_parser("record")
    rec.add_argument(
        "--check",
        type=int,
        default=0,
        help="only re-check N recorded files and mutants (exit 1 if any changed)",
    )
    ini = sub.add_parser("initialize", help="record initialize() verdicts (slow: minutes)")
    ini.add_argument("--controls", type=int, default=150, help="clean configs to run as a control")
    args = ap.parse_args()
    if args.cmd == "extract":
        extract(args.deepspeed_git)
    elif args.cmd == "initialize":
        record_init(args.controls)
    elif record(args.check):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
