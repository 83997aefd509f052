"""The hardware catalog: every built-in profile loads, round-trips and cites its numbers; the loader's
errors are one clear InputError each; with_counts refuses impossible shapes."""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from zerotune.catalog.hardware import (
    DEFAULT_PROFILE,
    dump_profile,
    hardware_dir,
    list_profiles,
    load_cached_probe,
    load_profile,
    probe_cache_path,
    with_counts,
)
from zerotune.errors import InputError
from zerotune.schema.hardware import CalibratedValue, Calibration, CollectivePerf, HardwareProfile, LinkClass
from zerotune.units import GiB, MiB

BRIEFED = {
    "dgx-h100",
    "dgx-a100-80g",
    "8xa100-pcie",
    "8xl40s-pcie",
    "4xrtx4090",
    "h100-2node-ib",
    "h100-4node-ib",
    "h200-node",
}
PROFILES = sorted(list_profiles())
RING_OPS = ("all_gather", "reduce_scatter", "all_reduce")


def _links(profile: HardwareProfile):
    return [link for link in (profile.intra_node, profile.inter_node) if link is not None]


def _models(model: BaseModel):
    """`model` and every pydantic model nested in it."""
    yield model
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, BaseModel):
                yield from _models(item)


def _has_number(model: BaseModel) -> bool:
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if isinstance(value, (list, dict)) and value and name in ("curve", "achieved_flops"):
            return True
    return False


def test_catalog_holds_the_briefed_profiles_and_the_default() -> None:
    assert set(PROFILES) >= BRIEFED
    assert DEFAULT_PROFILE in PROFILES
    assert hardware_dir().name == "hardware"


@pytest.mark.parametrize("name", PROFILES)
def test_profile_loads_and_round_trips(name: str, tmp_path: Path) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.origin == "catalog"
    text = dump_profile(profile)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    again = load_profile(str(path))
    assert again == profile
    assert dump_profile(again) == text  # stable order


TRICKY_FLOATS = [
    0.0, -0.0, 1.0, 0.1 + 0.2, 1.189, 4e-5, 5e-324, 1e-9, 999999.9999999999, 1e6, 1048576.0,
    123456789.123, 25757220864.0, 989.4e12, 1e15, 2.0**60, -3e20, 1.7976931348623157e308, math.inf, -math.inf,
]  # fmt: skip


def test_any_float_survives_a_dump() -> None:
    """dump_profile shortens floats (9.894e+14); each reads back exactly, sign of zero included. The
    signed floats ride in fit residuals, the one field a profile may hold them in; the positive ones in
    a collective's curve."""
    signed = Calibration(
        created="2026-11-25",
        values=[CalibratedValue(path=f"v{i}", calibrated=1.0, residual=f) for i, f in enumerate(TRICKY_FLOATS)],
    )
    positive = [f for f in TRICKY_FLOATS if f > 0 and math.isfinite(f)]
    curve = list(zip(positive, reversed(positive), strict=True))
    link = LinkClass(kind="loopback-gloo", collectives={"all_gather": CollectivePerf(curve=curve)})
    profile = HardwareProfile(name="cpu-box", gpus_per_node=0, intra_node=link, calibration=signed)
    again = HardwareProfile.model_validate(yaml.safe_load(dump_profile(profile)))
    assert again.intra_node.collectives["all_gather"].curve == curve
    residuals = [v.residual for v in again.calibration.values]
    assert residuals == TRICKY_FLOATS
    assert all(math.copysign(1, a) == math.copysign(1, b) for a, b in zip(residuals, TRICKY_FLOATS, strict=True))


def test_impossible_numbers_are_refused_naming_the_field() -> None:
    from pydantic import ValidationError

    for bad in (-1.0, -math.inf, math.nan):
        with pytest.raises(ValidationError, match="busbw_Bps"):
            CollectivePerf(busbw_Bps=bad)
    with pytest.raises(ValidationError, match="gpu"):
        HardwareProfile.model_validate(load_profile("dgx-h100").model_dump() | {"gpus_per_node": 0})


