"""Issue 12 scale targets: `zerotune validate` over ~3,600 files in one process against DeepSpeed's own parser
loop over the same files (its import included), and one file with 50,000 unknown keys.

    python scripts/benchmarks/bench_validate_many.py [--repeats 3]

The files are the differential corpus (tests/fixtures/differential: DeepSpeed's test/doc configs, the
public-project corpus of tests/fixtures/corpus, and the recorded mutants), written to a temporary folder. Each command is a fresh
interpreter; wall and CPU (user+sys) seconds are reported with the load average, because on a shared machine
wall time moves with the neighbours and CPU time much less. Targets: zerotune faster than DeepSpeed's loop;
50k keys < 2 s.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench_validate import print_timings  # scripts/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parents[2]
DIFF = REPO / "tests" / "fixtures" / "differential"
PUBLIC = REPO / "tests" / "fixtures" / "corpus" / "configs"

DEEPSPEED_LOOP = """
import contextlib, io, logging, os, sys
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    import deepspeed.comm as dscomm
    from deepspeed.runtime.config import DeepSpeedConfig
logging.getLogger("DeepSpeed").setLevel(logging.CRITICAL)
dscomm.get_rank = lambda *a, **k: 0
dscomm.get_world_size = lambda *a, **k: 8
folder = sys.argv[1]
rejected = 0
for name in sorted(os.listdir(folder)):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            DeepSpeedConfig(os.path.join(folder, name))
    except Exception:
        rejected += 1
print(rejected)
"""


def write_files(folder: Path) -> int:
    sources = sorted((DIFF / "configs").glob("*.json"))
    sources += sorted(PUBLIC.iterdir())
    for i, path in enumerate(sources):
        shutil.copy(path, folder / f"{i:05d}.json")
    n = len(sources)
    with gzip.open(DIFF / "mutants.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            (folder / f"{n:05d}.json").write_bytes(json.loads(line)["text"].encode())
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONPATH=str(REPO))
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        many = Path(tmp) / "many"
        many.mkdir()
        n = write_files(many)
        keys = Path(tmp) / "keys50k.json"
        config = {"train_batch_size": 8, "zero_optimization": {"stage": 3}}
        config.update({f"unknown_key_{i}": i for i in range(25_000)})
        config["zero_optimization"].update({f"unknown_key_{i}": i for i in range(25_000)})
        keys.write_text(json.dumps(config, indent=1))
        commands = {
            f"zerotune validate DIR ({n} files, json)": [
                py,
                "-m",
                "zerotune",
                "validate",
                str(many),
                "--format",
                "json",
                "--exit-zero",
            ],
            f"zerotune validate DIR ({n} files, text)": [
                py,
                "-m",
                "zerotune",
                "validate",
                str(many),
                "--exit-zero",
            ],
            f"DeepSpeedConfig(path) loop ({n} files, world 8)": [py, "-c", DEEPSPEED_LOOP, str(many)],
            "zerotune validate (50,000 unknown keys, json)": [
                py,
                "-m",
                "zerotune",
                "validate",
                str(keys),
                "--format",
                "json",
                "--exit-zero",
            ],
        }
        print_timings(commands, env, args.repeats, width=52, digits=2)


if __name__ == "__main__":
    main()
