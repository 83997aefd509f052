"""What NVML says about this node's GPUs: per-device facts, NVLink, PCIe and the pairwise topology.

The NVML module is a parameter: by default `pynvml` (nvidia-ml-py) imported when called, in tests a
zerotune.hw.nvml_replay.ReplayNvml of recorded answers. No driver, no library or no package means
NvmlUnavailable with the reason; the probe then carries on with what the host offers. A single call
a GPU does not support (NVLink on a PCIe card, ECC on a GeForce) gives null for that field only.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from zerotune.hw.nvml_replay import MAX_LINKS
from zerotune.schema.hardware import DeviceInfo, NvLinkInfo, Topology

# nvmlNvlinkVersion_t as NVML returns it (an enum, not the marketing version: A100 answers 4 for
# NVLink 3.0), mapped to (generation, per-link bandwidth in one direction, B/s). Enum values from
# nvml.h / nvidia-ml-py; the quirk is documented in open-mpi/hwloc#658. Per-link figures are the
# datasheet totals divided by links and by 2 directions: P100 160 GB/s / 4 links (NVLink 1.0);
# V100 300 GB/s / 6 (2.x); A100 600 GB/s / 12 (3.0); RTX A6000 bridge 112.5 GB/s / 4 (3.1);
# H100 900 GB/s / 18 (4.0); B200 1.8 TB/s / 18 (5.0); see also open-mpi/hwloc#574.
NVLINK_VERSIONS: dict[int, tuple[int, float | None]] = {
    1: (1, 20e9),
    2: (2, 25e9),
    3: (2, 25e9),
    4: (3, 25e9),
    5: (3, 14.0625e9),
    6: (4, 25e9),
    7: (5, 50e9),
    8: (6, None),  # NVLink 6 (Rubin): per-link figure not published at the time of writing
}

# Usable bandwidth of one PCIe lane in one direction, after line coding (PCI-SIG base specs:
# 2.5/5 GT/s with 8b/10b for gen 1/2; 8/16/32 GT/s with 128b/130b for gen 3/4/5; gen 6 64 GT/s PAM4
# with FLIT mode, ~7.88 GB/s per lane as commonly quoted).
PCIE_LANE_Bps = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.877e9}

# nvmlGpuTopologyLevel_t -> nvidia-smi topo legend. INTERNAL (0) is two GPUs on one board,
# which nvidia-smi also shows as a single PCIe switch.
TOPOLOGY_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_P2P_CAPS_INDEX_READ = 0  # nvmlGpuP2PCapsIndex_t
_P2P_STATUS_OK = 0  # nvmlGpuP2PStatus_t
_NVLINK_DEVICE_TYPE_SWITCH = 2  # nvmlIntNvLinkDeviceType_t
_ENABLED = 1  # nvmlEnableState_t


class NvmlUnavailable(Exception):
    """No NVIDIA GPU can be read here: no nvidia-ml-py, no libnvidia-ml, no driver or no device."""


@dataclass(frozen=True)
class GpuReport:
    devices: list[DeviceInfo]
    topology: Topology
    driver_version: str | None
    cuda_driver_version: str | None
    p2p: bool | None
    """Every GPU pair can read each other's memory directly (None: NVML could not say)."""

    @property
    def nvlink_generation(self) -> int | None:
        """Highest NVLink generation among active links (None: no NVLink, or an unknown enum)."""
        gens = [NVLINK_VERSIONS[link.version][0] for d in self.devices for link in d.nvlinks
                if link.version in NVLINK_VERSIONS]  # fmt: skip
        return max(gens) if gens else None

    @property
    def link_kind(self) -> str:
        """LinkClass.kind of the intra-node GPU links: nvlink<gen> or pcie<gen>."""
        if self.nvlink_generation:
            return f"nvlink{self.nvlink_generation}"
        gens = [d.pcie_gen_max for d in self.devices if d.pcie_gen_max]
        return f"pcie{min(gens)}" if gens else "pcie"

    @property
    def nominal_Bps(self) -> float | None:
        """Per-GPU one-direction peak of the intra-node links: the sum over a GPU's active NVLinks,
        else its PCIe link (maximum generation and width: idle GPUs train the link down)."""
        if not self.devices:
            return None
        first = self.devices[0]
        if first.nvlinks:
            rates = [link.bandwidth_Bps for link in first.nvlinks]
            return None if any(r is None for r in rates) else float(sum(rates))  # type: ignore[arg-type]
        lane = PCIE_LANE_Bps.get(first.pcie_gen_max or 0)
        return lane * first.pcie_width_max if lane and first.pcie_width_max else None


