"""`zerotune memory` (placeholder until its issue lands)."""

from __future__ import annotations

from zerotune.errors import InputError

NAME = "memory"
HELP = "Not implemented yet."


def command() -> None:
    raise InputError("'zerotune memory' is not implemented yet")
