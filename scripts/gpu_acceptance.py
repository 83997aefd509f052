"""GPU acceptance run: zerotune's commands on a real GPU, predicted vs measured, in one resumable command.

    python scripts/gpu_acceptance.py                 # on the GPU machine (docs/gpu.md)
    python scripts/gpu_acceptance.py --budget 570    # stop before a step that might not fit; rerun to resume
    python scripts/gpu_acceptance.py --budget 420 --step-limit 120 --only probe --only calibrate
                                                     # a short lease: every step capped, some steps only
    python scripts/gpu_acceptance.py --dry --out D   # CPU rehearsal: gloo, recorded NVML, tiny shapes

Steps, each a subprocess with its own time limit (its whole process group is killed at the limit, so
a hung NCCL rank cannot take the run with it):

  environment  versions (python, torch, CUDA, DeepSpeed, zerotune), GPU name, driver
  nvml         NVML's answers recorded (zerotune.hw.nvml_replay, a test fixture for later) and read
               back: inventory, NVLink/PCIe, topology
  probe        `zerotune probe --model tinyllama-1.1b`: collectives (NCCL with >= 2 GPUs), compute at
               the model's shapes, host and CPU Adam; its profile predicts the bench grid
  cpu-adam     DeepSpeed's DeepSpeedCPUAdam built (JIT) and timed on a flat fp32 partition, next to the
               torch AdamW path the probe times: the offload rate the model uses; and FusedAdam built
               (JIT), which the benches without offload then load
  bench/<id>   `zerotune bench` per grid point: measured step time, max_memory_allocated/reserved
  calibrate    `zerotune calibrate` on this GPU
  recommend    `zerotune recommend --measure 2` end to end
  report       (in this process) every bench re-predicted with the probe-only and the calibrated
               profile; evidence.json and the printed table

Resuming: each step's outcome lands in OUT/steps/<step>.json. A rerun skips the steps that finished
(ok or skipped) and retries those that failed or timed out; --force reruns everything. The outputs
belong to the run's folder, so the report step rewrites evidence.json from the step files each time.
Exit status: 0 every step finished, 1 a step failed or is left for a rerun, 2 usage.

Dry mode (--dry) runs the same steps on a CPU host (tests/dist/test_gpu_acceptance.py): gloo ranks,
NVML replayed from tests/fixtures/nvml/dgx_h100.json, a width-scaled one-layer proxy, no calibrate
(seven design runs take about four minutes on two cores, tests/dist/test_calibrate.py) and no
DeepSpeedCPUAdam build (a JIT compile of about 90 s; zerotune/bench/config.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
NVML_FIXTURE = REPO / "tests" / "fixtures" / "nvml" / "dgx_h100.json"
SCHEMA_VERSION = 1
KILL_GRACE_S = 10.0
"""Seconds between SIGTERM and SIGKILL to a timed-out step's process group."""
CPU_ADAM_PARAMS = 100_000_000
"""Flat partition timed for CPU Adam on a GPU host: 1.6 GB of fp32 weights, grads and moments, far
past the caches, and about what one rank of a 7B model offloads under ZeRO-2 on 8 GPUs (875M) / 8."""
DRY_CPU_ADAM_PARAMS = 2_000_000
MIN_STEP_LIMIT_S = 60.0
"""The lowest --step-limit: a bench's own --timeout is its limit less 30 s, and a DeepSpeed launch
took 20-28 s to its first step on the H200 (data/gpu/2026-11-28-NVIDIA-H200; a 45 s limit left each
bench 15 s and every one timed out in deepspeed.initialize)."""


@dataclass(frozen=True)
class GridPoint:
    """One bench run: a catalog model's proxy under one ZeRO setting."""

    model: str
    layers: int
    stage: int
    micro_batch: int
    offload_optimizer: bool = False
    offload_param: bool = False
    checkpointing: bool = False

    @property
    def id(self) -> str:
        parts = [self.model, f"L{self.layers}", f"z{self.stage}", f"mb{self.micro_batch}"]
        parts += ["offopt"] * self.offload_optimizer + ["offparam"] * self.offload_param
        parts += ["ckpt"] * self.checkpointing
        return "-".join(parts)

    def ds_config(self, dry: bool) -> dict[str, Any]:
        zero: dict[str, Any] = {"stage": self.stage}
        if self.offload_optimizer:
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if self.offload_param:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
        return {
            "train_micro_batch_size_per_gpu": self.micro_batch,
            "gradient_accumulation_steps": 1,
            "bf16": {"enabled": not dry},  # the CPU proxy runs fp32 anyway (bench/config.py)
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
            "zero_optimization": zero,
        }


