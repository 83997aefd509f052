"""ZT5xx: unknown, misplaced, deprecated, removed and doubly-spelled keys (docs/deepspeed-facts.md §1.3, §1.4, §3.0)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator

from zerotune.dsconfig import schema
from zerotune.dsconfig.load import pointer_of
from zerotune.lint.context import Context
from zerotune.lint.diagnostic import Diagnostic, Fix, Severity
from zerotune.lint.rule import Rule

# Keys too generic to say "this belongs in section X" about.
_GENERIC = {
    "enabled",
    "type",
    "params",
    "device",
    "nvme_path",
    "buffer_count",
    "pin_memory",
    "dtype",
    "project",
    "output_path",
    "job_name",
    "debug",
    "verbose",
    "profile",
    "offload",
    "mode",
    "names",
    "classes",
}


def _elsewhere(key: str, here: str) -> list[str]:
    if key in _GENERIC:
        return []
    homes = [p for p in schema.known_keys_anywhere().get(key, []) if p != here]
    return homes if 0 < len(homes) <= 2 else []


def _suggest(key: str, value: object, sec: schema.Section) -> str:
    match = difflib.get_close_matches(key.lower(), sec.keys, n=1, cutoff=0.75)
    if not match:
        return ""
    f = sec.field(match[0])
    if f is not None and f.kind == "object" and isinstance(value, str):
        # a note (`_comment`), not a misspelt section: DeepSpeed reads a section as a mapping
        # (deepspeed/monitor/config.py:13 get_monitor_config, `param_dict.get(key, {})` into
        # DeepSpeedMonitorConfig(**...)), or a legacy bool for zero_optimization (runtime/zero/config.py:74),
        # never a string
        return ""
    if f is not None and f.deprecated:  # never steer towards a deprecated key: name what --fix would write
        return f"did you mean `{_replacement(sec.pointer, match[0], f)}`?"
    return f"did you mean `{match[0]}`?"


def _replacement(pointer: str, key: str, f: schema.Field) -> str:
    """The current key for a deprecated one, spelled as `--fix` writes it."""
    if (pointer, key) in _RENAMES:
        return _RENAMES[(pointer, key)]
    if pointer == "/zero_optimization" and key in _BOOL_TO_SECTION:
        return _BOOL_TO_SECTION[key]
    return f.deprecated or key


# Unknown keys reported one by one per section (with a did-you-mean); the rest of a section's unknown keys
# make one finding. A generated config with 50,000 stray keys then costs milliseconds, not minutes of
# difflib, and its report stays readable.
LISTED_PER_SECTION = 50


def _capped(
    rule: Rule, ctx: Context, found: list[tuple[str, str, schema.Section]], severity_of
) -> Iterator[Diagnostic]:
    by_section: dict[str, list[tuple[str, str, schema.Section]]] = {}
    for item in found:
        by_section.setdefault(item[0], []).append(item)
    for pointer, items in by_section.items():
        where = pointer or "the top level"
        for _, key, sec in items[:LISTED_PER_SECTION]:
            suggestion = _suggest(key, ctx.at(pointer + pointer_of(key)), sec)
            yield rule.emit(
                ctx,
                pointer + pointer_of(key),
                what=f"key `{key}`",
                where=where,
                help=suggestion or None,
                severity=severity_of(pointer, key, suggestion),
            )
        rest = items[LISTED_PER_SECTION:]
        if rest:
            yield rule.emit(
                ctx,
                pointer + pointer_of(rest[0][1]),
                what=f"keys `{rest[0][1]}` and {len(rest) - 1:,} more (after the {LISTED_PER_SECTION} above)",
                where=where,
                help=None,
                severity=severity_of(pointer, rest[0][1], ""),
            )


def _unknown(ctx: Context) -> list[tuple[str, str, schema.Section]]:
    """(pointer, key, section) for keys the section does not define, excluding removed ones (computed once
    per file: three rules read it)."""
    memo = ctx.memo.get("unknown_keys")
    if memo is not None:
        return memo
    memo = ctx.memo["unknown_keys"] = []
    for pointer, value, sec in ctx.sections():
        for key in value:
            if sec.field(key) is not None:
                continue
            if (pointer == "" and key in schema.REMOVED_TOP) or (
                pointer == "/zero_optimization" and key in schema.REMOVED_ZERO
            ):
                continue
            memo.append((pointer, key, sec))
    return memo


class UnknownKey(Rule):
    """Key that a strict DeepSpeed section does not define.

    ## What it does
    Checks keys inside `zero_optimization`, its offload/zenflow/leaf_module blocks, `fp16`, `bf16`, `compile`,
    the monitors, `comms_logger`, `hybrid_engine`, `tensor_parallel` and `timers.throughput` against
    DeepSpeed 0.19.8's pydantic models, suggesting the closest valid name.

    ## Why is this bad?
    These sections are pydantic models with `extra="forbid"`: one typo stops `deepspeed.initialize` with
    "Extra inputs are not permitted", often after a long job-queue wait. Keys from other DeepSpeed versions
    (e.g. `zero_hpz_partition_size` on old releases, `grad_hooks` from old docs) fail the same way.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "stage3_max_live_parameter": 1e9}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9}}
    ```

    ## References
    - deepspeed/runtime/config_utils.py `DeepSpeedConfigModel` (extra="forbid")
    - microsoft/DeepSpeed#3827, #2721
    """

    code = "ZT501"
    name = "unknown-key"
    severity = Severity.ERROR
    message = "unknown {what} in {where}: DeepSpeed rejects it (extra inputs are not permitted)"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        found = [
            (pointer, key, sec)
            for pointer, key, sec in _unknown(ctx)
            if sec.mode == "strict"
            and not _elsewhere(key, pointer)
            # DeepSpeedConfigModel drops "auto" values before pydantic sees the key (ZT802 reports them)
            and not schema.is_auto(ctx.at(pointer + pointer_of(key)))
        ]
        yield from _capped(self, ctx, found, lambda pointer, key, suggestion: None)


class IgnoredKey(Rule):
    """Key that DeepSpeed silently ignores.

    ## What it does
    Reports keys at the top level and in dict.get sections (`optimizer`, `scheduler`, `aio`, `checkpoint`,
    `activation_checkpointing`, `flops_profiler`, `data_types`, …) that DeepSpeed 0.19.8 never reads, with a
    did-you-mean suggestion.

    ## Why is this bad?
    The setting has no effect and nothing tells you: a typo such as `zero_force_ds_cpu_optimization` leaves
    the real default in place. A misspelt section name (`zero_optimisation`) loses every setting in it, so
    that one is an error.

    ## Example
    ```json
    {"train_batch_size": 8, "gradient_clip": 1.0}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8, "gradient_clipping": 1.0}
    ```

    ## References
    - docs/deepspeed-facts.md §3.0 (keys read by DeepSpeedConfig), §3.8 (tolerant sections)
    """

    code = "ZT502"
    name = "ignored-key"
    severity = Severity.WARNING
    message = "unknown {what} in {where}: DeepSpeed silently ignores it"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        found = [
            (pointer, key, sec)
            for pointer, key, sec in _unknown(ctx)
            if sec.mode == "tolerant" and not _elsewhere(key, pointer)
        ]
        yield from _capped(
            self,
            ctx,
            found,
            lambda pointer, key, suggestion: Severity.ERROR
            if _lost_section(ctx, pointer, key)
            else Severity.WARNING
            if suggestion or not key.startswith("_")
            else Severity.INFO,
        )


def _lost_section(ctx: Context, pointer: str, key: str) -> bool:
    """A top-level mapping whose name is a misspelling of a DeepSpeed section (`zero_optimisation`): every
    setting in it is lost, not one key (DeepSpeed reads the real name with dict.get and finds nothing)."""
    if pointer != "" or not isinstance(ctx.config.get(key), dict):
        return False
    top = schema.SECTIONS[""]
    match = difflib.get_close_matches(key.lower(), top.keys, n=1, cutoff=0.75)
    f = top.field(match[0]) if match else None
    return f is not None and f.kind == "object" and match[0] not in ctx.config


class MisplacedKey(Rule):
    """A known DeepSpeed key in the wrong section.

    ## What it does
    Finds keys that DeepSpeed defines, but in a different section: `offload_optimizer` at the top level,
    `aio` inside `zero_optimization`, `loss_scale` under `bf16`.

    ## Why is this bad?
    In a strict section the stray key is a start-up error; in a tolerant one it is silently ignored and the
    feature you configured is off.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2}, "offload_optimizer": {"device": "cpu"}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## References
    - microsoft/DeepSpeed#2721 (aio inside zero_optimization); FlagOpen/FlagEmbedding#1487 (loss scale under bf16)
    """

    code = "ZT503"
    name = "misplaced-key"
    severity = Severity.ERROR
    message = "`{key}` does not belong in {where}; it is a key of {home}"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for pointer, key, sec in _unknown(ctx):
            homes = _elsewhere(key, pointer)
            if homes:
                yield self.emit(
                    ctx,
                    pointer + pointer_of(key),
                    key=key,
                    where=pointer or "the top level",
                    home=" or ".join(h or "the top level" for h in homes),
                    severity=Severity.ERROR
                    if sec.mode == "strict" and not schema.is_auto(ctx.at(pointer + pointer_of(key)))
                    else Severity.WARNING,
                )


_RENAMES = {  # (section, old key) → new key, for aliases DeepSpeed still maps (safe to rename)
    (
        "/zero_optimization",
        "stage3_gather_fp16_weights_on_model_save",
    ): "stage3_gather_16bit_weights_on_model_save",
    ("", "bfloat16"): "bf16",
}
_BOOL_TO_SECTION = {  # deprecated booleans that DeepSpeed turns into an offload section
    "cpu_offload": "offload_optimizer",
    "cpu_offload_param": "offload_param",
}


class DeprecatedKey(Rule):
    """A deprecated key that still works, or whose old spelling is now ignored.

    ## What it does
    Flags `cpu_offload`, `cpu_offload_param`, `cpu_offload_use_pin_memory`,
    `stage3_gather_fp16_weights_on_model_save`, the `bfloat16` section, `seq_parallel_comm_data_type` and
    `aio.thread_count`. Where DeepSpeed maps the old key to the new one, `--fix` rewrites it.

    ## Why is this bad?
    Deprecated keys log warnings and are removed in later releases; some are already ignored
    (`seq_parallel_comm_data_type`, `aio.thread_count`, `cpu_offload_use_pin_memory`), so the value you set
    does nothing.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "cpu_offload": true}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## References
    - deepspeed/runtime/zero/config.py (json_schema_extra deprecated/new_param)
    - docs/deepspeed-facts.md §1.3, §3.0, §3.6
    """

    code = "ZT504"
    name = "deprecated-key"
    severity = Severity.WARNING
    message = "`{key}` is deprecated{detail}"
    fix_title = "rename to the current key"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for pointer, value, sec in ctx.sections():
            for key in value:
                f = sec.field(key)
                if f is None or not f.deprecated:
                    continue
                ptr = pointer + pointer_of(key)
                fix = self._fix(ctx, pointer, key, value)
                ignored = key in ("seq_parallel_comm_data_type", "thread_count", "cpu_offload_use_pin_memory")
                detail = f"; use `{_replacement(pointer, key, f)}`"
                if ignored:
                    detail += " (DeepSpeed 0.19.8 ignores the old key)"
                if key == "bfloat16" and "bf16" in ctx.config:
                    detail += " (ignored: `bf16` is also present)"
                yield self.emit(
                    ctx,
                    ptr,
                    key=key,
                    detail=detail,
                    fix=fix,
                    help=fix.title if fix else f"replace it with `{f.deprecated}`",
                )

    def _fix(self, ctx: Context, pointer: str, key: str, section: dict) -> Fix | None:
        ptr = pointer + pointer_of(key)
        new = _RENAMES.get((pointer, key))
        if new:
            f = schema.section(pointer).field(new) if schema.section(pointer) else None
            taken = f.spellings if f else (new,)
            if any(k in section for k in taken):
                return None
            edit = ctx.key_edit(ptr, new)
            return Fix(f"rename `{key}` to `{new}`", (edit,)) if edit else None
        target = _BOOL_TO_SECTION.get(key) if pointer == "/zero_optimization" else None
        if target and section.get(key) is True and target not in section:
            edits = (ctx.key_edit(ptr, target), ctx.value_edit(ptr, json.dumps({"device": "cpu"})))
            if all(edits):
                return Fix(f'replace `"{key}": true` with `"{target}": {{"device": "cpu"}}`', edits)
        return None


class RemovedKey(Rule):
    """A key DeepSpeed 0.19 removed and now rejects.

    ## What it does
    Finds the top-level blocks `amp`, `nebula`, `compression_training`, `quantize_training`,
    `sparse_gradients`, `eigenvalue`, `sparse_attention`, `elasticity`, `graph_harvesting`,
    `curriculum_learning`, `progressive_layer_drop` and the ZeRO keys `mics_shard_size`,
    `mics_hierarchical_params_gather`, `zeropp_loco_param`.

    ## Why is this bad?
    These features existed in DeepSpeed 0.16 and were removed by 0.19.8: the mere presence of the key (any
    value, even `false` or `null`) raises `DeepSpeedConfigError` before anything else is parsed.

    ## Example
    ```json
    {"train_batch_size": 8, "sparse_gradients": false}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 8}
    ```

    ## References
    - deepspeed/runtime/config.py `_reject_removed_config_keys`; https://github.com/deepspeedai/DeepSpeed/issues/8489
    """

    code = "ZT505"
    name = "removed-key"
    severity = Severity.ERROR
    message = "`{key}` is rejected by DeepSpeed 0.19 (present in 0.16): {why}"
    help_text = "delete the key, or pin deepspeed<0.17"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for key in ctx.config:
            if key in schema.REMOVED_TOP:
                yield self.emit(ctx, pointer_of(key), key=key, why=schema.REMOVED_TOP[key])
        for key in ctx.zero:
            if key in schema.REMOVED_ZERO:
                yield self.emit(
                    ctx, pointer_of("zero_optimization", key), key=key, why=schema.REMOVED_ZERO[key]
                )


class AliasConflict(Rule):
    """A ZeRO setting given under both its `stage3_*` alias and its field name.

    ## What it does
    Finds pairs such as `stage3_max_live_parameters` and `max_live_parameters` in one `zero_optimization`.

    ## Why is this bad?
    DeepSpeed accepts either spelling, but not both: pydantic reports the field name as an extra input and
    start-up fails. Even if it did not, only one of the two values could win.

    ## Example
    ```json
    {"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9, "max_live_parameters": 3e8}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 3e8}}
    ```

    ## References
    - deepspeed/runtime/zero/config.py (Field alias=, populate_by_name=True)
    """

    code = "ZT506"
    name = "alias-conflict"
    severity = Severity.ERROR
    message = "`{alias}` and `{name}` are the same setting; DeepSpeed rejects both together"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for f in schema.SECTIONS["/zero_optimization"].fields:
            if f.alias and f.alias in ctx.zero and f.name in ctx.zero:
                yield self.emit(ctx, pointer_of("zero_optimization", f.name), alias=f.alias, name=f.name)


class DeprecatedWithReplacement(Rule):
    """A deprecated ZeRO key together with the key that replaces it.

    ## What it does
    Finds `cpu_offload` with `offload_optimizer`, `cpu_offload_param` with `offload_param`, and
    `stage3_gather_fp16_weights_on_model_save` with `stage3_gather_16bit_weights_on_model_save`.

    ## Why is this bad?
    DeepSpeed's deprecation shim asserts that only one is given: start-up fails with an AssertionError.

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "cpu_offload": true, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## Use instead
    ```json
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    ```

    ## References
    - deepspeed/runtime/config_utils.py `_process_deprecated_field`
    """

    code = "ZT507"
    name = "deprecated-with-replacement"
    severity = Severity.ERROR
    message = "`{old}` and its replacement `{new}` are both set; DeepSpeed asserts only one is given"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        zero = ctx.zero
        for old, new in (
            ("cpu_offload", ("offload_optimizer",)),
            ("cpu_offload_param", ("offload_param",)),
            (
                "stage3_gather_fp16_weights_on_model_save",
                ("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save"),
            ),
        ):
            present = [n for n in new if n in zero]
            if old in zero and present and zero[old] is not None:
                yield self.emit(ctx, pointer_of("zero_optimization", old), old=old, new=present[0])


class RecentKey(Rule):
    """A key that only recent DeepSpeed releases understand.

    ## What it does
    Notes keys added after DeepSpeed 0.16 in strict sections (`compute_grad_norm`, `zenflow`,
    `stage3_allgather_sequential`, `parameter_alignment`, `leaf_module`, `bf16.check_grad_overflow`, …).

    ## Why is this bad?
    The same file fails on an older DeepSpeed with "extra inputs are not permitted" (version skew between
    machines or containers is a common cause of that error).

    ## Example
    ```json
    {"zero_optimization": {"stage": 2, "parameter_alignment": true}}
    ```

    ## Use instead
    Pin `deepspeed>=0.19` where this config is used, or drop the key when it is set to its default.

    ## References
    - docs/deepspeed-facts.md §10 (0.16 → 0.19.8 differences); OpenRLHF/OpenRLHF#63
    """

    code = "ZT508"
    name = "recent-key"
    severity = Severity.INFO
    message = "`{key}` is new since DeepSpeed 0.16; older releases reject it"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        for pointer, value, sec in ctx.sections():
            if sec.mode != "strict" and pointer != "":
                continue
            for key in value:
                f = sec.field(key)
                if f is not None and f.status == "new" and (sec.mode == "strict" or f.kind != "object"):
                    yield self.emit(ctx, pointer + pointer_of(key), key=key)


RULES = (
    UnknownKey,
    IgnoredKey,
    MisplacedKey,
    DeprecatedKey,
    RemovedKey,
    AliasConflict,
    DeprecatedWithReplacement,
    RecentKey,
)
