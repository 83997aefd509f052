"""Predicted vs measured on DeepSpeed ZeRO runs that other people measured and published.

    .venv/bin/python scripts/evidence/published.py                    # table + summary, every run
    .venv/bin/python scripts/evidence/published.py --split holdout    # only the hold-out runs
    .venv/bin/python scripts/evidence/published.py --json             # one JSON document on stdout
    .venv/bin/python scripts/evidence/published.py --record           # rewrite data/published/recorded.json
    .venv/bin/python scripts/evidence/published.py --commands         # each run as a `zerotune predict` command

No GPU is lent to this project, so the GPU side of the model (zerotune.model) is judged against the
suite in data/published/runs.yaml: each run names its source (URL and where in it), the catalog model
and hardware profile, the DeepSpeed knobs the source states, the ones this suite had to assume (and
why), and what the source measured. Each run is re-predicted through zerotune's public functions,
the same path `zerotune predict` takes (dsconfig.settings.resolve -> model.memory.estimate_memory,
model.step.predict_step). Where a source also timed the same job on the same box without ZeRO (one
GPU, DDP), the run carries those rows as `same_box`: the box's compute rate and bandwidth come from
them, as `zerotune probe` would measure them on a real box (`run_hardware`).

Every throughput measurement is turned into tokens/s over the whole job before comparing:
tokens_per_s as is, tokens_per_s_per_gpu x world, samples_per_s x seq_len, tokens per step / step
time, or TFLOPS per GPU divided by the FLOPs per token of the formula the source used (`flops_formula`:
`6n`/`8n` = 6 or 8 x parameters per token, `megatron`/`megatron_recompute` = Narayanan et al. 2021
eq. 3: 72 or 96 x l h^2 (1 + s/6h + V/16lh) per token, `stated` = the run's `flops_per_token`, worked
out in runs.yaml from the source's own formula and dimensions). Each run says which counter the source read
(max_allocated, max_reserved, nvidia-smi) and its peak memory is compared with the estimate as that counter
reads it (zerotune.model.counters.counter_bytes: live bytes; with the caching allocator's cached blocks; with
the CUDA context and NCCL buffers too). The fit verdict judges the per-GPU total, as the commands do.

Metrics: MAPE and median signed error of throughput, Spearman rank correlation of tokens/s per GPU,
MAPE of peak memory, "predicted not to fit" for runs that really ran, and the same errors per
category (stage, offload, where the CPU Adam rate of an offload run comes from, GPU generation, tokens
per GPU per micro-step, multi-node, split).
The split (`fit` / `holdout`) is fixed per source by the rule in runs.yaml's header, chosen before
any prediction was looked at, so a model fitted on `fit` runs can be judged on `holdout` ones.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from zerotune.catalog.hardware import load_profile, with_counts  # noqa: E402
from zerotune.catalog.models import load_model  # noqa: E402
from zerotune.dsconfig.settings import resolve  # noqa: E402
from zerotune.files import write_atomic  # noqa: E402
from zerotune.model.compute import training_flops_per_token  # noqa: E402
from zerotune.model.counters import counter_bytes  # noqa: E402
from zerotune.model.fit import fits  # noqa: E402
from zerotune.model.memory import estimate_memory  # noqa: E402
from zerotune.model.step import predict_step  # noqa: E402
from zerotune.schema.workload import Workload  # noqa: E402

SUITE = REPO / "data" / "published" / "runs.yaml"
RECORDED = REPO / "data" / "published" / "recorded.json"

MemoryKind = Literal["max_allocated", "max_reserved", "nvidia-smi"]
FlopsFormula = Literal["6n", "8n", "megatron", "megatron_recompute", "stated"]
# Tokens per GPU per micro-step (micro-batch x seq_len): the bins the per-category table uses.
TOKEN_BINS = ((0, 1024, "<1k"), (1024, 4096, "1k-4k"), (4096, 16384, "4k-16k"), (16384, math.inf, ">=16k"))
OVER_CAPACITY = 0.0
"""The margin of the "ran but predicted not to fit" check: a run that ran is flagged when its predicted
peak is over the GPU's memory itself. The question is whether the model says the run could not have
run at all, not whether a job planned that way is safe (the commands' SAFETY_MARGIN, schema/job.py)."""

# GPU generation from compute capability (https://developer.nvidia.com/cuda-gpus).
GENERATIONS = {
    "7.0": "volta",
    "7.5": "turing",
    "8.0": "ampere",
    "8.6": "ampere",
    "8.9": "ada",
    "9.0": "hopper",
    "10.0": "blackwell",
}


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    where: str = Field(description="table / section / line of the source the numbers come from")
    quote: str = Field(description="the source's own text holding the measurement (short)")


class Measured(BaseModel):
    """What the source measured. At least one throughput figure or a peak memory."""

    model_config = ConfigDict(extra="forbid")

    tokens_per_s: float | None = Field(None, gt=0, description="whole job")
    tokens_per_s_per_gpu: float | None = Field(None, gt=0)
    samples_per_s: float | None = Field(None, gt=0, description="whole job, sequences of seq_len")
    step_time_s: float | None = Field(None, gt=0, description="one optimizer step (all micro-steps)")
    tflops_per_gpu: float | None = Field(None, gt=0)
    flops_formula: FlopsFormula | None = None
    flops_per_token: float | None = Field(
        None, gt=0, description="with flops_formula 'stated': the source's own FLOPs per token (its formula, its dims)"
    )
    throughput_note: str | None = Field(None, description="how the source timed it (what is in / out)")
    peak_memory_bytes: int | None = Field(None, gt=0, description="per GPU")
    memory_kind: MemoryKind | None = None

    @model_validator(mode="after")
    def _complete(self) -> Measured:
        figures = (self.tokens_per_s, self.tokens_per_s_per_gpu, self.samples_per_s, self.step_time_s)
        if sum(v is not None for v in (*figures, self.tflops_per_gpu)) > 1:
            raise ValueError("give one throughput figure per run (the one the source states)")
        if self.tflops_per_gpu is not None and self.flops_formula is None:
            raise ValueError("tflops_per_gpu needs flops_formula (how the source counted FLOPs)")
        if (self.flops_formula == "stated") != (self.flops_per_token is not None):
            raise ValueError("flops_formula 'stated' goes with flops_per_token, and only with it")
        if self.peak_memory_bytes is not None and self.memory_kind is None:
            raise ValueError("peak_memory_bytes needs memory_kind")
        if all(v is None for v in (*figures, self.tflops_per_gpu, self.peak_memory_bytes)):
            raise ValueError("a run needs a throughput figure or a peak memory")
        return self

    @property
    def has_throughput(self) -> bool:
        return any(
            v is not None
            for v in (
                self.tokens_per_s,
                self.tokens_per_s_per_gpu,
                self.samples_per_s,
                self.step_time_s,
                self.tflops_per_gpu,
            )
        )


class SameBox(BaseModel):
    """What the run's own source measured on the same machine without ZeRO, standing in for `zerotune
    probe` (a published run has no probe of its box). Applied over the catalog profile; the ZeRO run
    being predicted is never among the rows these numbers come from."""

    model_config = ConfigDict(extra="forbid")

    quote: str = Field(description="the source's own rows the numbers come from")
    single_gpu_tokens_per_s: float | None = Field(
        None,
        gt=0,
        description="the same model, precision and seq_len without ZeRO, per GPU: on one GPU of the box, or "
        "in a DDP row whose gradient all-reduce hides under backward (as `derivation` shows); its achieved "
        "FLOP/s (zerotune's training FLOPs per token x this rate) replaces the profile's",
    )
    single_gpu_profile: str | None = Field(
        None,
        description="catalog profile of the GPU the single-GPU row ran on, where the source ran it on a "
        "sibling of the run's GPU (the same chip and SM count, another board): its rate is scaled by the "
        "ratio of the two GPUs' datasheet peaks for the precision (their clocks)",
    )
    busbw_Bps: float | None = Field(
        None, gt=0, description="intra-node bus bandwidth, every collective, derived as `derivation` shows"
    )
    derivation: str = Field(description="the arithmetic from the quoted rows to the numbers")


class Run(BaseModel):
    """One published run: setup (stated or assumed) and measurement."""

    model_config = ConfigDict(extra="forbid")

    id: str
    source: Source
    split: Literal["fit", "holdout"]
    model: str = Field(
        description="catalog model name (profiles/models/), or models/<name>.yaml under data/published/ for "
        "research-only models kept out of the catalog (Megatron 175B-2T)"
    )
    profile: str = Field(description="catalog hardware profile (profiles/hardware/)")
    nodes: int = Field(1, gt=0)
    gpus_per_node: int = Field(gt=0)
    precision: Literal["bf16", "fp16", "fp32"]
    seq_len: int = Field(gt=0)
    micro_batch: int = Field(gt=0)
    grad_accum: int = Field(1, gt=0)
    activation_checkpointing: bool
    checkpoint_in_cpu: bool = Field(False, description="checkpoints held in host memory (cpu_checkpointing)")
    optimizer: Literal["adamw", "adam", "sgd", "lion", "adagrad"] = "adamw"
    precision_section: dict[str, Any] = Field(
        default_factory=dict,
        description="the run's other keys of its bf16/fp16 section (bf16_master_weights_and_grads, ...)",
    )
    zero: dict[str, Any] = Field(description="the run's zero_optimization block as DeepSpeed reads it")
    torch_autocast: dict[str, Any] = Field(
        default_factory=dict, description="the run's torch_autocast section (DeepSpeed runs the forward under it)"
    )
    kernels: dict[str, str] = Field(
        default_factory=dict, description="workload options the source states (attention, loss, ...)"
    )
    packing: bool | None = Field(
        None, description="sequences packed to seq_len (padding-free / varlen batches), as the source states"
    )
    activation_offloading: bool = Field(
        False, description="activations offloaded to host memory by the trainer (e.g. TRL/axolotl activation offloading)"
    )
    moe_impl: Literal["loop", "grouped"] | None = Field(
        None, description="MoE expert implementation: HF's per-expert loop or a grouped GEMM kernel"
    )
    omp_threads: int | None = Field(
        None,
        description="OpenMP threads per rank the launcher leaves (OMP_NUM_THREADS): 1 where the source launches "
        "several processes per node with torchrun / accelerate launch; null = the deepspeed launcher's default",
    )
    logits_held: Literal["none", "model", "fp32"] = Field(
        "none",
        description="the source's training loop keeps the model's output (its logits) through backward and the "
        "step (Workload.logits_held): model or fp32 as its transformers returned them",
    )
    zero_init: bool = Field(
        True,
        description="stage 3: the model is built under deepspeed.zero.Init (HF Trainer / accelerate); false "
        "where the source's script builds it before deepspeed.initialize (moved to the GPU whole)",
    )
    deepspeed_version: str | None = Field(
        None,
        description="the DeepSpeed release the source ran, where it states one or its date bounds it "
        "(null: the release zerotune models)",
    )
    stated: list[str] = Field(description="fields the source states")
    assumed: dict[str, str] = Field(default_factory=dict, description="field -> why this value was assumed")
    measured: Measured
    at_memory_limit: bool = Field(False, description="the source says the run was at the memory limit")
    same_box: SameBox | None = Field(None, description="the source's own non-ZeRO measurements of its box")
    notes: list[str] = Field(default_factory=list)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    def ds_config(self) -> dict[str, Any]:
        """The DeepSpeed config this run amounts to (the knobs zerotune reads)."""
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": self.micro_batch,
            "gradient_accumulation_steps": self.grad_accum,
            "zero_optimization": self.zero,
        }
        if self.precision != "fp32":
            config[self.precision] = {"enabled": True, **self.precision_section}
        if self.torch_autocast:
            config["torch_autocast"] = self.torch_autocast
        return config


