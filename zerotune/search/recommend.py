"""`zerotune recommend` as a function: search, explain, emit, compare with the baselines.

The CLI (zerotune/cli/recommend.py) resolves the model and profile, calls `recommend`, renders
the result and writes the files; everything a test wants to check is on `Recommendation`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from zerotune.dsconfig import hf_auto
from zerotune.dsconfig.emit import emit_config, get_path
from zerotune.dsconfig.hf_auto import BASELINES, HF_AUTO_KEYS, HIDDEN, hf_hidden_size_values
from zerotune.errors import NothingFits
from zerotune.model.fit import host_rank_capacity
from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec
from zerotune.search.explain import Explanation, explain, group_label, predicted_line, signed_pct
from zerotune.search.rank import (
    Evaluation,
    SearchRequest,
    SearchResult,
    search,
)
from zerotune.search.report import (  # noqa: F401 (re-exported: the CLI imports to_json from here)
    JSON_SCHEMA_VERSION,
    candidate_summary,
    to_json,
)
from zerotune.search.space import workload_for
from zerotune.units import fmt_gib


@dataclass(frozen=True)
class Baseline:
    name: str
    evaluation: Evaluation
    """memory and step time of the baseline (predicted even when it does not fit)"""


@dataclass(frozen=True)
class Recommendation:
    result: SearchResult
    best: Evaluation
    explanation: Explanation
    config: dict[str, Any]
    """the DeepSpeed config as written (with --hf: HF-managed keys "auto")"""
    concrete: dict[str, Any]
    """the same config with every value concrete (what DeepSpeed sees after HF fills "auto")"""
    reasons: dict[str, str]
    detail: Any
    """StepEstimate of the choice with detail=True (timeline, per-collective records)"""
    top: tuple[Evaluation, ...]
    baselines: tuple[Baseline, ...]
    hf: bool
    hf_keep_tuned: bool = False
    written: Evaluation | None = None
    """the config as it will run, when that differs from `best`: with --hf (without --hf-keep-tuned) HF
    fills the hidden-size keys with its own formulas, so this is what the summary, --json "predicted"
    and `zerotune predict` on the written file report"""

    @property
    def as_run(self) -> Evaluation:
        """The evaluation of the config as DeepSpeed will run it (see `written`)."""
        return self.written or self.best

    @property
    def training_arguments(self) -> dict[str, Any]:
        """The HF TrainingArguments the prediction assumed (what --hf leaves "auto" is filled from)."""
        return self.arguments(self.as_run.candidate, self.concrete)

    @staticmethod
    def arguments(c, concrete: dict[str, Any]) -> dict[str, Any]:
        return {
            "per_device_train_batch_size": c.micro_batch,
            "gradient_accumulation_steps": c.grad_accum,
            "gradient_checkpointing": c.checkpointing,
            "bf16": c.precision == "bf16",
            "fp16": c.precision == "fp16",
            "max_grad_norm": 1.0,
            "learning_rate": get_path(concrete, "optimizer.params.lr"),
            "weight_decay": get_path(concrete, "optimizer.params.weight_decay"),
            "adam_beta1": get_path(concrete, "optimizer.params.betas")[0],
            "adam_beta2": get_path(concrete, "optimizer.params.betas")[1],
            "adam_epsilon": get_path(concrete, "optimizer.params.eps"),
        }

    def launch_line(self, config_path: str = "ds.json") -> str:
        """The TrainingArguments as command-line flags of a HF Trainer script."""
        return self.launch_flags(self.as_run.candidate, self.concrete, config_path)

    @staticmethod
    def launch_flags(cand, concrete: dict[str, Any], config_path: str = "ds.json") -> str:
        a = Recommendation.arguments(cand, concrete)
        flags = [
            f"--per_device_train_batch_size {a['per_device_train_batch_size']}",
            f"--gradient_accumulation_steps {a['gradient_accumulation_steps']}",
        ]
        if a["gradient_checkpointing"]:
            flags.append("--gradient_checkpointing")
        flags += [f"--{p}" for p in ("bf16", "fp16") if a[p]]
        flags += [
            f"--learning_rate {a['learning_rate']:g}",
            f"--weight_decay {a['weight_decay']:g}",
            f"--adam_beta2 {a['adam_beta2']:g}",
            f"--adam_epsilon {a['adam_epsilon']:g}",
            f"--deepspeed {config_path}",
        ]
        return " ".join(flags)

    @property
    def workload(self):
        """The job the prediction is for (batch split, checkpointing, precision, ranks)."""
        return workload_for(self.result.workload, self.as_run.candidate)

    @property
    def hf_values(self) -> dict[str, Any]:
        """What HF Trainer puts into the "auto" keys: the TrainingArguments matching this
        recommendation, and its hidden-size formulas for the hidden-size keys."""
        return hf_auto.hf_values(self.concrete, self.result.model)


def cheapest_node_count(
    model: ModelSpec, hardware: HardwareProfile, request: SearchRequest
) -> tuple[SearchResult, tuple[str, ...]]:
    """--objective cost on a multi-node profile: search 1..nodes nodes and keep the lowest $ per
    1B tokens. The rate scales with the GPU count (GPUs are rented per GPU; with_counts does the
    same for the profile's rate), so fewer nodes win when scaling out costs more than it gains."""
    from zerotune.catalog.hardware import with_counts

    rows = []
    for nodes in range(1, hardware.nodes + 1):
        hw = with_counts(hardware, nodes=nodes)
        rate = request.hourly_rate_usd
        req = replace(request, hourly_rate_usd=rate * nodes / hardware.nodes if rate is not None else None)
        res = search(model, hw, req)
        cost = res.cost(res.best) if res.best is not None else None
        rows.append((nodes, res, cost))
    priced = [(cost, -nodes, res) for nodes, res, cost in rows if cost is not None]
    if not priced:
        return rows[-1][1], ()
    cost, _, best = min(priced, key=lambda r: (r[0], r[1]))
    parts = [
        f"{n} node{'s' if n > 1 else ''}: " + (usd(c) if c is not None else "does not fit")
        for n, _, c in rows
    ]
    line = f"cost per 1B tokens by node count: {'; '.join(parts)} -> {best.workload.nodes} node(s)"
    return best, (line,)


def usd(amount: float) -> str:
    """$1,298 or $1.94: cents only where they matter."""
    return f"${amount:,.2f}" if amount < 100 else f"${amount:,.0f}"


def nothing_fits(result: SearchResult) -> NothingFits:
    """The error for a model no configuration fits: what the smallest one needs."""
    smallest = min(
        (g.smallest for g in result.groups.values() if g.smallest is not None),
        key=lambda ev: (ev.per_gpu_bytes, ev.candidate),
    )
    c = smallest.candidate
    cap = result.hardware.gpu.memory_bytes if result.hardware.gpu and result.hardware.has_gpus else None
    need = smallest.per_gpu_bytes * (1 + result.request.safety_margin)
    where = f" vs {fmt_gib(cap)}" if cap else ""
    if not result.hardware.has_gpus:
        host, why = host_rank_capacity(result.hardware, result.workload.gpus_per_node)
        where = f" vs {fmt_gib(host)} ({why})" if host else ""
    needs = f"{fmt_gib(need)} per {'GPU' if result.hardware.has_gpus else 'rank'}"
    hint = (
        "use more GPUs (--gpus/--nodes or a bigger profile), a shorter --seq-len, or a smaller model"
        if result.hardware.has_gpus
        else "this host's RAM holds every rank: use a smaller model or a shorter --seq-len, or a GPU profile"
    )
    if smallest.reject == "host":  # the rank fits; what the offload keeps in each node's RAM does not
        ram = result.hardware.host.ram_bytes or 0
        host_need = smallest.memory.cpu_bytes_per_node * (1 + result.request.safety_margin)
        needs = f"{fmt_gib(host_need)} of host RAM per node ({fmt_gib(need)} per GPU fits)"
        where = f" vs {fmt_gib(ram)}"
        hint = "use more nodes (each holds its share of the offloaded states), offload less, or a smaller model"
    return NothingFits(
        f"no configuration of {result.model.name} fits {result.hardware.name}: the smallest "
        f"({group_label((c.stage, *c.offload))}, micro-batch {c.micro_batch}) needs {needs} "
        f"with the {result.request.safety_margin:.0%} margin{where}",
        hint=hint,
    )


def top_alternatives(result: SearchResult, k: int) -> tuple[Evaluation, ...]:
    """The best `k` ranked candidates with distinct (stage, offload, batch split, checkpointing):
    the next-best configurations that differ in something that matters, not in a knob that
    changes nothing."""
    out: list[Evaluation] = []
    seen: set[tuple] = set()
    for ev in result.ranked:
        if ev.candidate.macro in seen:
            continue
        seen.add(ev.candidate.macro)
        out.append(ev)
        if len(out) >= k:
            break
    return tuple(out)


def recommend(
    model: ModelSpec,
    hardware: HardwareProfile,
    request: SearchRequest | None = None,
    *,
    top_k: int = 5,
    hf: bool = False,
    result: SearchResult | None = None,
    choice: Evaluation | None = None,
    vary_nodes: bool = False,
    hf_keep_tuned: bool = False,
    config_name: str = "ds.json",
) -> Recommendation:
    """Search and explain (InputError when nothing fits). `result`/`choice` let a caller
    (--measure) re-explain a different candidate of an existing search. With `vary_nodes` and
    the cost objective on a multi-node profile, every node count from 1 up is searched and the
    cheapest per token wins (`cheapest_node_count`)."""
    extra: tuple[str, ...] = ()
    if (
        result is None
        and vary_nodes
        and request is not None
        and request.objective == "cost"
        and hardware.nodes > 1
    ):
        result, extra = cheapest_node_count(model, hardware, request)
    result = result or search(model, hardware, request)
    best = choice or result.best
    if best is None:
        raise nothing_fits(result)
    explanation = explain(result, best)
    if extra:
        explanation = replace(explanation, summary=explanation.summary + extra)
    world = result.workload.world_size
    concrete = emit_config(best.candidate, world, task=result.request.task)
    reasons = dict(explanation.reasons)
    config = concrete
    written = None
    if hf:
        config = hf_auto.to_auto(concrete, keep_tuned=hf_keep_tuned)
        h = hf_hidden_size_values(model)
        present = [p for p in HF_AUTO_KEYS if hf_auto.has(concrete, p)]
        for pointer in present:
            if HF_AUTO_KEYS[pointer].fills_from != HIDDEN:
                path = hf_auto.dotted(pointer)
                reasons[path] = (
                    f'"auto": HF Trainer fills it from {HF_AUTO_KEYS[pointer].fills_from} and checks it; '
                    f"zerotune predicted with {get_path(concrete, path)}. " + reasons.get(path, "")
                ).strip()
        hidden = [hf_auto.dotted(p) for p in present if HF_AUTO_KEYS[p].fills_from == HIDDEN]
        if hidden and not hf_keep_tuned:
            key = {p: p.rsplit(".", 1)[1] for p in hidden}
            for path in hidden:
                reasons[path] = (
                    f'"auto": HF fills {h[key[path]]:,} from the hidden size ({model.hidden_size}); zerotune\'s '
                    f"hardware-tuned value is {get_path(concrete, path):,} (--hf-keep-tuned writes it). "
                    + reasons.get(path, "")
                )
            filled = best.candidate.with_(
                reduce_bucket_size=h["reduce_bucket_size"],
                **(
                    {
                        "prefetch_bucket_size": h["stage3_prefetch_bucket_size"],
                        "param_persistence_threshold": h["stage3_param_persistence_threshold"],
                    }
                    if best.candidate.stage == 3
                    else {}
                ),
            )
            written = result.evaluate.unconstrained(filled)
            tuned = (
                f"{best.step_time_s:.3g} s per step, {best.tokens_per_s:,.0f} tokens/s, "
                f"{fmt_gib(best.per_gpu_bytes)} per GPU"
            )
            lines = list(explanation.summary)
            lines[1] = predicted_line(result, written) + (
                "" if written.fits else " — does NOT fit: pass --hf-keep-tuned"
            )
            lines.insert(
                2,
                f"--hf: HF fills {', '.join(key.values())} from the hidden size, so the prediction above is "
                f"for HF's values; with zerotune's tuned values (--hf-keep-tuned): {tuned} "
                f"({signed_pct(best.tokens_per_s / written.tokens_per_s - 1)} tokens/s)",
            )
            explanation = replace(explanation, summary=tuple(lines))
    if hf:
        explanation = replace(
            explanation,
            summary=explanation.summary
            + (
                "HF Trainer launch (the TrainingArguments this prediction assumed): "
                + Recommendation.launch_flags(best.candidate, concrete, config_name),
            ),
        )
    from zerotune.model.step import predict_step

    run = written or best
    detail = predict_step(
        model,
        workload_for(result.workload, run.candidate),
        run.candidate.zero_settings(),
        hardware,
        detail=True,
    )
    baselines = [Baseline("zerotune", best)]
    for name, make in BASELINES.items():
        knobs = make(best.candidate.stage, model)
        baselines.append(Baseline(name, result.evaluate.unconstrained(best.candidate.with_(**knobs))))
    return Recommendation(
        result=result,
        best=best,
        explanation=explanation,
        config=config,
        concrete=concrete,
        reasons=reasons,
        detail=detail,
        top=top_alternatives(result, top_k),
        baselines=tuple(baselines),
        hf=hf,
        hf_keep_tuned=hf_keep_tuned,
        written=written,
    )
