"""One rank of `zerotune probe`: the collective sweep, the compute/communication overlap test,
then the compute microbenchmarks (rank 0 alone on a GPU host; every rank at once on a CPU host). Started by zerotune.launch as `python -m` (or called
in-process under torchrun by `probe --distributed`); imports torch at module level, as rank entry
points may (tests/unit/test_pure_core.py).

Task keys (built by zerotune.probe.runner.build_task): backend, dtype, sizes, warmup, samples,
batch_s, op_timeout_s, threads_per_rank; compute (bool) with shape (BlockShape fields), budget_s,
adam_params, compute_threads, overlap_dim, overlap_iters, overlap_bytes; and the test-only
`fault` {"rank": r, "at": step, "kind": "exit" | "hang", "pid_dir": optional folder}.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from zerotune import launch
from zerotune.probe import compute
from zerotune.probe.metrics import SWEPT, element_count

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MAX_BATCH = 50
"""At most this many back-to-back calls per timed sample (a sample lasts about task["batch_s"])."""


def _all_gather_fn() -> Any:
    # torch 2.13 deprecates all_gather_into_tensor for all_gather_single; older torch has only the former.
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _reduce_scatter_fn() -> Any:
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class Collectives:
    """Buffers, the call and the expected result of each swept collective, for one group.

    Inputs are small integers (rank + 1 and the like), exact in bf16 for up to 16 ranks, so every
    result can be compared exactly; `wrong` counts mismatching elements as nccl-tests' #wrong does.
    """

    def __init__(self, group: Any, device: Any, dtype: Any):
        self.group, self.device, self.dtype = group, device, dtype
        self.n = dist.get_world_size(group)
        self.me = dist.get_rank(group)
        self.reduce_scatter_impl = "reduce_scatter_single"

    def prepare(self, op: str, count: int) -> tuple[Any, Any, Any]:
        """(run, refill, (output, expected output)) for a `count`-element total array."""
        n, me, shard = self.n, self.me, count // self.n

        def full(numel: int, value: float) -> Any:
            return torch.full((numel,), value, dtype=self.dtype, device=self.device)

        if op == "all_reduce":
            buf = full(count, me + 1)
            expected = full(count, n * (n + 1) / 2)
            return (
                (lambda: dist.all_reduce(buf, group=self.group)),
                (lambda: buf.fill_(me + 1)),
                (buf, expected),
            )
        if op == "all_gather":
            inp, out = full(shard, me + 1), full(count, 0)
            expected = torch.arange(1, n + 1, dtype=self.dtype, device=self.device).repeat_interleave(shard)
            fn = _all_gather_fn()
            return (lambda: fn(out, inp, group=self.group)), (lambda: out.zero_()), (out, expected)
        if op == "reduce_scatter":
            inp, out = full(count, me + 1), full(shard, 0)
            expected = full(shard, n * (n + 1) / 2)
            return self._reduce_scatter(inp, out), (lambda: out.zero_()), (out, expected)
        if op == "all_to_all":
            # chunk j of rank i's input goes to rank j; it holds i*n + j + 1
            inp = (torch.arange(n, device=self.device) + me * n + 1).to(self.dtype).repeat_interleave(shard)
            out = full(count, 0)
            expected = (
                (torch.arange(n, device=self.device) * n + me + 1).to(self.dtype).repeat_interleave(shard)
            )
            return (
                (lambda: dist.all_to_all_single(out, inp, group=self.group)),
                (lambda: out.zero_()),
                (out, expected),
            )
        raise ValueError(op)

    def _reduce_scatter(self, inp: Any, out: Any) -> Any:
        fn = _reduce_scatter_fn()
        if self.reduce_scatter_impl == "reduce_scatter_single":
            try:
                fn(out, inp, group=self.group)
                return lambda: fn(out, inp, group=self.group)
            except RuntimeError as exc:  # a backend without reduce_scatter (older gloo)
                if "not supported" not in str(exc).lower() and "unsupported" not in str(exc).lower():
                    raise
                self.reduce_scatter_impl = "all_reduce + local slice (backend lacks reduce_scatter)"
        scratch = inp.clone()
        lo = self.me * out.numel()

        def fallback() -> None:
            scratch.copy_(inp)
            dist.all_reduce(scratch, group=self.group)
            out.copy_(scratch[lo : lo + out.numel()])

        return fallback


def _sync(device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fault(task: dict[str, Any], rank: int, step: str) -> None:
    """Test-only fault injection: die or hang at a named step. With "pid_dir", every rank also
    writes rank<r>.pid there at start-up, so a test can check that no rank survives."""
    fault = task.get("fault")
    if fault and fault.get("pid_dir") and step == "init":
        with open(os.path.join(fault["pid_dir"], f"rank{rank}.pid"), "w") as handle:
            handle.write(str(os.getpid()))
    if not fault or fault.get("rank") != rank or fault.get("at") != step:
        return
    if fault.get("kind") == "hang":
        while True:
            time.sleep(3600)
    sys.stderr.write(f"injected fault: rank {rank} exits at {step}\n")
    sys.stderr.flush()
    os._exit(3)


def sweep(task: dict[str, Any], group: Any, device: Any, step: Any) -> dict[str, Any]:
    """Time every collective over the size sweep; per size: each sample's seconds per call (this
    rank's view) and the number of wrong elements after a checked call."""
    dtype = DTYPES[task["dtype"]]
    coll = Collectives(group, device, dtype)
    rank = dist.get_rank()
    results: dict[str, list[dict[str, Any]]] = {}
    for op in SWEPT:
        step(op)
        _fault(task, rank, op)
        rows = []
        for size in task["sizes"]:
            step(f"{op} {size} B")  # a hang names the size each rank reached
            count = element_count(size, coll.n, task["dtype"])
            run, refill, (out, expected) = coll.prepare(op, count)
            for _ in range(task["warmup"]):
                refill()
                run()
            _sync(device)
            start = time.perf_counter()
            run()
            _sync(device)
            # every rank must batch the same number of calls: agree on the slowest estimate
            probe_t = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
            dist.all_reduce(probe_t, op=dist.ReduceOp.MAX, group=group)
            batch = max(1, min(MAX_BATCH, math.ceil(task["batch_s"] / max(probe_t.item(), 1e-9))))
            samples = []
            for _ in range(task["samples"]):
                refill()
                _sync(device)
                dist.barrier(group=group)
                start = time.perf_counter()
                for _ in range(batch):
                    run()
                _sync(device)
                samples.append((time.perf_counter() - start) / batch)
            refill()
            run()
            _sync(device)
            wrong = int((out != expected).sum().item())
            rows.append({"count": count, "times": samples, "wrong": wrong})
        results[op] = rows
    return {"sweep": results, "reduce_scatter_impl": coll.reduce_scatter_impl}


