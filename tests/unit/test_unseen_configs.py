"""317 DeepSpeed configs from 118 public repositories the project had never used (tests/fixtures/unseen_configs):
provenance, no crash, exit codes, zerotune's errors against DeepSpeed 0.19.8's own parser verdicts, and the
findings checked by hand against DeepSpeed / accelerate source."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from tests.unit.test_lint_differential_corpus import ENGINE_TIME
from zerotune.dsconfig import accelerate
from zerotune.dsconfig.load import load_bytes, load_path, load_text
from zerotune.lint.context import LintOptions
from zerotune.lint.runner import lint

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "unseen_configs"
CONFIGS = HERE / "configs"
CORPUS_MANIFEST = Path(__file__).resolve().parents[1] / "fixtures" / "corpus" / "MANIFEST.tsv"
VERDICTS = json.loads((HERE / "deepspeed_verdicts.json").read_text())


def _manifest() -> list[dict[str, str]]:
    with (HERE / "MANIFEST.tsv").open() as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _codes(name: str, *, severity: str | None = None, **options) -> list[str]:
    found = lint(load_path(CONFIGS / name), LintOptions(**options))
    return [d.code for d in found if severity is None or d.severity.value == severity]


def test_manifest_is_verbatim_and_unseen() -> None:
    rows = _manifest()
    with CORPUS_MANIFEST.open() as fh:
        seen = {r["repo"] for r in csv.DictReader(fh, delimiter="\t")}
    assert len(rows) == len(list(CONFIGS.iterdir())) == 317
    assert len({r["repo"] for r in rows}) == 118
    for row in rows:
        data = (HERE / row["filename"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == row["sha256"], row["filename"]
        assert row["repo"] not in seen and row["license"] and len(row["commit"]) == 40


def test_validate_whole_set_never_crashes(cli) -> None:
    for hf in ([], ["--hf"]):
        res = cli("validate", str(CONFIGS / "*"), "--format", "json", "--world-size", "8", *hf)
        assert res.code == 1  # some files have errors; none is a usage error
        doc = json.loads(res.stdout)
        assert len(doc["files"]) == 317
        codes = [d["code"] for f in doc["files"] for d in f["diagnostics"]]
        assert "ZT000" not in codes
    for path in sorted(CONFIGS.iterdir()):
        assert cli("validate", str(path)).code in (0, 1), path.name


@pytest.mark.parametrize("name", sorted(VERDICTS))
@pytest.mark.parametrize("world", [1, 8])
def test_errors_agree_with_deepspeed(name: str, world: int) -> None:
    """An error wherever DeepSpeed 0.19.8's DeepSpeedConfig refuses the file (recorded verdicts); on a file
    it accepts, only the errors that name a failure inside deepspeed.initialize() (ENGINE_TIME, the same
    contract as the differential corpus: YaLM-100B's `optimizer.params.max_grad_norm` is ZT609, the
    ValueError of engine.py _configure_basic_optimizer)."""
    errors = _codes(name, severity="error", world_size=world)
    rejected = VERDICTS[name][str(world)]
    if rejected:
        assert errors, rejected
    else:
        assert set(errors) <= set(ENGINE_TIME), errors


def test_findings_checked_by_hand() -> None:
    # DeepSpeed 0.19.8 deepspeed/compile/config.py CompileConfig has no `enabled`/`backend` (extra forbidden)
    assert _codes("AIDC-AI__Ovis__scripts__zero_configs__zero3_cp.json").count("ZT501") == 2
    # DeepSpeedFP16Config has no fused_optimizer; WarmupCosineLR(total_num_steps) has no default
    gd = _codes("CoinCheung__gdGPT__configs__ds_config_pp.yml", severity="error")
    assert {"ZT501", "ZT616"} <= set(gd)
    # DeepSpeedBF16Config takes none of the fp16 loss-scale keys
    assert _codes("dvlab-research__LongLoRA__ds_configs__stage2.json").count("ZT503") == 5
    # train_batch_size 6 = 1 x 1 x world: refused at world 8 (DeepSpeed's batch assertion)
    assert "ZT101" in _codes(
        "argonne-lcf__Megatron-DeepSpeed__ALCF__examples__finetune_llama3__ds_config.json", world_size=8
    )
    tpl = (
        "argonne-lcf__Megatron-DeepSpeed__examples_deepspeed__sequence_parallel__ds_config_gpt_TEMPLATE.json"
    )
    assert "ZT003" in _codes(tpl)
    auto = "determined-ai__determined__harness__tests__experiment__fixtures__deepspeed_autotune__example_experiment__ds_config.json"
    assert "ZT504" in _codes(auto)  # cpu_offload is the deprecated spelling


def test_json_in_a_yaml_file_is_read_as_json() -> None:
    """THUDM/CogVideo's finetune/configs/zero*.yaml are JSON documents named .yaml. DeepSpeed opens a config
    path with hjson.load whatever its name (deepspeed/runtime/config.py:443-444, 0.19.8) and accelerate's
    deepspeed_config_file with json.load, so `5e8` is a number and a repeated key is refused by DeepSpeed.
    Was: read by PyYAML (YAML 1.1), `5e8` the string "5e8": ZT601 under --hf and in predict, where accelerate
    starts, and the duplicate keys of zero3.yaml unseen."""
    z2 = "THUDM__CogVideo__finetune__configs__zero2.yaml"
    loaded = load_path(CONFIGS / z2)
    assert loaded.data["zero_optimization"]["reduce_bucket_size"] == 500_000_000
    assert _codes(z2, severity="error", hf=True) == []
    assert _codes(z2, severity="error") == ["ZT801"]  # "auto" only, as DeepSpeed's TypeError on it
    z3 = _codes("THUDM__CogVideo__finetune__configs__zero3.yaml", severity="error")
    assert z3.count("ZT004") == 2 and "ZT601" not in z3
    # accelerate reads it with json.load (last value kept) and hands DeepSpeed a dict: the job starts
    z3_hf = _codes("THUDM__CogVideo__finetune__configs__zero3.yaml", severity="warning", hf=True)
    assert z3_hf.count("ZT004") == 2
    assert _codes("THUDM__CogVideo__finetune__configs__zero3.yaml", severity="error", hf=True) == []


def test_json_object_in_yaml_bytes() -> None:
    """Only a JSON object is read as JSON; real YAML keeps PyYAML's reading (a launcher yaml.safe_load-s it
    and hands DeepSpeed the dict, as gdGPT does)."""
    assert load_bytes(b'{"train_batch_size": 8, "x": 2e8}', "a.yaml").data == {
        "train_batch_size": 8,
        "x": 200_000_000,
    }
    assert load_bytes(b"x: 2e8\n", "a.yaml").data == {"x": "2e8"}  # YAML 1.1, as PyYAML reads it
    assert load_bytes(b"[1, 2]", "a.yml").data == [1, 2]


def test_sat_yaml_is_read_as_its_deepspeed_section(cli) -> None:
    """SwissArmyTransformer (CogVideo sat/arguments.py) hands DeepSpeed the `deepspeed:` mapping of its YAML,
    read with OmegaConf (`1e-8` a float), and builds a `sat.` optimizer itself. Was: the whole file read as a
    DeepSpeed config: ZT102 (no batch size), `args`/`data`/`deepspeed` unknown, and predict at stage 0."""
    name = "THUDM__CogVideo__sat__configs__sft.yaml"
    loaded = load_path(CONFIGS / name)
    assert loaded.section == "/deepspeed" and loaded.data["train_micro_batch_size_per_gpu"] == 2
    assert loaded.data["optimizer"]["params"]["eps"] == 1e-8  # OmegaConf's float, PyYAML's would be "1e-8"
    found = {d.code: d.severity.value for d in lint(loaded, LintOptions(world_size=8))}
    assert found["ZT006"] == "info" and found["ZT610"] == "info" and "ZT102" not in found
    assert "ZT615" not in found and "ZT502" not in found
    res = cli("predict", "--config", str(CONFIGS / name), "--model", "llama-7b", "--gpus", "8")
    assert res.code == 0 and "ZeRO stage 2" in res.stdout and "micro-batch 2" in res.stdout
    # a DeepSpeed config with its own top-level keys is never read as a nested section
    plain = load_bytes(
        json.dumps({"train_batch_size": 8, "deepspeed": {"train_batch_size": 4}}).encode(), "ds.json"
    )
    assert plain.section == "" and plain.data["train_batch_size"] == 8
    nested = load_bytes(
        b'{"args": {},\n "deepspeed": {"train_batch_size": 8,\n  "fp16": {"enabled": 1, "x": 2}}}', "s.json"
    )
    [unknown] = [d for d in lint(nested) if d.code == "ZT501"]
    assert nested.section == "/deepspeed" and (unknown.line, unknown.pointer) == (3, "/fp16/x")


def test_zero3_save_without_gather_says_what_each_saver_does() -> None:
    """engine.save_16bit_model returns False and writes nothing without the gather (a note for a
    save_checkpoint loop such as wenet's); HF save_model writes no usable weights (a warning)."""
    name = "wenet-e2e__wenet__examples__aishell__whisper__conf__ds_stage3.json"
    plain = [d for d in lint(load_path(CONFIGS / name)) if d.code == "ZT805"]
    hf = [d for d in lint(load_path(CONFIGS / name), LintOptions(hf=True)) if d.code == "ZT805"]
    assert [d.severity.value for d in plain] == ["info"] and "returns False" in plain[0].message
    assert [d.severity.value for d in hf] == ["warning"] and "HF save_model()" in hf[0].message


def test_offload_without_optimizer_is_fine_under_accelerate() -> None:
    """accelerate's _prepare_deepspeed swaps the client optimizer for DeepSpeedCPUAdam under optimizer
    offload, so HF Trainer/accelerate start; plain DeepSpeed raises ZeRORuntimeException."""
    name = "PKU-YuanGroup__MoE-LLaVA__scripts__zero2_offload.json"
    assert "ZT305" in _codes(name, severity="error")
    assert "ZT305" in _codes(name, severity="info", hf=True)
    assert "ZT305" not in _codes(name, severity="error", hf=True)


def test_legacy_cpu_offload_gets_no_accelerate_swap() -> None:
    """accelerate's swap reads zero_optimization.offload_optimizer.device from the raw dict, so the
    deprecated `cpu_offload: true` (optimizer offload to DeepSpeed) keeps the client optimizer: refused."""
    config = {"train_batch_size": 8, "zero_optimization": {"stage": 2, "cpu_offload": True}}
    found = lint(load_text(json.dumps(config), "ds.json"), LintOptions(hf=True))
    assert [d.severity.value for d in found if d.code == "ZT305"] == ["error"]


def test_accelerate_yaml_is_read_as_the_config_accelerate_builds() -> None:
    simpo = "princeton-nlp__SimPO__accelerate_configs__deepspeed_zero3.yaml"
    loaded = load_path(CONFIGS / simpo)
    assert loaded.accelerate is not None
    assert loaded.data["zero_optimization"]["stage"] == 3 and loaded.data["bf16"] == {"enabled": True}
    assert loaded.data["fp16"] == {"enabled": False} and loaded.data["train_batch_size"] == "auto"
    codes = _codes(simpo)
    assert "ZT006" in codes and not {"ZT102", "ZT502", "ZT801"} & set(codes)  # was ZT102 + 16 x ZT502
    grit = load_path(CONFIGS / "ContextualAI__gritlm__scripts__configs__config_8gpusds_m8x7.yml").data
    assert grit["zero_optimization"]["offload_param"] == {"device": "cpu", "nvme_path": None}
    assert grit["gradient_accumulation_steps"] == 1 and grit["gradient_clipping"] == 1.0
    pointer = "PKU-YuanGroup__Open-Sora-Plan__scripts__accelerate_configs__deepspeed_zero2_config.yaml"
    assert _codes(pointer) == ["ZT006"]  # its JSON is not found from here: nothing else is claimed


def test_accelerate_config_written_as_json_is_read_as_one(tmp_path) -> None:
    """`accelerate launch --config_file` takes .json too (config_args.py load_config_from_file): was
    ZT102 + ZT502 on every launcher key, read as a DeepSpeed config."""
    acc = {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 3}, "num_processes": 8}
    (tmp_path / "acc.json").write_text(json.dumps(acc))
    loaded = load_path(tmp_path / "acc.json")
    assert loaded.accelerate == acc and loaded.data["zero_optimization"]["stage"] == 3
    codes = [d.code for d in lint(loaded)]
    assert "ZT006" in codes and not {"ZT102", "ZT502"} & set(codes)


