"""One rank of `zerotune bench`: real DeepSpeed training steps on the proxy decoder.

Run by zerotune.launch as `python -m zerotune.bench.step_worker` in every rank (the task comes
from zerotune.bench.run). The rank:

1. joins the process group itself (gloo on CPU, nccl on GPU, with a timeout on every collective),
2. builds the proxy decoder (deterministic for the seed) and `deepspeed.initialize`s it with the
   task's config and a torch optimizer,
3. runs `warmup` steps, then *unlogged* measured steps (true step time; DeepSpeed's global timers
   'fwd'/'bwd'/'step' with wall_clock_breakdown give the phases), repeated until the median is known
   to the task's precision or a cap (zerotune/bench/noise.py StopRule), then `logged_steps` with
   DeepSpeed's comms logger on (per-collective records) and per-module timing marks,
4. writes its losses, timings, collectives, compute marks and peak memory.

Timing instruments (the clock, the collective recorder, the per-module marks):
zerotune.bench.instruments.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from datetime import timedelta
from typing import Any

from zerotune.bench.instruments import Clock, CommRecorder, Marks
from zerotune.bench.noise import StopRule
from zerotune.diagnose.signals.facts import BENCH_JOB
from zerotune.launch import report_step, worker_rank, worker_task, write_result

_OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "adagrad": "Adagrad"}


def main() -> None:
    rank, world = worker_rank()
    task = worker_task()
    try:
        write_result(_run(task, rank, world))
    except BaseException as exc:  # one clear line on stderr for the parent, then a non-zero exit
        traceback.print_exc(file=sys.stdout)  # the full story stays in the rank's stdout log
        sys.stdout.flush()
        sys.stderr.write(f"{type(exc).__name__}: {_summary(exc)}\n")
        sys.stderr.flush()
        os._exit(1)
    # Skip interpreter teardown: DeepSpeed/gloo atexit handlers can block on a finished peer.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _summary(exc: BaseException, limit: int = 400) -> str:
    """The exception's message on one line (pydantic puts the field and the rule on later lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = "; ".join(lines[:4]) if lines else repr(exc)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _report(task: dict[str, Any], rank: int, step: str) -> None:
    """report_step, plus the test-only fault injection of the task's `fault`:
    {"rank": r, "at": step prefix, "kind": "exit" | "hang", "pid_dir": folder for rank<i>.pid}."""
    report_step(step)
    fault = task.get("fault")
    if not fault:
        return
    if fault.get("pid_dir") and step == "import torch":
        with open(os.path.join(fault["pid_dir"], f"rank{rank}.pid"), "w") as handle:
            handle.write(str(os.getpid()))
    if fault.get("rank") == rank and step.startswith(fault.get("at", "")):
        if fault.get("kind") == "hang":
            time.sleep(3600)
        sys.stderr.write(f"injected fault: rank {rank} exits at {step}\n")
        sys.stderr.flush()
        os._exit(3)


def _rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _say_job(task: dict[str, Any], world: int) -> None:
    """Rank 0's first output line: the job it runs, for a reader of its log (`zerotune calibrate
    --from-log`, `diagnose`: zerotune.diagnose.signals.facts.BENCH_JOB reads it). The proxy is no
    catalog model and DeepSpeed (at its default WARNING level) prints no config: this line says both."""
    job = {"model": task["spec"], "config": task["config"], "world_size": world, "seq_len": task["seq_len"],
           "activation_checkpointing": bool(task.get("activation_checkpointing")), "device": task["device"]}  # fmt: skip
    print(BENCH_JOB + json.dumps(job, separators=(",", ":")), flush=True)


