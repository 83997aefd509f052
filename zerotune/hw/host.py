"""Host facts from Linux's own files: CPU model and cores, RAM, /dev/shm.

The parsers take the file's text, so tests feed them recorded /proc contents; `read_host()`
reads the live files. Anything unreadable (another OS, a locked-down container) is None.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostFacts:
    cpu_model: str | None
    cpu_cores: int | None
    """Logical CPUs this process may run on (sched_getaffinity: a container's cpuset counts)."""
    ram_bytes: int | None
    ram_available_bytes: int | None
    shm_bytes: int | None
    """Size of /dev/shm: NCCL's shared-memory transport and DataLoader workers live in it."""


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The first 'model name' (x86), 'Model' (Arm, e.g. Grace) or 'cpu model' (MIPS) of /proc/cpuinfo."""
    for key in ("model name", "Model", "cpu model"):
        for line in cpuinfo.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return " ".join(value.split())
    return None


def parse_meminfo(meminfo: str) -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) in bytes from /proc/meminfo (which counts kB = 1024 B)."""
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if sep and fields and fields[0].isdigit():
            scale = 1024 if fields[1:] == ["kB"] else 1
            values[name.strip()] = int(fields[0]) * scale
    return values.get("MemTotal"), values.get("MemAvailable")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def read_host() -> HostFacts:
    total, available = parse_meminfo(_read("/proc/meminfo"))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    try:
        shm = shutil.disk_usage("/dev/shm").total
    except OSError:
        shm = None
    return HostFacts(
        cpu_model=parse_cpu_model(_read("/proc/cpuinfo")),
        cpu_cores=cores,
        ram_bytes=total,
        ram_available_bytes=available,
        shm_bytes=shm,
    )
