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
import re
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from zerotune.catalog import profiles_root
from zerotune.catalog.trust import provenance
from zerotune.errors import InputError
from zerotune.files import is_readable_file, read_json, read_yaml
from zerotune.model.overheads import with_prior
from zerotune.schema.hardware import SCHEMA_VERSION, HardwareProfile

DEFAULT_PROFILE = "dgx-h100"

_SUFFIXES = (".yaml", ".yml", ".json")
# libyaml's C emitter when PyYAML was built with it (about 10x faster), else pure Python.
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_PROBE_CACHE_FILE = "last-probe.yaml"
_CALIBRATED_CACHE_FILE = "calibrated.yaml"


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
    if path.suffix.lower() in _SUFFIXES or is_readable_file(path) or os.sep in ref:
        if not is_readable_file(path):
            raise InputError(f"hardware profile file {ref} not found", hint="check the path")
        return _load_file(path)
    candidate = hardware_dir() / f"{ref}.yaml"
    if candidate.is_file():
        return _load_file(candidate)
    names = list_profiles()
    message = f"unknown hardware profile {ref!r}"
    by_gpu = profiles_with_gpu(ref)
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.5)
    if by_gpu:
        message += f" (profiles with that GPU: {', '.join(by_gpu)})"
    elif close:
        message += f" (did you mean {', '.join(close)}?)"
    hint = f"known profiles: {', '.join(names)}" if names else f"no profiles found in {hardware_dir()}"
    raise InputError(message, hint=hint + "; or pass the path of a profile file")


_VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla"})
_BOX_WORDS = frozenset({"dgx", "hgx", "node", "nodes", "server"})
"""Words of a box, not of its GPU, that a user adds to the GPU's name (`dgx-h200`, `h200-node`)."""
_COUNT = re.compile(r"^\d+x(?=[a-z])")
"""A GPU count written before the GPU (`8xh200`, the catalog's own `8xh100-pcie`)."""


def _gpu_words(text: str) -> list[str]:
    """The words of a GPU name as a user types them: lower case, vendor and brand words dropped."""
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _VENDOR_WORDS]


def profiles_with_gpu(ref: str) -> list[str]:
    """Catalog profiles whose GPU a reference names (`a10g`, `h100-pcie`, `RTX 6000`, `rtx4090`, `dgx-h200`,
    `8xh200`): every word of the reference, box words and a GPU count left out, is a word of the GPU's name,
    or two or three of its words run together. A user who types
    the GPU they have gets the profiles of that GPU, not the names that merely look alike (`a10g` is not
    `dgx-a100-80g`). Files that do not load are skipped: this only feeds a suggestion."""
    wanted = [_COUNT.sub("", w) for w in _gpu_words(ref) if w not in _BOX_WORDS]
    if not wanted:
        return []
    found = []
    for name in list_profiles():
        try:
            gpu = _load_file(hardware_dir() / f"{name}.yaml").gpu
        except InputError:
            continue
        if gpu is None:
            continue
        words = _gpu_words(gpu.name)
        joined = {"".join(words[i : i + k]) for k in (1, 2, 3) for i in range(len(words) - k + 1)}
        if all(w in joined for w in wanted):
            found.append(name)
    return found


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
        profile = HardwareProfile.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{path}: {_loc(err['loc'])}: {err['msg'].removeprefix('Value error, ')}{_did_you_mean(err)}"
            for err in exc.errors()
        ]
        hint = (
            f"fix the file (compare with {hardware_dir() / DEFAULT_PROFILE}.yaml) or re-run `zerotune probe`"
        )
        raise InputError("\n".join(lines), hint=hint) from None
    # a GPU profile's null per-step / hook costs come from the one global prior (model/overheads.py)
    return profile.model_copy(update={"overheads": with_prior(profile.overheads, profile.has_gpus)})


