"""`zerotune probe` (placeholder until its issue lands)."""

from __future__ import annotations

from zerotune.errors import InputError

NAME = "probe"
HELP = "Not implemented yet."


def command() -> None:
    raise InputError("'zerotune probe' is not implemented yet")
