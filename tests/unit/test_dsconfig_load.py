"""The loader: DeepSpeed's hjson parity, HF's json view, positions, duplicates, placeholders."""

from __future__ import annotations

import hjson

from zerotune.dsconfig.load import load_path, load_text, pointer_of

TEXT = """{
  "train_batch_size": 8,
  "zero_optimization": {
    "stage": 3,
    "offload_param": {"device": "cpu"},
    "a/b~c": [1, {"x": 2}]
  }
}
"""


def test_positions_of_keys_and_nested_items() -> None:
    loaded = load_text(TEXT)
    assert loaded.strict_json and not loaded.issues
    assert loaded.locate("/train_batch_size") == (2, 3)
    assert loaded.locate("/zero_optimization/stage") == (4, 5)
    assert loaded.locate("/zero_optimization/offload_param/device") == (5, 23)
    assert loaded.locate(pointer_of("zero_optimization", "a/b~c", 1, "x")) == (6, 19)
    # a key that is not in the file points at its nearest ancestor
    assert loaded.locate("/zero_optimization/overlap_comm") == (3, 3)
    assert loaded.locate("/nothing") == (1, 1)


def test_pointer_escaping_follows_rfc6901() -> None:
    assert pointer_of("a/b~c", 0) == "/a~1b~0c/0"


def test_hjson_only_syntax_loads_like_deepspeed_and_warns() -> None:
    text = '{\n  // global batch\n  "train_batch_size": 8,\n  "fp16": {"enabled": true,},\n}'
    loaded = load_text(text)
    assert loaded.parsed and not loaded.strict_json
    assert loaded.data == hjson.loads(text)
    [issue] = loaded.issues
    assert issue.kind == "hjson_only"
    assert loaded.position(issue.offset) == (2, 3)  # json stops at the comment


def test_placeholders_are_read_to_the_end_of_the_line_as_hjson_does() -> None:
    loaded = load_text('{\n  "train_batch_size": CONFIG_BATCH_SIZE,\n  "steps_per_print": 10\n}')
    assert loaded.data["train_batch_size"] == "CONFIG_BATCH_SIZE,"  # hjson's own reading
    kinds = {i.kind: i for i in loaded.issues}
    assert kinds["placeholder"].pointer == "/train_batch_size"
    assert kinds["placeholder"].message == "CONFIG_BATCH_SIZE,"
    assert loaded.position(kinds["placeholder"].offset) == (2, 23)


def test_duplicates_are_found_with_their_position() -> None:
    loaded = load_text('{"a": 1,\n "b": {"c": 1, "c": 2},\n "a": 3}')
    dups = sorted((i.pointer, loaded.position(i.offset)) for i in loaded.issues if i.kind == "duplicate")
    assert dups == [("/a", (3, 2)), ("/b/c", (2, 16))]
    assert loaded.data["a"] == 3  # last wins, as json.load does


def test_syntax_error_reports_line_and_column() -> None:
    loaded = load_text('{"a": {"b": 1}\n  "c": ]\n}')
    [issue] = loaded.issues
    assert issue.kind == "syntax" and not loaded.parsed
    assert loaded.position(issue.offset) == (2, 8)


def test_bom_and_non_utf8_files(tmp_path) -> None:
    good = tmp_path / "bom.json"
    good.write_bytes(b'\xef\xbb\xbf{"train_batch_size": 8}')
    assert load_path(good).data == {"train_batch_size": 8}
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"name": "caf\xe9"}')
    loaded = load_path(bad)
    assert not loaded.parsed and loaded.issues[0].kind == "syntax"


def test_corpus_templates_parse_with_placeholders(corpus) -> None:
    path = (
        corpus
        / "configs"
        / "microsoft__Megatron-DeepSpeed__examples_deepspeed__MoE__ds_config_gpt_TEMPLATE.json"
    )
    loaded = load_path(path)
    assert loaded.parsed and not loaded.strict_json
    assert {i.pointer for i in loaded.issues if i.kind == "placeholder"} >= {"/train_batch_size"}
