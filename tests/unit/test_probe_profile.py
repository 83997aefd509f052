"""Profile assembly from rank results (no processes), its YAML round trip through the catalog
loader, and the rendered tables."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from zerotune.catalog.hardware import dump_profile, load_profile
from zerotune.collectives import alpha_beta_time
from zerotune.hw.host import HostFacts, parse_cpu_model, parse_meminfo
from zerotune.hw.nvml import read_gpus
from zerotune.hw.nvml_replay import ReplayNvml
from zerotune.probe.metrics import SWEPT, size_sweep
from zerotune.probe.profile import build_profile, merge_compute, merge_sweep
from zerotune.probe.runner import catalog_gpu
from zerotune.render import probe as view

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
HOST = HostFacts("Test CPU", 8, 64 * 2**30, 60 * 2**30, 32 * 2**30)


def _results(n: int, backend: str, busbw: float = 1e9, wrong: int = 0, elem: int = 4) -> list[dict]:
    """Rank results whose times follow t = 20 us + S*factor/busbw; rank r is (1 + r/100) slower."""
    sizes = size_sweep(4096, 2**20)

    def sweep(r: int) -> dict:
        return {
            op: [{"count": s // elem, "times": [alpha_beta_time(op, s, n, 20e-6, busbw) * (1 + 0.01 * r)] * 3,
                  "wrong": wrong} for s in sizes]
            for op in SWEPT
        }  # fmt: skip

    return [{"rank": r, "backend": backend, "sweep": sweep(r), "reduce_scatter_impl": "reduce_scatter_single"}
            for r in range(n)]  # fmt: skip


COMPUTE = {"shape": "block h=512", "block": {"dtype": "fp32", "flops": 2.5e10, "seconds": 0.01, "iters": 5},
           "adam": {"params_per_s": 2e8, "params": 8_000_000}}  # fmt: skip


def _rank_compute(flops: float, adam: float, ranks: int | None) -> dict:
    out = {"shape": "block h=512", "block": {"dtype": "fp32", "flops": flops, "seconds": 1e9 / flops, "iters": 5},
           "adam": {"params_per_s": adam, "params": 8_000_000}}  # fmt: skip
    return out if ranks is None else {**out, "concurrent_ranks": ranks}


def test_concurrent_cpu_ranks_give_the_median_per_rank() -> None:
    """Every CPU rank measured at once: the profile gets the median rank, and says so."""
    results = [{"rank": r, "compute": _rank_compute(f, a, 3)} for r, (f, a) in
               enumerate([(3e10, 1e8), (1e10, 3e8), (2e10, 2e8)])]  # fmt: skip
    merged = merge_compute(results)
    assert merged["block"]["flops"] == 2e10 and merged["adam"]["params_per_s"] == 2e8
    assert merged["block"]["per_rank_flops"] == [3e10, 1e10, 2e10]
    assert merged["shape"] == "block h=512, per rank with 3 ranks computing concurrently"
    intra = merge_sweep(_results(3, "gloo"), "fp32")
    profile = build_profile(name="p", date="2026-11-22", dtype="fp32", host=HOST, intra=intra,
                            compute=merged, overlap=None)  # fmt: skip
    assert profile.compute.achieved_flops == {"fp32": 2e10}
    # CPU Adam is the node's rate: the median rank's share of the cores, times the 3 ranks sharing them
    assert profile.host.cpu_adam_params_per_s == pytest.approx(6e8)
    assert "3 ranks computing concurrently" in profile.compute.measured_shape
    assert "3 ranks computing concurrently" in profile.compute.source


def test_host_memory_rates_reach_the_profile_as_the_median_rank() -> None:
    """CPU ranks' host memory rates: median per key into HostSpec; a rank without a first-touch rate
    (none measurable) leaves the profile's null rather than a guess."""
    rates = [(4e9, 1e9), (6e9, 3e9), (5e9, 2e9)]
    results = [{"rank": r, "compute": {**_rank_compute(2e10, 2e8, 3),
                "host_memory": {"memory_Bps": m, "first_touch_Bps": f, "bytes": 2**26}}}
               for r, (m, f) in enumerate(rates)]  # fmt: skip
    merged = merge_compute(results)
    assert merged["host_memory"] == {"memory_Bps": 5e9, "first_touch_Bps": 2e9}
    intra = merge_sweep(_results(3, "gloo"), "fp32")
    profile = build_profile(name="p", date="2026-11-22", dtype="fp32", host=HOST, intra=intra,
                            compute=merged, overlap=None)  # fmt: skip
    assert profile.host.memory_Bps == 5e9 and profile.host.first_touch_Bps == 2e9
    results[1]["compute"]["host_memory"]["first_touch_Bps"] = None
    merged = merge_compute(results)
    assert merged["host_memory"] == {"memory_Bps": 5e9, "first_touch_Bps": None}
    # a profile from an older probe (no host_memory) keeps both null
    old = build_profile(name="p", date="2026-11-22", dtype="fp32", host=HOST, intra=intra,
                        compute=merge_compute([{"rank": 0, "compute": _rank_compute(2e10, 2e8, 1)}]),
                        overlap=None)  # fmt: skip
    assert old.host.memory_Bps is None and old.host.first_touch_Bps is None