def test_accelerate_defaults_follow_the_plugin() -> None:
    """DeepSpeedPlugin defaults: stage 2, no offload, gradient accumulation "auto", no clipping key."""
    built = accelerate.built_config({"distributed_type": "DEEPSPEED", "mixed_precision": "fp16"})
    assert built["zero_optimization"] == {"stage": 2, "stage3_gather_16bit_weights_on_model_save": False}
    assert built["gradient_accumulation_steps"] == "auto" and "gradient_clipping" not in built
    assert built["fp16"] == {"enabled": True, "auto_cast": True} and built["bf16"] == {"enabled": False}


def test_accelerate_yaml_naming_a_json_is_followed_from_the_launch_folder(cli, tmp_path, monkeypatch) -> None:
    (tmp_path / "conf").mkdir()
    ds = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3, "cpu_offload": True}}
    (tmp_path / "conf" / "z3.json").write_text(json.dumps(ds))
    acc = {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "conf/z3.json"}}
    (tmp_path / "acc.yaml").write_text(yaml.safe_dump(acc))
    monkeypatch.chdir(tmp_path)
    res = cli("validate", "acc.yaml", "--format", "json")
    [report] = json.loads(res.stdout)["files"]
    codes = [d["code"] for d in report["diagnostics"]]
    assert report["path"] == "conf/z3.json" and "ZT006" in codes and "ZT504" in codes
    assert "ZT801" not in codes  # accelerate fills "auto"
    before = (tmp_path / "acc.yaml").read_text()
    cli("validate", "acc.yaml", "--fix")
    assert (tmp_path / "acc.yaml").read_text() == before  # --fix never rewrites a file it was not given
    res = cli("predict", "--config", "acc.yaml", "--model", "llama-7b", "--json")
    # the deprecated cpu_offload gets no DeepSpeedCPUAdam swap from accelerate: the client optimizer is refused
    rejects = json.loads(res.stdout)["deepspeed_rejects"]
    assert [r.split()[0] for r in rejects] == ["ZT305"] and res.code in (0, 1)
    monkeypatch.chdir(tmp_path / "conf")
    res = cli("predict", "--config", "../acc.yaml", "--model", "llama-7b")
    assert res.code == 2 and "not found from here" in res.stderr and "Traceback" not in res.stderr


