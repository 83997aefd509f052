"""Memory timeline vs the real DeepSpeed engine: live bytes per phase, predicted and measured.

    .venv/bin/python scripts/evidence/memory_engine.py run [--only NAME ...] [--force]   # measure (slow)
    .venv/bin/python scripts/evidence/memory_engine.py                                   # table from the data

`run` trains a 142M-parameter Llama (llama-7b's shapes at width 0.25, 10 blocks: HF layout, random
init, nothing downloaded; zerotune.bench.decoder) with DeepSpeed on 2 gloo ranks of this CPU host
(DS_ACCELERATOR=cpu), one job at a time, each in its own processes (`zerotune bench`'s launcher:
DeepSpeed keeps stage-3 engines alive through module references). Every allocation and free is
counted, on every thread, from before the model is built (zerotune.bench.live_memory: the CPU
allocator's process-wide count read at each profiler record), and each row keeps the fullest rank's
live bytes after init and the peaks of forward, backward and step. The measurements go to data/evidence/memory_engine.json (with the date and versions), so that
tests/unit/test_memory_engine.py checks the model against them without DeepSpeed.

fp32 rows use seq 128; bf16 matmul is ~150x slower on this CPU, so bf16 rows use seq 4 (memory does
not depend on speed), except two at seq 128 and 512 that check the bf16 activations and logits. Rows pass a torch optimizer (DeepSpeed's ops JIT-compile for ~90 s) except the
offload rows, where DeepSpeedCPUAdam runs as it would in a real offload job; the `-foreach` rows ask
torch for its multi-tensor Adam, what it runs on CUDA (the GPU bench's optimizer), where CPU ranks
default to the single-tensor one.
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

from zerotune.dsconfig.settings import resolve  # noqa: E402
from zerotune.files import write_atomic  # noqa: E402
from zerotune.schema.model import ModelSpec  # noqa: E402
from zerotune.schema.workload import Workload  # noqa: E402

DATA = REPO / "data" / "evidence" / "memory_engine.json"
BASE_MODEL, LAYERS, WIDTH = "llama-7b", 10, 0.25
PHASES = ("init", "forward", "backward", "step", "after step")
LIMIT_PCT, OVER_LIMIT_PCT = 5.0, 10.0
"""Acceptance (issue 23): every phase within 5%, no over-estimate above 10%."""
KNOWN_MISSES: dict[tuple[str, str], float] = {}
"""Phases the model misses by more than LIMIT_PCT on the recorded grid, each held to its recorded
error rounded up + 1 point by tests/unit/test_memory_engine.py so they cannot grow unnoticed. None
since the harness records every free (zerotune.bench.live_memory: the 0.07-0.25 GiB that stage 3
showed after init, different in every run, were blocks gloo's worker threads freed without a
profiler record, and so were the stage-1 and offload buckets once thought to outlive the step) and
the model has the stage 1/2 bucket flush's flattened copy (zerotune.model.live_bytes)."""


def _row(name: str, stage: int, *, precision: str = "fp32", seq: int = 128, micro: int = 1, ga: int = 1,
         ckpt: bool = False, offload: str = "none", foreach: bool = False, lora: tuple[int, tuple[str, ...]] | None = None,
         **zero: Any) -> dict[str, Any]:
    section: dict[str, Any] = {"stage": stage, **zero}
    if offload != "none":
        section["offload_optimizer"] = {"device": offload}
    params: dict[str, Any] = {"lr": 1e-4, **({"foreach": True} if foreach else {})}
    config: dict[str, Any] = {"zero_optimization": section, "optimizer": {"type": "AdamW", "params": params}}
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    row = {"name": name, "config": config, "seq": seq, "micro": micro, "ga": ga, "ckpt": ckpt, "cpu_adam": offload != "none"}
    if lora is not None:
        row["lora"] = {"rank": lora[0], "targets": list(lora[1])}
    return row