@pytest.mark.parametrize("name", PROFILES)
def test_every_numeric_sub_object_cites_a_source(name: str) -> None:
    profile = load_profile(name)
    checked = 0
    for model in _models(profile):
        if "source" in type(model).model_fields and _has_number(model):
            assert model.source and model.source.strip(), f"{name}: {type(model).__name__} has no source"
            checked += 1
    assert checked >= 5  # gpu, host, link, its collectives, compute
    if profile.hourly_rate_usd is not None:
        assert any("hourly_rate_usd" in note for note in profile.notes)


@pytest.mark.parametrize("name", PROFILES)
def test_gpu_facts_are_consistent(name: str) -> None:
    gpu = load_profile(name).gpu
    assert gpu is not None
    assert gpu.memory_bytes % MiB == 0  # NVML reports whole MiB
    assert 15 * GiB <= gpu.memory_bytes <= 180 * GiB  # T4 (15360 MiB) to B200 (180 GB)
    assert gpu.bf16_supported == (float(gpu.compute_capability) >= 8.0)
    # Tensor cores: dense bf16 (fp16 on Volta, which has no bf16) well above the FP32 vector peak.
    tensor = gpu.peak_bf16_flops if gpu.bf16_supported else gpu.peak_fp16_flops
    assert tensor > 1.5 * gpu.peak_fp32_flops
    assert gpu.peak_flops("bf16") == gpu.peak_bf16_flops
    if not gpu.bf16_supported:
        assert gpu.peak_bf16_flops is None


@pytest.mark.parametrize("name", PROFILES)
def test_ring_busbw_does_not_exceed_the_link_rate(name: str) -> None:
    """nccl-tests busbw compares with the per-GPU link peak; only NVLink SHARP all_reduce may exceed it."""
    for link in _links(load_profile(name)):
        for op in ("all_gather", "reduce_scatter"):
            assert link.collectives[op].busbw_Bps <= link.nominal_Bps * (
                8 if link.kind.startswith("ib") else 1
            )
        assert link.collectives["all_reduce"].busbw_Bps <= 1.1 * link.nominal_Bps * (
            8 if link.kind.startswith("ib") else 1
        )


def test_nvlink_beats_pcie_for_every_collective() -> None:
    profiles = [load_profile(n) for n in PROFILES]
    nvlink = [p.intra_node for p in profiles if p.intra_node.kind.startswith("nvlink")]
    pcie = [p.intra_node for p in profiles if p.intra_node.kind.startswith("pcie")]
    assert len(nvlink) >= 5 and len(pcie) >= 3
    gen4 = [link for link in pcie if link.kind in ("pcie3", "pcie4")]
    for op in RING_OPS:
        slowest_nvlink = min(link.collectives[op].busbw_Bps for link in nvlink)
        # PCIe Gen5 (28 GB/s measured on 8 GPUs, NVIDIA/nccl#1639) against NVLink2 (115) is the closest pair
        assert slowest_nvlink > 3 * max(link.collectives[op].busbw_Bps for link in pcie)
        assert slowest_nvlink > 5 * max(link.collectives[op].busbw_Bps for link in gen4)


def test_no_p2p_is_recorded_where_the_brief_says_so() -> None:
    assert load_profile("4xrtx4090").intra_node.p2p is False
    assert load_profile("dgx-h100").intra_node.p2p is True


@pytest.mark.parametrize("name", PROFILES)
def test_multi_node_profiles_have_an_inter_node_link(name: str) -> None:
    profile = load_profile(name)
    if profile.nodes == 1:
        assert profile.inter_node is None
        return
    link = profile.inter_node
    # InfiniBand, Ethernet (NCCL sockets) or Intel Omni-Path (Jean Zay)
    assert link is not None and link.kind.startswith(("ib", "tcp", "opa"))
    assert link.ranks == profile.world_size
    for op in RING_OPS:
        assert link.collectives[op].busbw_Bps > 0
        # crossing nodes is never cheaper in latency than staying inside one
        assert link.collectives[op].alpha_s > profile.intra_node.collectives[op].alpha_s