def load_run_model(run: Run):
    """The run's ModelSpec: a catalog name, or a suite-only YAML relative to data/published/."""
    if run.model.endswith((".yaml", ".yml")):
        return load_model(str(SUITE.parent / run.model))
    return load_model(run.model)


def run_hardware(run: Run, spec, precision: str):
    """The catalog profile at the run's GPU counts, with the source's own measurements of its box
    (`same_box`) in place of the catalog's compute rate and intra-node bandwidth."""
    hardware = load_profile(run.profile)
    if run.gpus_per_node != hardware.gpus_per_node or run.nodes != hardware.nodes:
        hardware = with_counts(hardware, gpus_per_node=run.gpus_per_node, nodes=run.nodes)
    box = run.same_box
    if box is None:
        return hardware
    if box.single_gpu_tokens_per_s is not None:
        flops = training_flops_per_token(spec, run.seq_len, recompute=run.activation_checkpointing)
        scale = 1.0
        if box.single_gpu_profile is not None:
            sibling = load_profile(box.single_gpu_profile).gpu.peak_flops(precision)
            scale = hardware.gpu.peak_flops(precision) / sibling
        compute = hardware.compute.model_copy(
            update={
                "achieved_flops": {precision: flops * box.single_gpu_tokens_per_s * scale},
                "shape_points": {},
                "source": f"{run.id} same_box: {box.derivation}",
            }
        )
        hardware = hardware.model_copy(update={"compute": compute})
    if box.busbw_Bps is not None and hardware.intra_node is not None:
        link = hardware.intra_node
        collectives = {
            name: perf.model_copy(update={"busbw_Bps": box.busbw_Bps, "curve": [], "source": box.derivation})
            for name, perf in link.collectives.items()
        }
        hardware = hardware.model_copy(update={"intra_node": link.model_copy(update={"collectives": collectives})})
    return hardware