def test_accelerate_yaml_naming_itself_is_a_usage_error(cli, tmp_path, monkeypatch) -> None:
    """Was: RecursionError (internal error) from following deepspeed_config_file without end."""
    acc = {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "acc.yaml"}}
    (tmp_path / "acc.yaml").write_text(yaml.safe_dump(acc))
    monkeypatch.chdir(tmp_path)
    for args in (("validate", "acc.yaml"), ("predict", "--config", "acc.yaml", "--model", "llama-7b")):
        res = cli(*args)
        assert res.code == 2 and "is itself an accelerate config" in res.stderr, res.stderr
        assert "internal error" not in res.stderr and "Traceback" not in res.stderr


def test_predict_reads_an_accelerate_yaml(cli) -> None:
    """Was: stage 0 fp32 and a ZT102 rejection (the launcher keys read as a DeepSpeed config)."""
    res = cli(
        "predict",
        "--config",
        str(CONFIGS / "princeton-nlp__SimPO__accelerate_configs__deepspeed_zero3.yaml"),
        "--model",
        "llama-7b",
        "--json",
    )
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["deepspeed_rejects"] == []
    assert (
        "ZeRO stage 3"
        in cli(
            "predict",
            "--config",
            str(CONFIGS / "princeton-nlp__SimPO__accelerate_configs__deepspeed_zero3.yaml"),
            "--model",
            "llama-7b",
        ).stdout
    )
    assert 'precision "auto"' not in res.stderr  # mixed_precision bf16 is explicit


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.iterdir()))
def test_predict_never_crashes(cli, name: str) -> None:
    res = cli("predict", "--config", str(CONFIGS / name), "--model", "llama-7b", "--json")
    assert res.code in (0, 1, 2) and "Traceback" not in res.stderr
    # exit 2 only for the launcher files (accelerate, trainer's arguments) whose JSON is not found from here, and
    # for multi-machine accelerate configs on the one-node default profile (the error names their size)
    if res.code == 2:
        assert "accelerate config" in res.stderr or "trainer's arguments" in res.stderr
        assert len(res.stderr.strip().splitlines()) <= 2