TINY = "tinyllama-1.1b"
SEVEN = "llama-7b"
# One GPU, and still real: tinyllama at full depth and width (1.1B params; ZeRO-0 needs ~18 GB of
# states in bf16 + fp32 Adam) at seq 2048, and a 4-layer llama-7b proxy at full width (~1.1B params,
# 4096-wide matmuls). Stages 0-3, offload of the optimizer and of the parameters, checkpointing on
# and off, micro-batch 1-4; the points a user would try first, not the whole product.
GPU_GRID = (
    # Ordered for a short lease (a drawn task has 15 minutes of device time): a run cut off by
    # --budget still has both models, every stage, checkpointing and an offload point.
    GridPoint(TINY, 22, 0, 1),
    GridPoint(SEVEN, 4, 3, 1),
    GridPoint(TINY, 22, 2, 4, checkpointing=True),
    GridPoint(TINY, 22, 3, 1),
    GridPoint(SEVEN, 4, 0, 1),
    GridPoint(TINY, 22, 2, 2, offload_optimizer=True),
    GridPoint(TINY, 22, 1, 1),
    GridPoint(SEVEN, 4, 2, 2, checkpointing=True),
    GridPoint(TINY, 22, 3, 2, offload_optimizer=True, offload_param=True),
    GridPoint(TINY, 22, 2, 1),
    GridPoint(TINY, 22, 2, 2),
    GridPoint(TINY, 22, 3, 4, checkpointing=True),
    GridPoint(SEVEN, 4, 1, 1),
    GridPoint(SEVEN, 4, 2, 1),
    GridPoint(TINY, 22, 0, 4, checkpointing=True),
    GridPoint(TINY, 22, 3, 2, offload_optimizer=True),
    GridPoint(SEVEN, 4, 2, 1, offload_optimizer=True),
    GridPoint(TINY, 22, 3, 4, offload_optimizer=True, offload_param=True, checkpointing=True),
    GridPoint(SEVEN, 4, 3, 1, offload_optimizer=True, offload_param=True),
)
DRY_GRID = (
    GridPoint(TINY, 1, 0, 1),
    GridPoint(TINY, 1, 2, 2, offload_optimizer=True, checkpointing=True),
)


@dataclass
class Step:
    name: str
    timeout_s: float
    argv: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    """Set when the step cannot run in this mode; it is recorded as skipped, with this reason."""
    note: str | None = None
    """How this mode's step differs from the GPU run's; recorded with its outcome."""


