"""The NVML reader against recorded answers of three boxes (a DGX H100 with NVSwitch, a PCIe
workstation without peer-to-peer, and one H200 in a VM recorded on the first GPU run), a host without
a driver, and the real pynvml of this machine."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from zerotune.hw.nvml import NVLINK_VERSIONS, NvmlUnavailable, PCIE_LANE_Bps, read_gpus
from zerotune.hw.nvml_replay import ReplayNvml, record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"


def _box(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_dgx_h100_devices() -> None:
    report = read_gpus(ReplayNvml(_box("dgx_h100")))
    assert len(report.devices) == 8
    d = report.devices[0]
    assert d.name == "NVIDIA H100 80GB HBM3"
    assert d.uuid.startswith("GPU-")
    assert d.pci_bus_id == "0000:18:00.0"  # 8-digit NVML domain normalised to 4 digits
    assert d.memory_total_bytes == 81559 * 2**20  # nvidia-smi shows 81559MiB on an H100 SXM5
    assert d.memory_free_bytes < d.memory_total_bytes
    assert d.compute_capability == "9.0"
    assert (d.pcie_gen_current, d.pcie_gen_max, d.pcie_width_current, d.pcie_width_max) == (5, 5, 16, 16)
    assert d.power_limit_w == 700.0  # H100 SXM5 TDP (datasheet)
    assert d.ecc_enabled is True and d.mig_enabled is False
    assert [x.numa_node for x in report.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert report.devices[0].cpu_affinity == "0-55,112-167"
    assert report.devices[7].cpu_affinity == "56-111,168-223"
    assert report.driver_version == "535.129.03"
    assert report.cuda_driver_version == "12.2"


def test_dgx_h100_nvlink_and_topology() -> None:
    report = read_gpus(ReplayNvml(_box("dgx_h100")))
    links = report.devices[3].nvlinks
    assert len(links) == 18 and {link.version for link in links} == {6}
    # H100 datasheet: 900 GB/s NVLink per GPU, both directions together, over 18 links
    assert sum(link.bandwidth_Bps for link in links) * 2 == pytest.approx(900e9)
    assert report.nominal_Bps == pytest.approx(450e9)
    assert report.link_kind == "nvlink4" and report.nvlink_generation == 4
    assert report.p2p is True
    matrix = report.topology.matrix
    assert [matrix[i][i] for i in range(8)] == ["X"] * 8
    assert all(matrix[i][j] == "NV18" for i in range(8) for j in range(8) if i != j)  # NVSwitch: all-to-all


def test_pcie_box_without_p2p() -> None:
    report = read_gpus(ReplayNvml(_box("pcie_4090_no_p2p")))
    d = report.devices[0]
    assert d.name == "NVIDIA GeForce RTX 4090" and d.compute_capability == "8.9"
    assert d.nvlinks == []
    assert (d.pcie_gen_current, d.pcie_gen_max) == (1, 4)  # idle link trained down; max counts
    assert d.ecc_enabled is None and d.mig_enabled is None and d.numa_node is None  # unsupported -> null
    assert report.p2p is False
    assert report.link_kind == "pcie4"
    # PCIe 4.0 x16: 16 GT/s * 16 lanes * 128/130 / 8 bits = 31.5 GB/s per direction
    assert report.nominal_Bps == pytest.approx(16e9 * 16 * 128 / 130 / 8, rel=1e-3)
    assert report.topology.matrix == [
        ["X", "PHB", "SYS", "SYS"],
        ["PHB", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "PHB"],
        ["SYS", "SYS", "PHB", "X"],
    ]


def test_h200_in_a_vm_recorded_on_the_first_gpu_run() -> None:
    """Real answers (data/gpu/2026-11-28-NVIDIA-H200/nvml-record.json, the acceptance run's nvml step):
    one H200 passed through to a Firecracker VM, NVLink and NUMA queries NOT_SUPPORTED there."""
    report = read_gpus(ReplayNvml(_box("h200_vm_1gpu")))
    (d,) = report.devices
    assert d.name == "NVIDIA H200" and d.compute_capability == "9.0"
    assert d.memory_total_bytes == 150754820096  # 143,771 MiB: what nvidia-smi showed on this kind of machine
    assert d.pci_bus_id == "0000:00:06.0"
    assert (d.pcie_gen_current, d.pcie_width_current) == (5, 16)
    assert d.nvlinks == [] and d.numa_node is None  # NOT_SUPPORTED -> none, not a crash
    assert d.cpu_affinity == "0-15"  # mask 65535: the VM's 16 cores
    assert d.power_limit_w == 700.0 and d.ecc_enabled is True and d.mig_enabled is False
    assert report.driver_version == "580.159.04" and report.cuda_driver_version == "13.0"
    # PCIe 5.0 x16: 32 GT/s * 16 lanes * 128/130 / 8 bits = 63.0 GB/s per direction
    assert report.link_kind == "pcie5"
    assert report.nominal_Bps == pytest.approx(32e9 * 16 * 128 / 130 / 8, rel=1e-3)


def test_direct_nvlink_bridge_counts_links_per_pair() -> None:
    """Two GPUs bridged with 4 NVLink 3.1 links (RTX A6000-style): NV4 between them, PCIe to the rest."""
    box = _box("pcie_4090_no_p2p")
    bus = [d["nvmlDeviceGetPciInfo"]["busId"] for d in box["devices"]]
    for me, peer in ((0, 1), (1, 0)):
        box["devices"][me]["links"] = [
            {"nvmlDeviceGetNvLinkState": 1, "nvmlDeviceGetNvLinkVersion": 5,
             "nvmlDeviceGetNvLinkRemotePciInfo": {"busId": bus[peer].replace("00000000:", "0000:")},
             "nvmlDeviceGetNvLinkRemoteDeviceType": 0}
            for _ in range(4)
        ]  # fmt: skip
    report = read_gpus(ReplayNvml(box))
    assert report.topology.matrix[0][1] == "NV4" and report.topology.matrix[1][0] == "NV4"
    assert report.topology.matrix[0][2] == "SYS"
    # RTX A6000 datasheet: 112.5 GB/s bidirectional over the bridge
    assert sum(link.bandwidth_Bps for link in report.devices[0].nvlinks) * 2 == pytest.approx(112.5e9)


def test_nvlink_table_matches_datasheet_totals() -> None:
    """Per-link one-way rates times link counts give the published per-GPU bidirectional totals."""
    for enum, links, total in ((1, 4, 160e9), (2, 6, 300e9), (4, 12, 600e9), (6, 18, 900e9), (7, 18, 1800e9)):
        assert NVLINK_VERSIONS[enum][1] * links * 2 == pytest.approx(total)
    assert PCIE_LANE_Bps[5] * 16 == pytest.approx(63e9, rel=0.01)  # PCIe 5.0 x16 ~ 63 GB/s one way


def test_no_driver_is_unavailable_not_a_crash() -> None:
    with pytest.raises(NvmlUnavailable, match="NVML not found"):
        read_gpus(ReplayNvml(_box("no_driver")))


def test_real_pynvml_on_this_machine() -> None:
    """nvidia-ml-py is installed here but there is no libnvidia-ml: a clear NvmlUnavailable."""
    try:
        report = read_gpus()
    except NvmlUnavailable as exc:
        assert "NVML" in str(exc) or "nvidia-ml-py" in str(exc)
    else:  # a GPU host
        assert report.devices and report.topology.matrix[0][0] == "X"


def test_zero_gpus_is_unavailable() -> None:
    box = _box("dgx_h100")
    box["devices"] = []
    with pytest.raises(NvmlUnavailable, match="no GPU"):
        read_gpus(ReplayNvml(box))


@pytest.mark.parametrize("name", ["dgx_h100", "pcie_4090_no_p2p", "h200_vm_1gpu", "no_driver"])
def test_recorder_round_trips(name: str) -> None:
    """record() of a replay gives back what the reader needs: reading the re-recording equals reading
    the original (so `python -m zerotune.hw.nvml_replay` on a real box makes valid fixtures)."""
    box = _box(name)
    again = record(ReplayNvml(copy.deepcopy(box)))
    if name == "no_driver":
        assert again["init"] == {"error": "LIBRARY_NOT_FOUND"}
        return
    assert read_gpus(ReplayNvml(again)) == read_gpus(ReplayNvml(box))
