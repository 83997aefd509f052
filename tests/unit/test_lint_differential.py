"""Differential test: DeepSpeed's own config parser versus zerotune validate.

Every corpus config and a few thousand seeded mutations of them (type changes, removed keys, typos, "auto" at
the top level, batch mismatches, both precisions, stages, removed and misplaced keys, bounds) go through
`deepspeed.runtime.config.DeepSpeedConfig` (world size patched, docs/deepspeed-facts.md §0 "[run]") and through
zerotune's linter with the same world size. Every config DeepSpeed rejects must carry at least one
zerotune error. (The converse need not hold: zerotune also reports engine-time failures DeepSpeed's parser
does not see, e.g. removed optimizers.)
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

import pytest

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import load_path, load_text
from zerotune.lint.context import LintOptions
from zerotune.lint.diagnostic import Severity
from zerotune.lint.runner import lint

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed"),
]

WORLD = 4
MUTATIONS_PER_CONFIG = 10
SEED = int(os.environ.get("ZEROTUNE_DIFF_SEED", "20260101"))


@pytest.fixture(scope="module")
def deepspeed_parse():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import deepspeed.comm as dscomm
        from deepspeed.runtime.config import DeepSpeedConfig
    logging.getLogger("DeepSpeed").setLevel(logging.CRITICAL)
    saved = dscomm.get_rank, dscomm.get_world_size
    dscomm.get_rank = lambda *a, **k: 0
    dscomm.get_world_size = lambda *a, **k: WORLD

    def parse(config: dict) -> str | None:
        """None if DeepSpeed accepts the config, else the exception it raised."""
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                DeepSpeedConfig(copy.deepcopy(config))
        except Exception as exc:  # DeepSpeed raises many types: the point is that it refuses
            return f"{type(exc).__name__}: {str(exc)[:160]}"
        return None

    yield parse
    dscomm.get_rank, dscomm.get_world_size = saved


def zerotune_errors(config: dict) -> list[str]:
    loaded = load_text(json.dumps(config), "mutant.json")
    return [d.code for d in lint(loaded, LintOptions(world_size=WORLD)) if d.severity is Severity.ERROR]


# ---- seeded mutations ------------------------------------------------------------------------------------------

ODD_VALUES: list[Any] = [
    "5e8",
    15099494.4,
    -1,
    0,
    "true",
    "yes",
    None,
    [],
    {},
    "auto",
    2.5,
    True,
    "abc",
    7,
    "8",
]
REMOVED = list(schema.REMOVED_TOP)
SECTION_KEYS = {p: s.keys for p, s in schema.SECTIONS.items()}


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(node, dict):
        for key, child in node.items():
            out.append(prefix + (key,))
            out.extend(_paths(child, prefix + (key,)))
    return out


def _get_parent(config: dict, path: tuple) -> dict:
    node = config
    for key in path[:-1]:
        node = node[key]
    return node


def _typo(key: str, rng: random.Random) -> str:
    if len(key) < 3:
        return key + "s"
    i = rng.randrange(len(key) - 1)
    return rng.choice([key[:i] + key[i + 1 :], key[:i] + key[i + 1] + key[i] + key[i + 2 :], key + "s"])


def mutate(config: dict, rng: random.Random) -> dict:
    c = copy.deepcopy(config)
    paths = _paths(c)
    kind = rng.randrange(12)
    if kind == 0 and paths:  # type change of any value
        path = rng.choice(paths)
        _get_parent(c, path)[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
    elif kind == 1 and paths:  # remove a key
        path = rng.choice(paths)
        del _get_parent(c, path)[path[-1]]
    elif kind == 2 and paths:  # typo in a key
        path = rng.choice(paths)
        parent = _get_parent(c, path)
        parent[_typo(path[-1], rng)] = parent.pop(path[-1])
    elif kind == 3:  # "auto" at the top level or anywhere
        key = rng.choice(
            [
                "train_batch_size",
                "train_micro_batch_size_per_gpu",
                "gradient_accumulation_steps",
                "gradient_clipping",
                "steps_per_print",
                "communication_data_type",
            ]
        )
        c[key] = "auto"
    elif kind == 4:  # batch arithmetic
        for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
            if rng.random() < 0.5:
                c.pop(key, None)
            else:
                c[key] = rng.choice([1, 2, 3, 4, 8, 16, 30, 64])
    elif kind == 5:  # precision
        fp16, bf16 = rng.choice([(True, True), (True, False), (False, True), ("auto", True), ("true", 1)])
        c["fp16"] = {
            "enabled": fp16,
            **({"loss_scale": rng.choice([0, -1, 128, True])} if rng.random() < 0.3 else {}),
        }
        c[rng.choice(["bf16", "bfloat16"])] = {"enabled": bf16}
    elif kind == 6:  # stage
        c.setdefault("zero_optimization", {})
        if isinstance(c["zero_optimization"], dict):
            c["zero_optimization"]["stage"] = rng.choice([0, 1, 2, 3, 4, "3", "auto", 2.0, 2.5, True])
    elif kind == 7:  # removed keys
        if rng.random() < 0.5:
            c[rng.choice(REMOVED)] = rng.choice([None, False, {}])
        elif isinstance(c.get("zero_optimization"), dict):
            c["zero_optimization"][rng.choice(list(schema.REMOVED_ZERO))] = 1
    elif kind == 8:  # a known key of one section placed in another
        src, dst = rng.sample([p for p in SECTION_KEYS if SECTION_KEYS[p]], 2)
        key = rng.choice(SECTION_KEYS[src])
        target = c
        for token in dst.split("/")[1:]:
            target = target.setdefault(token, {}) if isinstance(target, dict) else target
        if isinstance(target, dict):
            target[key] = rng.choice([1, True, "x", {}])
    elif kind == 9:  # a known field with an odd value
        pointer = rng.choice(
            [
                "/zero_optimization",
                "/zero_optimization/offload_optimizer",
                "/zero_optimization/offload_param",
                "/fp16",
                "/bf16",
                "",
            ]
        )
        key = rng.choice(SECTION_KEYS[pointer])
        target = c
        for token in pointer.split("/")[1:]:
            target = target.setdefault(token, {}) if isinstance(target, dict) else target
        if isinstance(target, dict):
            target[key] = copy.deepcopy(
                rng.choice(ODD_VALUES + [1e9, 0.5, "cpu", "nvme", "none", "fp32", "sum"])
            )
    elif kind == 10:  # both spellings / deprecated + replacement
        z = c.setdefault("zero_optimization", {})
        if isinstance(z, dict):
            pair = rng.choice(
                [
                    ("stage3_max_live_parameters", "max_live_parameters", 1e9),
                    ("cpu_offload", "offload_optimizer", None),
                    ("stage3_gather_fp16_weights_on_model_save", "gather_16bit_weights_on_model_save", 1),
                ]
            )
            z[pair[0]] = pair[2] if pair[2] is not None else True
            z[pair[1]] = pair[2] if pair[2] is not None else {"device": "cpu"}
    else:  # a section replaced by a non-object
        key = rng.choice(["fp16", "bf16", "optimizer", "scheduler", "zero_optimization", "checkpoint", "aio"])
        c[key] = rng.choice([None, True, 5, "x", []])
    return c


_FILL = {
    "lr": 1e-4,
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "weight_decay": 0.0,
    "warmup_min_lr": 0,
    "warmup_max_lr": 1e-4,
    "warmup_num_steps": 10,
    "total_num_steps": 100,
    "gradient_clipping": 1.0,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
}


def hf_filled(config: dict) -> dict:
    """What HF Trainer would hand DeepSpeed: top-level and params "auto" replaced by concrete values."""

    def fill(node: Any, strict: bool) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                child_strict = strict or key in ("zero_optimization", "fp16", "bf16")
                if value == "auto" and not strict:
                    if key in _FILL:
                        out[key] = _FILL[key]
                    continue
                out[key] = fill(value, child_strict)
            return out
        return node

    filled = fill(config, False)
    filled.pop("train_batch_size", None)
    return filled


def _corpus_configs(corpus: Path) -> list[tuple[str, dict]]:
    out = []
    for path in sorted((corpus / "configs").iterdir()):
        loaded = load_path(path)
        if loaded.parsed and isinstance(loaded.data, dict):
            out.append((path.name, json.loads(json.dumps(loaded.data))))
    return out


def test_every_corpus_rejection_is_a_zerotune_error(corpus, deepspeed_parse) -> None:
    misses, rejected = [], 0
    for name, config in _corpus_configs(corpus):
        why = deepspeed_parse(config)
        if why is not None:
            rejected += 1
            if not zerotune_errors(config):
                misses.append((name, why))
    assert rejected >= 50  # the "auto" templates, removed keys, strict-section typos …
    assert not misses, misses


def test_every_mutant_rejection_is_a_zerotune_error(corpus, deepspeed_parse) -> None:
    rng = random.Random(SEED)
    misses, accepted, rejected = [], 0, 0
    bases = [(name, base) for name, config in _corpus_configs(corpus) for base in (config, hf_filled(config))]
    for name, config in bases:
        for _ in range(MUTATIONS_PER_CONFIG):
            mutant = mutate(config, rng)
            why = deepspeed_parse(mutant)
            if why is None:
                accepted += 1
                continue
            rejected += 1
            if not zerotune_errors(mutant):
                misses.append((name, why, json.dumps(mutant)))
    print(f"mutants: {accepted} accepted, {rejected} rejected by DeepSpeed")
    assert accepted > 200 and rejected > 600
    assert not misses, f"{len(misses)} DeepSpeed rejections without a zerotune error, e.g. {misses[:5]}"
