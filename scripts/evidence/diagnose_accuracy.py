"""`zerotune diagnose` over every labelled log corpus: cause accuracy per class, failed runs that
exit 0, and causes without a fix.

    PYTHONPATH=. .venv/bin/python scripts/evidence/diagnose_accuracy.py          # the table
    PYTHONPATH=. .venv/bin/python scripts/evidence/diagnose_accuracy.py --wrong  # and each miss

Corpora (tests/fixtures/logs/): manifest.yaml (real/, holdout/, synthetic/: `file`, `class`) and,
where present, threads.yaml (threads/: `file`, `url`, `class`, `facts`, `fix`, and `job`: the job options
the thread states, passed to diagnose as a user would pass them). A log's `## ` header
lines (source, cause, trimming) are removed before it is diagnosed. tests/unit/test_diagnose_accuracy.py
asserts the overall floor and that no failed run exits 0.
"""

from __future__ import annotations

import argparse
import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from zerotune.diagnose.analyse import Options, analyse

LOGS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "logs"


@dataclass(frozen=True)
class Case:
    corpus: str
    path: Path
    want: str
    failed: bool
    """the run failed (threads.yaml says so where a warning-only log has a cause, e.g. early overflows)"""
    first_sight: str | None = None
    """diagnose's answer the first time it saw the log, before any change made for it (threads.yaml
    `first_sight`, recorded for the rounds collected after the engine existed)"""
    job: tuple[tuple[str, object], ...] = ()
    """the job options the thread states (threads.yaml `job`: diagnose's --model/--params/--config/
    --profile/...), passed as a user would; without them diagnose judges from the log alone"""


@dataclass(frozen=True)
class Outcome:
    case: Case
    got: str
    exit_code: int
    has_fix: bool


def cases(logs: Path = LOGS) -> list[Case]:
    """Every labelled log: manifest.yaml's sections, then threads.yaml if it exists."""
    out: list[Case] = []
    manifest = yaml.safe_load((logs / "manifest.yaml").read_text())
    for section in ("real", "holdout", "synthetic"):
        out += [
            Case(section, logs / section / e["file"], e["class"], e["class"] not in ("none", "slow"))
            for e in manifest.get(section) or []
        ]
    threads = logs / "threads.yaml"
    if threads.is_file():
        doc = yaml.safe_load(threads.read_text()) or []
        entries = doc.get("logs", doc.get("threads", [])) if isinstance(doc, dict) else doc
        out += [
            Case(
                "threads",
                logs / "threads" / e["file"],
                e["class"],
                e.get("failed", e["class"] not in ("none", "slow")),
                e.get("first_sight"),
                tuple((e.get("job") or {}).items()),
            )
            for e in entries
        ]
    return out


def body(path: Path) -> bytes:
    """The log without its `## ` fixture header."""
    return b"".join(
        line for line in path.read_bytes().splitlines(keepends=True) if not line.startswith(b"## ")
    )


def run(case: Case) -> Outcome:
    job = dict(case.job)
    if "config" in job:
        job["config"] = str(case.path.parents[1] / str(job["config"]))
    report, _ = analyse(io.BytesIO(body(case.path)), case.path.name, Options(**job))  # type: ignore[arg-type]
    d = report.diagnosis
    fix = report.fix is not None and bool(report.fix.changes or report.fix.text)
    return Outcome(case, d.cause, report.exit_code, fix)


def table(outcomes: list[Outcome]) -> str:
    total, right = Counter(), Counter()
    for o in outcomes:
        total[o.case.want] += 1
        right[o.case.want] += o.got == o.case.want
    rows = [f"{'class':<26} {'logs':>5} {'right':>6} {'accuracy':>9}"]
    for cls in sorted(total):
        rows.append(f"{cls:<26} {total[cls]:>5} {right[cls]:>6} {right[cls] / total[cls]:>9.1%}")
    n, ok = sum(total.values()), sum(right.values())
    rows.append(f"{'all':<26} {n:>5} {ok:>6} {ok / n if n else 0:>9.1%}")
    failed_exit0 = [o for o in outcomes if o.case.failed and o.exit_code == 0]
    no_fix = [o for o in outcomes if o.got not in ("none",) and not o.has_fix]
    rows.append(
        f"failed runs that exit 0: {len(failed_exit0)}; diagnosed causes without a fix: {len(no_fix)}"
    )
    seen = [o.case for o in outcomes if o.case.first_sight is not None]
    if seen:
        first = sum(c.first_sight == c.want for c in seen)
        now = sum(o.got == o.case.want for o in outcomes if o.case.first_sight is not None)
        rows.append(
            f"logs with a recorded first sight: {first}/{len(seen)} right then, {now}/{len(seen)} now"
        )
    corpora = Counter(o.case.corpus for o in outcomes)
    rows.append("corpora: " + ", ".join(f"{k} {v}" for k, v in sorted(corpora.items())))
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wrong", action="store_true", help="list each miss")
    parser.add_argument(
        "--logs", type=Path, default=LOGS, help="the fixture folder (default: this checkout's)"
    )
    args = parser.parse_args()
    outcomes = [run(c) for c in cases(args.logs)]
    print(table(outcomes))
    if args.wrong:
        for o in outcomes:
            if o.got != o.case.want:
                print(f"  {o.case.corpus}/{o.case.path.name}: {o.got} (labelled {o.case.want})")
        for o in outcomes:
            if o.case.failed and o.exit_code == 0:
                print(f"  exit 0 on a failed run: {o.case.corpus}/{o.case.path.name}")


if __name__ == "__main__":
    main()