@pytest.mark.parametrize("name", PROFILES)
def test_collective_time_grows_with_size(name: str) -> None:
    """Strictly from 1 MiB up; below that a measured curve is flat at the launch latency and its
    points wobble by a few percent (the H200 sweep: 39.8 us at 32 KiB, 38.3 us at 512 KiB)."""
    profile = load_profile(name)
    sizes = [2**k for k in range(15, 35)]  # 32 KiB .. 16 GiB
    for link in _links(profile):
        n = link.ranks or profile.gpus_per_node
        if n < 2:  # one GPU per node: nothing crosses the intra-node link
            continue
        for op, perf in link.collectives.items():
            times = [perf.time(op, s, n) for s in sizes]
            assert all(t is not None and t > 0 for t in times)
            assert all(b > 0.95 * a for a, b in pairwise(times)), f"{name} {op}"
            large = times[5:]
            assert all(b > a for a, b in pairwise(large)), f"{name} {op}"
            assert times[-1] > 100 * times[0]


def test_time_below_a_measured_curve_keeps_the_latency_floor() -> None:
    perf = load_profile("h200-node").intra_node.collectives["all_reduce"]
    assert perf.time("all_reduce", 1024, 8) >= perf.alpha_s


def test_alpha_beta_time_by_hand() -> None:
    """1 GiB all_gather over 8 H100s: 40 us + S*(7/8)/370 GB/s (nccl-tests' busbw definition)."""
    perf = load_profile("dgx-h100").intra_node.collectives["all_gather"]
    expected = 40e-6 + GiB * 7 / 8 / 370e9
    assert math.isclose(perf.time("all_gather", GiB, 8), expected, rel_tol=1e-12)
    assert math.isclose(expected, 0.0025793, rel_tol=1e-4)


def test_h200_curve_reproduces_the_published_sweep() -> None:
    """Points of stas00/ml-engineering all-reduce-8xH200.md: time = S * 2(n-1)/n / busbw."""
    perf = load_profile("h200-node").intra_node.collectives["all_reduce"]
    assert len(perf.curve) == 20
    # 256 MiB: busbw 436.15 GB/s, algbw 249.23 GB/s -> t = S / algbw
    t = perf.time("all_reduce", 256 * MiB, 8)
    assert math.isclose(256 * MiB / t / 1e9, 249.23, rel_tol=2e-3)
    assert math.isclose(perf.time("all_reduce", 32 * 1024, 8), 40e-6, rel_tol=0.01)


# --- loader errors ---------------------------------------------------------------------------------


def test_unknown_name_suggests_close_names() -> None:
    with pytest.raises(InputError) as info:
        load_profile("dgx-h10")
    assert "unknown hardware profile 'dgx-h10'" in info.value.message
    assert "dgx-h100" in info.value.message
    assert "4xrtx4090" in info.value.hint


@pytest.mark.parametrize(
    ("typed", "expected", "not_offered"),
    [
        ("a10g", ["g5-12xlarge", "g5-48xlarge", "g5-4xlarge-tcp"], "dgx-a100"),  # difflib alone offered the A100 profiles
        ("L4", ["g6-12xlarge", "g6-48xlarge"], "8xl40s-pcie"),
        ("h100-pcie", ["8xh100-pcie"], "8xa100-pcie"),
        ("RTX 6000", ["8xrtx6000ada"], "8xa6000"),  # the RTX A6000 is another card
        ("rtx4090", ["4xrtx4090"], "8xrtx3090"),
        ("dgx-h200", ["h200-node"], "dgx-h100"),  # the box word named no GPU: difflib offered the H100 box
        ("8xh200", ["h200-node"], "dgx-h100"),
    ],
)
def test_a_gpu_name_suggests_the_profiles_of_that_gpu(
    typed: str, expected: list[str], not_offered: str
) -> None:
    with pytest.raises(InputError) as info:
        load_profile(typed)
    message = info.value.message
    assert f"(profiles with that GPU: {', '.join(expected)})" in message
    assert not_offered not in message