@dataclass
class Run:
    out: Path
    dry: bool
    force: bool
    budget_s: float | None
    step_limit_s: float | None = None
    """Caps every step's limit (--step-limit): a short lease then runs many steps, not one long one."""
    python: str = sys.executable
    started: float = field(default_factory=time.monotonic)

    def path(self, *parts: str) -> Path:
        return self.out.joinpath(*parts)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # an own cache: the run neither reads a stale profile nor replaces the user's
        env["ZEROTUNE_CACHE_DIR"] = str(self.path("cache"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        if self.dry:
            env["DS_ACCELERATOR"] = "cpu"
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env


# --------------------------------------------------------------------------- the plan


def zt(run: Run, *args: str) -> list[str]:
    """A zerotune command. --force always: its outputs live in the run's folder and belong to this
    step, which runs only while it is unfinished (a failed try may have left a partial file)."""
    return [run.python, "-m", "zerotune", *args, "--force"]


def plan(run: Run) -> list[Step]:
    dry = run.dry
    device = "cpu" if dry else "cuda"
    internal = [run.python, str(Path(__file__).resolve()), "--out", str(run.out), *(["--dry"] if dry else [])]
    probe_yaml, cal_yaml = str(run.path("probe.yaml")), str(run.path("calibrated.yaml"))

    def own(limit: float, margin: float) -> str:
        """A command's own --timeout: inside its step's (capped) limit, so it ends itself and
        writes its result rather than being killed."""
        return f"{min(limit, run.step_limit_s or limit) - margin:.0f}"

    steps = [
        Step("environment", 120, [*internal, "--internal", "environment"]),
        Step("nvml", 60, [*internal, "--internal", "nvml"]),
        Step(
            "probe",
            120 if dry else 420,
            zt(run, "probe", "--model", TINY, "--out", probe_yaml, "--json",
               *(["--quick", "--nproc", "2", "--timeout", own(120, 20)] if dry else ["--timeout", own(420, 20)])),
        ),  # fmt: skip
        Step("cpu-adam", 60 if dry else 300, [*internal, "--internal", "cpu-adam"]),
    ]
    shape = ["--width-scale", "0.125", "--seq-len", "32"] if dry else ["--seq-len", "2048"]
    counts = (
        ["--warmup", "1", "--steps", "2", "--max-steps", "2", "--logged-steps", "1", "--time-cap", "5"]
        if dry
        else ["--warmup", "2", "--steps", "5", "--max-steps", "20", "--logged-steps", "2", "--time-cap", "60"]
    )
    for point in DRY_GRID if dry else GPU_GRID:
        steps.append(
            Step(
                f"bench/{point.id}",
                90 if dry else 480,
                zt(run, "bench", "--model", point.model, "--layers", str(point.layers),
                   "--config", str(run.path("configs", f"{point.id}.json")),
                   "--micro-batch", str(point.micro_batch), "--device", device, "--nproc", "1",
                   "--checkpointing" if point.checkpointing else "--no-checkpointing",
                   "--profile", "@probe", "--timeout", own(90, 10) if dry else own(480, 30),
                   "--out", str(run.path("bench", f"{point.id}.json")), "--json", *shape, *counts,
                   "--log", str(run.path("bench", f"{point.id}.log"))),
            )  # fmt: skip
        )
    steps.append(
        Step(
            "calibrate",
            560,
            zt(run, "calibrate", "--model", SEVEN, "--device", device, "--out", cal_yaml, "--profile", "@probe",
               "--save-runs", str(run.path("calibrate-runs.json")), "--timeout", own(560, 20), "--json"),
            skip_reason="dry mode: calibrate's seven design runs take about 4 minutes on 2 CPU cores "
            "(tests/dist/test_calibrate.py covers it)" if dry else None,
        )  # fmt: skip
    )
    # After calibrate when it ran, else on the probe's profile (the report says which).
    # Dry: no --measure, whose CPU bench runs 2 ranks up to its 30 s time cap (about 50 s here);
    # a short sequence and batch, and GPT-2 medium (355M) rather than TinyLlama: fp32 training holds
    # ~20 B/param on the host (weights, gradients, Adam moments and the optimizer's flattened fp32
    # gradient copy, docs/how-it-works.md), 22 GB for 1.1B, more than a 24 GiB CI host has free.
    steps.append(
        Step(
            "recommend",
            120 if dry else 560,
            zt(run, "recommend", "--model", "gpt2-medium" if dry else TINY, "--profile", "@calibrated-or-probe",
               "--gpus", "1",
               *(["--seq-len", "128", "--global-batch-tokens", "512"] if dry else ["--measure", "2"]),
               "--out", str(run.path("recommend", "ds_config.json")), "--json"),
            note="dry mode: without --measure (its CPU bench takes about 50 s)" if dry else None,
        )  # fmt: skip
    )
    return steps


# --------------------------------------------------------------------------- running steps


def step_file(run: Run, name: str) -> Path:
    return run.path("steps", f"{name.replace('/', '__')}.json")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write_json(path: Path, data: Any) -> None:
    from zerotune.files import write_atomic

    write_atomic(path, json.dumps(data, indent=1, default=str) + "\n", force=True)


def run_step(run: Run, step: Step, timeout_s: float) -> dict[str, Any]:
    """Run one step in its own session; on timeout, kill its process group (SIGTERM, then SIGKILL)."""
    begun = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if step.skip_reason:
        return {"status": "skipped", "reason": step.skip_reason, "elapsed_s": 0.0, "started": begun}
    argv = resolve_argv(run, step.argv)
    logs = run.path("logs")
    logs.mkdir(parents=True, exist_ok=True)
    stem = step.name.replace("/", "__")
    out_log, err_log = logs / f"{stem}.stdout", logs / f"{stem}.stderr"
    start = time.monotonic()
    with out_log.open("w") as stdout, err_log.open("w") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=run.env(), cwd=REPO, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            code = None
    elapsed = time.monotonic() - start
    record: dict[str, Any] = {"argv": argv, "elapsed_s": round(elapsed, 2), "started": begun, "stdout": str(out_log)}
    if code is None:
        return {**record, "status": "timeout", "reason": f"no result within {timeout_s:.0f} s (process group killed)"}
    if code != 0:
        return {**record, "status": "failed", "reason": f"exit {code}: {last_line(err_log)}"}
    return {**record, "status": "ok", "reason": None}


def kill_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no stderr)"


def resolve_argv(run: Run, argv: list[str]) -> list[str]:
    """Fill the profile placeholders with what earlier steps left: "@probe" is this run's probe,
    "@calibrated-or-probe" its calibration when there is one. With neither, `--profile` is dropped
    and the command falls back to its own default (a failed probe must not fail every bench)."""
    choices = {
        "@probe": [run.path("probe.yaml")],
        "@calibrated-or-probe": [run.path("calibrated.yaml"), run.path("probe.yaml")],
    }
    out: list[str] = []
    for arg in argv:
        if arg in choices:
            found = next((p for p in choices[arg] if p.is_file()), None)
            if found is None:
                out.pop()  # the "--profile" before it
                continue
            arg = str(found)
        out.append(arg)
    return out


def execute(run: Run, steps: list[Step], say: Any) -> dict[str, dict[str, Any]]:
    """Run what is not finished yet; return every step's record (pending ones included)."""
    records: dict[str, dict[str, Any]] = {}
    for folder in ("bench", "recommend", "steps", "logs"):
        run.path(folder).mkdir(parents=True, exist_ok=True)
    for point in DRY_GRID if run.dry else GPU_GRID:
        path = run.path("configs", f"{point.id}.json")
        if run.force or not path.exists():
            write_json(path, point.ds_config(run.dry))
    stopped = False
    for step in steps:
        path = step_file(run, step.name)
        done = None if run.force else read_json(path)
        if done and done.get("status") in ("ok", "skipped"):
            records[step.name] = {**done, "resumed": True}
            say(f"{step.name}: {done['status']} earlier, kept")
            continue
        timeout = min(step.timeout_s, run.step_limit_s or step.timeout_s)
        if run.budget_s is not None:
            left = run.budget_s - (time.monotonic() - run.started)
            if stopped or left < timeout:
                stopped = True
                records[step.name] = {"status": "pending", "reason": "left for a rerun (--budget)"}
                continue
        say(f"{step.name}: running (limit {timeout:.0f} s)")
        record = {"name": step.name, **run_step(run, step, timeout), "note": step.note}
        write_json(path, record)
        records[step.name] = record
        say(f"{step.name}: {record['status']}" + (f" ({record['reason']})" if record.get("reason") else ""))
    return records


# --------------------------------------------------------------------------- internal steps


def internal_environment(run: Run) -> dict[str, Any]:
    import torch

    import zerotune

    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "zerotune": zerotune.__version__,
        "cpu_count": os.cpu_count(),
        "dry": run.dry,
    }
    try:
        import deepspeed

        info["deepspeed"] = deepspeed.__version__
    except Exception as exc:  # noqa: BLE001 - recorded, the bench steps will fail with their own message
        info["deepspeed"] = f"not importable: {type(exc).__name__}: {exc}"
    if torch.cuda.is_available():
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_name"] = torch.cuda.get_device_name(0)
        props = torch.cuda.get_device_properties(0)
        info["gpu_memory_bytes"] = props.total_memory
        info["compute_capability"] = f"{props.major}.{props.minor}"
    else:
        info["gpu_count"], info["gpu_name"] = 0, None
    return info