def test_sat_optimizer_type_in_a_json_config_is_built_by_sat() -> None:
    """THUDM/SwissArmyTransformer tests/deepspeed_test.json names `sat.ops.FusedEmaAdam`: SAT reads a JSON
    --deepspeed_config too (sat/arguments.py json.load) and builds a `sat.` type itself, deleting the section
    before deepspeed.initialize. Was: ZT610 error on a JSON (only a SAT YAML section got the note), where
    DeepSpeed 0.19.8's parser accepts the file."""
    config = {"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "sat.ops.FusedEmaAdam"}}
    found = [d for d in lint(load_text(json.dumps(config), "ds.json")) if d.code == "ZT610"]
    assert [d.severity.value for d in found] == ["info"] and "SwissArmyTransformer" in found[0].message
    # any other dotted name: DeepSpeed cannot build it
    config["optimizer"]["type"] = "apex.optimizers.FusedAdam"
    found = [d for d in lint(load_text(json.dumps(config), "ds.json")) if d.code == "ZT610"]
    assert [d.severity.value for d in found] == ["error"]


def test_neox_config_is_read_as_what_neox_hands_deepspeed() -> None:
    """A GPT-NeoX config (EleutherAI/pythia, Stability-AI/StableLM) holds NeoX's own arguments next to
    DeepSpeed's keys; NeoX hands DeepSpeed only NeoXArgsDeepspeedConfig's fields and deepspeed_extra_args.
    Was: 40-81 ZT502 warnings per file, one for each NeoX argument (`num-layers`, `vocab-file`, ...)."""
    name = "EleutherAI__pythia__models__6.9B__pythia-6.9b-deduped.yml"
    loaded = load_path(CONFIGS / name)
    assert "num-layers" in loaded.neox_args and "num-layers" not in loaded.data
    assert loaded.data["zero_optimization"]["stage"] == 1
    assert loaded.data["train_micro_batch_size_per_gpu"] == 8
    assert "ZT006" in _codes(name) and "ZT502" not in _codes(name)
    assert "ZT503" in _codes(name, severity="error")  # fp16.fp16 reaches DeepSpeed, whose parser refuses it
    neox = {
        "num_layers": 2,
        "hidden-size": 64,
        "vocab-file": "v.json",
        "train_micro_batch_size_per_gpu": 4,
        "deepspeed_extra_args": {"comms_logger": {"enabled": True}},
    }
    loaded = load_bytes(json.dumps(neox).encode(), "neox.json")
    assert loaded.data == {"train_micro_batch_size_per_gpu": 4, "comms_logger": {"enabled": True}}
    assert set(loaded.neox_args) == {"num_layers", "hidden-size", "vocab-file", "deepspeed_extra_args"}
    # one model-looking key in a DeepSpeed config is not enough to make it NeoX's
    plain = load_bytes(json.dumps({"train_batch_size": 8, "hidden_size": 64}).encode(), "ds.json")
    assert plain.neox_args == () and "ZT502" in [d.code for d in lint(plain)]


def test_hydra_yaml_is_read_as_omegaconf_reads_it() -> None:
    """microsoft/unilm PFPO keeps its DeepSpeed config as a Hydra config group (`${learning_rate}`): OmegaConf
    loads it, and `1e-4`, `1e8` are numbers there. Was: PyYAML's strings, so ZT615 (lr "1e-4") and ZT601
    (stage3_max_live_parameters "1e8") errors on values the job reads as numbers."""
    name = "microsoft__unilm__PFPO__conf__deepspeed__train_hybrid_engine_zero3_optim_offload.yaml"
    loaded = load_path(CONFIGS / name)
    assert loaded.data["optimizer"]["params"]["lr"] == 1e-4
    assert loaded.data["zero_optimization"]["stage3_max_live_parameters"] == 1e8
    errors = _codes(name, severity="error")
    assert not {"ZT601", "ZT615"} & set(errors)
    assert "ZT102" in errors  # the batch sizes are null in the file: the program fills them
    assert load_bytes(b"x: 2e8\nlr: ${lr}\n", "a.yaml").data["x"] == 2e8
    assert load_bytes(b"x: 2e8\nlr: 1\n", "a.yaml").data["x"] == "2e8"  # no interpolation: PyYAML's reading


def test_trainer_arguments_file_is_read_as_the_json_it_names(cli, tmp_path, monkeypatch) -> None:
    """HF TrainingArguments / axolotl YAML naming the DeepSpeed JSON in `deepspeed` (OpenLMLab/LOMO
    args_lomo.yaml, pjlab-sys4nlp/llama-moe conf/cpt/lora.yaml, om-ai-lab/VLM-R1's training args): HF Trainer
    reads that JSON from the launch folder and fills its "auto" values. Was: the arguments read as a DeepSpeed
    config, ZT102 (no batch size) and one ZT502 per trainer argument (19-48 per file)."""
    # the JSON LOMO names is not found from here; RLHFlow's axolotl YAML leaves `deepspeed:` empty
    assert _codes("OpenLMLab__LOMO__lomo__config__args_lomo.yaml") == ["ZT006"]
    assert _codes("RLHFlow__RLHF-Reward-Modeling__pair-pm__gemma-2b-it.yaml") == ["ZT006"]
    (tmp_path / "conf").mkdir()
    ds = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3, "cpu_offload": True}}
    (tmp_path / "conf" / "z3.json").write_text(json.dumps(ds))
    args = "per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\nbf16: true\ndeepspeed: conf/z3.json\n"
    (tmp_path / "args.yaml").write_text(args)
    monkeypatch.chdir(tmp_path)
    [report] = json.loads(cli("validate", "args.yaml", "--format", "json").stdout)["files"]
    codes = [d["code"] for d in report["diagnostics"]]
    assert report["path"] == "conf/z3.json" and {"ZT006", "ZT504"} <= set(codes)
    assert not {"ZT102", "ZT502", "ZT801"} & set(codes)  # HF fills "auto"
    doc = json.loads(cli("predict", "--config", "args.yaml", "--model", "llama-7b", "--json").stdout)
    assert (doc["workload"]["micro_batch"], doc["workload"]["grad_accum"]) == (4, 2)
    assert doc["workload"]["precision"] == "bf16"
    (tmp_path / "args.yaml").write_text(args.replace("conf/z3.json", "elsewhere/z3.json"))
    res = cli("predict", "--config", "args.yaml", "--model", "llama-7b")
    assert res.code == 2 and "not found from here" in res.stderr and "Traceback" not in res.stderr
    # a DeepSpeed config is never one: its `deepspeed` key, if any, is no path (NeoX's is a boolean)
    assert load_bytes(b'{"train_batch_size": 8, "deepspeed": true}', "ds.json").trainer_args is None


