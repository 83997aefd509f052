"""`zerotune recommend` (placeholder until its issue lands)."""

from __future__ import annotations

from zerotune.errors import InputError

NAME = "recommend"
HELP = "Not implemented yet."


def command() -> None:
    raise InputError("'zerotune recommend' is not implemented yet")
