"""The hardware catalog: cited hardware profiles in profiles/hardware/*.yaml, and the loader that
reads them, or any profile file `zerotune probe` wrote, into a HardwareProfile.

A reference is either a catalog name (the file's stem: `dgx-h100`) or a path to a .yaml/.yml/.json
profile. Every failure a user can cause is an InputError that names the file and, for schema
errors, each offending `loc.path` on its own line.
"""

from __future__ import annotations

import difflib
import math
import os
from pathlib import Path

import yaml
from pydantic import ValidationError

from zerotune.catalog import profiles_root
from zerotune.errors import InputError
from zerotune.files import read_json, read_yaml
from zerotune.schema.hardware import SCHEMA_VERSION, HardwareProfile

DEFAULT_PROFILE = "dgx-h100"

_SUFFIXES = (".yaml", ".yml", ".json")
# libyaml's C emitter when PyYAML was built with it (about 10x faster), else pure Python.
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_PROBE_CACHE_FILE = "last-probe.yaml"


def hardware_dir() -> Path:
    """Folder of the built-in profiles: <profiles root>/hardware (see zerotune.catalog.profiles_root)."""
    return profiles_root() / "hardware"


def list_profiles() -> list[str]:
    """Names of the catalog profiles, sorted."""
    folder = hardware_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.yaml"))


def load_profile(ref: str) -> HardwareProfile:
    """A catalog profile by name, or a profile file by path (what the probe writes)."""
    path = Path(ref).expanduser()
    if path.suffix.lower() in _SUFFIXES or path.is_file() or os.sep in ref:
        if not path.is_file():
            raise InputError(f"hardware profile file {ref} not found", hint="check the path")
        return _load_file(path)
    candidate = hardware_dir() / f"{ref}.yaml"
    if candidate.is_file():
        return _load_file(candidate)
    names = list_profiles()
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.5)
    message = f"unknown hardware profile {ref!r}"
    if close:
        message += f" (did you mean {', '.join(close)}?)"
    hint = f"known profiles: {', '.join(names)}" if names else f"no profiles found in {hardware_dir()}"
    raise InputError(message, hint=hint + "; or pass the path of a profile file")


def _load_file(path: Path) -> HardwareProfile:
    data = read_json(path) if path.suffix.lower() == ".json" else read_yaml(path)
    if data is None:
        raise InputError(f"{path}: the file is empty", hint="write a profile with `zerotune probe`")
    if not isinstance(data, dict):
        raise InputError(f"{path}: a hardware profile must be a mapping, got {type(data).__name__}")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise InputError(
            f"{path}: schema_version {version!r} is not supported; this zerotune reads version {SCHEMA_VERSION}",
            hint="re-run `zerotune probe` with this zerotune version, or use a matching zerotune",
        )
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        lines = [f"{path}: {_loc(err['loc'])}: {err['msg']}" for err in exc.errors()]
        hint = (
            f"fix the file (compare with {hardware_dir() / DEFAULT_PROFILE}.yaml) or re-run `zerotune probe`"
        )
        raise InputError("\n".join(lines), hint=hint) from None


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


class _Dumper(_BaseDumper):
    """Writes floats in scientific form where that is shorter (9.894e+14, not 989400000000000.0)."""


def _represent_float(dumper: _Dumper, value: float) -> yaml.ScalarNode:
    if value == 0 or not math.isfinite(value) or 1e-3 <= abs(value) < 1e6:
        return dumper.represent_float(value)
    for digits in range(17):  # the shortest mantissa that reads back exactly
        text = f"{value:.{digits}e}"
        if float(text) == value:
            break
    if "." not in text:  # YAML 1.1 only resolves floats with a dot: 1e+15 -> 1.0e+15
        text = text.replace("e", ".0e", 1)
    if len(text) >= len(repr(value)):  # 1048576.0 reads better than 1.048576e+06
        return dumper.represent_float(value)
    return dumper.represent_scalar("tag:yaml.org,2002:float", text)


_Dumper.add_representer(float, _represent_float)


def dump_profile(profile: HardwareProfile) -> str:
    """YAML text in schema field order; load_profile of it gives back an equal profile."""
    data = profile.model_dump(mode="json")
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110)


def probe_cache_path() -> Path:
    """Where `zerotune probe` keeps its last result: $ZEROTUNE_CACHE_DIR, else
    $XDG_CACHE_HOME/zerotune, else ~/.cache/zerotune; file last-probe.yaml."""
    if os.environ.get("ZEROTUNE_CACHE_DIR"):
        folder = Path(os.environ["ZEROTUNE_CACHE_DIR"])
    elif os.environ.get("XDG_CACHE_HOME"):
        folder = Path(os.environ["XDG_CACHE_HOME"]) / "zerotune"
    else:
        folder = Path.home() / ".cache" / "zerotune"
    return folder / _PROBE_CACHE_FILE


def load_cached_probe() -> HardwareProfile | None:
    """The last probe's profile, or None when nothing was probed yet."""
    path = probe_cache_path()
    if not path.is_file():
        return None
    return load_profile(str(path))


def with_counts(
    profile: HardwareProfile, *, gpus_per_node: int | None = None, nodes: int | None = None
) -> HardwareProfile:
    """The profile resized to `nodes` x `gpus_per_node` (e.g. --gpus 4 on dgx-h100).

    Counts can only shrink a node (the per-GPU numbers stay valid), and more than one node
    needs an inter-node link class to time the collectives that cross nodes. The whole-cluster
    hourly rate scales with the GPU count (cloud GPUs are rented per GPU).
    """
    update: dict[str, object] = {}
    if gpus_per_node is not None:
        if gpus_per_node < 1:
            raise InputError(f"GPUs per node must be at least 1, got {gpus_per_node}")
        if gpus_per_node > profile.gpus_per_node:
            raise InputError(
                f"{gpus_per_node} GPUs per node requested but profile {profile.name!r} has "
                f"{profile.gpus_per_node} per node",
                hint=f"use at most {profile.gpus_per_node}, or a profile with larger nodes",
            )
        update["gpus_per_node"] = gpus_per_node
        if profile.devices:
            update["devices"] = profile.devices[:gpus_per_node]
        if profile.topology is not None:
            rows = profile.topology.matrix[:gpus_per_node]
            update["topology"] = profile.topology.model_copy(
                update={"matrix": [r[:gpus_per_node] for r in rows]}
            )
    if nodes is not None:
        if nodes < 1:
            raise InputError(f"node count must be at least 1, got {nodes}")
        if nodes > 1 and profile.inter_node is None:
            raise InputError(
                f"{nodes} nodes requested but profile {profile.name!r} has no inter_node link",
                hint="choose a multi-node profile (e.g. h100-2node-ib) or add inter_node to the profile",
            )
        update["nodes"] = nodes
    if not update:
        return profile
    resized = profile.model_copy(update=update)
    if profile.hourly_rate_usd is not None and profile.world_size:
        resized.hourly_rate_usd = profile.hourly_rate_usd * resized.world_size / profile.world_size
    return resized