def test_trainer_yaml_reusing_deepspeed_section_names_is_read_as_its_deepspeed_section() -> None:
    """A trainer config that keeps the DeepSpeed config under `deepspeed:` may name its own settings like
    DeepSpeed sections (snowflakedb/ArcticTraining: `optimizer` without a type, `checkpoint` a list of savers,
    `scheduler.warmup_ratio`, `gradient_accumulation_steps`). DeepSpeed reads top-level keys by name and
    never looks at the others (runtime/config.py _initialize_params), so a file whose top level is mostly
    keys DeepSpeed does not know is a launcher's, and its `deepspeed` mapping is what DeepSpeed gets.
    Was: read whole: ZT603 (checkpoint a list), ZT617, 13 x ZT502, and predict at ZeRO stage 0."""
    name = "snowflakedb__ArcticTraining__projects__swiftkv__configs__llama-3.1-swiftkv-8b-instruct.yaml"
    loaded = load_path(CONFIGS / name)
    assert loaded.section == "/deepspeed" and loaded.data == {"zero_optimization": {"stage": 2}}
    codes = _codes(name)
    assert "ZT006" in codes and not {"ZT502", "ZT603", "ZT617"} & set(codes)
    # a DeepSpeed config with as many DeepSpeed keys as others keeps its top level
    mixed = {"train_batch_size": 8, "optimizer": {"type": "Adam"}, "deepspeed": {"train_batch_size": 4}}
    assert load_bytes(json.dumps(mixed).encode(), "ds.json").section == ""


