"""The CPU part of scripts/evidence/calibrate_from_log.py (issue 22): calibrate from the DeepSpeed output
of one `zerotune bench` run on this machine, predict the held-out grid.

1. a --quick probe of this machine (the profile a calibration starts from), into a fresh cache;
2. one `zerotune bench` run (2 gloo ranks, the calibration's proxy width) of a config the held-out grid
   does not hold, with its ranks' output kept (ZEROTUNE_KEEP_RUN_DIR): rank 0's stdout is DeepSpeed's log
   (wall_clock_breakdown timers, as a user's training log would have them);
3. calibrate --from-log's reader and fit on it (zerotune.diagnose.measure, zerotune.calibrate.from_log;
   the proxy model is no catalog model, so its job is given as the bench ran it);
4. the held-out configs of data/evidence/held_out.yaml measured with real DeepSpeed steps
   (scripts/evidence/accuracy.py measure) and predicted with the probe-only and the from-log profiles.

Timing: run it on a quiet machine; it prints the load average at each stage.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import SETS, WIDTH_SCALE, load_held_out, measure  # noqa: E402

from zerotune.calibrate.from_log import fit_logs  # noqa: E402
from zerotune.calibrate.observation import Observation  # noqa: E402
from zerotune.calibrate.stepmodel import predict_run, proxy_workload  # noqa: E402
from zerotune.catalog.hardware import dump_profile, load_profile  # noqa: E402
from zerotune.diagnose.measure import from_scan  # noqa: E402
from zerotune.diagnose.scan import scan_stream  # noqa: E402
from zerotune.dsconfig.settings import resolve  # noqa: E402
from zerotune.schema.model import ModelSpec  # noqa: E402

BENCH_CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                "zero_optimization": {"stage": 2, "reduce_bucket_size": 2000000}}  # fmt: skip
"""Not in the held-out grid (its stage-2 configs use other buckets and batches)."""
BENCH_LAYERS, BENCH_SEQ = 4, 256
CALIBRATE_OWN_PCT = 9.0
"""`zerotune calibrate`'s own held-out MAPE, median of the quiet rounds of the 2026-11-25 stability
evidence (data/evidence/calibration_stability.json: 9.0, 12.3, 5.0, 11.7, 7.1%)."""


def _load() -> float:
    return os.getloadavg()[0]


def _zerotune(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zerotune", *args], env=env, capture_output=True, text=True, check=False)


def cpu_part(set_name: str = "stability") -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="zt-fromlog-"))
    env = {**os.environ, "ZEROTUNE_CACHE_DIR": str(work / "cache"), "ZEROTUNE_KEEP_RUN_DIR": "1",
           "PYTHONPATH": str(REPO), "TMPDIR": str(work)}  # fmt: skip
    loads = {"start": _load()}
    probe = _zerotune(["probe", "--quick", "--nproc", "2", "--out", str(work / "probe.yaml")], env)
    if probe.returncode != 0:
        return {"error": f"probe failed: {probe.stderr[-500:]}"}
    loads["after_probe"] = _load()
    config = work / "ds.json"
    config.write_text(json.dumps(BENCH_CONFIG))
    t0 = time.monotonic()
    bench = _zerotune(["bench", "--model", "llama-7b", "--config", str(config), "--nproc", "2", "--device", "cpu",
                       "--layers", str(BENCH_LAYERS), "--width-scale", str(WIDTH_SCALE), "--seq-len", str(BENCH_SEQ),
                       "--profile", str(work / "probe.yaml"), "--out", str(work / "bench.json")], env)  # fmt: skip
    if bench.returncode != 0:
        return {"error": f"bench failed: {bench.stderr[-500:]}"}
    loads["after_bench"] = _load()
    logs = sorted(work.glob("zerotune-run-*/rank0.out"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return {"error": "bench kept no rank log"}
    log = logs[-1]
    result = json.loads((work / "bench.json").read_text())
    # the proxy (llama-7b's layers at the calibration's width) is no catalog model, so the run goes to
    # the same reader and fit as `calibrate --from-log` (zerotune.calibrate.observe) with its job given
    with log.open("rb") as stream:
        found = from_scan(scan_stream(stream))
    obs = Observation(str(log), ModelSpec.model_validate(result["proxy"]["model"]), proxy_workload(result),
                      resolve(BENCH_CONFIG).zero, found)  # fmt: skip
    fit = fit_logs([obs], load_profile(str(work / "probe.yaml")))
    (work / "from-log.yaml").write_text(dump_profile(fit.profile))
    fitted = load_profile(str(work / "from-log.yaml"))
    base = load_profile(str(work / "probe.yaml"))
    _, sets = load_held_out()
    held = sets[set_name] if set_name in sets else SETS[set_name]
    runs = measure(held)
    loads["after_held_out"] = _load()
    rows = []
    for run in runs:
        measured = float(run["step_time_s"])
        rows.append({
            "name": run["name"],
            "measured_s": measured,
            "probe_only_pct": abs(predict_run(run, base) / measured - 1) * 100,
            "from_log_pct": abs(predict_run(run, fitted) / measured - 1) * 100,
        })  # fmt: skip
    return {
        "bench_log": str(log),
        "bench_wall_s": time.monotonic() - t0,
        "measured": {k: v.value for k, v in vars(found).items() if hasattr(v, "value")},
        "moved": [v.model_dump(mode="json") for v in fit.values],
        "findings": fit.findings,
        "held_out": rows,
        "probe_only_mape_pct": statistics.fmean(r["probe_only_pct"] for r in rows),
        "from_log_mape_pct": statistics.fmean(r["from_log_pct"] for r in rows),
        "calibrate_own_median_pct": CALIBRATE_OWN_PCT,
        "load_average": loads,
        "work_dir": str(work),
    }
