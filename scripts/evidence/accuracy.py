"""Held-out accuracy of the step-time model: calibrate once, then predict configs the calibration
never ran and measure them with real DeepSpeed steps (2 gloo ranks on this CPU host).

    .venv/bin/python scripts/evidence/accuracy.py                       # calibrate + 17 held-out configs
    .venv/bin/python scripts/evidence/accuracy.py --save acc.json       # keep everything measured (calibration_replay.py replays it)
    .venv/bin/python scripts/evidence/accuracy.py --load acc.json       # re-analyse, measure nothing
    .venv/bin/python scripts/evidence/accuracy.py --set smoke           # 3 held-out configs (a smoke test)
    .venv/bin/python scripts/evidence/accuracy.py --calibration-runs c.json   # re-fit a `calibrate --save-runs`

1. **Calibrate** (`zerotune.calibrate.run.calibrate`: a probe if none is fresh, the designed runs of
   zerotune/calibrate/design.py, the fit). The probe's own profile is kept as the *probe-only* baseline.
2. **Held-out set** (data/evidence/held_out.yaml): three jobs (a job = model depth, sequence length and tokens per step, so its
   configs are alternatives for the same work), each run under several ZeRO configs spanning stage
   0-3, reduce bucket 1e5-5e7, overlap_comm, micro-batch 1-4, accumulation 1-4, seq 128-512, 2-6
   layers, stage-3 prefetch / persistence / max_live. None is a design run.
3. **Measure** each with `zerotune.bench.run_bench` (the llama-7b proxy at the calibration's width,
   noise-aware: steps repeated until the median is known to PRECISION or a time cap), and predict it
   with both profiles.

Metrics (zerotune/calibrate/accuracy.py), for the calibrated and the probe-only profile:
- MAPE of the step time;
- Spearman rank correlation of step times with *noise ties*: measured configs whose medians are
  within 2 combined standard errors (zerotune/bench/noise.py) form one tie group (average ranks),
  so noise cannot be "ranked"; plus the share of distinguishable pairs the model orders right;
- regret, per job: (measured time of the model's pick - best measured) / best measured, 0 when the
  pick is within noise of the best; the mean over jobs;
- ranking resolution, per job: the largest predicted gap (slower / faster - 1) between two configs the
  model orders wrong although their measurements are distinguishable, i.e. how close two predictions
  can be and still mislead; recommend's TIE_BAND (zerotune/search/objective.py) is this number.
Targets (issue 9): calibrated MAPE <= 10%, Spearman >= 0.9, regret <= 5%; probe-only MAPE <= 25%.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from zerotune.calibrate.accuracy import metrics  # noqa: E402
from zerotune.calibrate.check import PACE_SPIKE, is_slow, pace_reference, pace_slowdown  # noqa: E402
from zerotune.calibrate.fit import predict_run  # noqa: E402
from zerotune.schema.hardware import HardwareProfile  # noqa: E402

WIDTH_SCALE = 0.125  # the calibration's CPU proxy width (zerotune/calibrate/run.py)
PRECISION = 0.03
MAX_STEPS = 10
TIME_CAP_S = 8.0


@dataclass(frozen=True)
class Held:
    job: str
    name: str
    stage: int
    micro_batch: int
    grad_accum: int
    zero: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        return {
            "train_micro_batch_size_per_gpu": self.micro_batch,
            "gradient_accumulation_steps": self.grad_accum,
            "zero_optimization": {"stage": self.stage, **self.zero},
        }


HELD_OUT_FILE = REPO / "data" / "evidence" / "held_out.yaml"


def load_held_out(path: Path = HELD_OUT_FILE) -> tuple[dict[str, tuple[int, int]], dict[str, list[Held]]]:
    """(job -> (layers, seq_len), set name -> held-out configs) from data/evidence/held_out.yaml."""
    doc = yaml.safe_load(path.read_text())
    jobs = {name: (j["layers"], j["seq_len"]) for name, j in doc["jobs"].items()}
    def held(configs: list[dict[str, Any]]) -> list[Held]:
        return [Held(c["job"], c["name"], c["stage"], c["micro_batch"], c["grad_accum"], c.get("zero", {}))
                for c in configs]  # fmt: skip

    full = held(doc["configs"])
    sets = {name: [h for h in full if h.name in doc[name]] for name in ("smoke", "stability") if name in doc}
    return jobs, {"full": full, **sets, "novel": held(doc.get("novel", []))}


JOBS, SETS = load_held_out()


# --------------------------------------------------------------------------- measuring


def calibrated_profiles(args: argparse.Namespace) -> tuple[HardwareProfile, HardwareProfile, dict[str, Any]]:
    """(probe-only profile, calibrated profile, the design runs as `calibrate --save-runs` writes them)."""
    from zerotune.calibrate.run import CalibrateOptions, calibrate, saved_runs

    options = CalibrateOptions(nproc=2, device="cpu", from_runs=args.calibration_runs)
    print("# calibrating (zerotune.calibrate)", file=sys.stderr)
    outcome = calibrate(options, say=lambda m: print(f"#   {m}", file=sys.stderr) if args.verbose else None)
    print(f"# calibration: {len(outcome.runs)} runs, {outcome.elapsed_s:.0f} s", file=sys.stderr)
    if outcome.decision is not None:  # the calibrated profile is evaluated either way
        print(f"# calibration self-check: {outcome.decision.line}", file=sys.stderr)
    return outcome.base, outcome.fit.profile, saved_runs(outcome)


def measure(held: list[Held]) -> list[dict[str, Any]]:
    from zerotune.bench.run import run_bench
    from zerotune.catalog.models import load_model

    model = load_model("llama-7b")
    runs = []
    for i, h in enumerate(held, 1):
        layers, seq = JOBS[h.job]
        t0 = time.monotonic()
        result = run_bench(
            model,
            h.config(),
            layers=layers,
            width_scale=WIDTH_SCALE,
            seq_len=seq,
            micro_batch=h.micro_batch,
            grad_accum=h.grad_accum,
            nproc=2,
            device="cpu",
            warmup=1,
            steps=3,
            max_steps=MAX_STEPS,
            precision=PRECISION,
            time_cap_s=TIME_CAP_S,
            logged_steps=1,
            max_micro_steps=None,
            pace=True,  # the machine's speed during the held-out run, as the design runs record it
        )
        run = json.loads(result.model_dump_json())
        run["name"], run["job"] = h.name, h.job
        runs.append(run)
        print(
            f"# [{i}/{len(held)}] {h.name}: {run['step_time_s']:.3f} s "
            f"+-{run['step_time_precision_pct'] or float('nan'):.1f}% ({time.monotonic() - t0:.0f} s wall, "
            f"pace {' / '.join(f'{p * 1e3:.2f}' for p in run.get('pace_s') or [])} ms)",
            file=sys.stderr,
        )
    return runs


# --------------------------------------------------------------------------- report


def report(runs: list[dict[str, Any]], probe: HardwareProfile, calibrated: HardwareProfile) -> dict[str, Any]:
    raw = [predict_run(r, probe) for r in runs]
    cal = [predict_run(r, calibrated) for r in runs]
    print(
        f"{'config':<30} {'measured':>9} {'+-':>6} {'probe-only':>10} {'err':>7} {'calibrated':>10} {'err':>7}"
    )
    for r, p, c in zip(runs, raw, cal, strict=True):
        m = r["step_time_s"]
        prec = r.get("step_time_precision_pct")
        print(
            f"{r['name']:<30} {m:9.3f} {(f'{prec:.1f}%' if prec is not None else '-'):>6} "
            f"{p:10.3f} {(p - m) / m:+7.1%} {c:10.3f} {(c - m) / m:+7.1%}"
        )
    out: dict[str, Any] = {}
    for title, predicted in (("probe-only", raw), ("calibrated", cal)):
        s = metrics(runs, predicted)
        out[title] = s
        print(
            f"{title:<11} MAPE {s['mape_pct']:5.1f}%   Spearman (noise ties) {s['spearman_noise_ties']:+.3f}   "
            f"pairs ordered right {s['pairs_ordered_right']:.0%} of {s['distinguishable_pairs']} distinguishable   "
            f"regret {s['regret_pct']:4.1f}%   ranking resolution {s['resolution_pct']:4.1f}%"
        )
    slow = slow_moments(runs)
    if slow:  # the measurement's own hygiene: which held-out runs the machine ran slow for
        kept = [i for i, r in enumerate(runs) if r["name"] not in slow]
        errors = [abs(cal[i] - runs[i]["step_time_s"]) / runs[i]["step_time_s"] * 100 for i in kept]
        out["slow_moments"] = slow
        out["calibrated_mape_without_slow_pct"] = sum(errors) / len(errors)
        print(
            f"machine slow (pace over {PACE_SPIKE:.0%} above the held-out runs' median) during: "
            + ", ".join(f"{name} {slowdown:+.0%}" for name, slowdown in slow.items())
            + f"; calibrated MAPE without them {out['calibrated_mape_without_slow_pct']:.1f}% ({len(kept)} configs)"
        )
    return out


def slow_moments(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Held-out runs measured while the machine ran slower than during the others: pace (a fixed matmul
    read beside the steps, zerotune/probe/compute.py measure_pace) over PACE_SPIKE above the median of
    the held-out runs' paces, as calibrate judges its design runs (zerotune/calibrate/check.py)."""
    reference = pace_reference(runs)
    return {r["name"]: slow for r in runs if is_slow(r, reference) and (slow := pace_slowdown(r, reference))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(SETS), default="full")
    parser.add_argument("--save", help="write the profiles and held-out measurements to this JSON file")
    parser.add_argument("--load", help="re-analyse a --save file instead of measuring")
    parser.add_argument(
        "--calibration-runs", help="re-fit a `zerotune calibrate --save-runs` file instead of calibrating"
    )
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON at the end")
    parser.add_argument("--verbose", action="store_true", help="show calibration progress")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    if args.load:
        data = json.loads(Path(args.load).read_text())
        probe = HardwareProfile.model_validate(data["probe"])
        calibrated = HardwareProfile.model_validate(data["calibrated"])
        runs = data["runs"]
    else:
        probe, calibrated, design = calibrated_profiles(args)
        runs = measure(SETS[args.set])
        if args.save:  # design + held_out: the shape scripts/evidence/calibration_replay.py replays
            Path(args.save).write_text(json.dumps({
                "probe": probe.model_dump(mode="json"), "calibrated": calibrated.model_dump(mode="json"), "runs": runs,
                "design": design, "held_out": runs,
            }))  # fmt: skip
    metrics_out = report(runs, probe, calibrated)
    print(f"# {len(runs)} held-out configs, {time.monotonic() - t0:.0f} s wall", file=sys.stderr)
    if args.json:
        print(json.dumps(metrics_out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