def _run(task: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    if rank == 0:
        _say_job(task, world)
    _report(task, rank, "import torch")
    import torch
    import torch.distributed as tdist

    cuda = task["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    _report(task, rank, "init process group")
    if not tdist.is_initialized():  # under `calibrate --distributed` one process runs every design run
        tdist.init_process_group(
            "nccl" if cuda else "gloo",
            init_method="env://",
            timeout=timedelta(seconds=float(task["collective_timeout_s"])),
        )
    torch.set_num_threads(max(1, int(task.get("threads_per_rank") or 1)))
    baseline = _rss_bytes() if not cuda else 0
    phases = None
    if task.get("memory_phases"):
        from zerotune.bench.live_memory import PhaseRecorder

        phases = PhaseRecorder(cuda)
        phases.start()  # before the model is built: every state allocation is recorded
        phases.mark("init")

    def mark(label: str) -> None:
        if phases is not None:
            phases.mark(label)

    _report(task, rank, "import deepspeed")
    import deepspeed
    import deepspeed.comm.comm as dscomm
    import deepspeed.ops

    # DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce op (about a minute) when the
    # op counts as compatible (deepspeed/comm/torch.py build_shm_op); plain gloo is what we measure.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

    from zerotune.bench.decoder import build_decoder
    from zerotune.schema.model import ModelSpec

    _report(task, rank, "build proxy model")
    spec = ModelSpec.model_validate(task["spec"])
    model = build_decoder(spec, seed=int(task["seed"]))
    counted = sum(p.numel() for p in model.parameters())
    if counted != spec.params:
        raise AssertionError(f"proxy has {counted} parameters, the spec says {spec.params}")
    lora = task.get("lora")
    if lora:  # a LoRA job: the base frozen, rank-r adapters on the named projections
        from zerotune.bench.decoder import add_lora

        add_lora(model, int(lora["rank"]), tuple(lora["targets"]), seed=int(task["seed"]) + 1)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if cuda else torch.device("cpu")
    model = model.to(device)
    checkpointing = bool(task.get("activation_checkpointing"))
    model.checkpointing = checkpointing
    opt = task["optimizer"]
    _report(task, rank, "deepspeed.initialize")
    if opt is None:  # DeepSpeed builds the config's optimizer (DeepSpeedCPUAdam under offload)
        engine, *_ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=task["config"]
        )
    else:
        optimizer = getattr(torch.optim, _OPTIMIZERS[opt["type"]])(model.parameters(), **opt["params"])
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=task["config"])
    clock = Clock(torch, cuda)
    marks = Marks(clock)
    # Under recompute a block's forward hooks fire again inside backward, so its marks would not
    # pair up: per-module timing is off then, and only the step and its phases are measured.
    modules = [] if checkpointing else engine.module.timed_modules()
    handles = marks.attach(modules, task["layer_names"])
    recorder = CommRecorder(dscomm, clock)

    batches = _Batches(torch, task, rank, device)
    grad_accum = int(task["grad_accum"])
    losses: list[float] = []
    step_times: list[float] = []
    timer_rows: list[dict[str, float]] = []
    logged_times: list[float] = []
    logged_steps: list[dict[str, Any]] = []
    warmup, logged_n = int(task["warmup"]), int(task["logged_steps"])
    stop = StopRule.from_task(task)

    def one_step(step: int, logged: bool, label: str) -> float:
        _report(task, rank, label)
        marks.enabled = logged
        if logged:
            recorder.start()
        else:
            recorder.stop()
        tdist.barrier()
        clock.sync()
        start = time.perf_counter()
        marks.reset(start)
        recorder.reset(start)
        step_losses = []
        for micro in range(grad_accum):
            inputs, labels = batches.get(step * grad_accum + micro)
            recorder.phase = "forward"
            mark(f"{step}.{micro}:forward")
            loss = engine(inputs, labels)
            recorder.phase = "backward"
            marks.backward_started()
            mark(f"{step}.{micro}:backward")
            engine.backward(loss)
            marks.backward_ended()
            recorder.phase = "step"
            marks.step_started()
            mark(f"{step}.{micro}:step")
            engine.step()
            marks.step_ended()
            mark(f"{step}.{micro}:end")
            step_losses.append(float(loss.detach().float().item()))
        clock.sync()
        elapsed = time.perf_counter() - start
        losses.append(sum(step_losses) / len(step_losses))
        return elapsed

    step = 0
    for _ in range(warmup):
        one_step(step, False, f"warm-up step {step + 1}/{warmup}")
        step += 1
    pace = _Pace(torch, tdist) if task.get("pace") and not cuda else None
    if pace is not None:
        pace.read()
    # Measured steps: repeated until the median is known to the asked precision (or a cap). Every
    # rank keeps the slowest rank's time (a synchronous step ends when its last rank does), so all
    # ranks take the same decision and run the same number of steps.
    measured_s = 0.0
    while True:
        elapsed = one_step(
            step, False, f"measured step {len(step_times) + 1} (median {stop.describe(step_times)})"
        )
        step += 1
        # on the rank's device: NCCL has no CPU tensors ("No backend type associated with device
        # type cpu", seen on the first GPU run)
        slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
        tdist.all_reduce(slowest, op=tdist.ReduceOp.MAX)
        step_times.append(float(slowest.item()))
        measured_s += step_times[-1]
        timers = engine.get_wall_clock_timers()  # ms, this step's accumulation window
        timer_rows.append({k: timers.get(k, 0.0) / 1e3 for k in ("fwd", "bwd", "step")})
        if stop.done(step_times, measured_s):
            break
    if pace is not None:
        pace.read()
    for i in range(logged_n):
        elapsed = one_step(step, True, f"logged step {i + 1}/{logged_n} (comms logged)")
        step += 1
        logged_times.append(elapsed)
        logged_steps.append({"comms": recorder.take(), **marks.take()})
    recorder.stop()
    for handle in handles:
        handle.remove()

    _report(task, rank, "finish")
    memory_phases = phases.phases() if phases is not None else None
    reserved = None
    if cuda:
        peak, method = torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
        # what the caching allocator held at its peak: the figure an OOM is decided against
        reserved = int(torch.cuda.max_memory_reserved(device))
    else:
        peak, method = _rss_bytes(), "peak RSS of the rank process (getrusage ru_maxrss)"
    tdist.barrier()
    host_memory = None
    if task.get("host_memory") and not cuda:
        # calibrate: the host memory rates, measured now with the peers measuring too (as the probe
        # does), after the peak memory was read (the buffers would raise it)
        from zerotune.probe.compute import measure_host_memory

        host_memory = measure_host_memory(torch, budget_s=float(task["host_memory"]))
        tdist.barrier()
    return {
        "host_memory": host_memory,
        "rank": rank,
        "world": world,
        "losses": losses,
        "step_times_s": step_times,
        "timers_s": timer_rows,
        "logged_step_times_s": logged_times,
        "logged_steps": logged_steps,
        "peak_memory_bytes": int(peak),
        "peak_reserved_bytes": reserved,
        "optimizer_class": _optimizer_class(engine),
        "baseline_memory_bytes": int(baseline),
        "memory_method": method,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "backend": "nccl" if cuda else "gloo",
        "deepspeed_version": deepspeed.__version__,
        "torch_version": torch.__version__,
        "stop_reason": stop.reason,
        "memory_phases": memory_phases,
        "pace_s": pace.readings if pace is not None else None,
    }


