"""scripts/gpu_wheels.sh: its offline check (--verify) here; the download and build only with
ZEROTUNE_NETWORK_TESTS=1, since they need the package index."""

from __future__ import annotations

import os
import subprocess
import zipfile

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "gpu_wheels.sh"
NAMES = ("deepspeed-0.19.8", "hjson-3.1.0", "annotated_types-0.8.0", "typing_inspection-0.4.5",
         "typing_extensions-4.16.0", "zerotune-0.1.0")  # fmt: skip


def _sh(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def _wheel(folder, stem: str, requires: tuple[str, ...] = ()) -> None:
    name = stem.split("-")[0]
    with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as wheel:
        metadata = "".join(f"Requires-Dist: {r}\n" for r in requires)
        wheel.writestr(f"{stem}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\n{metadata}")


def test_verify_names_the_missing_wheels(tmp_path) -> None:
    _wheel(tmp_path, "hjson-3.1.0")
    done = _sh("--verify", str(tmp_path))
    assert done.returncode == 1
    assert "missing wheels" in done.stderr and "deepspeed" in done.stderr and "pydantic_core" in done.stderr
    assert " hjson" not in done.stderr


def test_verify_refuses_a_pydantic_core_other_than_pydantics_pin(tmp_path) -> None:
    for stem in NAMES:
        _wheel(tmp_path, stem)
    _wheel(tmp_path, "pydantic-2.14.4", ("pydantic-core==2.50.5", "annotated-types>=0.6.0"))
    _wheel(tmp_path, "pydantic_core-2.40.0")
    done = _sh("--verify", str(tmp_path))
    assert done.returncode == 1 and "pydantic needs pydantic-core==2.50.5" in done.stderr, done.stderr


def test_usage_errors_exit_2(tmp_path) -> None:
    assert _sh("--verify").returncode == 2
    assert _sh("--verify", str(tmp_path / "absent")).returncode == 2
    assert _sh("--frobnicate").returncode == 2


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("ZEROTUNE_NETWORK_TESTS") != "1", reason="needs the package index")
def test_the_wheel_set_downloads_builds_and_installs(tmp_path) -> None:
    import sys

    done = _sh(str(tmp_path), env={"TORCH_PYTHON": sys.executable}, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    wheels = sorted(p.name.split("-")[0] for p in tmp_path.glob("*.whl"))
    assert {"deepspeed", "hjson", "pydantic", "pydantic_core", "zerotune"} <= set(wheels)
    assert "install for CPython 3.12" in done.stdout
