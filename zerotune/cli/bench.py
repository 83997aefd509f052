"""`zerotune bench` (placeholder until its issue lands)."""

from __future__ import annotations

from zerotune.errors import InputError

NAME = "bench"
HELP = "Not implemented yet."


def command() -> None:
    raise InputError("'zerotune bench' is not implemented yet")