def test_rank_zero_alone_is_taken_as_is() -> None:
    """A GPU host: only rank 0 measured (no concurrency), its numbers pass through unchanged."""
    alone = _rank_compute(2.5e10, 2e8, None)
    assert merge_compute([{"rank": 0, "compute": alone}, {"rank": 1}]) == alone
    assert merge_compute([{"rank": 0}, {"rank": 1}]) is None
    profile = build_profile(name="p", date="2026-11-22", dtype="fp32", host=HOST,
                            intra=merge_sweep(_results(2, "gloo"), "fp32"), compute=alone, overlap=None)  # fmt: skip
    assert "concurrently" not in profile.compute.source
    # rank 0 alone used every core: its CPU-Adam rate is the node's, which the ranks then share
    assert profile.host.cpu_adam_params_per_s == 2e8


def test_cpu_profile_has_the_fields_recommend_needs(tmp_path) -> None:
    intra = merge_sweep(_results(2, "gloo"), "fp32")
    profile = build_profile(
        name="probe-test", date="2026-11-22T11:00:00+00:00", dtype="fp32", host=HOST, intra=intra,
        compute=COMPUTE, overlap={"slowdown": 1.3}, notes=["no NVIDIA GPU"],
    )  # fmt: skip
    assert profile.origin == "probe" and profile.gpus_per_node == 0 and profile.gpu is None
    link = profile.intra_node
    assert link.backend == "gloo" and link.ranks == 2 and link.kind == "loopback-gloo"
    assert set(link.collectives) == set(SWEPT)
    assert link.collectives["all_reduce"].busbw_Bps == pytest.approx(1e9, rel=0.02)
    assert link.collectives["all_reduce"].alpha_s == pytest.approx(20e-6, rel=0.05)
    assert profile.compute.achieved_flops == {"fp32": 2.5e10}
    assert profile.compute.overlap_slowdown == 1.3
    assert profile.host.cpu_adam_params_per_s == 2e8 and profile.host.cpu_cores == 8
    assert "zerotune probe" in profile.compute.source and "2026-11-22" in profile.compute.source
    path = tmp_path / "p.yaml"
    path.write_text(dump_profile(profile))
    assert load_profile(str(path)) == profile