def test_a_name_matching_no_gpu_falls_back_to_close_names() -> None:
    with pytest.raises(InputError) as info:
        load_profile("g5.12xlarge")
    assert "did you mean g5-12xlarge" in info.value.message


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_profile(str(tmp_path / "nope.yaml"))


def test_invalid_profile_lists_every_error_with_its_path(tmp_path: Path) -> None:
    data = load_profile("dgx-h100").model_dump(mode="json")
    data["gpu"]["memory_bytes"] = "lots"
    del data["intra_node"]["kind"]
    data["host"]["colour"] = "green"
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        load_profile(str(path))
    lines = info.value.message.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"{path}: ") for line in lines)
    text = info.value.message
    assert "gpu.memory_bytes: " in text and "intra_node.kind: Field required" in text
    assert "host.colour: Extra inputs are not permitted" in text


def test_schema_version_mismatch_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "future.yaml"
    path.write_text(dump_profile(load_profile("dgx-h100")).replace("schema_version: 1", "schema_version: 2"))
    with pytest.raises(InputError) as info:
        load_profile(str(path))
    assert "schema_version 2 is not supported" in info.value.message
    assert "version 1" in info.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu: [unclosed", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping, got list"),
        ("# nothing\n", "the file is empty"),
    ],
)
def test_unparsable_or_non_mapping_files(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=expected):
        load_profile(str(path))


def test_json_profile_as_the_probe_may_write_it(tmp_path: Path) -> None:
    profile = load_profile("h200-node")
    path = tmp_path / "probe.json"
    path.write_text(profile.model_dump_json())
    assert load_profile(str(path)) == profile
    path.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_profile(str(path))


# --- locations -------------------------------------------------------------------------------------


def test_profiles_dir_can_be_overridden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hardware").mkdir()
    profile = load_profile("4xrtx4090").model_copy(update={"name": "my-box"})
    (tmp_path / "hardware" / "my-box.yaml").write_text(dump_profile(profile))
    monkeypatch.setenv("ZEROTUNE_PROFILES", str(tmp_path))
    assert list_profiles() == ["my-box"]
    assert load_profile("my-box") == profile


def test_probe_cache_path_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZEROTUNE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert probe_cache_path() == tmp_path / "home" / ".cache" / "zerotune" / "last-probe.yaml"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert probe_cache_path() == tmp_path / "xdg" / "zerotune" / "last-probe.yaml"
    monkeypatch.setenv("ZEROTUNE_CACHE_DIR", str(tmp_path / "cache"))
    assert probe_cache_path() == tmp_path / "cache" / "last-probe.yaml"


def test_cached_probe_is_none_until_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEROTUNE_CACHE_DIR", str(tmp_path))
    assert load_cached_probe() is None
    probe = load_profile("8xl40s-pcie").model_copy(
        update={"origin": "probe", "created": "2026-11-22T11:00:00Z"}
    )
    probe_cache_path().write_text(dump_profile(probe))
    assert load_cached_probe() == probe


# --- with_counts -----------------------------------------------------------------------------------


def test_with_counts_shrinks_a_node_and_scales_the_rate() -> None:
    full = load_profile("dgx-h100")
    half = with_counts(full, gpus_per_node=4)
    assert (half.nodes, half.gpus_per_node, half.world_size) == (1, 4, 4)
    assert half.hourly_rate_usd == pytest.approx(12.40)
    assert full.gpus_per_node == 8 and full.hourly_rate_usd == pytest.approx(24.80)
    assert with_counts(full) is full


