"""A bounded sequential write/read bandwidth test of the folder ZeRO-Infinity would offload to.

It writes one file in large blocks, then reads it back, and removes it whatever happens. Both the
size and the time are capped: the test stops at whichever comes first and reports what it moved.
To measure the device rather than the page cache it opens the file with O_DIRECT (blocks aligned
to the page size, as the kernel requires). Filesystems without O_DIRECT (tmpfs, some overlay and
network mounts) fall back to buffered I/O with an fsync after writing and posix_fadvise(DONTNEED)
to evict the file's pages before reading; `method` says which ran, since a page-cache figure
overstates an NVMe.
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

from zerotune.errors import InputError
from zerotune.units import MiB

BLOCK_BYTES = 8 * MiB
"""Bytes per write/read call: what DeepSpeed's NVMe swapper keeps in flight by default, aio block_size
1 MiB x queue_depth 8 (DeepSpeed 0.19.8 runtime/swap_tensor/constants.py:20-22). One synchronous call of
that size stands in for its eight parallel requests."""


@dataclass(frozen=True)
class DiskResult:
    path: str
    write_Bps: float
    read_Bps: float
    bytes_written: int
    bytes_read: int
    method: str
    """'O_DIRECT', or 'buffered + fsync + fadvise(DONTNEED)' when O_DIRECT is refused."""


def measure(
    folder: str | os.PathLike[str], max_bytes: int = 1024 * MiB, max_seconds: float = 10.0
) -> DiskResult:
    """Sequential write then read of up to `max_bytes` in `folder`, each phase capped at
    `max_seconds / 2`. The test file is removed before returning or raising."""
    target = Path(folder)
    if not target.is_dir():
        raise InputError(
            f"--nvme-path {folder} is not a folder", hint="pass an existing directory on the NVMe"
        )
    if not os.access(target, os.W_OK):
        raise InputError(f"--nvme-path {folder} is not writable")
    path = target / f".zerotune-disk-test-{os.getpid()}"
    buffer = mmap.mmap(-1, BLOCK_BYTES)  # page-aligned, as O_DIRECT requires
    buffer.write(os.urandom(MiB) * (BLOCK_BYTES // MiB))
    try:
        fd, method = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        written, write_s = _pump(lambda: os.write(fd, buffer), max_bytes, max_seconds / 2, sync=fd)
        os.close(fd)
        fd, _ = _open(path, os.O_RDONLY, direct=method == "O_DIRECT")
        if method != "O_DIRECT" and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        read, read_s = _pump(lambda: os.readv(fd, [buffer]), written, max_seconds / 2)
        os.close(fd)
    finally:
        path.unlink(missing_ok=True)
        buffer.close()
    return DiskResult(str(target), written / write_s, read / read_s, written, read, method)


def _open(path: Path, flags: int, direct: bool = True) -> tuple[int, str]:
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o600), "O_DIRECT"
        except OSError:
            pass
    return os.open(path, flags, 0o600), "buffered + fsync + fadvise(DONTNEED)"


def _pump(step, limit: int, seconds: float, sync: int | None = None) -> tuple[int, float]:
    """Call `step` (returns bytes moved) until `limit` bytes or `seconds` pass; fsync `sync` inside
    the timed span so buffered writes count their flush."""
    moved, start = 0, time.perf_counter()
    while moved < limit and time.perf_counter() - start < seconds:
        n = step()
        if n <= 0:
            break
        moved += n
    if sync is not None:
        os.fsync(sync)
    return moved, max(time.perf_counter() - start, 1e-9)
