"""How zerotune reads configs it has never seen, against DeepSpeed 0.19.8's recorded parser verdicts.

    python scripts/evidence/unseen_agreement.py [FOLDER [VERDICTS]]   # default: tests/fixtures/unseen_configs

For each file: `zerotune validate --world-size W --format json` at W = 1 and 8 (exit 0/1, no traceback, no
ZT000), errors or none against the verdict unseen_verdicts.py recorded (files without one, launcher files
DeepSpeed never reads, are only run), and `zerotune predict --config FILE --model llama-7b --json` (exit
0/1/2, no traceback). Run as subprocesses, as a user runs them: this is the "first sight" count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "zerotune", *args], capture_output=True, text=True, env=env, cwd=REPO
    )


def main(folder: Path, verdicts: dict[str, dict[str, str | None]]) -> int:
    agree = total = 0
    problems: list[str] = []
    for path in sorted(folder.iterdir()):
        for world in ("1", "8"):
            res = _run("validate", str(path), "--format", "json", "--world-size", world)
            if res.returncode not in (0, 1) or "Traceback" in res.stderr:
                problems.append(f"validate crash {path.name} w{world}: {res.stderr.strip()[-200:]}")
                continue
            found = [d for f in json.loads(res.stdout)["files"] for d in f["diagnostics"]]
            errors = sorted({d["code"] for d in found if d["severity"] == "error"})
            if "ZT000" in errors:
                problems.append(f"ZT000 {path.name} w{world}")
            if path.name in verdicts:
                total += 1
                rejected = verdicts[path.name][world]
                agree += bool(errors) == bool(rejected)
                if bool(errors) != bool(rejected):
                    problems.append(f"disagree {path.name} w{world}: zerotune {errors}, DeepSpeed {rejected}")
        res = _run("predict", "--config", str(path), "--model", "llama-7b", "--json")
        if res.returncode not in (0, 1, 2) or "Traceback" in res.stderr:
            problems.append(f"predict crash {path.name}: {res.stderr.strip()[-200:]}")
    print(f"validate errors agree with DeepSpeed's parser: {agree}/{total} (files x worlds 1, 8)")
    print("\n".join(problems))
    return 0


if __name__ == "__main__":
    here = REPO / "tests" / "fixtures" / "unseen_configs"
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else here / "configs"
    verdicts = Path(sys.argv[2]) if len(sys.argv) > 2 else here / "deepspeed_verdicts.json"
    sys.exit(main(folder, json.loads(verdicts.read_text())))