def test_deepspeed_dict_beside_training_arguments_is_filled_by_hf(cli, tmp_path) -> None:
    """HF TrainingArguments also take the DeepSpeed config as a dict (transformers training_args.py
    `deepspeed`: "the location of DeepSpeed json config file ... or an already loaded json file as a dict"),
    and HF Trainer fills its "auto" values from those arguments. A launcher file keeping that dict beside the
    arguments (IlyaGusev/rulm self_instruct/configs/*_deepspeed.json: `TrainingArguments(deepspeed=
    config["deepspeed"], **config["trainer"])`) is such a job. Was: ZT801 errors on the "auto" values, and
    predict at micro-batch 1 x 1 instead of the arguments' 4 x 8."""
    ds = {
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto"},
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
    }
    args = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8, "bf16": True, "learning_rate": 1e-5}
    # the arguments in a mapping beside `deepspeed`, or at the top level (an HfArgumentParser YAML)
    beside = tmp_path / "beside.json"
    beside.write_text(json.dumps({"model_name": "m", "args": args, "deepspeed": ds}))
    top = tmp_path / "top.yaml"
    top.write_text(yaml.safe_dump({**args, "output_dir": "out", "report_to": "none", "deepspeed": ds}))
    for path, where in ((beside, "/args"), (top, "")):
        loaded = load_path(path)
        assert loaded.section == "/deepspeed" and loaded.trainer_args_section == where
        assert loaded.trainer_args["per_device_train_batch_size"] == 4 and "deepspeed" not in loaded.trainer_args
        found = {d.code: d for d in lint(loaded, LintOptions(world_size=8))}
        assert "ZT801" not in found and "TrainingArguments" in found["ZT006"].message
        doc = json.loads(cli("predict", "--config", str(path), "--model", "llama-7b", "--json").stdout)
        workload = doc["workload"]
        assert (workload["micro_batch"], workload["grad_accum"], workload["precision"]) == (4, 8, "bf16")
        assert doc["deepspeed_rejects"] == []
    # a launcher's own batch-size argument (SwissArmyTransformer's `batch_size`) is no TrainingArguments
    sat = load_bytes(json.dumps({"args": {"batch_size": 4, "lr": 1}, "deepspeed": ds}).encode(), "sat.json")
    assert sat.section == "/deepspeed" and sat.trainer_args is None
    assert "ZT801" in [d.code for d in lint(sat)]


