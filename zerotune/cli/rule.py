"""`zerotune rule` (placeholder until its issue lands)."""

from __future__ import annotations

from zerotune.errors import InputError

NAME = "rule"
HELP = "Not implemented yet."


def command() -> None:
    raise InputError("'zerotune rule' is not implemented yet")
