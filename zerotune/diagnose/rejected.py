"""A config DeepSpeed rejected, rebuilt from the values its error printed, and zerotune's validate
rules on it: the rule codes that name the same keys go into the diagnosis."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from zerotune.diagnose.report import Diagnosis, LintFinding

SECTION_OF_MODEL = {
    "DeepSpeedZeroConfig": ("zero_optimization",),
    "DeepSpeedZeroOffloadOptimizerConfig": ("zero_optimization", "offload_optimizer"),
    "DeepSpeedZeroOffloadParamConfig": ("zero_optimization", "offload_param"),
    "DeepSpeedFP16Config": ("fp16",),
    "DeepSpeedBF16Config": ("bf16",),
    "DeepSpeedConfig": (),
}
"""DeepSpeed's pydantic config classes and the section of the JSON each validates."""


def _value(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        low = text.strip().lower()
        return {"true": True, "false": False, "none": None}.get(low, text.strip().strip("'\""))


def rejected_world(d: Diagnosis) -> int | None:
    """The world size a batch assertion printed, if any."""
    for f in d.rejected.fields if d.rejected else []:
        if f.field == "world_size" and f.value is not None and f.value.lstrip("-").isdigit():
            return int(f.value)
    return None


def rejected_config(base: dict[str, Any] | None, d: Diagnosis) -> dict[str, Any] | None:
    """`base` (or {}) with the values DeepSpeed rejected put back where they were."""
    if d.rejected is None or d.rejected.model not in SECTION_OF_MODEL:
        return None
    cfg = copy.deepcopy(base) if base else {"train_micro_batch_size_per_gpu": 1}
    node = cfg
    for part in SECTION_OF_MODEL[d.rejected.model]:
        node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else node
    for f in d.rejected.fields:
        if not f.field or "." in f.field or f.field == "world_size":
            continue
        if f.value is not None:
            node[f.field] = _value(f.value)
        elif "extra" in f.message.lower() or "not permitted" in f.message:
            node[f.field] = {}  # an unknown or misplaced key: its value is not in the message
    if d.rejected.model == "DeepSpeedZeroConfig" and "stage" not in node:
        node["stage"] = (
            3 if any(f.field.startswith("stage3_") for f in d.rejected.fields) else node.get("stage", 0)
        )
    return cfg


def _file_values(node: Any) -> Any:
    """`node` without the floats a config file cannot hold (inf, nan): a trainer passed them in code (accelerate's
    "steps_per_print": inf), and the linter would read their JSON spelling as an unquoted placeholder (ZT003)."""
    if isinstance(node, dict):
        return {k: _file_values(v) for k, v in node.items() if not (isinstance(v, float) and not math.isfinite(v))}
    if isinstance(node, list):
        return [_file_values(v) for v in node]
    return node


def lint_config(config: dict[str, Any], *, world: int | None, seq_len: int, hf: bool = False) -> list[LintFinding]:
    from zerotune.dsconfig.load import load_text
    from zerotune.lint.context import LintOptions
    from zerotune.lint.runner import lint

    loaded = load_text(json.dumps(_file_values(config), indent=2), "<config>")
    found = lint(loaded, LintOptions(world_size=world, seq_len=seq_len, hf=hf))
    return [
        LintFinding(code=x.code, severity=x.severity.value, message=x.message, pointer=x.pointer)
        for x in found
    ]