def test_accelerate_config_sizes_the_job(cli) -> None:
    """accelerate launch starts DeepSpeed with --num_gpus num_processes // num_machines and --num_nodes
    num_machines (huggingface/accelerate src/accelerate/utils/launch.py prepare_deepspeed_cmd_env), so an
    accelerate config given as --config sizes the job as its launcher does. Was: OpenWAM's `num_processes: 2`
    predicted on the profile's 1x8 ranks."""
    name = "OpenWAM-Official__OpenWAM__configs__accelerate__deepspeed_zero3.yaml"
    res = cli("predict", "--config", str(CONFIGS / name), "--model", "llama-7b", "--json")
    assert res.code == 0
    workload = json.loads(res.stdout)["workload"]
    assert (workload["world_size"], workload["nodes"]) == (2, 1), workload
    # what is said on the command line wins
    said = cli("predict", "--config", str(CONFIGS / name), "--model", "llama-7b", "--gpus", "4", "--json")
    assert json.loads(said.stdout)["workload"]["world_size"] == 4
    # 16 processes over 2 machines are 2 nodes of 8; a count that does not split evenly says nothing
    assert accelerate.launcher_size({"num_processes": 16, "num_machines": 2}) == {"gpus": 8, "nodes": 2}
    assert accelerate.launcher_size({"num_processes": 8}) == {"gpus": 8, "nodes": 1}
    assert accelerate.launcher_size({"num_processes": 6, "num_machines": 4}) == {}
    assert accelerate.launcher_size({"num_processes": "8"}) == {}


def test_validate_judges_an_accelerate_config_at_the_size_predict_predicts(cli) -> None:
    """One job, one number: validate's memory rules resolve an accelerate config at the ranks it launches, as
    predict does (Context.launcher_size; was: validate judged OpenWAM's 2-process ZeRO-3 job on the profile's
    8 ranks, 31.9 GiB per GPU, while predict said 104.8 GiB for the same file and options)."""
    name = str(CONFIGS / "OpenWAM-Official__OpenWAM__configs__accelerate__deepspeed_zero3.yaml")
    job = ("--model", "llama-13b", "--profile", "dgx-h100", "--gpu-memory", "30")
    predicted = json.loads(cli("predict", "--config", name, *job, "--json").stdout)
    res = cli("validate", name, *job, "--json")
    assert res.code == 1
    found = {d["code"]: d["message"] for d in json.loads(res.stdout)["files"][0]["diagnostics"]}
    total = predicted["memory"]["per_gpu_bytes"] / 2**30
    assert f"predicted peak {total:.2f} GiB" in found["ZT901"], (total, found["ZT901"])
    assert "2 GPUs x 1 node" in found["ZT006"]
    # --world-size said on the command line wins, and the batch rules read the launched world too
    said = json.loads(cli("validate", name, *job, "--world-size", "8", "--json").stdout)
    assert "2 GPUs" not in {d["code"]: d["message"] for d in said["files"][0]["diagnostics"]}["ZT006"]


def test_a_multi_machine_accelerate_config_on_a_one_node_profile_says_why_memory_is_not_judged(cli) -> None:
    """Mantis' 2 x 4-process accelerate config on the one-node default profile: predict exits 2 naming the size;
    validate, a linter over many files, says in ZT006 why it judged no memory for this file, exit 0."""
    name = str(CONFIGS / "TIGER-AI-Lab__Mantis__mantis__train__accelerate_configs__accelerate_config_zero3++.yaml")
    res = cli("validate", name, "--model", "llama-13b", "--profile", "dgx-h100", "--json")
    assert res.code == 0, res.stdout
    codes = {d["code"]: d["message"] for d in json.loads(res.stdout)["files"][0]["diagnostics"]}
    assert "ZT000" not in codes and "cannot hold" in codes["ZT006"] and "inter_node" in codes["ZT006"]


