"""The shared corpus of 116 real DeepSpeed configs: no crash, findings equal to a reviewed snapshot, and a
whole-corpus run in one process never imports torch, deepspeed or pynvml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from zerotune.dsconfig.load import load_path
from zerotune.lint.context import LintOptions
from zerotune.lint.runner import lint

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "corpus_findings.json"


def _findings(corpus: Path, hf: bool) -> dict[str, dict[str, int]]:
    out = {}
    for path in sorted((corpus / "configs").iterdir()):
        found = lint(load_path(path), LintOptions(hf=hf))
        out[path.name] = dict(sorted(Counter(d.code for d in found).items()))
    return out


def test_corpus_findings_match_the_snapshot(corpus) -> None:
    got = {"plain": _findings(corpus, hf=False), "hf": _findings(corpus, hf=True)}
    assert len(got["plain"]) == len(list((corpus / "configs").iterdir())) >= 100
    if os.environ.get("ZEROTUNE_UPDATE_SNAPSHOTS") or not SNAPSHOT.exists():
        SNAPSHOT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(SNAPSHOT.read_text())


def test_corpus_known_cases(corpus) -> None:
    """Cases the corpus README lists, each found by the rule meant for it."""
    snap = {"plain": _findings(corpus, hf=False)}["plain"]

    def codes(fragment: str) -> set[str]:
        [name] = [n for n in snap if fragment in n]
        return set(snap[name])

    assert "ZT503" in codes("llm_embedder__data__deepspeed__stage2-offload")  # top-level offload_optimizer
    assert "ZT502" in codes("Tencent__TencentPretrain__models__deepspeed_mp_config")  # ..._optimization typo
    assert "ZT301" in codes("CarperAI__trlx")  # offload_param at stage 2
    assert "ZT505" in codes("VILA__scripts__zero3_mics_mini_fixed")  # MiCS removed
    assert "ZT003" in codes("MoE__ds_config_gpt_TEMPLATE.json")  # placeholders
    assert "ZT504" in codes("transformers__tests__deepspeed__ds_config_zero3.json")  # fp16 gather alias


@pytest.mark.slow
def test_whole_corpus_run_never_imports_heavy_packages(corpus) -> None:
    code = (
        "import sys\n"
        "from zerotune.cli.app import main\n"
        f"sys.argv = ['zerotune', 'validate', {str(corpus / 'configs' / '*')!r}, '--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'deepspeed', 'pynvml') if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY=" in done.stderr and done.stderr.rsplit("HEAVY=", 1)[1].strip() == ""
    doc = json.loads(done.stdout)
    assert doc["summary"]["files"] == len(list((corpus / "configs").iterdir()))
