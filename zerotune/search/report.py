"""The `zerotune recommend --json` document (schema_version 1): the config, its reasons, the
prediction, the alternatives and the baselines, as plain data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zerotune.dsconfig.knobs import STAGE3_KNOBS, ZERO_KEYS
from zerotune.model.fit import fits
from zerotune.model.step import step_summary
from zerotune.search.binding import group_label
from zerotune.search.evaluate import Evaluation

if TYPE_CHECKING:  # recommend.py re-exports to_json for the CLI
    from zerotune.search.recommend import Recommendation

JSON_SCHEMA_VERSION = 1


def candidate_summary(ev: Evaluation) -> dict[str, Any]:
    c = ev.candidate
    return {
        "stage": c.stage,
        "offload_optimizer": c.offload_optimizer,
        "offload_param": c.offload_param,
        "label": group_label((c.stage, c.offload_optimizer, c.offload_param)),
        "micro_batch": c.micro_batch,
        "grad_accum": c.grad_accum,
        "activation_checkpointing": c.checkpointing,
        "precision": c.precision,
        "reduce_bucket_size": c.reduce_bucket_size,
        "overlap_comm": c.overlap_comm,
        "contiguous_gradients": c.contiguous_gradients,
        **({ZERO_KEYS[knob]: getattr(c, knob) for knob in STAGE3_KNOBS} if c.stage == 3 else {}),
        "per_gpu_bytes": ev.per_gpu_bytes,
        "fits": ev.fits,
        "step_time_s": ev.step_time_s if ev.step is not None else None,
        "tokens_per_s": ev.tokens_per_s if ev.step is not None else None,
    }


def to_json(
    rec: Recommendation, *, files: dict[str, str] | None = None, measured: list | None = None
) -> dict:
    """The `--json` document (schema_version 1)."""
    r, best = rec.result, rec.as_run
    step = rec.detail  # the as-run estimate predict also computes (detail=True sums in timeline order)
    mem = best.memory
    b = mem.per_gpu
    s = r.stats
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "model": {"name": r.model.name, "params": r.model.params},
        "hardware": {
            "name": r.hardware.name,
            "origin": r.hardware.origin,
            "nodes": r.workload.nodes,
            "gpus_per_node": r.workload.gpus_per_node,
            "world_size": r.workload.world_size,
        },
        "request": {
            "seq_len": r.request.seq_len,
            "global_batch_tokens": r.request.global_batch_tokens,
            "objective": r.request.objective,
            "task": r.request.task,
            "safety_margin": r.request.safety_margin,
            "hourly_rate_usd": r.hourly_rate_usd,
            "hf": rec.hf,
        },
        **({"training_arguments": rec.training_arguments} if rec.hf else {}),
        "config": rec.config,
        "reasons": rec.reasons,
        "summary": list(rec.explanation.summary),
        "binding_constraint": {"kind": rec.explanation.binding, "detail": rec.explanation.binding_detail},
        "activation_checkpointing": best.candidate.checkpointing,
        "predicted": {
            **step_summary(step),
            "usd_per_billion_tokens": r.cost(best),
            "memory": {
                "per_gpu_bytes": b.total,
                "fits": fits(mem, r.hardware, r.workload.gpus_per_node, r.request.safety_margin).fits,
                "gpu_capacity_bytes": mem.gpu_capacity_bytes,
                "cpu_bytes_per_node": mem.cpu_bytes_per_node,
                "nvme_bytes_per_node": mem.nvme_bytes_per_node,
                "breakdown": b._asdict(),
            },
        },
        "top": [candidate_summary(ev) for ev in rec.top],
        "comparison": [{"name": bl.name, **candidate_summary(bl.evaluation)} for bl in rec.baselines],
        "search": {
            "candidates": s.candidates,
            "pruned_by_memory": s.pruned,
            "screened_out": s.screened_out,
            "predicted": s.predicted,
            "memory_estimates": s.memory_estimates,
            "step_predictions": s.step_predictions,
            "wall_s": s.wall_s,
        },
        "files": files or {},
        **({"measured": measured} if measured is not None else {}),
    }