def load_nvml() -> Any:
    """The pynvml module, or NvmlUnavailable when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
    return pynvml


def read_gpus(nvml: Any = None) -> GpuReport:
    """Read every GPU of this node through `nvml` (default: pynvml)."""
    nvml = load_nvml() if nvml is None else nvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML not found or no driver loaded: {exc}") from None
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("NVML reports no GPU")
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        devices = [_device(nvml, i, h) for i, h in enumerate(handles)]
        matrix = _topology(nvml, handles, devices)
        p2p = _p2p(nvml, handles)
        return GpuReport(
            devices=devices,
            topology=Topology(matrix=matrix),
            driver_version=_text(_get(nvml, "nvmlSystemGetDriverVersion")),
            cuda_driver_version=_cuda_version(_get(nvml, "nvmlSystemGetCudaDriverVersion")),
            p2p=p2p,
        )
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _get(nvml: Any, call: str, *args: Any) -> Any:
    """One NVML answer, or None when this GPU or driver does not support the call."""
    try:
        return getattr(nvml, call)(*args)
    except nvml.NVMLError:
        return None
    except AttributeError:  # an older nvidia-ml-py without this call
        return None


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _cuda_version(value: int | None) -> str | None:
    """NVML encodes CUDA 12.4 as 12040 (1000 * major + 10 * minor)."""
    return None if value is None else f"{value // 1000}.{value % 1000 // 10}"


def _bus_id(value: Any) -> str | None:
    """PCI bus id normalised to 'dddd:bb:dd.f' in lower case: nvmlPciInfo_t.busId writes the domain
    with 8 digits, other tools with 4 or none."""
    text = (_text(getattr(value, "busId", None)) or "").strip().lower()
    parts = text.split(":")
    if len(parts) == 3:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    return f"0000:{text}" if len(parts) == 2 else None


def _cpu_list(words: Any) -> str | None:
    """CPU affinity bitmask words (64 CPUs each, lowest first) -> '0-55,112-167'."""
    if words is None:
        return None
    cpus = [w * 64 + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]
    if not cpus:
        return None
    spans: list[list[int]] = []
    for cpu in cpus:
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in spans)


def _device(nvml: Any, index: int, handle: Any) -> DeviceInfo:
    def get(call: str, *args: Any) -> Any:
        return _get(nvml, call, handle, *args)

    memory = get("nvmlDeviceGetMemoryInfo")
    cc = get("nvmlDeviceGetCudaComputeCapability")
    power_mw = get("nvmlDeviceGetPowerManagementLimit")
    ecc = get("nvmlDeviceGetEccMode")
    mig = get("nvmlDeviceGetMigMode")
    words = max(1, math.ceil((os.cpu_count() or 64) / 64))
    return DeviceInfo(
        index=index,
        name=_text(get("nvmlDeviceGetName")) or f"GPU {index}",
        uuid=_text(get("nvmlDeviceGetUUID")),
        pci_bus_id=_bus_id(get("nvmlDeviceGetPciInfo")),
        memory_total_bytes=None if memory is None else int(memory.total),
        memory_free_bytes=None if memory is None else int(memory.free),
        compute_capability=None if cc is None else f"{cc[0]}.{cc[1]}",
        pcie_gen_current=get("nvmlDeviceGetCurrPcieLinkGeneration"),
        pcie_gen_max=get("nvmlDeviceGetMaxPcieLinkGeneration"),
        pcie_width_current=get("nvmlDeviceGetCurrPcieLinkWidth"),
        pcie_width_max=get("nvmlDeviceGetMaxPcieLinkWidth"),
        nvlinks=_nvlinks(nvml, handle),
        numa_node=get("nvmlDeviceGetNumaNodeId"),
        cpu_affinity=_cpu_list(get("nvmlDeviceGetCpuAffinity", words)),
        power_limit_w=None if power_mw is None else power_mw / 1000,
        ecc_enabled=None if ecc is None else ecc[0] == _ENABLED,
        mig_enabled=None if mig is None else mig[0] == _ENABLED,
    )


def _nvlinks(nvml: Any, handle: Any) -> list[NvLinkInfo]:
    links = []
    for link in range(MAX_LINKS):
        if _get(nvml, "nvmlDeviceGetNvLinkState", handle, link) != _ENABLED:
            continue
        version = _get(nvml, "nvmlDeviceGetNvLinkVersion", handle, link)
        links.append(
            NvLinkInfo(
                link=link,
                version=version,
                remote_pci_bus_id=_bus_id(_get(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)),
                bandwidth_Bps=NVLINK_VERSIONS.get(version or 0, (None, None))[1],
            )
        )
    return links


def _topology(nvml: Any, handles: list[Any], devices: list[DeviceInfo]) -> list[list[str]]:
    """nvidia-smi topo -m: NV<k> where GPUs share k NVLinks (directly, or all through NVSwitches,
    where k is the smaller link count), else the PCIe level of their closest common ancestor."""
    by_bus = {d.pci_bus_id: d.index for d in devices if d.pci_bus_id}
    switched = [_through_switch(nvml, h, d) for h, d in zip(handles, devices, strict=True)]
    matrix = []
    for i, a in enumerate(devices):
        row = []
        for j, b in enumerate(devices):
            if i == j:
                row.append("X")
                continue
            direct = sum(1 for link in a.nvlinks if by_bus.get(link.remote_pci_bus_id) == j)
            if direct:
                row.append(f"NV{direct}")
            elif switched[i] and switched[j]:
                row.append(f"NV{min(len(a.nvlinks), len(b.nvlinks))}")
            else:
                level = _get(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                row.append(TOPOLOGY_LEVELS.get(level, "n/a") if level is not None else "n/a")
        matrix.append(row)
    return matrix


def _through_switch(nvml: Any, handle: Any, device: DeviceInfo) -> bool:
    return any(
        _get(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link.link) == _NVLINK_DEVICE_TYPE_SWITCH
        for link in device.nvlinks
    )


def _p2p(nvml: Any, handles: list[Any]) -> bool | None:
    status: list[Any] = [
        _get(nvml, "nvmlDeviceGetP2PStatus", a, b, _P2P_CAPS_INDEX_READ)
        for i, a in enumerate(handles)
        for j, b in enumerate(handles)
        if i != j
    ]
    if not status:
        return None  # one GPU: nothing to talk to
    if any(s is None for s in status):
        return None
    return all(s == _P2P_STATUS_OK for s in status)
