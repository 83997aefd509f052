"""What every rule sees: the loaded file, the options, and DeepSpeed's view of the values."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import LoadedConfig
from zerotune.lint.diagnostic import Edit


@dataclass(frozen=True)
class LintOptions:
    hf: bool = False
    """The config is given to HF Trainer/accelerate, which fill "auto" values before DeepSpeed sees them."""
    world_size: int | None = None
    """Data-parallel world size, for batch arithmetic and ZeRO++ group checks."""
    model: str | None = None
    """A model reference for zerotune.catalog.models.load_model (enables model-aware rules)."""
    profile: str | None = None
    """A hardware profile reference for zerotune.catalog.hardware.load_profile."""
    gpus: int | None = None
    gpu_memory_gib: float | None = None
    bf16_capable: bool | None = None
    seq_len: int | None = None
    """Tokens per sequence for the memory rules' activation estimate (the config does not say; None:
    zerotune.job's default)."""
    checkpointing: bool | None = None
    """Activation checkpointing in the training script, for the memory rules (None: zerotune.job's default)."""
    checkpoint_in_cpu: bool = False
    """Checkpointed activations kept in host memory (DeepSpeed's checkpoint_in_cpu), for the memory rules."""
    margin: float | None = None
    """The safety margin the memory rules judge with (None: the one every command defaults to)."""
    workload: tuple[tuple[str, object], ...] = ()
    """The workload options said (JobInputs fields: attention, liger, packing, ...), for the memory rules."""
    verbose: bool = False
    """Let a check's exception propagate (a traceback) instead of becoming a ZT000 finding."""