def compute_benchmarks(task: dict[str, Any], device: Any) -> dict[str, Any]:
    """Block fwd+bwd, host<->device copies and HBM bandwidth (GPU) or host memory rates (CPU), CPU Adam, with this
    process's torch threads."""
    shape = compute.BlockShape(**task["shape"])
    dtype = DTYPES[task["dtype"]]
    budget = task["budget_s"]
    result: dict[str, Any] = {"shape": shape.describe()}
    block = compute.measure_block(torch, shape, dtype, device, budget_s=budget)
    result["block"] = {"dtype": task["dtype"], **block}
    if device.type == "cuda":
        result["copies"] = compute.measure_copies(torch, device, budget_s=budget)
        result["device_memory"] = compute.measure_device_memory(torch, device, budget_s=budget)
    else:
        result["host_memory"] = compute.measure_host_memory(torch, budget_s=budget)
    result["adam"] = compute.measure_cpu_adam(torch, params=task["adam_params"], budget_s=budget)
    return result


def overlap(task: dict[str, Any], group: Any, device: Any) -> dict[str, Any] | None:
    """Compute slowdown while an all_reduce runs concurrently: rank 0 times a matmul loop alone,
    then again while a second thread drives all_reduce calls that the other ranks join."""
    n = dist.get_world_size(group)
    if n < 2:
        return None
    rank = dist.get_rank(group)
    dtype = DTYPES[task["dtype"]]
    dim, iters = task["overlap_dim"], task["overlap_iters"]
    numel = task["overlap_bytes"] // torch.tensor([], dtype=dtype).element_size()
    buf = torch.ones(numel, dtype=dtype, device=device)
    # how many all_reduce calls cover the matmul loop: rank 0 measures, everyone agrees (MAX)
    calls = torch.zeros(1, dtype=torch.float64, device=device)
    alone = 0.0
    if rank == 0:
        alone = compute.matmul_loop(torch, device, dtype, dim, iters)
        start = time.perf_counter()
        dist.all_reduce(buf, group=group)
        _sync(device)
        one = time.perf_counter() - start
        calls[0] = math.ceil(1.5 * alone / max(one, 1e-9)) + 1
    else:
        dist.all_reduce(buf, group=group)
    dist.all_reduce(calls, op=dist.ReduceOp.MAX, group=group)
    count = int(min(calls.item(), 10_000))

    def drive() -> None:
        # On a GPU the calls go on their own stream: on the compute stream NCCL would wait for
        # the queued matmuls and nothing would overlap.
        side = torch.cuda.Stream(device) if device.type == "cuda" else None
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            for _ in range(count):
                dist.all_reduce(buf, group=group)
                buf.fill_(1)
        _sync(device)

    if rank != 0:
        drive()
        return None
    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    together = compute.matmul_loop(torch, device, dtype, dim, iters)
    thread.join()
    return {"alone_s": alone, "together_s": together, "slowdown": together / alone, "allreduce_calls": count}