def internal_nvml(run: Run) -> dict[str, Any]:
    from zerotune.hw.nvml import read_gpus
    from zerotune.hw.nvml_replay import ReplayNvml, record

    if run.dry:
        nvml, source = ReplayNvml.from_file(str(NVML_FIXTURE)), f"replayed from {NVML_FIXTURE.name}"
    else:
        import pynvml as nvml

        source = "live NVML"
    recorded = record(nvml)
    write_json(run.path("nvml-record.json"), recorded)  # a fixture for tests/fixtures/nvml
    report = read_gpus(ReplayNvml(recorded))  # read back through the replay: the fixture is complete
    return {
        "source": source,
        "driver_version": report.driver_version,
        "cuda_driver_version": report.cuda_driver_version,
        "gpus": [d.model_dump(mode="json") for d in report.devices],
        "link_kind": report.link_kind,
        "nominal_Bps": report.nominal_Bps,
        "p2p": report.p2p,
        "topology": report.topology.model_dump(mode="json"),
    }


def internal_cpu_adam(run: Run) -> dict[str, Any]:
    """CPU Adam updates/s on one flat fp32 partition: torch's path (what the probe times) and, off
    dry mode, DeepSpeedCPUAdam (what ZeRO-Offload runs): a warm-up step, then the median of 5."""
    import torch

    from zerotune.probe.compute import measure_cpu_adam

    n = DRY_CPU_ADAM_PARAMS if run.dry else CPU_ADAM_PARAMS
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    out: dict[str, Any] = {"params": n, "threads": threads, "torch": measure_cpu_adam(torch, params=n, budget_s=1.0 if run.dry else 5.0)}
    if run.dry:
        out["deepspeed"] = {"status": "skipped", "reason": "dry mode: DeepSpeedCPUAdam is JIT-compiled (~90 s)"}
        return out
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        weights = torch.nn.Parameter(torch.zeros(n, dtype=torch.float32))
        weights.grad = torch.randn(n, dtype=torch.float32) * 1e-3
        build = time.perf_counter()
        opt = DeepSpeedCPUAdam([weights], lr=1e-4)  # builds or loads the cpu_adam op
        build_s = time.perf_counter() - build
        opt.step()  # warm-up: first touch of the moments
        times = []
        for _ in range(5):
            start = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        out["deepspeed"] = {
            "status": "ok",
            "kernel": "DeepSpeedCPUAdam",
            "build_or_load_s": round(build_s, 2),
            "step_s": median,
            "params_per_s": n / median,
        }
        torch_rate = out["torch"].get("params_per_s")
        if torch_rate:
            out["deepspeed"]["speedup_vs_torch"] = (n / median) / torch_rate
    except Exception as exc:  # noqa: BLE001 - recorded as this step's finding
        out["deepspeed"] = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:400]}
    out["fused_adam"] = _build_fused_adam(torch)
    return out