GRID = [
    _row("s0", 0),
    _row("s0-ga2", 0, ga=2),
    _row("s1", 1),
    _row("s1-b5e6", 1, reduce_bucket_size=5_000_000),
    _row("s1-overlap-b5e7", 1, reduce_bucket_size=50_000_000, overlap_comm=True),
    _row("s1-ga2", 1, ga=2, reduce_bucket_size=50_000_000),
    _row("s2", 2, reduce_bucket_size=50_000_000),
    _row("s2-overlap-b5e6", 2, reduce_bucket_size=5_000_000, overlap_comm=True),
    _row("s2-nocontig", 2, reduce_bucket_size=50_000_000, contiguous_gradients=False),
    _row("s2-ga2", 2, ga=2, reduce_bucket_size=50_000_000),
    _row("s2-ckpt-mb2", 2, micro=2, ckpt=True, reduce_bucket_size=50_000_000),
    _row("s3", 3),
    _row("s3-b5e6-nocontig", 3, reduce_bucket_size=5_000_000, contiguous_gradients=False),
    _row("s3-ga2", 3, ga=2),
    _row("s3-ckpt", 3, ckpt=True),
    _row("s0-bf16", 0, precision="bf16", seq=4),
    _row("s1-bf16", 1, precision="bf16", seq=4),
    _row("s2-bf16", 2, precision="bf16", seq=4, reduce_bucket_size=50_000_000),
    _row("s3-bf16", 3, precision="bf16", seq=4),
    _row("s2-offload", 2, offload="cpu", reduce_bucket_size=50_000_000),
    _row("s3-offload", 3, offload="cpu"),
    # torch's multi-tensor Adam, its default on CUDA (the GPU bench's optimizer), forced on the CPU
    # ranks; stage 3 with sub-groups smaller than the rank's partition
    _row("s0-bf16-foreach", 0, precision="bf16", seq=4, foreach=True),
    _row("s2-bf16-foreach", 2, precision="bf16", seq=4, reduce_bucket_size=50_000_000, foreach=True),
    _row("s3-bf16-foreach-sg2e7", 3, precision="bf16", seq=4, sub_group_size=20_000_000, foreach=True),
    # bf16 activations and logits (their fp32 upcast in the loss) at a length where they count
    _row("s2-bf16-seq128", 2, precision="bf16", seq=128, reduce_bucket_size=50_000_000),
    _row("s2-bf16-seq512", 2, precision="bf16", seq=512, reduce_bucket_size=50_000_000),
    # LoRA: the base frozen (requires_grad=False), rank-64 adapters on q_proj and v_proj (peft's default
    # targets for Llama), as zerotune.bench.decoder `add_lora` builds them
    _row("s2-lora-r64", 2, reduce_bucket_size=50_000_000, lora=(64, ("q_proj", "v_proj"))),
    _row("s3-lora-r64", 3, lora=(64, ("q_proj", "v_proj"))),
    # every block linear adapted (peft's all-linear): the MLP's and o_proj's inputs kept again
    _row("s2-lora-all-r16", 2, reduce_bucket_size=50_000_000,
         lora=(16, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))),
    # bf16: the 16-bit RMSNorm terms under a frozen weight
    _row("s2-bf16-lora-seq128", 2, precision="bf16", seq=128, reduce_bucket_size=50_000_000, lora=(64, ("q_proj", "v_proj"))),
]


def proxy_spec() -> ModelSpec:
    from zerotune.catalog.models import derive, load_model

    return derive(load_model(BASE_MODEL), num_layers=LAYERS, width_scale=WIDTH)


def measure(row: dict[str, Any]) -> dict[str, Any]:
    from zerotune.bench import run_bench
    from zerotune.catalog.models import load_model

    result = run_bench(
        load_model(BASE_MODEL),
        row["config"],
        layers=LAYERS,
        width_scale=WIDTH,
        seq_len=row["seq"],
        micro_batch=row["micro"],
        grad_accum=row["ga"],
        nproc=2,
        device="cpu",
        warmup=0,
        steps=1,
        max_steps=1,
        logged_steps=1,
        timeout_s=1800,
        activation_checkpointing=row["ckpt"],
        memory_phases=True,
        keep_precision=True,
        cpu_adam=row["cpu_adam"],
        max_micro_steps=None,
        lora=row.get("lora"),
        progress=lambda message: print(f"  {message}", file=sys.stderr, flush=True),
    )
    measured = {p.phase: {"peak": p.measured_peak_bytes, "end": p.measured_end_bytes} for p in result.memory_phases or []}
    return {**row, "engine_config": result.config, "optimizer_class": result.optimizer_class,
            "measured": measured, "deepspeed": result.deepspeed_version, "torch": result.torch_version}


def workload(row: dict[str, Any]) -> Workload:
    return Workload(
        seq_len=row["seq"],
        micro_batch=row["micro"],
        grad_accum=row["ga"],
        precision=resolve(row["config"]).precision,
        optimizer="adamw",
        activation_checkpointing=row["ckpt"],
        gpus_per_node=2,
        lora_rank=row["lora"]["rank"] if row.get("lora") else None,
        lora_targets=",".join(row["lora"]["targets"]) if row.get("lora") else "",
    )


