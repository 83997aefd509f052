"""Issue 12: one bad file never sinks a run, numbers are read as DeepSpeed reads them, and the CLI
behaves like ruff for folders, symlinks and `--json`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from zerotune.dsconfig.load import load_path, load_text
from zerotune.lint import registry
from zerotune.lint.context import LintOptions
from zerotune.lint.diagnostic import Severity
from zerotune.lint.runner import lint

GOOD = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}
BAD_BATCH = {"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1}


def _codes(config_text: str, **options) -> list[str]:
    return [d.code for d in lint(load_text(config_text), LintOptions(**options))]


def _errors(config: dict, **options) -> list[str]:
    loaded = load_text(json.dumps(config))
    return [d.code for d in lint(loaded, LintOptions(**options)) if d.severity is Severity.ERROR]


# ---- item 1: a poisoned file among good ones ----------------------------------------------------------------


def test_a_1e400_file_among_good_ones_keeps_every_files_findings(cli, tmp_path) -> None:
    (tmp_path / "a_good.json").write_text(json.dumps(GOOD))
    (tmp_path / "b_poison.json").write_text('{"train_batch_size": 1e400}')
    (tmp_path / "c_mismatch.json").write_text(json.dumps(BAD_BATCH))
    res = cli("validate", tmp_path, "--json", "--world-size", "4")
    assert res.code == 1, res.stderr
    doc = json.loads(res.stdout)
    by_name = {Path(f["path"]).name: [d["code"] for d in f["diagnostics"]] for f in doc["files"]}
    assert list(by_name) == ["a_good.json", "b_poison.json", "c_mismatch.json"]
    assert by_name["b_poison.json"] == ["ZT001"]  # hjson cannot read it: DeepSpeed's syntax error
    assert "ZT101" in by_name["c_mismatch.json"]
    assert not [c for c in by_name["a_good.json"] if registry.get(c).severity is Severity.ERROR]


def test_a_crashing_rule_becomes_zt000_on_that_file_only(cli, tmp_path, monkeypatch) -> None:
    from zerotune.lint.rules import batch

    def boom(self, ctx):
        if ctx.config.get("train_batch_size") == 10:
            raise OverflowError("cannot convert float infinity to integer")
        yield from ()

    monkeypatch.setattr(batch.ImpliedWorldSize, "check", boom)
    (tmp_path / "a.json").write_text(json.dumps(GOOD))
    (tmp_path / "b.json").write_text(json.dumps(BAD_BATCH))
    res = cli("validate", tmp_path / "a.json", tmp_path / "b.json", "--format", "json")
    assert res.code == 1 and "Traceback" not in res.stderr
    files = json.loads(res.stdout)["files"]
    b = {d["code"]: d for d in files[1]["diagnostics"]}
    assert "ZT000" in b and "OverflowError" in b["ZT000"]["message"] and "ZT104" not in b
    assert "ZT101" in b  # the checks that did finish keep their findings
    assert all(d["code"] != "ZT000" for d in files[0]["diagnostics"])


# ---- item 2: numbers as DeepSpeed's hjson loader and pydantic read them ---------------------------------------


@pytest.mark.parametrize("text", ['{"train_batch_size": 1e400}', '{"a": -1e400}', '{"a": 1e400, // c\n}'])
def test_overflowing_numbers_are_a_syntax_error_as_in_hjson(text) -> None:
    loaded = load_text(text)
    assert not loaded.parsed
    assert [i.kind for i in loaded.issues] == ["syntax"] and "out of range" in loaded.issues[0].message


def test_whole_floats_below_1e10_become_ints_as_in_hjson() -> None:
    import hjson

    text = '{"a": 1000.0, "b": 5e8, "c": 1e10, "d": 2.5, "e": 1E3, "f": 9999999999.0}'
    data = load_text(text).data
    assert data == hjson.loads(text)
    assert [type(data[k]) for k in "abcdef"] == [int, int, float, float, int, int]


def test_warmup_steps_written_as_a_whole_float_pass_from_a_file_but_not_through_hf() -> None:
    text = json.dumps({"train_batch_size": 8}) [:-1] + ', "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1000.0}}}'
    assert "ZT612" not in _codes(text)  # DeepSpeed's hjson reads 1000.0 as 1000
    assert "ZT612" in _codes(text, hf=True)  # HF's json.load keeps 1000.0, the scheduler refuses a float


@pytest.mark.parametrize(
    "key, value",
    [
        ("reduce_bucket_size", 1e19),
        ("stage3_param_persistence_threshold", 1e308),
    ],
)
def test_integer_fields_reject_floats_beyond_int64(key, value) -> None:
    errors = _errors({"train_batch_size": 8, "zero_optimization": {"stage": 3, key: value}})
    assert "ZT601" in errors


def test_initial_scale_power_beyond_int64_is_an_error() -> None:
    errors = _errors({"train_batch_size": 8, "fp16": {"enabled": True, "initial_scale_power": 1e308}})
    assert "ZT601" in errors


@pytest.mark.parametrize("value, ok", [("3", True), ("3.0", True), ("+3", True), ("3e0", False),
                                       ("3.", False), ("2.000000e+00", False), ("\u0663", False)])
def test_integer_strings_follow_pydantic(value, ok) -> None:
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(int).validate_python(value)
        pydantic_ok = True
    except ValidationError:
        pydantic_ok = False
    assert pydantic_ok == ok
    errors = _errors({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": value}})
    assert ("ZT601" not in errors) == ok


def test_a_utf8_bom_is_reported_like_comments(tmp_path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    loaded = load_path(path)
    assert loaded.parsed and loaded.data == GOOD
    found = lint(loaded, LintOptions())
    zt002 = [d for d in found if d.code == "ZT002"]
    assert zt002 and "byte-order mark" in zt002[0].message and zt002[0].severity is Severity.WARNING


# ---- item 6: the CLI as a newcomer uses it -----------------------------------------------------------------


def test_validate_dir_recurses_like_ruff(cli, tmp_path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub" / "deeper" / "ds.json").write_text(json.dumps(BAD_BATCH))
    (tmp_path / "top.json").write_text(json.dumps(GOOD))
    (tmp_path / "notes.txt").write_text("not a config")
    (tmp_path / ".git" / "x.json").write_text("{")
    res = cli("validate", tmp_path, "--json")
    paths = [Path(f["path"]).relative_to(tmp_path).as_posix() for f in json.loads(res.stdout)["files"]]
    assert paths == ["sub/deeper/ds.json", "top.json"]


def test_json_flag_is_an_alias_of_format_json(cli, tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(BAD_BATCH))
    a, b = cli("validate", path, "--json"), cli("validate", path, "--format", "json")
    assert a.code == b.code == 1 and json.loads(a.stdout) == json.loads(b.stdout)


@pytest.mark.skipif(os.name != "posix", reason="symlinks and modes")
def test_fix_writes_through_a_symlink_and_keeps_the_mode(cli, tmp_path) -> None:
    real = tmp_path / "real.json"
    real.write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 3, "cpu_offload_param": true}}')
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    res = cli("validate", link, "--fix")
    assert "Fixed" in res.stdout, res.stdout + res.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "offload_param" in real.read_text() and "cpu_offload_param" not in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


# ---- items 3 and 4: what DeepSpeed accepts at parse and initialize(), and what it refuses there -----------------


def test_batch_keys_null_true_and_fractions_as_deepspeed_computes_them() -> None:
    assert _errors({"train_batch_size": 8, "train_micro_batch_size_per_gpu": None}) == []
    assert _errors({"train_batch_size": True, "gradient_accumulation_steps": True}, world_size=1) == []
    found = lint(load_text(json.dumps({"train_micro_batch_size_per_gpu": 1.5})), LintOptions(world_size=1))
    assert [(d.code, d.severity) for d in found if d.code.startswith("ZT1")] == [("ZT103", Severity.WARNING)]
    assert "ZT102" in _errors({"train_batch_size": None, "train_micro_batch_size_per_gpu": None})


def test_a_stage_above_3_is_one_error_not_a_cascade() -> None:
    config = {"train_batch_size": 8, "zero_optimization": {"stage": 4, "overlap_comm": True,
                                                           "reduce_bucket_size": 1000, "sub_group_size": 10}}
    codes = _codes(json.dumps(config))
    assert codes.count("ZT601") == 1 and not [c for c in codes if c.startswith("ZT2")], codes


def test_an_hf_template_without_hf_is_one_summary_finding() -> None:
    config = {k: "auto" for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                  "gradient_accumulation_steps", "gradient_clipping")}
    config["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}
    found = [d for d in lint(load_text(json.dumps(config)), LintOptions()) if d.code == "ZT801"]
    assert len(found) == 1 and "6 places" in found[0].message


def test_messages_name_the_key_fix_writes() -> None:
    config = {"train_batch_size": 8, "zero_optimization": {"stage": 3,
                                                           "stage3_gather_fp16_weights_on_model_save": True}}
    zt504 = [d for d in lint(load_text(json.dumps(config)), LintOptions()) if d.code == "ZT504"][0]
    assert "`stage3_gather_16bit_weights_on_model_save`" in zt504.message
    typo = {"train_batch_size": 8, "zero_optimization": {"stage": 3, "cpu_offload_params": True}}
    zt501 = [d for d in lint(load_text(json.dumps(typo)), LintOptions()) if d.code == "ZT501"][0]
    assert zt501.help == "did you mean `offload_param`?"


def test_skipped_model_and_hardware_rules_are_stated(cli, tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(GOOD))
    res = cli("validate", path, "--model", "llama-7b", "--json")
    assert "ZT901" in res.stderr and "--profile" in res.stderr
    json.loads(res.stdout)  # stdout stays JSON
    assert "skipped" not in cli("validate", path).stderr  # no model/hardware asked for: nothing to say


def test_thousands_of_unknown_keys_are_listed_up_to_a_cap_then_summarised() -> None:
    from zerotune.lint.rules.keys import LISTED_PER_SECTION

    config = {"train_batch_size": 8, "zero_optimization": {"stage": 3}}
    config.update({f"stray_{i}": i for i in range(500)})
    config["zero_optimization"].update({f"stray_{i}": i for i in range(300)})
    found = lint(load_text(json.dumps(config)), LintOptions())
    top = [d for d in found if d.code == "ZT502"]
    zero = [d for d in found if d.code == "ZT501"]
    assert len(top) == len(zero) == LISTED_PER_SECTION + 1
    assert "and 449 more" in top[-1].message and "and 249 more" in zero[-1].message
    assert all(d.severity is Severity.ERROR for d in zero)


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_a_dangling_link_in_a_folder_is_that_files_finding(cli, tmp_path) -> None:
    (tmp_path / "good.json").write_text(json.dumps(BAD_BATCH))
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone.json")
    res = cli("validate", tmp_path, "--json", "--world-size", "4")
    by_name = {Path(f["path"]).name: [d["code"] for d in f["diagnostics"]] for f in json.loads(res.stdout)["files"]}
    assert by_name["dangling.json"] == ["ZT001"] and "ZT101" in by_name["good.json"]
    assert cli("validate", tmp_path / "gone.json").code == 2  # a named missing file stays a usage error


def test_auto_outside_hf_does_not_promise_hf_fills_what_it_does_not() -> None:
    # transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_process fills the batch
    # trio, gradient_clipping and optimizer/scheduler params, never `steps_per_print`:
    # under HF those still reach DeepSpeed as "auto" (ZT803), so ZT801 must not say HF fills them.
    config = {"train_batch_size": "auto", "gradient_clipping": "auto", "steps_per_print": "auto"}
    (found,) = [d for d in lint(load_text(json.dumps(config)), LintOptions()) if d.code == "ZT801"]
    filled, _, rest = found.message.partition("HF Trainer does not fill")
    assert "/train_batch_size" in filled and "/gradient_clipping" in filled and "/steps_per_print" in rest
    (only,) = [d for d in lint(load_text('{"train_batch_size": 8, "steps_per_print": "auto"}'), LintOptions())
               if d.code == "ZT801"]
    assert "HF Trainer does not fill" in only.message and "pass --hf" not in (only.help or "")


def test_a_string_key_is_not_read_as_a_misspelt_section() -> None:
    """`_comment`/`comment` with a string is a note, not a misspelt `comet` section: DeepSpeed builds each monitor
    section from a mapping (deepspeed/monitor/config.py:13 get_monitor_config, `param_dict.get(key, {})` into
    DeepSpeedMonitorConfig(**...)), and no section is ever a string. Seen on
    yiqiao-yin/deepspeed-course's `_comment` keys (unseen round 11): a warning with "did you mean `comet`?"."""
    def zt502(config: dict) -> list:
        return [d for d in lint(load_text(json.dumps(config)), LintOptions()) if d.code == "ZT502"]

    note = zt502({"train_batch_size": 8, "_comment": "stage 1 on purpose"})
    assert [(d.severity, d.help) for d in note] == [(Severity.INFO, None)]  # as any other `_`-prefixed note
    plain = zt502({"train_batch_size": 8, "comment": "stage 1 on purpose"})
    assert [(d.severity, d.help) for d in plain] == [(Severity.WARNING, None)]
    # a mapping under a near name is still read as the misspelt section it loses
    lost = zt502({"train_batch_size": 8, "commet": {"enabled": True}})
    assert [(d.severity, d.help) for d in lost] == [(Severity.ERROR, "did you mean `comet`?")]
