"""A fix the memory model did not check (no --model/--config, or a cause not about memory), and
what to pass for one it checks."""

from __future__ import annotations

from zerotune.diagnose.report import Change, FixOut

EXACT = "pass --model (a catalog name or config.json) and --config (the DeepSpeed JSON) for a change checked by the memory model"


def unchecked(changes: list[Change], text: str) -> FixOut:
    """The qualitative fix: `changes` with the text that says what else to do."""
    return FixOut(changes=changes, checked=False, text=text)