def load_suite(path: Path = SUITE) -> list[Run]:
    data = yaml.safe_load(path.read_text())
    return [Run.model_validate(item) for item in data["runs"]]


def flops_per_token(formula: str, spec, seq_len: int, stated: float | None = None) -> float:
    """FLOPs per token the way the source counted them (see the module docstring)."""
    if formula == "stated":
        assert stated is not None
        return stated
    if formula in ("6n", "8n"):
        return (6 if formula == "6n" else 8) * spec.params
    h, layers, vocab = spec.hidden_size, spec.num_layers, spec.vocab_size
    factor = 96 if formula == "megatron_recompute" else 72
    return factor * layers * h * h * (1 + seq_len / (6 * h) + vocab / (16 * layers * h))


def measured_tokens_per_s(run: Run, spec) -> float | None:
    m = run.measured
    tokens_per_step = run.seq_len * run.micro_batch * run.grad_accum * run.world
    if m.tokens_per_s is not None:
        return m.tokens_per_s
    if m.tokens_per_s_per_gpu is not None:
        return m.tokens_per_s_per_gpu * run.world
    if m.samples_per_s is not None:
        return m.samples_per_s * run.seq_len
    if m.step_time_s is not None:
        return tokens_per_step / m.step_time_s
    if m.tflops_per_gpu is not None:
        per_token = flops_per_token(m.flops_formula, spec, run.seq_len, m.flops_per_token)
        return m.tflops_per_gpu * 1e12 * run.world / per_token
    return None


