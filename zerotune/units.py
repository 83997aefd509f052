"""Units, stated once. Memory is reported in GiB (1024**3); bandwidth in GB/s (1e9 B/s),
as nccl-tests and datasheets do. DeepSpeed's size knobs count *elements*, not bytes."""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 1e9

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1}


def fmt_bytes(n: float) -> str:
    """Human bytes in binary units: 1536 -> '1.5 KiB'."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_gib(n: float | None, *, unit: bool = True) -> str:
    """GiB to one decimal, the unit left off for table columns headed GiB: 'n/a' for None."""
    if n is None:
        return "n/a"
    return f"{n / GiB:.1f} GiB" if unit else f"{n / GiB:.1f}"


def fmt_count(n: float) -> str:
    """Element counts the way DeepSpeed users write them: 500000000 -> '500M'."""
    value = float(n)
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            text = f"{value / scale:.3g}"
            return f"{text}{unit}"
    return f"{value:.0f}"


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"