@dataclass
class Context:
    loaded: LoadedConfig
    options: LintOptions
    memo: dict[str, Any] = field(default_factory=dict)
    """Per-file results several rules share (computed by the first rule that needs them)."""

    @cached_property
    def config(self) -> dict[str, Any]:
        return self.loaded.data if isinstance(self.loaded.data, dict) else {}

    def section(self, key: str) -> dict[str, Any]:
        value = self.config.get(key)
        return value if isinstance(value, dict) else {}

    @cached_property
    def placeholders(self) -> frozenset[str]:
        """Pointers holding an unquoted placeholder (ZT003 reports them; other rules stay quiet there)."""
        return frozenset(i.pointer for i in self.loaded.issues if i.kind == "placeholder")

    @property
    def zero(self) -> dict[str, Any]:
        return self.section("zero_optimization")

    def zero_value(self, name: str) -> tuple[str | None, Any]:
        """(the spelling used, DeepSpeed's coerced value) for a zero_optimization field; (None, default) if unset."""
        f = schema.zero_field(name)
        assert f is not None, name
        for key in f.spellings:
            if key in self.zero and not schema.is_auto(self.zero[key]):
                value, problem = schema.coerce(f, self.zero[key])
                return key, (f.default if problem else value)
        return None, f.default

    @cached_property
    def stage(self) -> int:
        """The ZeRO stage DeepSpeed would run (legacy `true` → 1; "auto" → 0). A stage DeepSpeed rejects
        (4, 2.5, "x") is -1: ZT601 reports it once, and no rule reads it as "ZeRO off"."""
        section = self.config.get("zero_optimization")
        if section is True:
            return 1
        if isinstance(section, dict) and "stage" in section and not schema.is_auto(section["stage"]):
            _, problem = schema.coerce(schema.zero_field("stage"), section["stage"])
            if problem is not None:
                return -1
        _, value = self.zero_value("stage") if isinstance(section, dict) else (None, 0)
        return value if value in (0, 1, 2, 3) else 0

    @cached_property
    def launcher_size(self) -> dict[str, int]:
        """The job size an accelerate config gives its launcher (gpus per node, nodes), unless --world-size or
        --gpus was said: predict sizes the same file so (zerotune.job.sized_by_accelerate), and the rules judge
        the job it runs. Empty for other files."""
        from zerotune.dsconfig.accelerate import launcher_size

        if self.loaded.accelerate is None or self.options.world_size is not None or self.options.gpus is not None:
            return {}
        return launcher_size(self.loaded.accelerate)

    @property
    def world_size(self) -> int | None:
        """The data-parallel world the batch and group rules check against: --world-size, else the ranks an
        accelerate config launches (num_processes), else unknown."""
        if self.options.world_size is not None:
            return self.options.world_size
        size = self.launcher_size
        return size["gpus"] * size["nodes"] if size else None

    @cached_property
    def stage_known(self) -> bool:
        """False when the stage is "auto" or unreadable (then stage-applicability rules stay quiet)."""
        section = self.config.get("zero_optimization")
        if not isinstance(section, dict) or "stage" not in section:
            return True
        value, problem = schema.coerce(schema.zero_field("stage"), section["stage"])
        return not schema.is_auto(section["stage"]) and problem is None

    def offload(self, which: str) -> dict[str, Any] | None:
        """The offload_param/offload_optimizer dict if it moves something (device cpu or nvme)."""
        sec = self.zero.get(which)
        if isinstance(sec, dict) and sec.get("device") in ("cpu", "nvme"):
            return sec
        legacy = {"offload_optimizer": "cpu_offload", "offload_param": "cpu_offload_param"}[which]
        if which not in self.zero and legacy in self.zero and not schema.is_auto(self.zero[legacy]):
            # the deprecated boolean is read by pydantic too: "true", "yes", 1 … switch it on
            value, problem = schema.coerce(schema.zero_field(legacy), self.zero[legacy])
            if value is True and problem is None:
                return {"device": "cpu"}
        return None

    def enabled(self, section: str) -> bool:
        """fp16/bf16 `enabled`, as pydantic reads it ("auto" → False)."""
        if section == "bf16" and "bf16" not in self.config:
            section = "bfloat16"
        sec = self.section(section)
        if "enabled" not in sec or schema.is_auto(sec["enabled"]):
            return False
        value, problem = schema.coerce(schema.Field("enabled", "bool"), sec["enabled"])
        return bool(value) and problem is None

    @property
    def precision(self) -> str:
        if self.enabled("bf16"):
            return "bf16"
        return "fp16" if self.enabled("fp16") else "fp32"

    @property
    def optimizer_type(self) -> str | None:
        opt = self.section("optimizer")
        value = opt.get("type")
        return value if isinstance(value, str) else None

    def top_number(self, key: str) -> float | None:
        value = self.config.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return value

    @cached_property
    def resolved(self) -> Any:
        """zerotune.dsconfig.settings.resolve(config): the values DeepSpeed would use, unreadable ones
        replaced by defaults (the value rules report them); only the model- and hardware-aware rules
        need it."""
        from zerotune.dsconfig.settings import resolve

        return resolve(self.config)

    def at(self, pointer: str) -> Any:
        """The value at an RFC 6901 pointer, or None."""
        node: Any = self.loaded.data
        for token in pointer.split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return None
        return node

    def sections(self) -> list[tuple[str, dict[str, Any], schema.Section]]:
        """Every schema section present in the config as a mapping: (pointer, dict, Section)."""
        return self._sections

    @cached_property
    def _sections(self) -> list[tuple[str, dict[str, Any], schema.Section]]:
        out = []
        for pointer, sec in schema.SECTIONS.items():
            value = self.at(pointer) if pointer else self.config
            if isinstance(value, dict):
                out.append((pointer, value, sec))
        return out

    def key_edit(self, pointer: str, new_key: str) -> Edit | None:
        node = self.loaded.nodes.get(pointer)
        if node is None or node.key_start is None or node.key_end is None:
            return None
        return Edit(node.key_start, node.key_end, json.dumps(new_key))

    def value_edit(self, pointer: str, text: str) -> Edit | None:
        node = self.loaded.nodes.get(pointer)
        if node is None:
            return None
        return Edit(node.value_start, node.value_end, text)
