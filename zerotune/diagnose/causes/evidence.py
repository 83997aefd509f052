"""The evidence lines a diagnosis shows: the log lines (number, rank, text) that show its cause."""

from __future__ import annotations

from zerotune.diagnose.records import LogLine
from zerotune.diagnose.report import Evidence


def _ev(line: LogLine | None) -> list[Evidence]:
    return [] if line is None else [Evidence(line=line.number, rank=line.rank, text=line.text.strip()[:400])]


def evidence(lines: list[LogLine], limit: int = 5) -> list[Evidence]:
    """The first `limit` distinct lines of `lines`, as evidence."""
    out: list[Evidence] = []
    seen: set[int] = set()
    for line in lines:
        if line.number not in seen and len(out) < limit:
            seen.add(line.number)
            out.extend(_ev(line))
    return out