def test_round_ten_findings_checked_by_hand() -> None:
    # DeepSpeedZeroOffloadOptimizerConfig has no buffer_size/max_in_cpu (offload_param's keys; extra forbidden)
    nvme = _codes("che626__security-llm-platform__configs__ds_zero3_nvme.json", severity="error")
    assert nvme.count("ZT503") == 2
    # DeepSpeedFP16Config.min_loss_scale is an int (1e-10 refused); HF Trainer does not fill steps_per_print
    name = "Bolin97__GongBU__backend__backend__tuner__deepspeed_config__deepspeed_1.json"
    assert "ZT601" in _codes(name, severity="error")
    (auto,) = [d for d in lint(load_path(CONFIGS / name), LintOptions()) if d.code == "ZT801"]
    assert 'HF Trainer does not fill the "auto" at /steps_per_print' in auto.message
    assert _codes(name, severity="error", hf=True).count("ZT803") == 1


def test_round_eleven_findings_checked_by_hand() -> None:
    # aio reads intra_op_parallelism, not thread_count (runtime/swap_tensor/aio_config.py:28-29, 0.19.8)
    ddpo = "OpenRLHF__OpenRLHF__openrlhf__configs__ddpo_ds_config.json"
    assert "ZT504" in _codes(ddpo, severity="warning")
    assert _codes("yiqiao-yin__deepspeed-course__09_vss__ds_config_2xB200.json", severity="warning") == ["ZT504"]
    # offload_param reaches only the stage-3 optimizers (runtime/engine.py:2731, 2773): ignored at zero_stage 2
    wan = "modelscope__DiffSynth-Studio__examples__wanvideo__model_training__full__accelerate_config_14B.yaml"
    assert "ZT301" in _codes(wan, severity="warning")
    # memory_efficient_linear is read by zero.Init only (runtime/zero/partition_parameters.py:1080)
    oss = _codes("yiqiao-yin__deepspeed-course__07_huggingface_openai_gpt_oss_finetune_sft__ds_config.json")
    assert oss.count("ZT202") == 4 and oss.count("ZT503") == 1  # and once at the top level, where it is lost
    # `_comment` notes are notes, not a misspelt `comet` section (fixed in this round)
    moe = [d for d in lint(load_path(CONFIGS / "yiqiao-yin__deepspeed-course__03_llms__11_moe__ds_config_ep.json"),
                           LintOptions()) if d.code == "ZT502"]  # fmt: skip
    assert len(moe) == 3 and all(d.severity.value == "info" and not d.help for d in moe)


def test_validate_judges_a_trainer_arguments_file_as_predict_reads_it(cli, tmp_path, monkeypatch) -> None:
    """A trainer's arguments file names the DeepSpeed JSON and carries the batch HF fills into it: validate's
    memory rules read it as predict does (zerotune.job.read_inputs). Was: predict 35.7 GiB per GPU at the
    arguments' micro-batch 8, validate 29.3 GiB at micro-batch 1 for the same file and options."""
    ds = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": "auto",
          "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}  # fmt: skip
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    args = tmp_path / "args.yaml"
    args.write_text("per_device_train_batch_size: 8\ngradient_accumulation_steps: 4\nbf16: true\ndeepspeed: ds.json\n")
    job = ("--model", "llama-7b", "--profile", "dgx-h100", "--gpu-memory", "30")
    monkeypatch.chdir(tmp_path)  # HF reads the named JSON from the launch folder
    predicted = json.loads(cli("predict", "--config", "args.yaml", *job, "--json").stdout)
    res = cli("validate", "args.yaml", *job, "--json")
    total = predicted["memory"]["per_gpu_bytes"] / 2**30
    found = {d["code"]: d["message"] for d in json.loads(res.stdout)["files"][0]["diagnostics"]}
    assert f"predicted peak {total:.2f} GiB" in found["ZT901"] and "micro batch 8" in found["ZT901"], found["ZT901"]


def test_one_launched_gpu_is_singular(cli, tmp_path) -> None:
    """ZT006 names the launched size in words: one process is "1 GPU", not "1 GPUs" (round 11's report)."""
    yaml = tmp_path / "acc.yaml"
    yaml.write_text("distributed_type: DEEPSPEED\nnum_processes: 1\ndeepspeed_config:\n  zero_stage: 2\n")
    res = cli("validate", str(yaml), "--model", "llama-7b", "--profile", "dgx-h100", "--json")
    found = {d["code"]: d["message"] for d in json.loads(res.stdout)["files"][0]["diagnostics"]}
    assert "1 GPU x 1 node" in found["ZT006"], found["ZT006"]
