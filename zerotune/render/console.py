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


class _NoTrailingSpaces:
    """A text stream that drops the spaces rich pads lines with (table cells, titles) before each
    newline: piped reports diff and grep cleanly."""

    def __init__(self, file) -> None:
        self.file = file
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.file.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.file.write(self.pending)
            self.pending = ""
        self.file.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str):
        return getattr(self.file, name)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """A closed pipe (`zerotune ... | head`) is a normal end: rich points stdout at /dev/null (so
        the exit flush cannot fail) and exits 1; re-raise BrokenPipeError so cli.app exits 0 quietly."""
        try:
            super().on_broken_pipe()
        except SystemExit:
            raise BrokenPipeError from None


def _console(file, soft_wrap: bool = False) -> Console:
    terminal = hasattr(file, "isatty") and file.isatty()
    console = _Console(file=file if terminal else _NoTrailingSpaces(file), soft_wrap=soft_wrap, highlight=False)
    if not terminal and "COLUMNS" not in os.environ:
        console.width = _PIPE_WIDTH
    return console


def out() -> Console:
    return _console(sys.stdout)


def err() -> Console:
    # Notices and errors are sentences with paths and commands in them: the terminal wraps them (soft
    # wrap), so a path copied from a narrow terminal is whole and an error stays one line, as said.
    return _console(sys.stderr, soft_wrap=True)


def colour() -> bool:
    """Will stdout show colours? Not when piped, under NO_COLOR or TERM=dumb (rich's own decision):
    charts that tell parts apart by colour then draw them with distinct glyphs."""
    return out().color_system is not None


def print_json(text: str) -> None:
    """Machine output: plain text on stdout, no rich markup or wrapping."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
