"""The step-time model of a LoRA job against what the real engine does, counted, not timed (the CPU host is shared).

    .venv/bin/python scripts/evidence/lora_step.py run      # measure (a few minutes: 2 gloo ranks per row)
    .venv/bin/python scripts/evidence/lora_step.py          # compare from the data

Two deterministic checks on scripts/evidence/memory_engine.py's proxy (142M-parameter Llama, fp32, seq 128):
- FLOPs: torch's FlopCounterMode counts the matmuls (aten.mm) of one forward and one backward of the proxy, full
  and with rank-64 q/v adapters on a frozen base (zerotune.bench.decoder `add_lora`), against the layer FLOPs
  zerotune.model.setup `prepare` gives the step model (the frozen base's backward computes input gradients
  only; the first block's q/k/v none);
- collectives: bytes per step of each op DeepSpeed's comms logger records on 2 gloo ranks (stage 2: the gradient
  buckets; stage 3: the parameter all-gathers and the reduce-scatters), against zerotune.model.step's calls.
The measurements go to data/evidence/lora_step.json, which tests/unit/test_lora.py checks without torch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory_engine  # noqa: E402

from zerotune.files import write_atomic  # noqa: E402

DATA = REPO / "data" / "evidence" / "lora_step.json"
LORA = {"rank": 64, "targets": ["q_proj", "v_proj"]}
SEQ = 128
ROWS = {
    "s2-lora-r64": {"zero_optimization": {"stage": 2, "reduce_bucket_size": 50_000_000}},
    "s3-lora-r64": {"zero_optimization": {"stage": 3}},
}


def count_flops() -> dict[str, dict[str, int]]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from zerotune.bench.decoder import add_lora, build_decoder

    spec = memory_engine.proxy_spec()
    out = {}
    for name, lora in (("full", None), ("lora", LORA)):
        model = build_decoder(spec, seed=0)
        if lora:
            add_lora(model, lora["rank"], tuple(lora["targets"]), seed=1)
        ids = torch.randint(0, spec.vocab_size, (1, SEQ))
        with FlopCounterMode(display=False) as fwd:
            loss = model(ids, ids)
        with FlopCounterMode(display=False) as bwd:
            loss.backward()
        out[name] = {"forward": int(fwd.get_total_flops()), "backward": int(bwd.get_total_flops())}
    return out


def measure(name: str) -> list[dict[str, Any]]:
    from zerotune.bench import run_bench
    from zerotune.catalog.models import load_model

    config = {**ROWS[name], "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    result = run_bench(
        load_model(memory_engine.BASE_MODEL), config, layers=memory_engine.LAYERS, width_scale=memory_engine.WIDTH,
        seq_len=SEQ, micro_batch=1, grad_accum=1, nproc=2, device="cpu", warmup=0, steps=1, max_steps=1,
        logged_steps=1, timeout_s=1800, keep_precision=True, max_micro_steps=None, lora=LORA,
        progress=lambda message: print(f"  {message}", file=sys.stderr, flush=True),
    )  # fmt: skip
    return [{"op": c.op, "bytes": c.bytes, "size_bytes": c.size_bytes, "count": c.count, "phase": c.phase}
            for c in result.collectives]  # fmt: skip


def predicted_bytes(name: str) -> dict[str, float]:
    """Bytes per step of each op in zerotune.model.step's calls, as the comms logger counts them (one rank's
    shard of an all-gather, the whole bucket of a reduction)."""
    from zerotune.catalog.hardware import load_profile, with_counts
    from zerotune.dsconfig.settings import resolve
    from zerotune.model.step import predict_step
    from zerotune.schema.workload import Workload

    hardware = with_counts(load_profile("dgx-h100"), gpus_per_node=2, nodes=1)
    workload = Workload(seq_len=SEQ, precision="fp32", activation_checkpointing=False, gpus_per_node=2,
                        lora_rank=LORA["rank"], lora_targets=",".join(LORA["targets"]))  # fmt: skip
    est = predict_step(memory_engine.proxy_spec(), workload, resolve(ROWS[name]).zero, hardware, detail=True)
    out: dict[str, float] = {}
    for c in est.collectives:
        per_call = c.bytes / 2 if c.op == "all_gather" else c.bytes
        out[c.op] = out.get(c.op, 0.0) + per_call * c.count
    return out


def measured_bytes(calls: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in calls:
        op = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}.get(c["op"], c["op"])
        if op in ("all_gather", "reduce_scatter", "all_reduce"):
            out[op] = out.get(op, 0.0) + c["bytes"] * c["count"]
    return out


def predicted_flops() -> dict[str, dict[str, float]]:
    from zerotune.model.lora import Lora
    from zerotune.model.setup import prepare

    spec = memory_engine.proxy_spec()
    out = {}
    for name, lora in (("full", None), ("lora", Lora(LORA["rank"], tuple(LORA["targets"])))):
        prep = prepare(spec, lora, checkpointing=False)
        out[name] = {
            "forward": SEQ * sum(layer.flops.matmul_flops for layer in prep.layers),
            "backward": SEQ * sum(2 * layer.flops.matmul_flops - layer.frozen_flops for layer in prep.layers),
        }
    return out


def compare(data: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(what, measured, predicted) rows."""
    rows = []
    flops = predicted_flops()
    for name, phases in data["flops"].items():
        for phase, value in phases.items():
            rows.append((f"FLOPs {name} {phase}", float(value), flops[name][phase]))
    for name, calls in data["collectives"].items():
        predicted = predicted_bytes(name)
        for op, value in sorted(measured_bytes(calls).items()):
            rows.append((f"{name} {op} bytes/step", value, predicted.get(op, 0.0)))
    return rows


def report(data: dict[str, Any]) -> int:
    for what, measured, predicted in compare(data):
        error = (predicted - measured) / measured * 100 if measured else float("nan")
        print(f"{what:40s} measured {measured:16,.0f}  predicted {predicted:16,.0f}  {error:+.2f}%")
    return 0


def run() -> int:
    data: dict[str, Any] = {"flops": count_flops(), "collectives": {}}
    for name in ROWS:
        print(f"{name}: measuring", file=sys.stderr, flush=True)
        data["collectives"][name] = measure(name)
    import deepspeed
    import torch

    data |= {"recorded": datetime.date.today().isoformat(), "deepspeed": deepspeed.__version__, "torch": torch.__version__,
             "host": "2-core CPU host, 2 gloo ranks, DS_ACCELERATOR=cpu", "lora": LORA, "seq": SEQ}  # fmt: skip
    write_atomic(DATA, json.dumps(data, indent=1) + "\n", force=True)
    return report(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="report", choices=("report", "run"))
    args = parser.parse_args()
    return run() if args.command == "run" else report(json.loads(DATA.read_text()))


if __name__ == "__main__":
    sys.exit(main())
