"""The shape of a log signal, and what its extractor is handed when the scanner hits a line.

A line signal names the Scan field it fills, the byte patterns that make the scanner stop on a
line (they join the one-pass trigger regex, zerotune.diagnose.scan) and its extractors, which
re-check the normalised line and record what it shows. Every hit line is shown to every line
signal, in table order, so a line found by one signal's trigger is read by all of them.
A block signal reads a whole block at once (step lines come once per step per rank: too many to
parse one by one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from zerotune.diagnose.records import LogLine, Scan, normalise

MAX_LINE_BYTES = 64 * 1024
"""A "line" longer than this (a binary blob, a minified dump) is cut: nothing we match is that long."""
CONTEXT_LINES = 120
"""Lines looked back from a GPU OOM to find the code that allocated (a Python traceback is < 100)."""


class Follower(Protocol):
    """Reads the lines after a hit (a config dump, pydantic's per-field errors): the scanner feeds
    it each following line, untriggered, until `feed` returns False."""

    def feed(self, line: LogLine) -> bool: ...

    def close(self) -> None:
        """The log ended while following."""


@dataclass
class Hit:
    """One line the trigger stopped on, with the bytes around it for the extractors that look
    before or after it."""

    line: LogLine
    scan: Scan
    data: bytes
    """this block"""
    start: int
    end: int
    """the line is data[start:end]"""
    prev_tail: bytes
    """the end of the previous block (a traceback can start there)"""
    follower: Follower | None = None
    """set by an extractor that wants the next lines"""

    def says(self, *phrases: str) -> bool:
        """Whether the line holds any of `phrases` (the extractors' re-check after the trigger)."""
        return any(p in self.line.text for p in phrases)

    def wrapped(self, nbytes: int) -> str:
        """This line joined with the next two: a message wrapped over lines (rich tracebacks, notebooks)."""
        after = self.data[self.end : self.end + nbytes].decode("utf-8", "replace").split("\n")[1:3]
        return " ".join([self.line.text, *(normalise(a)[0] for a in after)])

    def previous_text(self) -> str:
        """The raw line before this one (in this block)."""
        stop = max(0, self.start - 1)
        return self.data[self.data.rfind(b"\n", 0, stop) + 1 : stop].decode("utf-8", "replace")

    def before(self, rank: int | None) -> list[LogLine]:
        """Up to CONTEXT_LINES normalised lines before this one (this block and the previous one),
        back to the most recent `Traceback` line; lines of other ranks than `rank` are left out."""
        start, number = self.start, self.line.number
        chunk = (self.prev_tail if start < MAX_LINE_BYTES * 2 else b"") + self.data[
            max(0, start - MAX_LINE_BYTES * 2) : start
        ]
        raws = chunk.decode("utf-8", "replace").split("\n")[-CONTEXT_LINES - 1 : -1]
        out: list[LogLine] = []
        for i, raw in enumerate(reversed(raws)):
            text, r = normalise(raw)
            if rank is not None and r is not None and r != rank:
                continue
            out.append(LogLine(number - 1 - i, text, r))
            if text.lstrip().startswith("Traceback (most recent call last)"):
                break
        out.reverse()
        return out

    def after(self, stop: Callable[[str], object]) -> list[LogLine]:
        """Up to CONTEXT_LINES normalised lines after this one (in this block), down to the first
        one after the next that `stop` accepts."""
        raws = (
            self.data[self.end + 1 : self.end + 1 + MAX_LINE_BYTES * 2]
            .decode("utf-8", "replace")
            .split("\n")[:CONTEXT_LINES]
        )
        out: list[LogLine] = []
        for i, raw in enumerate(raws):
            text, r = normalise(raw)
            out.append(LogLine(self.line.number + 1 + i, text, r))
            if i and stop(text):
                break
        return out


Extractor = Callable[[Hit], None]


@dataclass(frozen=True)
class Signal:
    name: str
    """the Scan field it fills"""
    triggers: tuple[bytes, ...]
    """byte regexes of the one-pass trigger; each starts with a byte rare in logs (scan.py says why)"""
    extract: tuple[Extractor, ...]
    """run in order on every hit line; each re-checks the line itself"""
    claims: str | None = None
    """a line holding this text is this signal's alone: no later signal sees it (the JSON of a
    config dump would otherwise read as facts); its extractors run only on such lines"""


@dataclass(frozen=True)
class Block:
    """One block of whole lines, for the block signals."""

    data: bytes
    base: int
    """lines before this block"""

    def line_at(self, offset: int) -> LogLine:
        data = self.data
        start = data.rfind(b"\n", 0, offset) + 1
        end = data.find(b"\n", offset)
        raw = data[start : end if end >= 0 else len(data)][:MAX_LINE_BYTES].decode("utf-8", "replace")
        text, rank = normalise(raw)
        return LogLine(self.base + data.count(b"\n", 0, start) + 1, text, rank)


@dataclass(frozen=True)
class BlockSignal:
    name: str
    """the Scan field it fills"""
    extract: Callable[[Block, Scan], None]
