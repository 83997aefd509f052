"""Shared test fixtures: run the CLI in-process, locate the repo's data and the config corpus."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from zerotune.cli.app import main
from zerotune.schema.hardware import CollectivePerf, ComputeSpec, HardwareProfile, LinkClass

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "profiles"
# 116 public-project DeepSpeed configs with their provenance (MANIFEST.tsv), vendored from the shared corpus
CORPUS = REPO / "tests" / "fixtures" / "corpus"


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cpu_probe_profile(name: str = "probe-cpu") -> HardwareProfile:
    """A minimal profile of the kind `zerotune probe` writes on a CPU host: 2 gloo ranks, no GPU."""
    return HardwareProfile(
        name=name,
        origin="probe",
        gpus_per_node=0,
        intra_node=LinkClass(
            kind="loopback-gloo",
            backend="gloo",
            ranks=2,
            collectives={"all_reduce": CollectivePerf(alpha_s=1e-3, busbw_Bps=2e8)},
        ),
        compute=ComputeSpec(achieved_flops={"fp32": 2e10}),
    )


@pytest.fixture(autouse=True, scope="session")
def _private_probe_cache(tmp_path_factory):
    """Tests never read or write the user's probe cache (~/.cache/zerotune): a probe a developer ran
    must not change what `recommend` picks in a test, and tests must not leave one behind.
    Set in os.environ so spawned commands and ranks inherit it."""
    folder = tmp_path_factory.mktemp("zerotune-cache")
    previous = os.environ.get("ZEROTUNE_CACHE_DIR")
    os.environ["ZEROTUNE_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("ZEROTUNE_CACHE_DIR", None)
    else:
        os.environ["ZEROTUNE_CACHE_DIR"] = previous


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `zerotune ARGS...` in this process; returns exit code, stdout and stderr."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "dumb")

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def corpus() -> Path:
    return CORPUS


def pytest_collection_modifyitems(config, items):
    """Under `pytest -n 2 --dist loadgroup` (make test) the tests that launch DeepSpeed ranks or other
    multi-process jobs run one after another on one worker: two such jobs at once on a 2-core box would
    trip each other's timeouts, while the single-process tests fill the other worker."""
    for item in items:
        if "tests/dist/" in item.nodeid or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.xdist_group("engine"))
