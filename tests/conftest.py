"""Shared test fixtures: run the CLI in-process, locate the repo's data and the shared corpus."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from zerotune.cli.app import main

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "profiles"
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"


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
    if not CORPUS.is_dir():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    return CORPUS
