"""Every tensor a rank hands to a collective is made on the rank's device.

NCCL has no CPU tensors: on the first GPU run (data/gpu/2026-11-28-NVIDIA-H200) every bench failed
at its first measured step with "No backend type associated with device type cpu", because the
step time the ranks agree on was a CPU tensor all-reduced over the NCCL group. gloo accepts CPU
tensors, so no CPU test can run into it: this reads the rank workers' source instead. A tensor
passed to all_reduce/all_gather/broadcast/reduce_scatter must be a parameter of the function (its
caller chose the device) or be built in the function by a call that names `device=`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "zerotune"
RANK_CODE = ("bench", "probe", "calibrate")
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce_scatter", "reduce_scatter_tensor"}
TENSOR_FACTORIES = {"tensor", "zeros", "ones", "empty", "full", "randn", "rand", "arange"}


def _collective_uses(tree: ast.AST):
    """(function, call, tensor name) for each collective call whose first argument is a name."""
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for call in ast.walk(func):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in COLLECTIVES
                and call.args
                and isinstance(call.args[0], ast.Name)
            ):
                yield func, call, call.args[0].id


def _made_on_a_device(func: ast.AST, name: str) -> bool:
    params = {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
    if name in params:
        return True
    made = [
        node.value
        for node in ast.walk(func)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        and isinstance(node.value, ast.Call)
    ]
    factories = [
        c
        for c in made
        if isinstance(c.func, ast.Attribute) and c.func.attr in TENSOR_FACTORIES
    ]
    return all(any(k.arg == "device" for k in c.keywords) for c in factories)


def _files():
    return sorted(p for part in RANK_CODE for p in (PACKAGE / part).rglob("*.py"))


def test_the_check_sees_the_rank_workers_collectives() -> None:
    uses = [u for path in _files() for u in _collective_uses(ast.parse(path.read_text()))]
    assert len(uses) >= 5, "the bench and probe rank workers all-reduce tensors: the walk found too few"


def test_the_check_catches_a_cpu_tensor() -> None:
    bad = ast.parse(
        "def f(torch, tdist, elapsed):\n"
        "    slowest = torch.tensor([elapsed], dtype=torch.float64)\n"
        "    tdist.all_reduce(slowest)\n"
    )
    (func, _, name), = _collective_uses(bad)
    assert not _made_on_a_device(func, name)


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_collective_tensors_name_their_device(path: Path) -> None:
    for func, call, name in _collective_uses(ast.parse(path.read_text())):
        assert _made_on_a_device(func, name), (
            f"{path.name}:{call.lineno} {func.name}(): {name!r} goes to a collective but is built without "
            "device= (NCCL refuses CPU tensors)"
        )