def measured_phases(row: dict[str, Any]) -> dict[str, int]:
    """Phase -> measured bytes: the live bytes after init and after the step, the peaks of the others."""
    m = row["measured"]
    return {"init": m["init"]["end"], "forward": m["forward"]["peak"], "backward": m["backward"]["peak"],
            "step": m["step"]["peak"], "after step": m["step"]["end"]}


def predicted_phases(spec: ModelSpec, row: dict[str, Any]) -> dict[str, int]:
    from zerotune.model.memory import estimate_memory  # not needed to measure

    # the rows pass a torch optimizer except under offload (DeepSpeedCPUAdam); on a CPU host the
    # offloaded states share the one memory with everything else
    foreach = bool(row["config"]["optimizer"]["params"].get("foreach"))  # else torch's CPU default: single-tensor
    est = estimate_memory(spec, workload(row), resolve(row["engine_config"]).zero, torch_optimizer=not row["cpu_adam"],
                          foreach=foreach, gloo=True)
    return est.bench_phases_flat(host_is_device=True)


def compare(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per row and phase: measured, predicted and the signed error in %; plus each row's peak."""
    spec = ModelSpec.model_validate(data["model"])
    out = []
    for row in data["rows"]:
        measured, predicted = measured_phases(row), predicted_phases(spec, row)
        measured["peak"] = max(measured[p] for p in ("forward", "backward", "step"))
        predicted["peak"] = max(predicted[p] for p in ("forward", "backward", "step"))
        for phase, value in measured.items():
            out.append({"row": row["name"], "phase": phase, "measured": value, "predicted": predicted[phase],
                        "error_pct": (predicted[phase] - value) / value * 100})
    return out


def report(data: dict[str, Any]) -> int:
    from rich.console import Console
    from rich.table import Table

    rows = compare(data)
    columns = (*PHASES, "peak")
    table = Table(title=f"memory timeline vs DeepSpeed {data['deepspeed']} ({data['recorded']}): error % per phase")
    table.add_column("row")
    for c in columns:
        table.add_column(c, justify="right")
    by_row: dict[str, dict[str, float]] = {}
    for r in rows:
        by_row.setdefault(r["row"], {})[r["phase"]] = r["error_pct"]
    for name, errors in by_row.items():
        table.add_row(name, *(f"{errors[c]:+.1f}" for c in columns))
    Console().print(table)
    worst = max(rows, key=lambda r: abs(r["error_pct"]))
    over = max(r["error_pct"] for r in rows)
    mape = sum(abs(r["error_pct"]) for r in rows) / len(rows)
    peak_mape = sum(abs(r["error_pct"]) for r in rows if r["phase"] == "peak") / len(by_row)
    print(f"{len(by_row)} rows: phase MAPE {mape:.2f}%, peak MAPE {peak_mape:.2f}%, worst {worst['error_pct']:+.1f}% "
          f"({worst['row']} {worst['phase']}), largest over-estimate {over:+.1f}%")
    ok = all(abs(r["error_pct"]) <= LIMIT_PCT for r in rows) and over <= OVER_LIMIT_PCT
    print("acceptance (every phase within 5%, no over-estimate > 10%):", "met" if ok else "NOT met")
    return 0 if ok else 1


def run(only: list[str], force: bool) -> int:
    data: dict[str, Any] = json.loads(DATA.read_text()) if DATA.exists() else {}
    data.setdefault("model", proxy_spec().model_dump(mode="json"))
    data.setdefault("rows", [])
    done = {r["name"] for r in data["rows"]}
    for row in GRID:
        if (only and row["name"] not in only) or (row["name"] in done and not force):
            continue
        print(f"{row['name']}: measuring", file=sys.stderr, flush=True)
        got = measure(row)
        data["rows"] = [r for r in data["rows"] if r["name"] != row["name"]] + [got]
        data["recorded"] = datetime.date.today().isoformat()
        data["deepspeed"], data["torch"] = got["deepspeed"], got["torch"]
        data["host"] = "2-core CPU host, 2 gloo ranks, DS_ACCELERATOR=cpu"
        write_atomic(DATA, json.dumps(data, indent=1) + "\n", force=True)
        print(f"{row['name']}: {got['measured']}", file=sys.stderr, flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="report", choices=("report", "run"))
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    if args.command == "run":
        return run(args.only, args.force)
    return report(json.loads(DATA.read_text()))


if __name__ == "__main__":
    sys.exit(main())
