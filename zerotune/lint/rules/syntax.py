"""ZT0xx: what json and hjson make of the file text (zerotune/dsconfig/load.py finds these)."""

from __future__ import annotations

from collections.abc import Iterator

from zerotune.dsconfig.load import LoadedConfig
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Severity
from zerotune.lint.rule import Rule


class _IssueRule(Rule):
    kind: str

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for issue in ctx.loaded.issues:
            if issue.kind == self.kind:
                yield self.emit(ctx, issue.pointer, offset=issue.offset, detail=issue.message.rstrip(","))


class SyntaxError_(_IssueRule):
    """File cannot be parsed as JSON or hjson.

    ## What it does
    Reports text that neither `json` nor `hjson` can load, with the line and column of the first problem.

    ## Why is this bad?
    DeepSpeed loads config files with `hjson.load`; if that fails, `deepspeed.initialize` raises before
    training starts, and every other check here is blind.

    ## Example
    ```json
    {"train_batch_size": 8 "fp16": {"enabled": true}}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "fp16": {"enabled": true}}
    ```

    ## References
    - deepspeed/runtime/config.py `DeepSpeedConfig.__init__` (hjson.load)
    """

    code = "ZT001"
    name = "syntax-error"
    severity = Severity.ERROR
    message = "cannot parse the config: {detail}"
    kind = "syntax"


class HjsonOnlySyntax(_IssueRule):
    """File is valid hjson but not valid JSON.

    ## What it does
    Flags comments, trailing commas, unquoted keys or values that DeepSpeed's hjson loader accepts but
    `json.load` rejects.

    ## Why is this bad?
    Hugging Face Trainer and accelerate read `--deepspeed ds.json` with `json.load`, so the same file that works
    with the `deepspeed` launcher fails under HF with a JSONDecodeError.

    ## Example
    ```json
    {"train_batch_size": 8, // global batch
    }
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8}
    ```

    ## References
    - transformers integrations/deepspeed.py `HfDeepSpeedConfig` (json.load)
    """

    code = "ZT002"
    name = "hjson-only-syntax"
    severity = Severity.WARNING
    message = (
        "not strict JSON ({detail}): DeepSpeed's hjson loader accepts it, HF/accelerate will not load this"
    )
    kind = "hjson_only"


class UnquotedPlaceholder(_IssueRule):
    """An unquoted placeholder value such as `CONFIG_BATCH_SIZE`.

    ## What it does
    Finds quoteless values (template placeholders meant to be replaced by a script, or Python's `True`).

    ## Why is this bad?
    hjson reads a quoteless value up to the end of the line: `"train_batch_size": CONFIG_BATCH_SIZE,` becomes
    the string `'CONFIG_BATCH_SIZE,'`, and DeepSpeed fails later with a confusing type error.

    ## Example
    ```json
    {"train_batch_size": CONFIG_BATCH_SIZE, "fp16": {"enabled": True}}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 256, "fp16": {"enabled": true}}
    ```

    ## References
    - hjson syntax: https://hjson.github.io/syntax.html (quoteless strings)
    """

    code = "ZT003"
    name = "unquoted-placeholder"
    severity = Severity.ERROR
    message = "unquoted value `{detail}`: a template placeholder? hjson reads it as a string"
    kind = "placeholder"


class DuplicateKey(_IssueRule):
    """The same key appears twice in one object.

    ## What it does
    Reports every repeated key in an object.

    ## Why is this bad?
    DeepSpeed loads files with `object_pairs_hook=dict_raise_error_on_duplicate_keys` and refuses them;
    `json.load` (HF) silently keeps the last value, so the two tools disagree. Under `--hf` it is a warning:
    HF Trainer/accelerate read the file with `json.load` and hand DeepSpeed the dict, so the job starts
    with the last value, and the file breaks only when launched without them.

    ## Example
    ```json
    {"train_batch_size": 8, "train_batch_size": 16}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 16}
    ```

    ## References
    - deepspeed/runtime/config_utils.py `dict_raise_error_on_duplicate_keys`
    - huggingface/accelerate src/accelerate/utils/deepspeed.py `HfDeepSpeedConfig.__init__` (json.load)
    """

    code = "ZT004"
    name = "duplicate-key"
    severity = Severity.ERROR
    message = "duplicate key `{detail}`: {outcome}"
    kind = "duplicate"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        hf = ctx.options.hf
        outcome = (
            "HF/accelerate keep the last value (json.load); DeepSpeed alone refuses the file"
            if hf
            else "DeepSpeed refuses files with repeated keys"
        )
        for issue in ctx.loaded.issues:
            if issue.kind == self.kind:
                yield self.emit(
                    ctx,
                    issue.pointer,
                    offset=issue.offset,
                    severity=Severity.WARNING if hf else None,
                    detail=issue.message.rstrip(","),
                    outcome=outcome,
                )


