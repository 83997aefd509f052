"""zerotune.files: user files are read with one-line errors; output is atomic and never clobbered."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from zerotune.errors import InputError
from zerotune.files import read_json, read_yaml, write_atomic


def test_write_atomic_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    target = write_atomic(tmp_path / "sub" / "ds.json", "{}\n")
    assert target.read_text() == "{}\n"
    with pytest.raises(InputError, match="already exists"):
        write_atomic(target, "changed")
    write_atomic(target, "changed", force=True)
    assert target.read_text() == "changed"
    assert [p.name for p in target.parent.iterdir()] == ["ds.json"]  # no temporary left behind


def test_write_atomic_gives_an_ordinary_file_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        target = write_atomic(tmp_path / "ds.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # as open() would create it, not mkstemp's 0600


@pytest.mark.parametrize(
    ("reader", "text", "expected"),
    [
        (read_yaml, "gpu: [unclosed\n", "not valid YAML"),
        (read_json, "{not json", "not valid JSON"),
    ],
)
def test_parse_errors_are_one_line_naming_the_file(tmp_path: Path, reader, text: str, expected: str) -> None:
    path = tmp_path / "broken"
    path.write_text(text)
    with pytest.raises(InputError, match=expected) as info:
        reader(path)
    assert str(path) in info.value.message and "\n" not in info.value.message


def test_unreadable_files_are_input_errors(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="cannot read"):
        read_yaml(binary)
    with pytest.raises(InputError, match="cannot read"):
        read_json(tmp_path / "missing.json")


def test_unwritable_targets_are_input_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match=r"cannot write .*file/ds.json"):
        write_atomic(blocker / "ds.json", "{}")  # a file where the folder should be
    folder = tmp_path / "taken.json"
    folder.mkdir()
    with pytest.raises(InputError, match="cannot write"):
        write_atomic(folder, "{}", force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "taken.json"]  # no temporary left behind
