"""`zerotune validate` as people and CI use it: formats, exit codes, selection, stdin, globs, --fix."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest

from zerotune.lint import registry

HERE = Path(__file__).resolve().parents[1]
CONFIGS = HERE / "fixtures" / "lint" / "configs"
SNAPSHOTS = HERE / "snapshots"
SARIF_SCHEMA = HERE / "fixtures" / "sarif" / "sarif-schema-2.1.0.json"
MIXED = CONFIGS / "mixed.json"
CLEAN = CONFIGS / "clean.json"


def _snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("ZEROTUNE_UPDATE_SNAPSHOTS") or not path.exists():
        path.write_text(text)
    assert text == path.read_text(), f"snapshot {name} changed (ZEROTUNE_UPDATE_SNAPSHOTS=1 to accept)"


def _rel(cli, *args):
    """Run with paths relative to the repo so snapshots do not depend on the checkout location."""
    cwd = os.getcwd()
    os.chdir(HERE.parent)
    try:
        return cli(*args)
    finally:
        os.chdir(cwd)


def test_text_output_snapshot(cli) -> None:
    res = _rel(cli, "validate", "tests/fixtures/lint/configs/mixed.json", "--world-size", "8")
    assert res.code == 1
    _snapshot("validate_mixed.txt", res.stdout)


def test_clean_config_exits_zero(cli) -> None:
    res = cli("validate", CLEAN)
    assert res.code == 0 and "All checks passed" in res.stdout


def test_json_output_shape(cli) -> None:
    res = cli("validate", MIXED, CLEAN, "--format", "json", "--world-size", "8")
    assert res.code == 1
    doc = json.loads(res.stdout)  # nothing but JSON on stdout
    assert [f["path"] for f in doc["files"]] == [str(MIXED), str(CLEAN)]
    diags = doc["files"][0]["diagnostics"]
    by_code = {d["code"]: d for d in diags}
    assert set(by_code) >= {"ZT101", "ZT401", "ZT501", "ZT504", "ZT201"}
    d = by_code["ZT501"]
    assert d["severity"] == "error" and d["pointer"] == "/zero_optimization/stage3_max_live_parameter"
    assert (d["line"], d["column"]) == (11, 5)
    assert by_code["ZT504"]["fix"]["applicability"] == "safe"
    assert doc["summary"] == {"files": 2, "errors": 4, "warnings": 2, "info": 1, "fixable": 1, "fixed": 0}


def test_github_annotations(cli) -> None:
    res = cli("validate", MIXED, "--format", "github", "--select", "ZT401,ZT501")
    lines = res.stdout.splitlines()
    assert lines[0] == (
        f"::error file={MIXED},line=6,col=12,title=ZT401 fp16-and-bf16::fp16 and bf16 are both enabled; "
        "DeepSpeed allows only one"
    )
    assert len(lines) == 2 and res.code == 1


def test_sarif_validates_against_the_2_1_0_schema(cli) -> None:
    res = cli("validate", MIXED, CLEAN, "--format", "sarif", "--world-size", "8")
    doc = json.loads(res.stdout)
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft4Validator(schema).validate(doc)
    run = doc["runs"][0]
    assert len(run["tool"]["driver"]["rules"]) == len(registry.all_rules())
    first = run["results"][0]
    assert run["tool"]["driver"]["rules"][first["ruleIndex"]]["id"] == first["ruleId"]
    assert first["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1


def test_sarif_schema_rejects_a_broken_document() -> None:
    schema = json.loads(SARIF_SCHEMA.read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema).validate({"version": "2.1.0", "runs": [{"results": []}]})


def test_strict_and_exit_zero(cli, tmp_path) -> None:
    warn_only = tmp_path / "w.json"
    warn_only.write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_comm": false}}')
    assert cli("validate", warn_only).code == 0
    assert cli("validate", warn_only, "--strict").code == 1
    assert cli("validate", MIXED, "--exit-zero").code == 0


def test_select_and_ignore(cli) -> None:
    res = cli("validate", MIXED, "--format", "json", "--select", "ZT5", "--ignore", "ZT504")
    codes = {d["code"] for d in json.loads(res.stdout)["files"][0]["diagnostics"]}
    assert codes == {"ZT501"}
    bad = cli("validate", MIXED, "--select", "XX1")
    assert bad.code == 2 and "unknown rule code" in bad.stderr


def test_stdin(cli, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"train_batch_size": 8, "amp": {}}')))
    res = cli("validate", "-", "--format", "json")
    doc = json.loads(res.stdout)
    assert doc["files"][0]["path"] == "<stdin>"
    assert [d["code"] for d in doc["files"][0]["diagnostics"]] == ["ZT505"]
    assert res.code == 1


def test_globs_and_bad_paths(cli) -> None:
    res = cli("validate", str(CONFIGS / "*.json"), "--format", "json")
    assert len(json.loads(res.stdout)["files"]) == len(list(CONFIGS.glob("*.json")))
    missing = cli("validate", CONFIGS / "nope.json")
    assert missing.code == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
    nomatch = cli("validate", str(CONFIGS / "*.nothing"))
    assert nomatch.code == 2


def test_fix_rewrites_in_place_and_keeps_formatting(cli, tmp_path) -> None:
    target = tmp_path / "ds.json"
    shutil.copy(MIXED, target)
    before = target.read_text()
    res = cli("validate", target, "--fix", "--format", "json")
    after = target.read_text()
    assert json.loads(res.stdout)["summary"]["fixed"] == 1
    assert '"offload_optimizer": {"device": "cpu"}' in after and "cpu_offload" not in after
    # only the fixed line changed
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert len(changed) == 1
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")]  # no temp file left behind
    assert cli("validate", "-", "--fix").code == 2


def test_ci_integration_files_run_real_commands(cli, tmp_path) -> None:
    import re

    import yaml

    hooks = yaml.safe_load((HERE.parent / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"] for h in hooks} == {"zerotune-validate", "zerotune-validate-hf"}
    for hook in hooks:
        pattern = re.compile(hook["files"])
        assert pattern.search("configs/ds_config_zero3.json") and not pattern.search("package.json")
        argv = hook["entry"].split()[1:] + [str(CLEAN)]  # pre-commit appends the file names
        assert cli(*argv).code == 0
    action = yaml.safe_load((HERE.parent / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    run_lines = [s["run"] for s in action["runs"]["steps"] if "run" in s and "zerotune validate" in s["run"]]
    assert run_lines and all("--format" in r and r.startswith("set -f;") for r in run_lines)
    # the default input is a recursive glob that zerotune itself expands
    (tmp_path / "a" / "b").mkdir(parents=True)
    shutil.copy(CLEAN, tmp_path / "a" / "b" / "ds_config_z3.json")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = cli("validate", action["inputs"]["files"]["default"], "--format", "github")
    finally:
        os.chdir(cwd)
    assert res.code == 0
