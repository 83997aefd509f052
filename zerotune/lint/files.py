"""Which files `zerotune validate` checks and how one file is checked: paths, globs and folders
expanded as ruff does, each file linted (and --fix written through a symlink) in isolation, so one bad
file in a glob never loses the others' results."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from zerotune.errors import InputError
from zerotune.lint.diagnostic import FileReport

if TYPE_CHECKING:
    from zerotune.lint.context import LintOptions
    from zerotune.lint.rule import Rule

# What `validate DIR` picks up, like ruff's default include: DeepSpeed configs are JSON (hjson-readable).
CONFIG_SUFFIXES = (".json", ".hjson")
_SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache"}


def expand(paths: list[str]) -> list[str]:
    """Paths as given, globs expanded (sorted), folders walked for *.json/*.hjson (sorted, hidden and
    virtual-env folders skipped, as ruff does); "-" is stdin. A glob that matches nothing is an input error."""
    out: list[str] = []
    for path in paths:
        if path != "-" and any(c in path for c in "*?[") and not os.path.exists(path):
            matches = sorted(glob.glob(path, recursive=True))
            if not matches:
                raise InputError(f"no file matches {path!r}")
            out.extend(matches)
        elif path != "-" and os.path.isdir(path):
            found = _walk(path)
            if not found:
                raise InputError(f"no *.json or *.hjson file under {path}")
            out.extend(found)
        else:
            out.append(path)
    return out


def _walk(root: str) -> list[str]:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        found.extend(
            os.path.normpath(os.path.join(folder, n)) for n in sorted(names) if n.endswith(CONFIG_SUFFIXES)
        )
    return sorted(found)


def write_through(path: str, text: str) -> None:
    """--fix: write the file a symlink points to (the link stays a link) and keep its permission bits."""
    from zerotune.files import write_atomic

    real = os.path.realpath(path)
    mode = os.stat(real).st_mode & 0o7777
    write_atomic(real, text, force=True)
    os.chmod(real, mode)


def skipped_rules(rules: Sequence[type[Rule]], options: LintOptions) -> str | None:
    """Which selected rules cannot run for want of --model / --profile, and what would enable them. Said
    once the user asks for model- or hardware-aware checks by giving one of the two."""
    have = {"model": options.model is not None, "hf": options.hf}
    have["hardware"] = options.profile is not None or options.gpu_memory_gib is not None
    if not (have["model"] or have["hardware"]):
        return None
    missing: dict[str, list[str]] = {}
    for rule in rules:
        lacking = [n for n in sorted(rule.needs) if not have.get(n, True)]
        if lacking and "hf" not in lacking:
            missing.setdefault(" and ".join(lacking), []).append(rule.code)
    if not missing:
        return None
    flags = {"model": "--model", "hardware": "--profile (or --gpus and --gpu-memory)"}
    parts = []
    for lacking, codes in missing.items():
        need = " and ".join(flags[n] for n in lacking.split(" and "))
        parts.append(f"{', '.join(codes)} skipped: they need {need}")
    return "; ".join(parts)


def check_file(
    path: str, options: LintOptions, rules: Sequence[type[Rule]], fix: bool, named: bool = True
) -> FileReport:
    """One file's report. Whatever goes wrong inside one file stays in that file's report (ZT000), so a
    glob over a repository never loses the other files' results."""
    from zerotune.dsconfig.load import LoadedConfig, load_path, load_text
    from zerotune.lint.runner import apply_fixes, internal_error, lint

    try:
        loaded = load_path(path)
    except InputError as exc:
        if named:
            raise  # a file the user named that is missing or unreadable is a usage error (exit 2)
        # one unreadable file in a glob or folder (a dangling link, no permission) is that file's finding
        from zerotune.lint.runner import unreadable

        return FileReport(path, (unreadable(path, exc.message),), 0)
    try:
        found = lint(loaded, options, rules)
        fixed = 0
        # a launcher file nesting the config (trainer_args_section) is the file named: its fixes land there
        named_through = loaded.trainer_args is not None and loaded.trainer_args_section is None
        launcher = loaded.accelerate is not None or named_through
        if fix and not launcher and any(d.fix for d in found):  # never rewrite a file not named
            new_text, fixed = apply_fixes(loaded, found)
            if fixed:
                write_through(path, new_text)
                found = lint(load_text(new_text, loaded.path), options, rules)
    except Exception as exc:
        if options.verbose or isinstance(exc, InputError):
            raise
        blank = LoadedConfig(path=loaded.path, text=loaded.text)
        return FileReport(loaded.path, (internal_error(blank, f"{type(exc).__name__}: {exc}"),), 0)
    return FileReport(loaded.path, tuple(found), fixed)
