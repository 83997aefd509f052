"""Print the built-in hardware profiles as one table (for the README).

    .venv/bin/python scripts/evidence/show_profiles.py [--size-mib 256] [--markdown]

busbw columns are effective: S * factor / time(S) for an all_gather of the given total size over
the link's ranks, so they include the latency term (and follow a measured curve when one exists).
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from zerotune.catalog.hardware import list_profiles, load_profile
from zerotune.collectives import busbw
from zerotune.schema.hardware import HardwareProfile, LinkClass
from zerotune.units import GB, GiB, MiB


def _busbw(profile: HardwareProfile, link: LinkClass | None, size: int) -> str:
    if link is None or "all_gather" not in link.collectives:
        return "-"
    n = link.ranks or profile.world_size
    seconds = link.collectives["all_gather"].time("all_gather", size, n)
    if not seconds:
        return "n/a"
    return f"{busbw('all_gather', size, seconds, n) / GB:.0f} ({link.kind})"


def _rows(size: int) -> list[list[str]]:
    rows = []
    for name in list_profiles():
        p = load_profile(name)
        gpu = p.gpu
        rows.append(
            [
                name,
                f"{p.nodes}x{p.gpus_per_node}",
                gpu.name if gpu else "-",
                f"{gpu.memory_bytes / GiB:.1f}" if gpu and gpu.memory_bytes else "n/a",
                f"{gpu.peak_bf16_flops / 1e12:.0f}" if gpu and gpu.peak_bf16_flops else "n/a",
                _busbw(p, p.intra_node, size),
                _busbw(p, p.inter_node, size),
                f"{p.compute.mfu_assumption:.2f}" if p.compute.mfu_assumption is not None else "n/a",
                f"{p.hourly_rate_usd:.2f}" if p.hourly_rate_usd is not None else "n/a",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256, help="all_gather total size in MiB")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    size = args.size_mib * MiB
    headers = [
        "profile",
        "nodes x GPUs",
        "GPU",
        "memory GiB",
        "bf16 TFLOP/s",
        f"intra all_gather busbw GB/s @{args.size_mib} MiB",
        f"inter all_gather busbw GB/s @{args.size_mib} MiB",
        "MFU",
        "$/h",
    ]
    rows = _rows(size)
    if args.markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "|".join("---" if i < 3 else "---:" for i in range(len(headers))) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    table = Table(title="zerotune hardware catalog")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i < 3 else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