def _workload_fields() -> set[str]:
    return set(Workload.model_fields)


def run_workload(run: Run, precision: str) -> Workload:
    """The run's job as zerotune's Workload; kernel options the model has no field for are dropped
    (predict_run lists them as unmodelled)."""
    fields = _workload_fields()
    return Workload(
        seq_len=run.seq_len,
        micro_batch=run.micro_batch,
        grad_accum=run.grad_accum,
        precision=precision,
        optimizer=run.optimizer,
        activation_checkpointing=run.activation_checkpointing,
        checkpoint_in_cpu=run.checkpoint_in_cpu or (run.activation_offloading and run.activation_checkpointing),
        packing=bool(run.packing),
        activation_offloading=run.activation_offloading,
        moe_impl=run.moe_impl or "grouped",
        zero_init=run.zero_init,
        logits_held=run.logits_held,
        deepspeed_version=run.deepspeed_version,
        autocast=resolve(run.ds_config()).autocast,
        omp_threads=run.omp_threads,
        gpus_per_node=run.gpus_per_node,
        nodes=run.nodes,
        **{k: v for k, v in run.kernels.items() if k in fields},
    )


def predict_run(run: Run) -> dict[str, Any]:
    """One run through zerotune: predicted tokens/s and peak memory next to the measured ones."""
    spec = load_run_model(run)
    resolved = resolve(run.ds_config())
    hardware = run_hardware(run, spec, resolved.precision)
    workload = run_workload(run, resolved.precision)
    unsupported = sorted(k for k in run.kernels if k not in _workload_fields())
    memory = estimate_memory(spec, workload, resolved.zero, hardware=hardware, safety_margin=OVER_CAPACITY)
    verdict = fits(memory, hardware, workload.gpus_per_node, margin=OVER_CAPACITY)
    fit = None if verdict.rank_capacity_bytes is None else verdict.reason != "gpu"
    estimate = predict_step(spec, workload, resolved.zero, hardware)
    measured_tps = measured_tokens_per_s(run, spec)
    z = resolved.zero
    offload = "none"
    if z.offload_param.device != "none":
        both = z.offload_optimizer.device != "none"
        offload = f"{'param+opt' if both else 'param'}-{z.offload_param.device}"
    elif z.offload_optimizer.device != "none":
        offload = f"opt-{z.offload_optimizer.device}"
    tokens_micro = run.micro_batch * run.seq_len
    row: dict[str, Any] = {
        "id": run.id,
        "split": run.split,
        "model": spec.name,
        "params": spec.params,
        "profile": run.profile,
        "world": run.world,
        "stage": z.stage,
        "offload": offload,
        "precision": resolved.precision,
        "generation": GENERATIONS.get(hardware.gpu.compute_capability or "", "other"),
        "multi_node": run.nodes > 1,
        "tokens_per_gpu_micro": tokens_micro,
        "token_bin": next(label for lo, hi, label in TOKEN_BINS if lo <= tokens_micro < hi),
        "predicted_tokens_per_s": estimate.tokens_per_s,
        "predicted_step_s": estimate.step_time_s,
        "measured_tokens_per_s": measured_tps,
        "tput_error": None if measured_tps is None else estimate.tokens_per_s / measured_tps - 1,
        "predicted_memory_bytes": memory.per_gpu.total,
        "predicted_counter_bytes": None,
        "measured_memory_bytes": run.measured.peak_memory_bytes,
        "memory_kind": run.measured.memory_kind,
        "memory_error": None,
        "fits": fit,
        "ran_but_predicted_oom": fit is False and not run.at_memory_limit,
        "cpu_adam": _cpu_adam_source(z, hardware),
        "method": run.measured.throughput_note,
        "setup": (run.model, run.profile, run.world, run.precision, run.seq_len, run.micro_batch, run.grad_accum),
        "unsupported_kernels": unsupported,
    }
    if run.measured.peak_memory_bytes:
        row["predicted_counter_bytes"] = counter_bytes(memory, run.measured.memory_kind)
        row["memory_error"] = row["predicted_counter_bytes"] / run.measured.peak_memory_bytes - 1
    return row


