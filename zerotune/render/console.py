"""Consoles, made at call time (never at import) so tests and redirections see them.

stdout carries a command's result (a report, or JSON with --json); stderr carries what is for
people only: progress bars, notices, warnings and errors.
"""

from __future__ import annotations

import sys

from rich.console import Console


def out() -> Console:
    return Console(file=sys.stdout, soft_wrap=False, highlight=False)


def err() -> Console:
    return Console(file=sys.stderr, soft_wrap=False, highlight=False)


def print_json(text: str) -> None:
    """Machine output: plain text on stdout, no rich markup or wrapping."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
