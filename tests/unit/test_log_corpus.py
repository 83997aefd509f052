"""The thread-log corpus of issue 20 (tests/fixtures/logs/threads.yaml + threads/*.log) is well formed:
every entry has its file and every file its entry, each names one cause from the vocabulary, cites its
own public thread once, carries the `## ` provenance headers, and no user name, home path or e-mail of
the posters survives. It checks the data only; diagnose's accuracy on it is measured elsewhere."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest
import yaml

from zerotune.diagnose.report import Cause

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
THREADS = LOGS / "threads"
ENTRIES = yaml.safe_load((LOGS / "threads.yaml").read_text())["threads"]

# The causes diagnose names (issue 20's vocabulary), one per log (the `class` field).
CLASSES = set(get_args(Cause))
HEADERS = ("source", "cause", "fix", "trimmed")
THREAD_URL = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$")
EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(\.[\w-]+)*\.[a-z]{2,}\b", re.IGNORECASE)
# Neutral names the corpus uses in place of the posters' own; anything else under /home is a leak.
HOME = re.compile(r"(/home/|/Users/|C:\\Users\\)(?!user\b|\.\.\.)([\w.-]+)")


def headers(name: str) -> dict[str, str]:
    found = {}
    for line in (THREADS / name).read_text().splitlines():
        if not line.startswith("## "):
            break
        key, _, value = line[3:].partition(":")
        found[key.strip()] = value.strip()
    return found


def test_every_entry_has_its_file_and_every_file_its_entry() -> None:
    listed = [e["file"] for e in ENTRIES]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    assert set(listed) == {p.name for p in THREADS.glob("*.log")}


def test_the_corpus_is_as_large_and_as_varied_as_asked() -> None:
    assert len(ENTRIES) >= 70
    per_class: dict[str, int] = {}
    for e in ENTRIES:
        per_class[e["class"]] = per_class.get(e["class"], 0) + 1
    # the causes issue 20 found unknown or weak; each needs several real examples
    for cls in (
        "fp16_overflow",
        "checkpoint",
        "zero3_param",
        "op_build",
        "version_mismatch",
        "config_rejected",
        "hang",
        "gpu_oom",
        "slow",
        "client_optimizer_offload",
        "nccl_desync",
        "nccl_error",
    ):
        assert per_class.get(cls, 0) >= 5, (cls, per_class.get(cls, 0))
    # NVMe/async-I/O failures are rare in threads: counted with the earlier corpus (manifest.yaml)
    earlier = yaml.safe_load((LOGS / "manifest.yaml").read_text())
    nvme = sum(e["class"] == "nvme_aio" for section in earlier.values() for e in section)
    assert nvme + per_class.get("nvme_aio", 0) >= 5, nvme + per_class.get("nvme_aio", 0)
    # desync also appears as a secondary cause of hangs (ranks running different collective sequences), and
    # as the primary cause of its own. Secondary: 2 since LLaVA#969's log was relabelled `none` (2026-11-28,
    # round 12: it is the single-GPU run that trained; the thread's hang was a 4-GPU run it does not hold)
    assert sum("nccl_desync" in e.get("also", []) for e in ENTRIES) >= 2
    assert sum(e["class"] == "nccl_desync" or "nccl_desync" in e.get("also", []) for e in ENTRIES) >= 5
    assert len({re.sub(r"/(issues|pull)/\d+$", "", e["url"]) for e in ENTRIES}) >= 20


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_entry_is_complete_and_cites_its_thread(entry: dict) -> None:
    assert entry["class"] in CLASSES
    assert set(entry.get("also", [])) <= CLASSES - {entry["class"]}
    assert THREAD_URL.match(entry["url"]), entry["url"]
    assert isinstance(entry["failed"], bool)
    assert entry["fix"].strip()
    assert isinstance(entry.get("facts", {}), dict)
    found = headers(entry["file"])
    for key in HEADERS:
        assert found.get(key), f"{entry['file']}: no '## {key}:' header"
    assert found["source"] == entry["url"]


def test_each_thread_is_used_once_and_not_already_in_the_other_corpora() -> None:
    urls = [e["url"] for e in ENTRIES]
    assert len(urls) == len(set(urls))
    earlier = set()
    for kind in ("real", "holdout"):
        for path in (LOGS / kind).glob("*.log"):
            for line in path.read_text().splitlines():
                if line.startswith("## source:"):
                    earlier.add(line.partition(":")[2].strip())
    assert not set(urls) & earlier

    def key(url: str) -> tuple[str, str]:  # survives organisation renames (microsoft -> deepspeedai)
        parts = url.rstrip("/").split("/")
        return parts[4].lower(), parts[6]

    assert not {key(u) for u in urls} & {key(u) for u in earlier}


@pytest.mark.parametrize("name", sorted(p.name for p in THREADS.glob("*.log")))
def test_no_personal_data_survives(name: str) -> None:
    text = (THREADS / name).read_text()
    assert not EMAIL.search(text), EMAIL.search(text)
    assert not HOME.search(text), HOME.search(text)
    body = [line for line in text.splitlines() if not line.startswith("## ")]
    assert body, f"{name} has no log text"