class RootNotObject(Rule):
    """The config is not a JSON object.

    ## What it does
    Checks that the top level of the file is an object (`{...}`).

    ## Why is this bad?
    DeepSpeed indexes the config as a dict; a list, a number or a bare hjson string fails at start-up.

    ## Example
    ```json
    [{"train_batch_size": 8}]
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8}
    ```

    ## References
    - deepspeed/runtime/config.py `DeepSpeedConfig`
    """

    code = "ZT005"
    name = "root-not-object"
    severity = Severity.ERROR
    message = "the config must be a JSON object, got {kind}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        data = ctx.loaded.data
        launcher = ctx.loaded.accelerate is not None or ctx.loaded.trainer_args is not None
        if ctx.loaded.parsed and not launcher and not isinstance(data, dict):
            kind = {list: "a list", str: "a string", bool: "a boolean"}.get(type(data), type(data).__name__)
            if data is None:
                kind = "null"
            elif isinstance(data, (int, float)) and not isinstance(data, bool):
                kind = "a number"
            yield self.emit(ctx, "", kind=kind)


class AccelerateConfig(Rule):
    """The file is an HF accelerate config, not a DeepSpeed config.

    ## What it does
    Recognizes an `accelerate config` file (it has `distributed_type`) and says what is checked: the
    DeepSpeed config accelerate builds from its `deepspeed_config:` options (zero_stage, offload devices,
    gradient_accumulation_steps, gradient_clipping, mixed_precision), with the "auto" values accelerate
    fills. When the file names a `deepspeed_config_file`, that JSON is the DeepSpeed config: validate it
    with `--hf`. When `distributed_type` is not DEEPSPEED, DeepSpeed is not used. Likewise a launcher YAML
    that keeps the DeepSpeed config in a `deepspeed:` mapping next to its own keys (SwissArmyTransformer's
    `args:`/`data:`/`deepspeed:` files, read with OmegaConf, where `1e-8` is a number) is checked as that
    mapping, a GPT-NeoX config (model-shape arguments such as `num-layers` next to DeepSpeed's keys) as
    the DeepSpeed keys NeoX passes on, and a trainer's arguments file (HF TrainingArguments, TRL,
    LLaMA-Factory or axolotl YAML/JSON with `deepspeed: ds.json`) as the JSON it names, read from the launch
    folder with HF's "auto" filling (`deepspeed:` empty: DeepSpeed is not used). An accelerate config's
    `num_processes` over `num_machines` is the job's size, as `accelerate launch` starts it and as `predict`
    sizes it, unless `--world-size` or `--gpus` is given: the batch and memory rules judge that job, and a
    size the profile cannot hold (several machines on a one-node profile) is said here instead of a memory
    finding. A trainer's arguments file gives the memory rules its micro-batch, accumulation and precision,
    read as `predict` reads them.

    ## Why is this bad?
    It is not: it is information. Read as a DeepSpeed config, every launcher key (num_processes,
    machine_rank, ...) would look unknown and the batch size missing, which is not what DeepSpeed gets.

    ## Example
    ```yaml
    distributed_type: DEEPSPEED
    deepspeed_config:
      deepspeed_config_file: ds_z3.json
    ```

    ## Use instead
    `zerotune validate --hf ds_z3.json`

    ## References
    - huggingface/accelerate src/accelerate/utils/dataclasses.py `DeepSpeedPlugin.__post_init__`
    - THUDM/CogVideo sat/arguments.py `process_config_to_args` (args.deepspeed_config = config["deepspeed"])
    - EleutherAI/gpt-neox megatron/neox_arguments/arguments.py `deepspeed_config` (NeoXArgsDeepspeedConfig)
    """

    code = "ZT006"
    name = "accelerate-config"
    severity = Severity.INFO
    message = "{detail}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        from zerotune.dsconfig import accelerate

        raw = ctx.loaded.accelerate
        if ctx.loaded.trainer_args is not None:
            yield self.emit(ctx, "", detail=_trainer_args_detail(ctx.loaded))
            return
        if raw is None:
            if ctx.loaded.neox_args:
                detail = (
                    f"a GPT-NeoX config: DeepSpeed gets the keys NeoX passes on (NeoXArgsDeepspeedConfig), "
                    f"checked as such; its {len(ctx.loaded.neox_args)} NeoX arguments are NeoX's own"
                )
                yield self.emit(ctx, "", detail=detail)
            if ctx.loaded.section:
                detail = (
                    f"a launcher config (SwissArmyTransformer or trainer YAML): its `{ctx.loaded.section[1:]}` "
                    "section is the DeepSpeed config, checked as such; keys the launcher adds are not seen"
                )
                yield self.emit(ctx, "", detail=detail)
            return
        named = accelerate.config_file(raw)
        if not accelerate.uses_deepspeed(raw):
            kind = raw.get("distributed_type")
            detail = f"an HF accelerate config with distributed_type {kind}: DeepSpeed is not used, nothing to check"
        elif ctx.loaded.accelerate_path is not None:
            detail = (
                f"read through the accelerate config {ctx.loaded.accelerate_path} (its deepspeed_config_file)"
            )
        elif named is not None:
            detail = f"an HF accelerate config whose DeepSpeed config {named} is not found from here: run from the launch folder"
        else:
            detail = (
                "an HF accelerate config: checked as the DeepSpeed config accelerate builds from its options"
            )
        if ctx.launcher_size and accelerate.uses_deepspeed(raw):
            size = ctx.launcher_size
            detail += f"; judged at the size it launches: {size['gpus']} GPU{'s' if size['gpus'] != 1 else ''} x {size['nodes']} node(s) (num_processes, num_machines)"
            if ctx.options.model and (ctx.options.profile or ctx.options.gpu_memory_gib):
                from zerotune.lint.rules.resources import judged

                if judged(ctx) is None and "unsized" in ctx.memo:
                    detail += f", which the profile cannot hold, so no memory finding ({ctx.memo['unsized']})"
        yield self.emit(ctx, "", detail=detail)