def test_with_counts_changes_nodes_where_there_is_a_fabric() -> None:
    bigger = with_counts(load_profile("h100-2node-ib"), nodes=4)
    assert bigger.world_size == 32
    assert bigger.hourly_rate_usd == pytest.approx(99.20)  # seed 002's 4-node price
    assert with_counts(load_profile("h100-4node-ib"), nodes=1).inter_node is not None


def test_with_counts_refuses_more_gpus_than_the_node_has() -> None:
    with pytest.raises(InputError) as info:
        with_counts(load_profile("4xrtx4090"), gpus_per_node=8)
    assert "8 GPUs per node" in info.value.message and "has 4 per node" in info.value.message


def test_with_counts_refuses_nodes_without_inter_node_link() -> None:
    with pytest.raises(InputError, match="no inter_node link"):
        with_counts(load_profile("dgx-h100"), nodes=2)


@pytest.mark.parametrize("counts", [{"gpus_per_node": 0}, {"nodes": 0}])
def test_with_counts_refuses_zero(counts: dict[str, int]) -> None:
    with pytest.raises(InputError, match="at least 1"):
        with_counts(load_profile("h100-2node-ib"), **counts)


def test_overheads_provenance_names_published_fits_and_missing_terms() -> None:
    from tests.conftest import cpu_probe_profile
    from zerotune.catalog.hardware import load_profile
    from zerotune.catalog.trust import inputs_provenance

    assert "DeepSpeed overheads fitted on published runs (5 of 8 terms)" in inputs_provenance(
        load_profile("dgx-h100"), "bf16"
    )
    assert "DeepSpeed overheads not modelled" in inputs_provenance(cpu_probe_profile(), "fp32")


# --- cloud instances and derived efficiencies ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cpu", "cores"),
    [("g5-12xlarge", "EPYC 7R32", 24), ("g5-48xlarge", "EPYC 7R32", 96), ("g6-12xlarge", "EPYC 7R13", 24)],
)
def test_cloud_instances_name_their_host_so_cpu_adam_follows_it(name: str, cpu: str, cores: int) -> None:
    """An instance's CPU is published (vCPUs = 2 threads per core): CPU Adam is derived from it, not from a
    DGX reference host or the fallback."""
    from zerotune.model.offload import node_cpu_adam

    profile = load_profile(name)
    assert cpu in profile.host.cpu_model and profile.host.cpu_cores == cores
    _, why = node_cpu_adam(profile)
    assert cpu in why and "reference host" not in why and why != "fallback"


@pytest.mark.parametrize(
    ("name", "matmul_tflops", "peak_tflops"),
    [
        ("g5-12xlarge", 69.47, 70.0),  # A10G bf16 10240^3, zzc0721/torch-performance-test-data#126
        ("g6-12xlarge", 56.9, 121.0),  # L4 bf16 10240^3 under its 72 W cap, same repository #120
        ("g4dn-4xlarge-tcp", 24.0, 65.0),  # T4 fp16 4096^3 under its 70 W cap, NVIDIA developer forum
    ],
)
def test_mfu_from_a_measured_matmul_is_half_its_ceiling(name: str, matmul_tflops: float, peak_tflops: float) -> None:
    """Profiles without a published training MFU derive it from a measured large matmul: training reaches half
    of the matmul ceiling where both are published (H100 0.40 / 0.801, A100 0.44 / 0.859)."""
    profile = load_profile(name)
    assert profile.gpu.peak_flops(profile.default_precision) == pytest.approx(peak_tflops * 1e12)
    assert profile.compute.mfu_assumption == pytest.approx(0.50 * matmul_tflops / peak_tflops, abs=0.001)
    assert 0.40 / 0.801 == pytest.approx(0.50, abs=0.01) and 0.44 / 0.859 == pytest.approx(0.50, abs=0.02)
