"""The pure core never imports torch, pynvml or deepspeed (DEVELOPERS.md: pure core)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "pynvml", "deepspeed")

PURE_MODULES = [
    "zerotune.cli.app",
    "zerotune.collectives",
    "zerotune.schema.hardware",
    "zerotune.schema.model",
    "zerotune.schema.workload",
    "zerotune.dsconfig.settings",
]


@pytest.mark.parametrize("module", PURE_MODULES)
def test_module_imports_no_heavy_dependency(module: str) -> None:
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", f"{module} imported {done.stdout.strip()}"
