"""Atomic file output: nothing is half-written and nothing is overwritten without --force."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from zerotune.errors import InputError


def write_atomic(path: str | os.PathLike[str], text: str, *, force: bool = False) -> Path:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    target = Path(path)
    if target.exists() and not force:
        raise InputError(f"{target} already exists", hint="pass --force to overwrite it")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