def _cpu_adam_source(zero, hardware) -> str:
    """Where the run's CPU Adam rate comes from: "none" (no optimizer offload), "profile" (the catalog's
    sourced rate) or "fallback" (zerotune's default, which the estimate's notes flag)."""
    if zero.offload_optimizer.device == "none":
        return "none"
    from zerotune.model.offload import node_cpu_adam

    origin = node_cpu_adam(hardware)[1]
    return origin if origin in ("profile", "fallback") else "host cpu"


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho with average ranks for ties; None below 3 points."""
    if len(xs) < 3:
        return None

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / var if var else None


def stage_order_violations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs of runs with the same setup, measured the same way (one `throughput_note`: an autotuner's
    timer metric and an end-to-end rate are not comparable), but a different ZeRO stage whose measured
    order the prediction reverses (issue 10: ZeRO-3 must not be predicted faster where it was measured
    slower)."""
    out = []
    timed = [r for r in rows if r["measured_tokens_per_s"] is not None]
    for i, a in enumerate(timed):
        for b in timed[i + 1 :]:
            if a["setup"] != b["setup"] or a["method"] != b["method"]:
                continue
            if a["stage"] == b["stage"] or a["offload"] != b["offload"]:
                continue
            lo, hi = (a, b) if a["stage"] < b["stage"] else (b, a)
            measured = hi["measured_tokens_per_s"] / lo["measured_tokens_per_s"]
            predicted = hi["predicted_tokens_per_s"] / lo["predicted_tokens_per_s"]
            if (measured < 1) != (predicted < 1):
                out.append(
                    {
                        "runs": [lo["id"], hi["id"]],
                        "measured_ratio": round(measured, 3),
                        "predicted_ratio": round(predicted, 3),
                    }
                )
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """MAPE (%), median signed error (%), Spearman, memory MAPE (%) and counts over `rows`."""
    tput = [r for r in rows if r["tput_error"] is not None]
    mem = [r for r in rows if r["memory_error"] is not None]

    def pct(values: list[float]) -> float | None:
        return round(100 * statistics.fmean(values), 2) if values else None

    rho = spearman(
        [r["predicted_tokens_per_s"] / r["world"] for r in tput],
        [r["measured_tokens_per_s"] / r["world"] for r in tput],
    )
    return {
        "runs": len(rows),
        "throughput_runs": len(tput),
        "throughput_mape": pct([abs(r["tput_error"]) for r in tput]),
        "throughput_median_error": (
            round(100 * statistics.median(r["tput_error"] for r in tput), 2) if tput else None
        ),
        "within_2x": sum(0.5 <= 1 + r["tput_error"] <= 2 for r in tput),
        "spearman": None if rho is None else round(rho, 3),
        "memory_runs": len(mem),
        "memory_mape": pct([abs(r["memory_error"]) for r in mem]),
        "memory_median_error": (
            round(100 * statistics.median(r["memory_error"] for r in mem), 2) if mem else None
        ),
        "ran_but_predicted_oom": [r["id"] for r in rows if r["ran_but_predicted_oom"]],
        "stage_order_violations": stage_order_violations(rows),
    }


