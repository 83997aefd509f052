"""Consoles, made at call time (never at import) so tests and redirections see them.

stdout carries a command's result (a report, or JSON with --json); stderr carries what is for
people only: progress bars, notices, warnings and errors.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

# Reports piped to a file or CI log have no terminal width; rich would squeeze tables into 80
# columns and elide numbers. Use a width that fits our widest tables unless COLUMNS says otherwise.
_PIPE_WIDTH = 140


def _console(file) -> Console:
    console = Console(file=file, soft_wrap=False, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = _PIPE_WIDTH
    return console


def out() -> Console:
    return _console(sys.stdout)


def err() -> Console:
    return _console(sys.stderr)


def print_json(text: str) -> None:
    """Machine output: plain text on stdout, no rich markup or wrapping."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
