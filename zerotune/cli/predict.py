"""`zerotune predict` (placeholder until its issue lands)."""

from __future__ import annotations

from zerotune.errors import InputError

NAME = "predict"
HELP = "Not implemented yet."


def command() -> None:
    raise InputError("'zerotune predict' is not implemented yet")
