"""`zerotune validate` (placeholder until its issue lands)."""

from __future__ import annotations

from zerotune.errors import InputError

NAME = "validate"
HELP = "Not implemented yet."


def command() -> None:
    raise InputError("'zerotune validate' is not implemented yet")
