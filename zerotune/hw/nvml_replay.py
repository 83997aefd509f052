"""Recorded NVML answers: a stand-in for the `pynvml` module, and the recorder that makes them.

The NVML reader (zerotune.hw.nvml) takes the NVML module as a parameter. Tests hand it a
`ReplayNvml` built from a JSON file of recorded answers, so the reader's real code paths run
against a DGX-class box or a PCIe box on any machine. `record(pynvml)` writes such a file from
a real driver:  python -m zerotune.hw.nvml_replay > box.json

File layout (every answer is a JSON value, or {"error": "<NVML_ERROR_ suffix>"}):
    {"init": null | {"error": ...},
     "system":  {"<nvmlSystem call>": answer, ...},
     "devices": [{"<nvmlDevice call>": answer, ..., "links": [{"<per-link call>": answer}, ...]}],
     "pairs":   {"<pair call>": [[answer for j] for i]}}
Structs (memory info, PCI info) are objects whose keys are the struct's field names.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

# Error codes from nvml.h (nvmlReturn_t); the names are pynvml's NVML_ERROR_* suffixes.
ERROR_CODES = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "NOT_FOUND": 6,
    "DRIVER_NOT_LOADED": 9,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "GPU_IS_LOST": 15,
    "UNKNOWN": 999,
}

SYSTEM_CALLS = ("nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion")
DEVICE_CALLS = (
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetMigMode",
)
LINK_CALLS = (
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
)
PAIR_CALLS = ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus")
MAX_LINKS = 18
"""NVLink ports per GPU on Hopper and Blackwell (NVIDIA H100/B200 datasheets: 18 links)."""
STRUCT_FIELDS = {"nvmlDeviceGetPciInfo": ("busId",), "nvmlDeviceGetNvLinkRemotePciInfo": ("busId",),
                 "nvmlDeviceGetMemoryInfo": ("total", "free", "used")}  # fmt: skip


class ReplayError(Exception):
    """Plays pynvml.NVMLError: carries the numeric NVML return code in `.value`."""

    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class _Handle(SimpleNamespace):
    index: int


class ReplayNvml:
    """Answers pynvml calls from recorded data. Unrecorded calls raise FUNCTION_NOT_FOUND, link
    numbers past the recorded ones raise INVALID_ARGUMENT, as a real driver does."""

    NVMLError = ReplayError

    def __init__(self, data: dict[str, Any]):
        self._data = data

    @classmethod
    def from_file(cls, path: str) -> ReplayNvml:
        with open(path, encoding="utf-8") as handle:
            return cls(json.load(handle))

    @staticmethod
    def _answer(value: Any) -> Any:
        if isinstance(value, dict) and "error" in value:
            raise ReplayError(ERROR_CODES[value["error"]])
        if isinstance(value, dict):
            return SimpleNamespace(**value)
        return value

    def nvmlInit(self) -> None:
        self._answer(self._data.get("init"))

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self._data["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self._data["devices"]):
            raise ReplayError(ERROR_CODES["INVALID_ARGUMENT"])
        return _Handle(index=index)

    def __getattr__(self, name: str) -> Any:
        if name in SYSTEM_CALLS:
            return lambda: self._lookup(self._data.get("system", {}), name)
        if name in LINK_CALLS:
            return lambda handle, link: self._link(handle, link, name)
        if name in PAIR_CALLS:
            return lambda first, second, *rest: self._answer(
                self._data["pairs"][name][first.index][second.index]
            )
        if name in DEVICE_CALLS:
            return lambda handle, *rest: self._lookup(self._data["devices"][handle.index], name)
        raise AttributeError(name)

    def _lookup(self, table: dict[str, Any], name: str) -> Any:
        if name not in table:
            raise ReplayError(ERROR_CODES["FUNCTION_NOT_FOUND"])
        return self._answer(table[name])

    def _link(self, handle: _Handle, link: int, name: str) -> Any:
        links = self._data["devices"][handle.index].get("links", [])
        if not 0 <= link < len(links):
            raise ReplayError(ERROR_CODES["INVALID_ARGUMENT"])
        return self._lookup(links[link], name)


def _capture(nvml: Any, call: str, *args: Any) -> Any:
    """One call's answer in the file's JSON form."""
    try:
        value = getattr(nvml, call)(*args)
    except nvml.NVMLError as exc:
        names = {code: name for name, code in ERROR_CODES.items()}
        return {"error": names.get(exc.value, "UNKNOWN")}
    if call in STRUCT_FIELDS:
        return {f: _plain(getattr(value, f)) for f in STRUCT_FIELDS[call]}
    if call == "nvmlDeviceGetCpuAffinity":
        return [int(word) for word in value]
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return _plain(value)


def _plain(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def record(nvml: Any, cpu_set_words: int = 4) -> dict[str, Any]:
    """Every answer the reader asks for, from a live NVML module (or a replay: round-trips)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        names = {code: name for name, code in ERROR_CODES.items()}
        return {"init": {"error": names.get(exc.value, "UNKNOWN")}, "system": {}, "devices": [], "pairs": {}}
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        devices = []
        for handle in handles:
            entry = {
                call: _capture(nvml, call, handle, cpu_set_words)
                if call == "nvmlDeviceGetCpuAffinity"
                else _capture(nvml, call, handle)
                for call in DEVICE_CALLS
            }
            entry["links"] = [{call: _capture(nvml, call, handle, link) for call in LINK_CALLS}
                              for link in range(MAX_LINKS)]  # fmt: skip
            devices.append(entry)
        pairs = {
            call: [
                [
                    _capture(nvml, call, a, b, *((0,) if call == "nvmlDeviceGetP2PStatus" else ()))
                    if a is not b
                    else None
                    for b in handles
                ]
                for a in handles
            ]  # fmt: skip
            for call in PAIR_CALLS
        }
        system = {call: _capture(nvml, call) for call in SYSTEM_CALLS}
        return {"init": None, "system": system, "devices": devices, "pairs": pairs}
    finally:
        nvml.nvmlShutdown()


if __name__ == "__main__":  # python -m zerotune.hw.nvml_replay > box.json
    import pynvml

    json.dump(record(pynvml), sys.stdout, indent=1)
    sys.stdout.write("\n")