def test_gpu_profile_from_the_dgx_replay() -> None:
    gpus = read_gpus(ReplayNvml.from_file(str(FIXTURES / "dgx_h100.json")))
    intra = merge_sweep(_results(8, "nccl", busbw=360e9, elem=2), "bf16")
    datasheet = catalog_gpu(gpus.devices[0].name)
    profile = build_profile(
        name="probe-dgx", date="2026-11-22", dtype="bf16", host=HOST, intra=intra, compute=None,
        overlap=None, gpus=gpus, datasheet=datasheet,
    )  # fmt: skip
    # cited peaks come from the catalog's entry for the same NVML name; measured facts from NVML
    assert datasheet is not None and profile.gpu.peak_bf16_flops == datasheet.peak_bf16_flops > 9e14
    assert profile.gpu.memory_bytes == gpus.devices[0].memory_total_bytes
    with_block = build_profile(
        name="probe-dgx", date="2026-11-22", dtype="bf16", host=HOST, intra=intra, overlap=None, gpus=gpus,
        compute={"shape": "s", "block": {"dtype": "bf16", "flops": 0.5 * datasheet.peak_bf16_flops}},
        datasheet=datasheet,
    )  # fmt: skip
    assert with_block.compute.mfu_assumption == pytest.approx(0.5)
    # HBM bandwidth: the datasheet's until the probe measured a device copy, then the measurement
    assert profile.gpu.hbm_bandwidth_Bps == datasheet.hbm_bandwidth_Bps == 3.35e12
    measured = build_profile(
        name="probe-dgx", date="2026-11-22", dtype="bf16", host=HOST, intra=intra, overlap=None, gpus=gpus,
        compute={"shape": "s", "device_memory": {"hbm_Bps": 2.9e12, "bytes": 2**30}}, datasheet=datasheet,
    )  # fmt: skip
    assert measured.gpu.hbm_bandwidth_Bps == 2.9e12 and "HBM bandwidth measured" in measured.gpu.source
    assert "HBM bandwidth measured" not in profile.gpu.source
    rendered = io.StringIO()
    for p in (profile, measured):
        Console(file=rendered, width=160, color_system=None).print(view.host_table(p))
    text = rendered.getvalue()
    assert "3350.00 GB/s (datasheet)" in text and "2900.00 GB/s" in text and "2900.00 GB/s (" not in text
    assert profile.gpus_per_node == 8 and profile.gpu.name == "NVIDIA H100 80GB HBM3"
    assert profile.gpu.bf16_supported is True and profile.gpu.compute_capability == "9.0"
    assert profile.intra_node.kind == "nvlink4" and profile.intra_node.backend == "nccl"
    assert profile.intra_node.nominal_Bps == pytest.approx(450e9) and profile.intra_node.p2p is True
    assert profile.host.pcie_gen == 5 and profile.host.pcie_width == 16
    assert len(profile.devices) == 8 and profile.topology.matrix[0][1] == "NV18"
    assert profile.cuda_driver_version == "12.2"
    # the slowest rank (7, 7% slower) sets every row's time, so the fit finds busbw / 1.07
    assert profile.intra_node.collectives["all_gather"].busbw_Bps == pytest.approx(360e9 / 1.07, rel=1e-3)
    assert 0 < intra.avg_busbw_GBps < 360


def test_wrong_elements_are_summed_over_ranks() -> None:
    intra = merge_sweep(_results(2, "gloo", wrong=1), "fp32")
    assert intra.wrong == 2 * len(SWEPT) * len(size_sweep(4096, 2**20))


def test_rendered_tables() -> None:
    gpus = read_gpus(ReplayNvml.from_file(str(FIXTURES / "pcie_4090_no_p2p.json")))
    intra = merge_sweep(_results(2, "gloo"), "fp32")
    buf = io.StringIO()
    console = Console(file=buf, width=160, color_system=None)
    console.print(view.gpu_table(gpus.devices))
    console.print(view.topology_table(gpus.topology, gpus.devices))
    console.print(view.sweep_table("all_reduce", intra.rows["all_reduce"]))
    text = buf.getvalue()
    assert "NVIDIA GeForce RTX 4090" in text and "gen1 x16 / gen4 x16" in text
    assert "PHB" in text and "SYS" in text and "0-31" in text
    assert "busbw" in text and "(GB/s)" in text and "#wrong" in text and "1048576" in text
    chart = view.bandwidth_chart("all_reduce", intra.rows["all_reduce"], width=20)
    lines = chart.splitlines()
    assert len(lines) == 1 + len(intra.rows["all_reduce"])
    assert lines[-1].count("#") == 20  # the largest size has the highest busbw here
    assert lines[1].count("#") < lines[-1].count("#")


def test_host_parsers() -> None:
    cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)  Platinum 8480C\n"
    assert parse_cpu_model(cpuinfo) == "Intel(R) Xeon(R) Platinum 8480C"
    assert parse_cpu_model("processor : 0\nCPU part : 0xd4f\nModel : NVIDIA Grace\n") == "NVIDIA Grace"
    assert parse_cpu_model("") is None
    total, available = parse_meminfo(
        "MemTotal:       24684096 kB\nMemFree: 1 kB\nMemAvailable:   22390212 kB\n"
    )
    assert total == 24684096 * 1024 and available == 22390212 * 1024
    assert parse_meminfo("") == (None, None)
