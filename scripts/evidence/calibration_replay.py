"""Replay `zerotune calibrate`'s fit and self-check offline on recorded rounds (issue 24).

    .venv/bin/python scripts/evidence/calibration_replay.py                       # data/evidence/calibration_runs
    .venv/bin/python scripts/evidence/calibration_replay.py path/to/round01.json ...
    .venv/bin/python scripts/evidence/calibration_replay.py --timings             # where calibrate's time went
    .venv/bin/python scripts/evidence/calibration_replay.py --launch [files]      # launch spread vs step noise

An older series: `git show <commit>:data/evidence/calibration_runs/roundNN.json > dir/roundNN.json` (the
commits are listed at zerotune/calibrate/check.py LAUNCH_PER_STEP_NOISE).

Each round file is what scripts/evidence/calibration_stability.py keeps per round: the design runs as
`calibrate --save-runs` wrote them (base profile, every run's step times, phases, collectives, load and
wall time) and the held-out runs measured after it. The replay re-runs the current code's fit, self-check
and cache decision on the recorded design runs, and scores the fitted profile on the recorded held-out
runs, so a change to the fit or the self-check is judged in seconds instead of a 45-minute series.

Prints one row per round: load, the decision, the stated expected error, the self-check's held-out
MAPE, the real held-out MAPE (calibrated and probe-only), whether the stated error covers it, and each
held-out config's signed error. With --timings: the recorded seconds per phase of each calibration. With --launch: the files as one
series, each held-out config's step-time coefficient of variation across the rounds' fresh launches
against the step-to-step noise of the quiet rounds' design runs (check.py LAUNCH_PER_STEP_NOISE).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from zerotune.calibrate.fit import fit, predict_run  # noqa: E402
from zerotune.calibrate.run import decision  # noqa: E402
from zerotune.schema.hardware import HardwareProfile  # noqa: E402

KEPT = REPO / "data" / "evidence" / "calibration_runs"


def errors(runs: list[dict[str, Any]], profile: HardwareProfile) -> dict[str, float]:
    """Held-out config -> signed error of the profile's step time, percent."""
    return {r["name"]: (predict_run(r, profile) - r["step_time_s"]) / r["step_time_s"] * 100 for r in runs}


def mape(errs: dict[str, float]) -> float:
    return statistics.mean(abs(e) for e in errs.values())


def replay(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    design, held = data["design"], data["held_out"]
    base = HardwareProfile.model_validate(design["base"])
    fitted = fit(design["runs"], base, names=design["names"])
    decided = decision(fitted, 1)
    check = fitted.check
    calibrated = errors(held, fitted.profile)
    expected = check.expected_error_pct if check else None
    return {
        "round": data.get("round", path.stem),
        "loaded": data.get("loaded", False),
        "cached": decided.cache,
        "reason": decided.line,
        "expected_error_pct": expected,
        "self_check_mape_pct": check.mape_pct if check else None,
        "held_out_mape_pct": mape(calibrated),
        "probe_only_mape_pct": mape(errors(held, base)),
        "covered": expected is not None and mape(calibrated) <= expected,
        "held_out_pct": calibrated,
        "design_in_sample_pct": {r.name: r.error_pct for r in fitted.runs},
        "self_check_pct": dict(check.held_out_pct) if check else {},
        "values": {v.path: v.calibrated for v in fitted.values},
    }


def timings(path: Path) -> str:
    data = json.loads(path.read_text())
    design = data["design"]
    phases = design.get("timings_s") or {}
    runs = [f"{name} {r.get('wall_s', 0):.0f}" + ("x2" if r.get("discarded") else "")
            for name, r in zip(design["names"], design["runs"], strict=True)]  # fmt: skip
    head = ", ".join(f"{k} {v:.0f} s" for k, v in phases.items())
    return f"{path.stem}: wall {data.get('calibrate_wall_s', 0):.0f} s ({head}); runs: {', '.join(runs)}"


def launch_table(paths: list[Path]) -> str:
    """One series' launch-to-launch spread against its design runs' step noise (module doc)."""
    launches: dict[str, list[float]] = {}
    step_cv: list[float] = []
    for p in paths:
        data = json.loads(p.read_text())
        for r in data["held_out"]:
            launches.setdefault(r["name"], []).append(r["step_time_s"])
        if not data.get("loaded"):
            step_cv += [_cv(r["step_times_s"]) for r in data["design"]["runs"] if len(r["step_times_s"]) >= 3]
    per = {k: _cv(v) for k, v in launches.items() if len(v) >= 3}
    launch, noise = statistics.median(per.values()), statistics.median(step_cv)
    configs = " ".join(f"{k.split()[0]} {v:.1f}" for k, v in per.items())
    return (f"{len(paths)} rounds: launch CV per held-out config {configs}; median {launch:.1f}% vs design "
            f"step CV {noise:.1f}% (quiet rounds): ratio {launch / noise:.2f}")  # fmt: skip


def _cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.mean(values) * 100


def _f(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else f"{value:{spec}}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help=f"round files (default: {KEPT.relative_to(REPO)}/*.json)")
    parser.add_argument("--timings", action="store_true", help="print where each calibration's time went")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--launch", action="store_true", help="the files as one series: launch spread vs step noise")
    args = parser.parse_args(argv)
    paths = [Path(f) for f in args.files] or sorted(KEPT.glob("*.json"))
    if not paths:
        print(f"no round files in {KEPT}: run scripts/evidence/calibration_stability.py first", file=sys.stderr)
        return 2
    if args.launch:
        print(launch_table(paths))
        return 0
    if args.timings:
        for p in paths:
            print(timings(p))
        return 0
    rows = [replay(p) for p in paths]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'round':>7} {'load':>6} {'cached':>6} {'expected':>8} {'check':>6} {'held-out':>8} {'probe':>6} "
          f"{'covered':>7}  per held-out config")  # fmt: skip
    for r in rows:
        per = " ".join(f"{k.split()[0]}{v:+.0f}" for k, v in r["held_out_pct"].items())
        print(f"{r['round']!s:>7} {'1 core' if r['loaded'] else '-':>6} {'yes' if r['cached'] else 'no':>6} "
              f"{_f(r['expected_error_pct']):>8} {_f(r['self_check_mape_pct']):>6} {_f(r['held_out_mape_pct']):>8} "
              f"{_f(r['probe_only_mape_pct'], '.0f'):>6} {'yes' if r['covered'] else 'no':>7}  {per}")  # fmt: skip
        if not r["cached"]:
            print(f"{'':>8}{r['reason']}")
    cached = [r["held_out_mape_pct"] for r in rows if r["cached"]]
    quiet = [r["held_out_mape_pct"] for r in rows if not r["loaded"]]
    print(f"# {len(rows)} rounds, {len(cached)} cached: held-out MAPE median {_f(statistics.median(cached) if cached else None)}"
          f", max {_f(max(cached) if cached else None)}; quiet rounds median {_f(statistics.median(quiet) if quiet else None)}; "
          f"stated error covers {sum(r['covered'] for r in rows if r['cached'])}/{len(cached)} cached")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