def _init(task: dict[str, Any]) -> tuple[Any, int, int]:
    """Pick the device, then join the default process group; returns (device, rank, world)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if task["backend"] == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, int(task.get("threads_per_rank", 1))))
    _fault(task, rank, "init")
    dist.init_process_group(
        task["backend"],
        init_method="env://",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=task["op_timeout_s"]),
        # binds NCCL to this rank's GPU (barriers then need no guess about the device)
        device_id=device if device.type == "cuda" else None,
    )
    return device, rank, world


def _compute_phase(task: dict[str, Any], group: Any, device: Any, rank: int, step: Any) -> dict[str, Any]:
    """Overlap test on `group`, then the compute benchmarks.

    On a CPU host every rank runs them at the same time with its `threads_per_rank` threads, as
    `zerotune bench` and real training do: one rank alone on all cores would overstate what each
    rank gets (about 1.8x on 2 ranks). On a GPU host rank 0 runs them alone: GPUs compute
    independently, while the host-copy benchmarks of several ranks would contend for PCIe."""
    result: dict[str, Any] = {}
    step("overlap")
    _fault(task, rank, "overlap")
    result["overlap"] = overlap(task, group, device)
    step("compute")
    _fault(task, rank, "compute")
    if device.type == "cpu":
        dist.barrier()  # start together, so every measurement sees its peers computing
        torch.set_num_threads(max(1, int(task.get("threads_per_rank", 1))))
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
        result["compute"] = {**compute_benchmarks(task, device), "concurrent_ranks": ranks_here}
    elif rank == 0:
        torch.set_num_threads(max(1, int(task.get("compute_threads", 1))))
        result["compute"] = compute_benchmarks(task, device)
    dist.barrier()
    return result


def _describe(task: dict[str, Any], rank: int, device: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"rank": rank, "backend": task["backend"], "device": str(device)}
    if device.type == "cuda":
        result["device_name"] = torch.cuda.get_device_name(device)
    return result


def run(task: dict[str, Any], step: Any) -> dict[str, Any]:
    """A rank started by zerotune.launch: every rank sweeps the default group."""
    step("init")
    device, rank, _ = _init(task)
    try:
        result = _describe(task, rank, device)
        result.update(sweep(task, None, device, step))
        if task.get("compute"):
            result.update(_compute_phase(task, None, device, rank, step))
        step("done")
        return result
    finally:
        dist.destroy_process_group()


def run_distributed(task: dict[str, Any], step: Any) -> dict[str, Any] | None:
    """A rank under torchrun: one group per node (intra-node links), then one rank per node
    (inter-node links) while the others wait. Rank 0 returns every rank's results; others None.

    Returns {"local_world": L, "nodes": N, "ranks": [per-rank {"intra", "inter", ...}]}.
    """
    step("init")
    device, rank, world = _init(task)
    try:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        nodes = world // local_world
        node_groups = [
            dist.new_group(list(range(k * local_world, (k + 1) * local_world))) for k in range(nodes)
        ]
        inter_group = dist.new_group([k * local_world for k in range(nodes)]) if nodes > 1 else None
        mine = _describe(task, rank, device)
        if local_world > 1:
            mine["intra"] = sweep(task, node_groups[rank // local_world], device, step)
        dist.barrier()
        if inter_group is not None and rank % local_world == 0:
            mine["inter"] = sweep(task, inter_group, device, step)
        dist.barrier()
        if task.get("compute"):
            group = node_groups[rank // local_world] if local_world > 1 else inter_group
            mine.update(_compute_phase(task, group, device, rank, step))
        gathered: list[Any] = [None] * world if rank == 0 else []
        dist.gather_object(mine, gathered if rank == 0 else None, dst=0)
        step("done")
        return {"local_world": local_world, "nodes": nodes, "ranks": gathered} if rank == 0 else None
    finally:
        dist.destroy_process_group()


def main() -> None:
    task = launch.worker_task()
    try:
        result = run(task, launch.report_step)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        # A peer that died breaks our collective at once; linger so the launcher sees the rank
        # that failed first and names it, not us.
        time.sleep(1.0)
        os._exit(1)
    launch.write_result(result)
    # The result is on disk: skip torch's interpreter teardown, which takes seconds on a busy host.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
