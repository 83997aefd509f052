"""Leave-one-source-out: every published source predicted by a model whose fitted terms never saw it.

    .venv/bin/python scripts/evidence/loso.py            # per source, per category, overall
    .venv/bin/python scripts/evidence/loso.py --write    # also data/evidence/loso.json and the bands

Runs are grouped by source URL (one blog post, README or issue thread is one source, whatever number
of rows it holds). For each source the global overhead prior (scripts/evidence/fit_published.py
fit_global: the multi-rank and one-rank per-step costs, per_module_hook_s, per_layer_launch_s and the one-thread CPU
Adam rate) is fitted on every other source's timed runs, and the
source's runs are predicted through zerotune's public path (published.predict_run) with that prior in
place of the profiles' overheads. The memory model has no fitted term, so its errors are the same in
and out of sample; they are reported here next to the throughput errors so one table holds both.

Categories (a run can be in several): long context (seq_len >= LONG_CONTEXT), fused kernels (flash
attention or a fused loss / Liger stated), MoE, offload, multi-node Ethernet (nodes > 1 over a `tcp`
inter-node link: NCCL's socket transport), and one per GPU kind. "Ran but predicted not to fit" judges the predicted peak
against the GPU with margin 0 (the model's own prediction, not the safety margin), unless the source
says the run was at the memory limit.

With --write the per-category residuals become the error bands predictions print
(zerotune/model/error_bands.json, zerotune.model.band): for each band category the smallest |error| that
covers at least BAND_COVERAGE of its runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_published  # noqa: E402
import published  # noqa: E402

from zerotune.catalog.hardware import load_profile  # noqa: E402
from zerotune.files import write_atomic  # noqa: E402
from zerotune.model.band import BAND_COVERAGE, BANDS_PATH, LONG_CONTEXT, job_category  # noqa: E402
from zerotune.model.comm import is_tcp  # noqa: E402
from zerotune.model.memory import estimate_memory  # noqa: E402

OUT = REPO / "data" / "evidence" / "loso.json"


def _categories(run: published.Run, spec) -> list[str]:
    hardware = load_profile(run.profile)
    out = []
    if run.seq_len >= LONG_CONTEXT:
        out.append("long context")
    kernels = run.kernels
    if kernels.get("attention") in ("flash", "flash3", "flash4") or kernels.get("cross_entropy") in ("fused", "fused_linear"):
        out.append("liger/flash")
    if spec.num_experts > 1:
        out.append("moe")
    z = run.zero
    if any((z.get(k) or {}).get("device", "none") not in ("none", None) for k in ("offload_optimizer", "offload_param")):
        out.append("offload")
    if run.nodes > 1 and is_tcp(hardware.inter_node):
        out.append("multi-node ethernet")
    out.append(f"gpu {hardware.gpu.name if hardware.gpu else 'cpu'}")
    return out


def _predict(run: published.Run, prior) -> dict[str, Any]:
    """published.predict_run with the fold's prior as every profile's overheads."""
    original = published.run_hardware

    def hardware(r, spec, precision):
        return original(r, spec, precision).model_copy(update={"overheads": prior})

    published.run_hardware = hardware
    try:
        row = published.predict_run(run)
    finally:
        published.run_hardware = original
    spec = published.load_run_model(run)
    resolved = published.resolve(run.ds_config())
    hw = hardware(run, spec, resolved.precision)
    memory = estimate_memory(spec, published.run_workload(run, resolved.precision), resolved.zero, hardware=hw)
    capacity = memory.gpu_capacity_bytes
    row["predicted_oom_margin0"] = bool(capacity and memory.per_gpu.total > capacity and not run.at_memory_limit)
    row["source"] = run.source.url
    row["categories"] = _categories(run, spec)
    row["band_category"] = job_category(
        spec, published.run_workload(run, resolved.precision), offload=row["offload"] != "none"
    )
    return row


def evaluate(runs: list[published.Run] | None = None) -> dict[str, Any]:
    runs = runs if runs is not None else published.load_suite()
    timed = {id(t.run): t for t in fit_published.timed_suite(runs)}
    by_source: dict[str, list[published.Run]] = {}
    for run in runs:
        by_source.setdefault(run.source.url, []).append(run)
    rows, folds = [], []
    for url, held in sorted(by_source.items()):
        train = [t for r in runs if r.source.url != url and (t := timed.get(id(r))) is not None]
        fitted = fit_published.fit_global(train)
        folds.append({"source": url, **dataclasses.asdict(fitted), "train_runs": len(train)})
        prior = fitted.spec(f"LOSO fold without {url}")
        rows.extend(_predict(run, prior) for run in held)
    return {
        "overall": summarize(rows),
        "sources": {url: summarize([r for r in rows if r["source"] == url]) for url in sorted(by_source)},
        "categories": {
            name: summarize([r for r in rows if name in r["categories"]])
            for name in sorted({c for r in rows for c in r["categories"]})
        },
        "folds": folds,
        "runs": [
            {k: r[k] for k in ("id", "source", "categories", "band_category", "tput_error", "memory_error",
                               "predicted_oom_margin0")}
            for r in rows
        ],  # fmt: skip
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    tput = [abs(r["tput_error"]) for r in rows if r["tput_error"] is not None]
    mem = [abs(r["memory_error"]) for r in rows if r["memory_error"] is not None]
    return {
        "runs": len(rows),
        "throughput_runs": len(tput),
        "throughput_mape": round(100 * statistics.fmean(tput), 1) if tput else None,
        "memory_runs": len(mem),
        "memory_mape": round(100 * statistics.fmean(mem), 1) if mem else None,
        "ran_but_predicted_oom": [r["id"] for r in rows if r["predicted_oom_margin0"]],
    }


def covering(errors: list[float], coverage: float = BAND_COVERAGE) -> float:
    """The smallest |error| bound that covers at least `coverage` of `errors`."""
    ordered = sorted(abs(e) for e in errors)
    bound = ordered[max(math.ceil(coverage * len(ordered)) - 1, 0)]
    return math.ceil(bound * 1000) / 1000  # stored to 0.1%, rounded up so it still covers


MIN_BAND_RUNS = 5
"""A band category needs this many LOSO residuals of its own; below, its jobs get the overall band."""

MIN_BAND_SOURCES = 3
"""...and residuals from this many sources: leave-one-source-out errors of one source share that source's
setup and measurement, so a band read off them states that source's spread, not the category's (the multi-node
memory band was +-4% from 10 runs, 8 of them one benchmark's, when tohtana/bench_deep_compile joined)."""


def bands(result: dict[str, Any]) -> dict[str, Any]:
    """Per band category and overall: the |error| bound covering BAND_COVERAGE of its LOSO residuals."""
    out: dict[str, Any] = {"coverage": BAND_COVERAGE, "categories": {}}
    runs = result["runs"]
    for metric, key in (("throughput", "tput_error"), ("memory", "memory_error")):
        errors = [r[key] for r in runs if r[key] is not None]
        out.setdefault("overall", {})[metric] = {"band": covering(errors), "runs": len(errors)}
        for name in sorted({r["band_category"] for r in runs}):
            rows = [r for r in runs if r[key] is not None and r["band_category"] == name]
            mine = [r[key] for r in rows]
            if len(mine) >= MIN_BAND_RUNS and len({r["source"] for r in rows}) >= MIN_BAND_SOURCES:
                out["categories"].setdefault(name, {})[metric] = {"band": covering(mine), "runs": len(mine)}
    return out


def _line(name: str, s: dict[str, Any]) -> str:
    t = "-" if s["throughput_mape"] is None else f"{s['throughput_mape']:.1f}"
    m = "-" if s["memory_mape"] is None else f"{s['memory_mape']:.1f}"
    return f"{name[-70:]:70} {s['runs']:>4} {t:>9} {m:>8} {len(s['ran_but_predicted_oom']):>4}"


def print_report(result: dict[str, Any]) -> None:
    head = f"{'':70} {'runs':>4} {'tput MAPE':>9} {'mem MAPE':>8} {'OOM':>4}"
    for title, table in (("source", result["sources"]), ("category", result["categories"])):
        print(f"{title}{head[len(title):]}")
        for name, s in table.items():
            print(_line(name, s))
        print()
    print(_line("overall (leave-one-source-out)", result["overall"]))
    if result["overall"]["ran_but_predicted_oom"]:
        print(f"ran but predicted not to fit: {', '.join(result['overall']['ran_but_predicted_oom'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(REPO)} and the bands")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = evaluate()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    if args.write:
        write_atomic(OUT, json.dumps(result, indent=2) + "\n", force=True)
        write_atomic(BANDS_PATH, json.dumps(bands(result), indent=2) + "\n", force=True)
        print(f"wrote {OUT.relative_to(REPO)} and {BANDS_PATH.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