def _build_fused_adam(torch: Any) -> dict[str, Any]:
    """DeepSpeed's FusedAdam, built (JIT) now so that the benches, which let DeepSpeed build it from
    their configs' optimizer section (zerotune/bench/config.py), load it rather than each compile it
    inside its own time limit."""
    try:
        from deepspeed.ops.adam import FusedAdam

        start = time.perf_counter()
        FusedAdam([torch.nn.Parameter(torch.zeros(8, device="cuda"))], lr=1e-4)
        return {"status": "ok", "build_or_load_s": round(time.perf_counter() - start, 2)}
    except Exception as exc:  # noqa: BLE001 - recorded; the benches then fail with their own message
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:400]}


INTERNAL = {"environment": internal_environment, "nvml": internal_nvml, "cpu-adam": internal_cpu_adam}


# --------------------------------------------------------------------------- the report


def pct(predicted: float | None, measured: float | None) -> float | None:
    if not predicted or not measured:
        return None
    return (predicted - measured) / measured * 100


def summary(errors: list[float]) -> dict[str, Any]:
    values = [abs(e) for e in errors]
    if not values:
        return {"n": 0}
    return {"n": len(values), "median_abs_pct": statistics.median(values), "max_abs_pct": max(values)}


def bench_rows(run: Run, records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per grid point: measured step and memory, and both predictions (probe-only, calibrated)."""
    from zerotune.bench.predicted import predict
    from zerotune.bench.result import BenchResult
    from zerotune.catalog.hardware import load_profile

    profiles = {}
    for label, name in (("probe", "probe.yaml"), ("calibrated", "calibrated.yaml")):
        if run.path(name).is_file():
            profiles[label] = load_profile(str(run.path(name)))
    rows = []
    for point in DRY_GRID if run.dry else GPU_GRID:
        name = f"bench/{point.id}"
        row: dict[str, Any] = {"id": point.id, **point.__dict__, "status": records.get(name, {}).get("status")}
        data = read_json(run.path("bench", f"{point.id}.json"))
        if row["status"] != "ok" or data is None:
            row["reason"] = records.get(name, {}).get("reason")
            rows.append(row)
            continue
        result = BenchResult.model_validate(data)
        measured = result.full_step_time_s or result.step_time_s
        row.update(
            device=result.device,
            optimizer_class=result.optimizer_class,
            measured_step_time_s=measured,
            measured_peak_bytes=max(result.peak_memory_bytes),
            measured_reserved_bytes=max(result.peak_reserved_bytes) if result.peak_reserved_bytes else None,
            memory_method=result.memory_method,
        )
        for label, profile in profiles.items():
            prediction = predict(result, profile)
            row[f"predicted_step_time_s_{label}"] = prediction.step_time_s
            row[f"step_error_pct_{label}"] = pct(prediction.step_time_s, measured)
            row["predicted_peak_bytes"] = prediction.peak_memory_bytes
        # CPU RSS counts the interpreter and libraries, not what the model counts: no error there
        if result.device != "cpu":
            row["memory_error_pct"] = pct(row.get("predicted_peak_bytes"), row["measured_peak_bytes"])
        rows.append(row)
    return rows


def build_evidence(run: Run, records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def output(name: str) -> Any:
        return read_json(run.path(f"{name}.json")) if records.get(name, {}).get("status") == "ok" else None

    env = output("environment") or {}
    probe = read_json(Path(records["probe"]["stdout"])) if records.get("probe", {}).get("status") == "ok" else None
    rows = bench_rows(run, records)
    recommend = None
    if records.get("recommend", {}).get("status") == "ok":
        data = read_json(Path(records["recommend"]["stdout"])) or {}
        recommend = {"hardware": data.get("hardware"), "measured": data.get("measured"), "config": data.get("config")}
    errors = {
        label: summary([r[f"step_error_pct_{label}"] for r in rows if r.get(f"step_error_pct_{label}") is not None])
        for label in ("probe", "calibrated")
    }
    errors["memory"] = summary([r["memory_error_pct"] for r in rows if r.get("memory_error_pct") is not None])
    profile = (probe or {}).get("profile") or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "zerotune-gpu-acceptance",
        "dry": run.dry,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": env,
        "gpu_name": env.get("gpu_name") or ("cpu (dry)" if run.dry else None),
        "nvml": output("nvml"),
        "steps": {
            name: {k: r.get(k) for k in ("status", "reason", "note", "elapsed_s", "started", "resumed") if k in r}
            for name, r in records.items()
        },
        "probe": {
            "links": {k: profile.get(k) for k in ("intra_node", "inter_node")},
            "compute": profile.get("compute"),
            "host": profile.get("host"),
            "notes": (probe or {}).get("notes"),
        }
        if probe
        else None,
        "cpu_adam": output("cpu-adam"),
        "configs": rows,
        "errors": errors,
        "recommend": recommend,
    }


def render(evidence: dict[str, Any], file: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=160, color_system=None)
    steps = Table(title="steps")
    for col in ("step", "status", "s", "reason"):
        steps.add_column(col, justify="right" if col == "s" else "left", no_wrap=col == "step")
    for name, rec in evidence["steps"].items():
        elapsed = rec.get("elapsed_s")
        status = rec["status"] + (" (kept)" if rec.get("resumed") else "")
        why = "; ".join(x for x in (rec.get("reason"), rec.get("note")) if x)
        steps.add_row(name, status, f"{elapsed:.0f}" if elapsed is not None else "", why)
    console.print(steps)

    def num(value: Any, scale: float = 1.0, fmt: str = "{:.3f}") -> str:
        return fmt.format(value / scale) if isinstance(value, (int, float)) else "n/a"

    table = Table(title="predicted vs measured (step seconds, memory GiB = 1024^3 B)")
    cols = ("config", "status", "meas s", "probe s", "err %", "calib s", "err %", "alloc GiB", "resv GiB", "pred GiB", "mem err %")
    for col in cols:
        table.add_column(col, justify="left" if col in ("config", "status") else "right", no_wrap=col == "config")
    gib = 1024**3
    for r in evidence["configs"]:
        table.add_row(
            r["id"], r["status"] or "",
            num(r.get("measured_step_time_s")), num(r.get("predicted_step_time_s_probe")),
            num(r.get("step_error_pct_probe"), fmt="{:+.0f}"), num(r.get("predicted_step_time_s_calibrated")),
            num(r.get("step_error_pct_calibrated"), fmt="{:+.0f}"), num(r.get("measured_peak_bytes"), gib, "{:.2f}"),
            num(r.get("measured_reserved_bytes"), gib, "{:.2f}"), num(r.get("predicted_peak_bytes"), gib, "{:.2f}"),
            num(r.get("memory_error_pct"), fmt="{:+.0f}"),
        )  # fmt: skip
    console.print(table)
    errors = evidence["errors"]
    for label in ("probe", "calibrated", "memory"):
        e = errors[label]
        if e["n"]:
            console.print(f"{label}: median |error| {e['median_abs_pct']:.1f}% over {e['n']} configs (max {e['max_abs_pct']:.1f}%)")
    adam = evidence.get("cpu_adam") or {}
    if adam:
        ds = adam.get("deepspeed") or {}
        rate = ds.get("params_per_s")
        console.print(
            f"CPU Adam: torch {num(adam.get('torch', {}).get('params_per_s'), 1e6, '{:.0f}')} M params/s; "
            + (f"DeepSpeedCPUAdam {rate / 1e6:.0f} M params/s" if rate else f"DeepSpeedCPUAdam {ds.get('status')}: {ds.get('reason')}")
        )


# --------------------------------------------------------------------------- entry point


def default_out(dry: bool) -> Path:
    date = datetime.now().strftime("%Y-%m-%d")
    name = "dry-cpu"
    if not dry:
        try:
            import torch

            if torch.cuda.is_available():
                name = torch.cuda.get_device_name(0).replace(" ", "-").replace("/", "-")
        except ImportError:
            name = "no-torch"
    return REPO / "data" / "gpu" / f"{date}-{name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="run folder (default data/gpu/<date>-<gpu-name>)")
    parser.add_argument("--dry", action="store_true", help="CPU rehearsal: gloo, recorded NVML, tiny shapes")
    parser.add_argument("--force", action="store_true", help="rerun finished steps and overwrite their outputs")
    parser.add_argument("--budget", type=float, help="seconds: start no step that could end past this")
    parser.add_argument("--step-limit", type=float, help="seconds: cap every step's time limit")
    parser.add_argument("--only", action="append", default=[], help="run only steps starting with this (repeatable)")
    parser.add_argument("--internal", choices=sorted(INTERNAL), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag, value, least in (("--budget", args.budget, 0.0), ("--step-limit", args.step_limit, MIN_STEP_LIMIT_S)):
        if value is not None and (value <= 0 or value < least):
            print(f"error: {flag} must be positive and at least {least:g} s, got {value:g}", file=sys.stderr)
            return 2
    run = Run(
        out=(args.out or default_out(args.dry)).resolve(),
        dry=args.dry,
        force=args.force,
        budget_s=args.budget,
        step_limit_s=args.step_limit,
    )
    if args.internal:
        write_json(run.path(f"{args.internal}.json"), INTERNAL[args.internal](run))
        return 0
    steps = plan(run)
    if args.only:
        steps = [s for s in steps if any(s.name.startswith(p) for p in args.only)]
        if not steps:
            print(f"error: --only {args.only} matches no step", file=sys.stderr)
            return 2
    run.out.mkdir(parents=True, exist_ok=True)
    print(f"# zerotune GPU acceptance{' (dry)' if run.dry else ''}: {run.out}", file=sys.stderr)
    records = execute(run, steps, say=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    # the report covers every step of the plan, also those --only left out
    for step in plan(run):
        if step.name not in records:
            records[step.name] = read_json(step_file(run, step.name)) or {"status": "pending", "reason": "not run yet"}
    evidence = build_evidence(run, records)
    write_json(run.path("evidence.json"), evidence)
    render(evidence)
    print(f"evidence: {run.path('evidence.json')}", file=sys.stderr)
    finished = all(r["status"] in ("ok", "skipped") for r in records.values())
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(main())
