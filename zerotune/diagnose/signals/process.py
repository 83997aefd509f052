"""Process signals: Python tracebacks and exception lines, and ranks that exited or were killed
(torch elastic's "failed (exitcode: -9)", DeepSpeed's launcher "exits with return code = -9",
"Killing subprocess", the kernel's "Killed process")."""

from __future__ import annotations

import re

from zerotune.diagnose.records import Kill
from zerotune.diagnose.signals.signal import Hit, Signal

EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception): ")
"""`RuntimeError: ...`, `torch.OutOfMemoryError: ...`: the last line of a Python traceback."""


def _traceback(hit: Hit) -> None:
    if "Traceback (most recent call last)" in hit.line.text:
        hit.scan.tracebacks += 1


def _exception(hit: Hit) -> None:
    if EXCEPTION_LINE.match(hit.line.text):
        hit.scan.last_exception = hit.line


_EXIT = re.compile(
    r"exits with return code = (-?\d+)|failed \(exitcode: (-?\d+)\)|return code (-?\d+)|killed by signal (\d+)"
    r"|Signal (\d+) \(SIG\w+\) received"
)


def _exit_code(hit: Hit) -> None:
    """An exit code or signal number: -9, 137 (128 + 9) and 9 are SIGKILL."""
    m = _EXIT.search(hit.line.text)
    if m:
        code = next(int(g) for g in m.groups() if g is not None)
        sig = 9 if code in (-9, 137, 9) else None
        if sig or "killed by signal" in hit.line.text:
            hit.scan.add(hit.scan.kills, Kill(hit.line, sig if sig else abs(code)))


def _killed(hit: Hit) -> None:
    """A kill without an exit code: the launcher ending the other ranks, or the kernel's OOM killer."""
    text = hit.line.text
    if hit.says("Killing subprocess", "Killed process", "oom-kill") or text.strip() == "Killed":
        by_kernel = hit.says("Killed process", "oom-kill")
        hit.scan.add(hit.scan.kills, Kill(hit.line, 9 if by_kernel else None))


SIGNALS = (
    Signal("tracebacks", (rb"Traceback",), (_traceback,)),
    Signal("last_exception", (rb"Error:", rb"Exception:"), (_exception,)),
    Signal(
        "kills",
        (
            rb"xits with return code",
            rb"xitcode",
            rb"killed by signal",
            rb"SIGKILL",
            rb"Sigkill",
            rb"Signal \d",
            rb"Kill",
        ),
        (_exit_code, _killed),
    ),
)