def _trainer_args_detail(loaded: LoadedConfig) -> str:
    from zerotune.dsconfig import trainer_args

    if loaded.trainer_args_section is not None:
        where = f"`{loaded.trainer_args_section[1:]}`" if loaded.trainer_args_section else "the top level"
        return (
            f"a launcher config whose `{loaded.section[1:]}` section HF Trainer gets as a dict, with the "
            f"TrainingArguments in {where}: checked as HF fills it"
        )
    if loaded.trainer_args_path is not None:
        return f"read through the trainer's arguments {loaded.trainer_args_path} (its `deepspeed`), as HF Trainer fills it"
    named = trainer_args.config_file(loaded.trainer_args)
    if named is None:
        return "a trainer's arguments file with an empty `deepspeed`: DeepSpeed is not used, nothing to check"
    return f"a trainer's arguments file whose DeepSpeed config {named} is not found from here: run from the launch folder"


class InternalError(Rule):
    """zerotune itself failed while checking this file.

    ## What it does
    Reports a check that raised an exception on this file, instead of stopping the whole run: the other
    files of the invocation (a CI glob over a repository) keep their findings, and this file keeps the
    findings of every check that did finish.

    ## Why is this bad?
    The file was not fully checked, so it cannot be called clean; it is an error so CI does not pass it.
    Please report it with the file: it is a zerotune bug.

    ## Example
    A value no check expected, in a file that otherwise looks fine.

    ## Use instead
    Run `zerotune validate --verbose FILE` for the traceback and report it.

    ## References
    - ruff reports a per-file panic as a diagnostic and goes on with the other files
    """

    code = "ZT000"
    name = "internal-error"
    severity = Severity.ERROR
    message = "zerotune failed while checking this file ({detail}); the file is not fully checked"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        return iter(())  # emitted by the runner (zerotune/lint/runner.py), never by itself


RULES = (
    InternalError,
    SyntaxError_,
    HjsonOnlySyntax,
    UnquotedPlaceholder,
    DuplicateKey,
    RootNotObject,
    AccelerateConfig,
)
