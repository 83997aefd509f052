"""The bounded disk bandwidth test: caps, cleanup, bad folders; and live host facts."""

from __future__ import annotations

import os

import pytest

from zerotune.errors import InputError
from zerotune.hw.disk import BLOCK_BYTES, measure
from zerotune.hw.host import read_host


def test_size_capped_and_cleaned_up(tmp_path) -> None:
    result = measure(tmp_path, max_bytes=2 * BLOCK_BYTES, max_seconds=10)
    assert result.bytes_written == 2 * BLOCK_BYTES and result.bytes_read == result.bytes_written
    assert result.write_Bps > 0 and result.read_Bps > 0
    assert result.method in ("O_DIRECT", "buffered + fsync + fadvise(DONTNEED)")
    assert os.listdir(tmp_path) == []


def test_time_capped(tmp_path) -> None:
    result = measure(tmp_path, max_bytes=1 << 40, max_seconds=0.2)  # 1 TiB cap never reached
    assert 0 < result.bytes_written < 1 << 40
    assert os.listdir(tmp_path) == []


def test_bad_folder_is_an_input_error(tmp_path) -> None:
    with pytest.raises(InputError, match="not a folder"):
        measure(tmp_path / "missing")


def test_live_host_facts() -> None:
    host = read_host()
    assert host.cpu_cores and host.cpu_cores >= 1
    assert host.ram_bytes and host.ram_available_bytes and host.ram_available_bytes <= host.ram_bytes
    assert host.shm_bytes is None or host.shm_bytes > 0
