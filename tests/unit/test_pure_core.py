"""Importing any zerotune module never imports torch, pynvml or deepspeed.

torch/pynvml/deepspeed are imported lazily inside the probe and bench functions that need them
(DEVELOPERS.md: pure core). Modules named `*_worker` are the entry points of spawned ranks and
are the only ones allowed to import torch at module level.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import zerotune

HEAVY = ("torch", "pynvml", "deepspeed")


def _modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(zerotune.__path__, "zerotune.")]
    return sorted(n for n in names if not n.rsplit(".", 1)[-1].endswith("_worker"))


def test_no_module_imports_a_heavy_dependency() -> None:
    modules = _modules()
    assert "zerotune.cli.app" in modules
    code = (
        "import sys, importlib\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"    heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "    if heavy:\n"
        "        print(name, heavy)\n"
        "        break\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"heavy import: {done.stdout.strip()}"