class _Pace:
    """The speed reference of calibrate's design runs (zerotune/probe/compute.py measure_pace), read by
    every rank at once just before the measured steps and just after them, so that it shares their
    machine: both ranks busy, whatever else the host ran then."""

    def __init__(self, torch: Any, tdist: Any) -> None:
        self.torch, self.tdist = torch, tdist
        self.readings: list[float] = []

    def read(self) -> None:
        from zerotune.probe.compute import measure_pace

        self.tdist.barrier()
        self.readings.append(measure_pace(self.torch))


def _optimizer_class(engine: Any) -> str | None:
    """The class doing the update: ZeRO and the bf16/fp16 wrappers keep it as `.optimizer`."""
    opt = engine.optimizer
    inner = getattr(opt, "optimizer", None)
    return type(inner if inner is not None else opt).__name__ if opt is not None else None


class _Batches:
    """Deterministic token batches: the same for every stage, different per rank.

    Steps cycle over `data_batches` batches so that the model sees data again and the loss falls
    measurably within a few steps (a parity check needs losses that move)."""

    def __init__(self, torch: Any, task: dict[str, Any], rank: int, device: Any) -> None:
        self._torch, self._device = torch, device
        self._rank, self._seed = rank, int(task["seed"])
        self._shape = (int(task["micro_batch"]), int(task["seq_len"]) + 1)
        self._vocab = int(task["spec"]["vocab_size"])
        self._cycle = int(task.get("data_batches") or 4)

    def get(self, index: int) -> tuple[Any, Any]:
        gen = self._torch.Generator().manual_seed(
            self._seed * 1_000_003 + self._rank * 7919 + index % self._cycle
        )
        tokens = self._torch.randint(0, self._vocab, self._shape, generator=gen).to(self._device)
        return tokens[:, :-1], tokens[:, 1:]


if __name__ == "__main__":
    main()