CATEGORIES = ("stage", "offload", "cpu_adam", "generation", "token_bin", "multi_node", "split")


def by_category(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for key in CATEGORIES:
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault(str(row[key]), []).append(row)
        out[key] = {
            name: {
                k: v
                for k, v in summarize(group).items()
                if k not in ("ran_but_predicted_oom", "stage_order_violations")
            }
            for name, group in sorted(groups.items())
        }
    return out


def evaluate(split: str = "all", path: Path = SUITE) -> dict[str, Any]:
    runs = [r for r in load_suite(path) if split == "all" or r.split == split]
    rows = [predict_run(run) for run in runs]
    summary, categories = summarize(rows), by_category(rows)
    for row in rows:
        row["setup"] = list(row["setup"])
    return {"split": split, "summary": summary, "categories": categories, "runs": rows}


def _fmt(value: float | None, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def print_report(result: dict[str, Any]) -> None:
    head = (
        f"{'run':44} {'stage':>5} {'offload':>12} {'world':>5} {'tok/micro':>9} "
        f"{'pred tok/s/gpu':>14} {'meas tok/s/gpu':>14} {'err%':>7} {'pred GiB':>8} {'meas GiB':>8} {'err%':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in result["runs"]:
        world = r["world"]
        meas = r["measured_tokens_per_s"]
        print(
            f"{r['id'][:44]:44} {r['stage']:>5} {r['offload']:>12} {world:>5} {r['tokens_per_gpu_micro']:>9} "
            f"{_fmt(r['predicted_tokens_per_s'] / world):>14} {_fmt(None if meas is None else meas / world):>14} "
            f"{_fmt(r['tput_error'], 100, 1):>7} {_fmt(r['predicted_counter_bytes'] or r['predicted_memory_bytes'], 1 / 2**30, 1):>8} "
            f"{_fmt(r['measured_memory_bytes'], 1 / 2**30, 1):>8} {_fmt(r['memory_error'], 100, 1):>6}"
            + ("  PREDICTED-OOM" if r["ran_but_predicted_oom"] else "")
        )
    s = result["summary"]
    print()
    print(
        f"split {result['split']}: {s['runs']} runs, throughput on {s['throughput_runs']}: "
        f"MAPE {_fmt(s['throughput_mape'], digits=1)}%, median error {_fmt(s['throughput_median_error'], digits=1)}%, "
        f"within 2x {s['within_2x']}/{s['throughput_runs']}, Spearman {s['spearman']}; "
        f"memory on {s['memory_runs']}: MAPE {_fmt(s['memory_mape'], digits=1)}%, "
        f"median error {_fmt(s['memory_median_error'], digits=1)}%"
    )
    if s["ran_but_predicted_oom"]:
        print(f"ran but predicted not to fit: {', '.join(s['ran_but_predicted_oom'])}")
    for v in s["stage_order_violations"]:
        print(
            f"stage order reversed: {v['runs'][1]} / {v['runs'][0]} measured {v['measured_ratio']:.2f}x, "
            f"predicted {v['predicted_ratio']:.2f}x"
        )
    print()
    print(f"{'category':12} {'value':14} {'runs':>4} {'tput MAPE%':>10} {'median%':>8} {'mem MAPE%':>9}")
    for key, groups in result["categories"].items():
        for name, g in groups.items():
            print(
                f"{key:12} {name:14} {g['runs']:>4} {_fmt(g['throughput_mape'], digits=1):>10} "
                f"{_fmt(g['throughput_median_error'], digits=1):>8} {_fmt(g['memory_mape'], digits=1):>9}"
            )
    unsupported = sorted({k for r in result["runs"] for k in r["unsupported_kernels"]})
    if unsupported:
        print(f"\nnote: workload options stated by sources but not modelled: {', '.join(unsupported)}")


def recorded_figures(result_all: dict[str, Any], splits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What --record writes: the headline figures the regression test holds the model to."""
    keep = (
        "runs",
        "throughput_runs",
        "throughput_mape",
        "throughput_median_error",
        "spearman",
        "memory_runs",
        "memory_mape",
    )

    def figures(summary: dict[str, Any]) -> dict[str, Any]:
        return {k: summary[k] for k in keep} | {
            "ran_but_predicted_oom": len(summary["ran_but_predicted_oom"]),
            "stage_order_violations": len(summary["stage_order_violations"]),
        }

    return {"all": figures(result_all["summary"]), **{n: figures(r["summary"]) for n, r in splits.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("all", "fit", "holdout"), default="all")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--record", action="store_true", help=f"rewrite {RECORDED.relative_to(REPO)}")
    parser.add_argument(
        "--commands",
        nargs="?",
        const="",
        metavar="DIR",
        help="print each run's `zerotune predict` command instead, its files written under DIR "
        "(default data/published/cli/): scripts/evidence/published_cli.py",
    )
    args = parser.parse_args(argv)
    if args.commands is not None:
        from scripts.evidence import published_cli

        return published_cli.main(["--out", args.commands] if args.commands else [])
    result = evaluate(args.split)
    if args.record:
        splits = {name: evaluate(name) for name in ("fit", "holdout")}
        everything = result if args.split == "all" else evaluate("all")
        write_atomic(RECORDED, json.dumps(recorded_figures(everything, splits), indent=2) + "\n", force=True)
        print(f"recorded {RECORDED.relative_to(REPO)}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