def _did_you_mean(err) -> str:
    """For an unknown key, the known keys of that section that are close to it."""
    if err["type"] != "extra_forbidden":
        return ""
    model: Any = HardwareProfile
    for part in err["loc"][:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return ""  # inside a list or a dict of sections: no single set of keys
        model = next((a for a in (field.annotation, *get_args(field.annotation)) if _is_model(a)), None)
        if model is None:
            return ""
    close = difflib.get_close_matches(str(err["loc"][-1]), list(model.model_fields), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


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


def cache_dir() -> Path:
    """$ZEROTUNE_CACHE_DIR, else $XDG_CACHE_HOME/zerotune, else ~/.cache/zerotune."""
    if os.environ.get("ZEROTUNE_CACHE_DIR"):
        return Path(os.environ["ZEROTUNE_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "zerotune"
    return Path.home() / ".cache" / "zerotune"


def probe_cache_path() -> Path:
    """Where `zerotune probe` keeps its last full probe: <cache_dir()>/last-probe.yaml."""
    return cache_dir() / _PROBE_CACHE_FILE


def calibrated_cache_path() -> Path:
    """Where `zerotune calibrate` keeps its last calibrated profile: <cache_dir()>/calibrated.yaml."""
    return cache_dir() / _CALIBRATED_CACHE_FILE


def load_cached_probe() -> HardwareProfile | None:
    """The cached profile of this machine: the last calibration when it is at least as new as the
    last full probe, else that probe; None when neither exists."""
    found = cached_profile()
    return found[0] if found else None


def cached_profile() -> tuple[HardwareProfile, Path] | None:
    """(profile, its file) as load_cached_probe picks it."""
    probe_path, calibrated_path = probe_cache_path(), calibrated_cache_path()
    probe = load_profile(str(probe_path)) if probe_path.is_file() else None
    calibrated = load_profile(str(calibrated_path)) if calibrated_path.is_file() else None
    if calibrated is not None and calibrated.calibration is not None:
        probed_at = (probe.created or "") if probe is not None else ""
        if probe is None or calibrated.calibration.created >= probed_at:
            return calibrated, calibrated_path
    if probe is not None:
        return probe, probe_path
    return None


def host_profile(notices: list[str]) -> HardwareProfile | None:
    """The profile of this host for what measures it (bench): the cached one (calibrated, else probed;
    any device kind), never a built-in one; None, said in `notices`, when nothing is cached."""
    found = cached_profile()
    if found is None:
        notices.append("no --profile and nothing cached: no prediction (run `zerotune calibrate`)")
        return None
    notices.append(f"predicting with the cached profile {found[1]} ({provenance(found[0])})")
    return found[0]


def default_profile(notices: list[str]) -> tuple[HardwareProfile, str]:
    """The profile a command uses without --profile (one rule for predict, recommend...), and a
    reference load_profile reads back (a path or a catalog name):

    1. the cached calibration of this machine (`zerotune calibrate`), when it is at least as new as
       the last full probe: calibrating is asking the tools to predict for this machine;
    2. else the cached full probe when it found GPUs (a CPU-only probe describes a test host, not
       a training cluster);
    3. else the built-in DEFAULT_PROFILE.

    Appends one notice saying which, and how far to trust it (provenance())."""
    found = cached_profile()
    if found is not None:
        profile, path = found
        if profile.calibration is not None or profile.has_gpus:
            notices.append(f"no --profile: using the cached profile {path} ({provenance(profile)})")
            return profile, str(path)
    profile = load_profile(DEFAULT_PROFILE)
    why = "the cached probe found no GPUs" if found is not None else "no cached probe or calibration"
    notices.append(f"no --profile and {why}: using the built-in profile {DEFAULT_PROFILE} ({provenance(profile)})")
    return profile, DEFAULT_PROFILE


def cache_probe(profile: HardwareProfile, *, full: bool, why_not: str = "") -> str:
    """Cache a probe result for later commands, and say what happened (issue: a quick or failed
    probe must not silently replace the profile recommend uses). Only full probes are cached; the
    previous one is kept as last-probe.previous.yaml."""
    path = probe_cache_path()
    if not full:
        found = cached_profile()
        keep = f"the cached {found[1]}" if found else f"the built-in {DEFAULT_PROFILE} (nothing cached)"
        return f"not cached ({why_not or 'not a full probe'}): commands without --profile keep using {keep}"
    from zerotune.files import write_atomic

    message = f"cached as {path} for commands without --profile"
    if path.is_file():
        previous = path.with_name("last-probe.previous.yaml")
        write_atomic(previous, path.read_text(), force=True)
        message += f" (the previous probe is kept as {previous})"
    write_atomic(path, dump_profile(profile), force=True)
    calibrated = calibrated_cache_path()
    if calibrated.is_file():
        message += f"; the older calibration {calibrated} is no longer used: run `zerotune calibrate` again"
    return message


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


def with_live_host_ram(profile: HardwareProfile) -> tuple[HardwareProfile, str | None]:
    """A probed (or calibrated) profile of *this* host without GPUs, with the RAM available now
    (/proc/meminfo MemAvailable, read when the command runs) instead of what was free when it was
    probed: on a CPU host that RAM bounds every rank, and it changes with every other job. Other
    profiles (another host, a GPU node, the catalog) are returned unchanged. (profile, notice)."""
    import socket

    from zerotune.hw.host import parse_meminfo

    if profile.has_gpus or profile.origin != "probe" or profile.name != f"probe-{socket.gethostname()}":
        return profile, None
    try:
        _, available = parse_meminfo(Path("/proc/meminfo").read_text())
    except OSError:
        return profile, None
    if not available:
        return profile, None
    was = profile.host.ram_available_bytes
    host = profile.host.model_copy(update={"ram_available_bytes": available})
    then = f" (the profile's probe-time value was {was / 2**30:.1f} GiB)" if was else ""
    return profile.model_copy(update={"host": host}), (
        f"host RAM available now: {available / 2**30:.1f} GiB, read from /proc/meminfo{then}"
    )
