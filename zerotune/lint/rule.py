"""The rule base class (ruff's Violation, sqlfluff's Rule_XX01): code, name, message, fix title, explanation.

A rule is a small class. Its docstring is the explanation `zerotune rule ZT101` prints, with fixed
sections (What it does / Why is this bad? / Example / Use instead / References; tests check them).
`check(ctx)` yields diagnostics through `self.emit`; rules never print.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from zerotune.lint.diagnostic import Diagnostic, Fix, Severity

if TYPE_CHECKING:
    from zerotune.lint.context import Context

SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "References")


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity]
    message: ClassVar[str]
    """Message template, formatted with the keyword arguments given to `emit`."""
    fix_title: ClassVar[str | None] = None
    """What the safe fix does, for rules that offer one (fix availability: sometimes)."""
    help_text: ClassVar[str | None] = None
    """A hint shown under the message when the rule has no automatic fix."""
    needs: ClassVar[frozenset[str]] = frozenset()
    """Extra inputs the rule needs: "model" (--model), "hardware" (--profile/--gpu-memory), "hf" (--hf)."""
    status: ClassVar[str] = "stable"
    since: ClassVar[str] = "0.1.0"

    def check(self, ctx: Context) -> Iterator[Diagnostic]:
        raise NotImplementedError

    def emit(
        self,
        ctx: Context,
        pointer: str,
        *,
        severity: Severity | None = None,
        help: str | None = None,
        fix: Fix | None = None,
        offset: int | None = None,
        **fmt: object,
    ) -> Diagnostic:
        if offset is not None:
            line, column = ctx.loaded.position(offset)
        else:
            line, column = ctx.loaded.locate(pointer)
        return Diagnostic(
            code=self.code,
            name=self.name,
            severity=severity or self.severity,
            message=self.message.format(**fmt),
            pointer=pointer,
            line=line,
            column=column,
            help=help if help is not None else (self.fix_title or self.help_text),
            fix=fix,
        )

    @classmethod
    def explanation(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def summary(cls) -> str:
        return cls.explanation().split("\n", 1)[0]

    @classmethod
    def family(cls) -> str:
        return cls.__module__.rsplit(".", 1)[-1]
