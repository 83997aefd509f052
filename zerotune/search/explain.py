"""Why the search chose what it chose: one reason per emitted key, and the summary.

Every reason names its evidence: the model's layer sizes, the profile's measured bandwidth,
the predicted memory of the alternatives that did not fit, and the predicted step-time cost of
the neighbouring values (re-evaluated through the search's memoised evaluator, so the numbers are
the same models the ranking used). This module writes the batch, precision, optimizer and offload
reasons and the summary; the zero_optimization knobs' reasons come from search/knob_reasons.py (one
per row of the knob table), the binding constraint from search/binding.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerotune.model.optimizer import CPU_ADAM_FALLBACK
from zerotune.search.binding import (  # noqa: F401 (group_label, predicted_line, signed_pct re-exported)
    binding_constraint,
    group_label,
    over_capacity,
    predicted_line,
    signed_pct,
    smallest_over,
    tie_line,
)
from zerotune.search.candidate import Candidate
from zerotune.search.knob_reasons import knob_reasons
from zerotune.search.objective import MEMORY_TOLERANCE
from zerotune.search.rank import Evaluation, SearchResult
from zerotune.units import fmt_count, fmt_gib


@dataclass(frozen=True)
class Explanation:
    summary: tuple[str, ...]
    binding: str
    """"memory" | "bandwidth" | "compute" | "offload" | "optimizer" """
    binding_detail: str
    reasons: dict[str, str]
    """dotted DeepSpeed key -> why this value"""


def explain(result: SearchResult, best: Evaluation | None = None) -> Explanation:
    """Reasons and summary for `best` (default: the winner)."""
    best = best or result.best
    if best is None:
        raise ValueError("nothing fits: no explanation to give")
    cand = best.candidate
    model, hw = result.model, result.hardware
    world = result.workload.world_size
    reasons: dict[str, str] = {}
    binding, binding_detail = binding_constraint(result, best)

    # --- batch
    tokens = cand.micro_batch * cand.grad_accum * world * result.request.seq_len
    reasons["train_batch_size"] = (
        f"= micro-batch {cand.micro_batch} x accumulation {cand.grad_accum} x {world} ranks "
        f"(DeepSpeed asserts this product); {tokens:,} tokens per step at seq_len {result.request.seq_len} "
        f"for a target of {result.request.global_batch_tokens:,} (--global-batch-tokens)"
    )
    mb_values = tuple(sorted({m for m, _ in result.space.splits}))
    alt = []
    for m, g in result.space.splits:
        if m == cand.micro_batch:
            continue
        ev = result.evaluate(cand.with_(micro_batch=m, grad_accum=g))
        alt.append((m, ev))
    bigger_nofit = [m for m, ev in alt if not ev.fits and m > cand.micro_batch]
    faster = [(m, ev) for m, ev in alt if ev.fits]
    text = f"sequences per rank per forward; tried {', '.join(map(str, mb_values))}"
    if bigger_nofit:
        smallest = min(bigger_nofit)
        ev = next(e for m, e in alt if m == smallest)
        text += f"; {smallest} {over_capacity(result, ev)}"
    if faster:
        m, ev = max(faster, key=lambda r: (r[1].tokens_per_s, -r[0]))
        text += f"; best alternative {m}: {signed_pct(ev.tokens_per_s / best.tokens_per_s - 1)} tokens/s"
    reasons["train_micro_batch_size_per_gpu"] = text
    reasons["gradient_accumulation_steps"] = (
        f"micro-steps per optimizer step to reach ~{result.request.global_batch_tokens:,} tokens "
        f"({cand.grad_accum} x {cand.micro_batch} x {world} sequences of {result.request.seq_len})"
    )
    reasons["gradient_clipping"] = (
        "1.0, DeepSpeed 0.19's default (0.16 had 0.0), written out so it is visible; HF Trainer's "
        "max_grad_norm default is also 1.0"
    )

    # --- precision and optimizer
    gpu = hw.gpu
    if cand.precision == "bf16":
        why = f"{gpu.name} supports bf16" if gpu else "bf16"
        if gpu and gpu.compute_capability:
            why += f" (compute capability {gpu.compute_capability} >= 8.0)"
        reasons["bf16.enabled"] = why + "; no loss scaling needed, same memory and speed as fp16"
    elif cand.precision == "fp16":
        reasons["fp16.enabled"] = f"{gpu.name if gpu else 'this GPU'} has no bf16 (compute capability < 8.0)"
        reasons["fp16.loss_scale"] = "0 = dynamic loss scaling (required for stable fp16 training)"
        reasons["fp16.initial_scale_power"] = "initial scale 2^16, DeepSpeed's default"
    else:
        reasons["bf16.enabled"] = (
            "false: fp32 on a host without GPUs (bf16 matmuls are ~150x slower on CPU, fp16 unsupported)"
        )
    offloaded = cand.offload_optimizer != "none"
    reasons["optimizer.type"] = (
        "AdamW; under optimizer offload DeepSpeed builds DeepSpeedCPUAdam (AVX CPU Adam) from this section"
        if offloaded
        else "AdamW; DeepSpeed builds FusedAdam on GPU from this section (torch AdamW on CPU hosts)"
    )
    if result.request.task == "finetune":
        reasons["optimizer.params.lr"] = (
            "--task finetune: Llama 2's supervised fine-tuning lr 2e-5 (arXiv 2307.09288 §3.1): set your own"
        )
        reasons["optimizer.params.betas"] = "HF TrainingArguments' AdamW defaults (0.9, 0.999)"
        reasons["optimizer.params.eps"] = "HF TrainingArguments' AdamW default 1e-8"
        reasons["optimizer.params.weight_decay"] = "Llama 2 supervised fine-tuning weight decay 0.1"
    else:
        reasons["optimizer.params.lr"] = (
            "--task pretrain: Llama 2's 7B/13B peak lr (arXiv 2307.09288 §2.2): set your own "
            "(--task finetune writes fine-tuning values)"
        )
        reasons["optimizer.params.betas"] = "Llama 2 pre-training betas (0.9, 0.95)"
        reasons["optimizer.params.eps"] = "Llama 2 pre-training eps 1e-5"
        reasons["optimizer.params.weight_decay"] = "Llama 2 pre-training weight decay 0.1"
    reasons["steps_per_print"] = "logging interval only"
    reasons["wall_clock_breakdown"] = "timers off (they synchronise the GPU every step)"

    # --- the knob table's keys (stage, communication knobs), then the offload sections
    reasons.update(knob_reasons(result, best))
    if offloaded:
        reasons["zero_optimization.offload_optimizer.device"] = (
            f"{cand.offload_optimizer}: optimizer states and the Adam step move to the host "
            f"({fmt_gib(best.memory.cpu_bytes_per_node)} host RAM per node predicted); "
            f"{_over_no_offload(result, cand)}"
        )
        reasons["zero_optimization.offload_optimizer.pin_memory"] = (
            "page-locked host buffers: full-speed PCIe DMA (DeepSpeed 0.19's default, written out)"
        )
    if cand.stage == 3 and cand.offload_param != "none":
        reasons["zero_optimization.offload_param.device"] = (
            f"{cand.offload_param}: 16-bit parameter partitions live on the host and stream in per layer"
        )
        reasons["zero_optimization.offload_param.pin_memory"] = (
            "page-locked host buffers (always pinned for cpu)"
        )
    for sect in ("offload_optimizer", "offload_param"):
        reasons[f"zero_optimization.{sect}.nvme_path"] = (
            "placeholder: point it at a local NVMe mount (DeepSpeed asserts it is set for nvme)"
        )

    # --- summary
    gpu_text = f"{hw.nodes * hw.gpus_per_node}x {gpu.name}" if gpu and hw.has_gpus else f"{world} CPU ranks"
    s = result.stats
    summary = (
        f"{model.name} ({fmt_count(model.params)} params) on {hw.name} ({gpu_text}): {group_label((cand.stage, *cand.offload))}, "
        f"micro-batch {cand.micro_batch} x accumulation {cand.grad_accum}, activation checkpointing "
        f"{'on' if cand.checkpointing else 'off'}, {cand.precision}",
        predicted_line(result, best),
        f"binding constraint: {binding_detail}",
        f"activation checkpointing {'on' if cand.checkpointing else 'off'}: "
        + _checkpointing_reason(result, best),
        f"search: {s.candidates:,} candidates, {s.pruned:,} pruned by memory, {s.step_predictions:,} step-time "
        f"predictions, {s.wall_s:.2f} s",
    )
    summary += (
        f"task {result.request.task}: "
        + (
            "Llama 2 pre-training recipe (2^21 tokens per step, AdamW 3e-4/0.95/1e-5); --task finetune for "
            "fine-tuning values"
            if result.request.task == "pretrain"
            else "64 sequences per step and fine-tuning AdamW values (Llama 2 SFT lr 2e-5, HF betas/eps)"
        ),
    )
    asked = result.request.global_batch_tokens
    got = cand.micro_batch * cand.grad_accum * world * result.request.seq_len
    if got != asked:
        unit = world * result.request.seq_len
        summary += (
            f"global batch: {got:,} tokens per step, not the {asked:,} asked (--global-batch-tokens): a step is "
            f"a whole number of sequences on each of {world} ranks, multiples of {unit:,} tokens "
            f"(micro-batch {cand.micro_batch} x accumulation {cand.grad_accum} x {world} x {result.request.seq_len})",
        )
    tie = tie_line(result, best)
    if tie:
        summary += (tie,)
    if best.memory.cpu_bytes_per_node and hw.has_gpus and not hw.host.ram_bytes:
        summary += (
            f"WARNING: host RAM NOT checked ({hw.name} records no host.ram_bytes): this offload needs "
            f"{fmt_gib(best.memory.cpu_bytes_per_node)} of host RAM per node",
        )
    notes = best.step.notes if best.step is not None else ()
    summary += tuple("WARNING: " + n for n in notes if n.startswith(CPU_ADAM_FALLBACK))[:1]
    if result.request.objective == "memory":
        summary += (
            f"objective memory: least per-GPU memory within {MEMORY_TOLERANCE:.0%} of the best throughput",
        )
    return Explanation(summary, binding, binding_detail, reasons)


def _over_no_offload(result: SearchResult, cand: Candidate) -> str:
    g = result.groups.get((cand.stage, "none", "none"))
    if g is None:
        return ""
    if g.fitting == 0 and g.smallest is not None:
        return f"without offload stage {cand.stage} does not fit: {smallest_over(result, g.smallest)}"
    if g.best is not None:
        return f"without offload stage {cand.stage} fits but predicts {g.best.tokens_per_s:,.0f} tokens/s"
    return ""


def _checkpointing_reason(result: SearchResult, best: Evaluation) -> str:
    """Activation checkpointing is the training script's switch, not a DeepSpeed key."""
    cand = best.candidate
    flipped = result.evaluate(cand.with_(checkpointing=not cand.checkpointing))
    hint = (
        " (enable it in the training script: model.gradient_checkpointing_enable())"
        if cand.checkpointing
        else ""
    )
    if not flipped.fits:
        return f"turning it off {over_capacity(result, flipped)}{hint}"
    delta = flipped.step_time_s / best.step_time_s - 1
    return f"turning it {'off' if cand.checkpointing else 'on'} changes the step time by {signed_pct(delta)}{hint}"
