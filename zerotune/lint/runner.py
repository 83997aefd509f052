"""Run the selected rules on a loaded config; apply safe fixes to the text."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from zerotune.dsconfig.load import LoadedConfig, load_text
from zerotune.lint import registry
from zerotune.lint.context import Context, LintOptions
from zerotune.lint.diagnostic import Diagnostic
from zerotune.lint.rule import Rule


def lint(
    loaded: LoadedConfig, options: LintOptions | None = None, rules: Iterable[type[Rule]] | None = None
) -> list[Diagnostic]:
    """All findings for one file, sorted by position. Rules only run on what they can read:
    syntax rules always, the others only when the file parsed to an object."""
    options = options or LintOptions()
    if loaded.accelerate is not None or loaded.trainer_args is not None:
        options = replace(options, hf=True)  # accelerate / HF Trainer fill the "auto" values
    ctx = Context(loaded, options)
    chosen = registry.all_rules() if rules is None else tuple(rules)
    parsed = loaded.parsed and isinstance(loaded.data, dict)
    found: list[Diagnostic] = []
    for rule_cls in chosen if parsed else [r for r in chosen if r.family() == "syntax"]:
        try:
            found.extend(rule_cls().check(ctx))
        except Exception as exc:  # one rule's bug on one file must not cost the other findings or files
            if ctx.options.verbose:
                raise
            found.append(internal_error(loaded, f"{rule_cls.code} raised {type(exc).__name__}: {exc}"))
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda d: (d.line or 0, d.column or 0, d.code, d.pointer))


def rejections(loaded: LoadedConfig, *, hf: bool, world: int) -> list[str]:
    """The errors of the rules (what DeepSpeed or HF would reject at launch), one line each: what
    predict warns about before it predicts."""
    from zerotune.lint.diagnostic import Severity

    return [
        f"{d.code} {d.message}" + (f" (line {d.line})" if d.line else "")
        for d in lint(loaded, LintOptions(hf=hf, world_size=world))
        if d.severity is Severity.ERROR
    ]


def internal_error(loaded: LoadedConfig, detail: str) -> Diagnostic:
    """ZT000 for a file a check (or the loader) crashed on."""
    from zerotune.lint.rules.syntax import InternalError

    detail = detail if len(detail) <= 160 else detail[:157] + "..."
    return InternalError().emit(Context(loaded, LintOptions()), "", detail=detail)


def unreadable(path: str, why: str) -> Diagnostic:
    """ZT001 for a file found by a glob or a folder walk that cannot be read."""
    from zerotune.dsconfig.load import LoadIssue
    from zerotune.lint.rules.syntax import SyntaxError_

    loaded = LoadedConfig(path=path, text="")
    loaded.issues.append(LoadIssue("syntax", why, "", None))
    return next(iter(SyntaxError_().check(Context(loaded, LintOptions()))))


def apply_fixes(loaded: LoadedConfig, diagnostics: Iterable[Diagnostic]) -> tuple[str, int]:
    """The text with every non-overlapping safe fix applied (later edits first) and how many were applied.
    A fix whose result no longer parses is dropped."""
    text = loaded.text
    applied = 0
    taken: list[tuple[int, int]] = []
    fixes = [d.fix for d in diagnostics if d.fix is not None]
    fixes.sort(key=lambda f: -min(e.start for e in f.edits))
    for fix in fixes:
        spans = [(e.start, e.end) for e in fix.edits]
        if any(s < te and ts < e or s == e == ts for s, e in spans for ts, te in taken):
            continue
        candidate = text
        for edit in sorted(fix.edits, key=lambda e: -e.start):
            candidate = candidate[: edit.start] + edit.content + candidate[edit.end :]
        if not load_text(candidate).parsed:
            continue
        text = candidate
        taken.extend(spans)
        applied += 1
    return text, applied
