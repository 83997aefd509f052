"""Why the search chose what it chose: one reason per emitted key, and the binding constraint.

Every reason names its evidence: the model's layer sizes, the profile's measured bandwidth,
the predicted memory of the alternatives that did not fit, and the predicted step-time cost of
the neighbouring grid values (re-evaluated through the search's memoised evaluator, so the
numbers are the same models the ranking used).

The binding constraint is
- "memory" when a configuration that shards or offloads less than the chosen one (a lower rung
  of LADDER) fits nowhere: the summary says which and by how much it is over;
- otherwise what bounds the predicted step: "bandwidth" when exposed communication is more than
  BANDWIDTH_SHARE of the step (or the step model calls it communication-bound), "offload" /
  "optimizer" when the step model says so, else "compute".
"""

from __future__ import annotations

from dataclasses import dataclass

from zerotune.model.comm import fill_buckets
from zerotune.model.optimizer import CPU_ADAM_FALLBACK
from zerotune.search.candidate import Candidate
from zerotune.search.objective import LADDER, MEMORY_TOLERANCE, TIE_BAND, quantize
from zerotune.search.rank import Evaluation, SearchResult, host_rank_capacity
from zerotune.search.saturation import busbw_at
from zerotune.units import DTYPE_BYTES, GB, fmt_bytes, fmt_count, fmt_gib

BANDWIDTH_SHARE = 0.10
"""Exposed communication above this share of the step makes bandwidth the binding constraint."""

@dataclass(frozen=True)
class Explanation:
    summary: tuple[str, ...]
    binding: str
    """"memory" | "bandwidth" | "compute" | "offload" | "optimizer" """
    binding_detail: str
    reasons: dict[str, str]
    """dotted DeepSpeed key -> why this value"""


def group_label(key: tuple[int, str, str]) -> str:
    stage, opt, par = key
    names = {"cpu": "CPU", "nvme": "NVMe"}
    if opt == "none":
        return f"stage {stage} without offload"
    if par == "none":
        return f"stage {stage} + {names[opt]} optimizer offload"
    return f"stage {stage} + {names[opt]} optimizer and {names[par]} parameter offload"


def signed_pct(x: float) -> str:
    """+1.2% / -0.4% / ±0.0% (a relative change)."""
    return "±0.0%" if abs(x) < 0.0005 else f"{x * 100:+.1f}%"


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _capacity(result: SearchResult) -> int | None:
    gpu = result.hardware.gpu
    return gpu.memory_bytes if gpu is not None else None


def _over(result: SearchResult, ev: Evaluation) -> str:
    """'needs 95.3 GiB per GPU (+10% margin: 104.8 GiB) vs 80.0 GiB, 24.8 GiB over'."""
    cap = _capacity(result)
    need = ev.per_gpu_bytes
    margin = result.request.safety_margin
    if ev.reject == "rank":
        cap, why = host_rank_capacity(result.hardware, result.workload.gpus_per_node)
        return (
            f"needs {fmt_gib(need)} per rank (+{margin:.0%} margin: {fmt_gib(need * (1 + margin))}) vs "
            f"{fmt_gib(cap or 0)} ({why})"
        )
    if ev.reject == "host":
        ram = result.hardware.host.ram_bytes or 0
        return (
            f"needs {fmt_gib(ev.memory.cpu_bytes_per_node)} of host RAM per node (+{margin:.0%} margin) "
            f"vs {fmt_gib(ram)}"
        )
    if cap is None:
        return f"needs {fmt_gib(need)} per GPU"
    padded = need * (1 + margin)
    return (
        f"needs {fmt_gib(need)} per GPU (+{margin:.0%} margin: {fmt_gib(padded)}) vs {fmt_gib(cap)}, "
        f"{fmt_gib(padded - cap)} over"
    )


def binding_constraint(result: SearchResult, best: Evaluation) -> tuple[str, str]:
    """(kind, one-line detail) — see the module docstring.

    Memory binds when a less-sharded option (a lower LADDER rung) fits nowhere and, predicted
    for the same batch split regardless of memory, would be faster than the choice.
    """
    cand = best.candidate
    chosen = (cand.stage, *cand.offload)
    rung = LADDER.index(chosen) if chosen in LADDER else len(LADDER)
    blocked = [k for k in LADDER[:rung] if k in result.groups and result.groups[k].fitting == 0]
    if result.request.objective == "memory":
        blocked = []  # the choice trades speed for memory on purpose; what bounds its step remains
    faster = []
    for k in blocked:
        stage, opt, par = k
        alt = result.space.representative(cand.with_(stage=stage, offload_optimizer=opt, offload_param=par))
        ev = result.evaluate.unconstrained(alt)
        if ev.tokens_per_s > best.tokens_per_s * 1.01:
            faster.append((ev.tokens_per_s, k, ev))
    if faster:
        tps, k, ev = max(faster, key=lambda r: LADDER.index(r[1]))  # the nearest rung below the choice
        names = ", ".join(group_label(b) for b in blocked)
        return "memory", (
            f"memory: {names} cannot fit; {group_label(k)} would run at {tps:,.0f} tokens/s "
            f"({signed_pct(tps / best.tokens_per_s - 1)}) but at the chosen micro-batch {cand.micro_batch}"
            f"{', checkpointing on' if cand.checkpointing else ''} it {_over(result, ev)}"
        )
    step = best.step
    share = step.exposed_comm_s / step.step_time_s if step.step_time_s else 0.0
    if step.bottleneck == "communication" or share > BANDWIDTH_SHARE:
        return "bandwidth", (
            f"bandwidth: {share:.0%} of the step is exposed communication "
            f"({step.exposed_comm_s:.3g} s of {step.step_time_s:.3g} s; {step.comm_s:.3g} s on the comm stream)"
        )
    if step.bottleneck in ("offload", "optimizer"):
        part = step.offload_s if step.bottleneck == "offload" else step.optimizer_s
        return step.bottleneck, (
            f"{step.bottleneck}: {part:.3g} s of the {step.step_time_s:.3g} s step "
            f"({'PCIe/NVMe transfers' if step.bottleneck == 'offload' else 'the optimizer step'})"
        )
    if step.bottleneck == "overhead":
        return "overhead", (
            f"overhead: {step.overhead_s:.3g} s of the {step.step_time_s:.3g} s step is DeepSpeed's fixed "
            f"per-step, per-micro-step and hook cost (the profile's `overheads`), more than any other part"
        )
    return "compute", (
        f"compute: no faster option is ruled out by memory, and the step is compute-bound "
        f"({step.compute_s:.3g} s compute, {step.exposed_comm_s:.3g} s exposed communication "
        f"of {step.step_time_s:.3g} s)"
    )


def _alternatives(result: SearchResult, best: Evaluation, field: str, values: tuple) -> str:
    """How the neighbours on `field`'s grid compare with the chosen value."""
    chosen = getattr(best.candidate, field)
    rows = []
    for value in values:
        if value == chosen:
            continue
        rows.append((value, result.evaluate(best.candidate.with_(**{field: value}))))
    if not rows:
        return ""
    fmt = _fmt_value
    parts = []
    fitting = [(v, ev) for v, ev in rows if ev.fits]
    if fitting:
        if result.request.objective == "memory":
            v, ev = min(fitting, key=lambda r: (r[1].per_gpu_bytes, r[0]))
            parts.append(
                f"next {fmt(v)}: {signed_pct(ev.per_gpu_bytes / best.per_gpu_bytes - 1)} memory, "
                f"{signed_pct(ev.step_time_s / best.step_time_s - 1)} step time"
            )
        else:
            v, ev = min(fitting, key=lambda r: (r[1].step_time_s, r[0]))
            delta = ev.step_time_s / best.step_time_s - 1
            parts.append(f"best alternative {fmt(v)}: {signed_pct(delta)} step time{_tie_text(best, ev)}")
    nofit = [v for v, ev in rows if not ev.fits]
    if nofit:
        parts.append(f"{', '.join(fmt(v) for v in nofit)} would not fit")
    return f"{len(rows) + 1} values tried; " + "; ".join(parts)


def _tie_text(best: Evaluation, ev: Evaluation) -> str:
    """Why `best` beat a neighbour whose throughput ranks equal (4 significant digits), in the
    ranking's own order (rank.rank_key): contiguous_gradients on, then lower memory, then field order."""
    if quantize(ev.tokens_per_s) != quantize(best.tokens_per_s):
        return ""
    if ev.candidate.contiguous_gradients != best.candidate.contiguous_gradients:
        return " (a tie: contiguous_gradients on wins ties)"
    if ev.per_gpu_bytes > best.per_gpu_bytes:
        return " (a tie: the lower-memory value wins)"
    if ev.per_gpu_bytes == best.per_gpu_bytes:
        return " (a tie in time and memory: the smaller value wins)"
    return " (a tie: the higher-memory value was chosen by another knob's tie-break)"


def tie_line(result: SearchResult, best: Evaluation) -> str | None:
    """The summary line when a faster but more involved configuration lost within TIE_BAND."""
    if result.request.objective == "memory" or not result.ranked:
        return None
    group = (best.candidate.stage, *best.candidate.offload)
    others = [ev for ev in result.ranked if (ev.candidate.stage, *ev.candidate.offload) != group]
    fastest = max(others, key=lambda ev: ev.tokens_per_s, default=None)
    if fastest is None or fastest.tokens_per_s <= best.tokens_per_s:
        return None
    c = fastest.candidate
    return (
        f"tie: {group_label((c.stage, *c.offload))} predicts "
        f"{signed_pct(fastest.tokens_per_s / best.tokens_per_s - 1)} tokens/s, inside the {TIE_BAND:.1%} "
        "the model cannot resolve (its measured ranking error), so the simpler configuration wins "
        "(less offload, lower stage, fewer host transfers)"
    )


def _fmt_value(v: object) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, int) and v >= 10_000:
        return fmt_count(v)
    return str(v)


def _layers(x: float) -> str:
    """'0.5 layers', '1 layer', '12 layers'."""
    text = f"{x:.2g}" if x < 10 else f"{x:.0f}"
    return f"{text} layer" + ("" if text == "1" else "s")


def explain(result: SearchResult, best: Evaluation | None = None) -> Explanation:
    """Reasons and summary for `best` (default: the winner)."""
    best = best or result.best
    if best is None:
        raise ValueError("nothing fits: no explanation to give")
    cand = best.candidate
    model, hw = result.model, result.hardware
    world = result.workload.world_size
    elem = DTYPE_BYTES[cand.precision]
    block = model.block_params
    layers = len(model.blocks)
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
        text += f"; {smallest} {_over(result, ev)}"
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

    # --- stage and offload
    groups = result.groups
    key = (cand.stage, *cand.offload)
    others = []
    for k in LADDER:
        g = groups.get(k)
        if g is None or k == key:
            continue
        if g.best is not None:
            others.append(
                f"{group_label(k)}: {signed_pct(g.best.tokens_per_s / best.tokens_per_s - 1)} tokens/s"
            )
        elif g.fitting == 0 and g.smallest is not None:
            others.append(f"{group_label(k)} does not fit: {_smallest_over(result, g.smallest)}")
    choice = "the best" if result.request.objective != "memory" else "the smallest within 5% of the best"
    reasons["zero_optimization.stage"] = (
        f"{group_label(key)} is {choice} predicted configuration ({result.request.objective}); "
        + "; ".join(others[:4])
    )
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

    # --- communication knobs
    if cand.stage > 0:
        reasons["zero_optimization.reduce_scatter"] = (
            "true, DeepSpeed's default, written out: each bucket is reduce-scattered (each rank receives "
            "only its gradient shard, half the bytes of an all-reduce)"
            if cand.stage == 3
            else "true, DeepSpeed's default, written out; at stage 1/2 DeepSpeed 0.19.8 still all-reduces "
            "each bucket (use_multi_rank_bucket_allreduce, on by default), so it does not halve the bytes"
        )
        reasons["zero_optimization.reduce_bucket_size"] = _reduce_reason(result, best, elem, block, layers)
        reasons["zero_optimization.overlap_comm"] = (
            (
                "one rank: no gradient is communicated, so there is nothing to overlap"
                if world == 1
                else "on: gradient reductions run on a side stream while backward continues"
                if cand.overlap_comm
                else "off: reductions run after the bucket fills, on the compute stream"
            )
            + "; "
            + _alternatives(result, best, "overlap_comm", (True, False))
        )
        reasons["zero_optimization.contiguous_gradients"] = (
            (
                "on: gradients are copied into one preallocated buffer (no fragmentation)"
                if cand.contiguous_gradients
                else "off: saves the preallocated gradient buffer"
                + (
                    "; with overlap_comm on, DeepSpeed synchronizes the device at every bucket flush "
                    "(stage_1_and_2.py, no second bucket to swap to)"
                    if cand.overlap_comm and cand.stage in (1, 2)
                    else ""
                )
            )
            + "; "
            + _alternatives(result, best, "contiguous_gradients", (True, False))
        )
    if cand.stage in (1, 2):
        reasons["zero_optimization.allgather_bucket_size"] = (
            f"{fmt_count(cand.allgather_bucket_size)} elements (even, as the stage 1/2 optimizer asserts); "
            "unused by DeepSpeed 0.19.8 on torch >= 1.13, which gathers each flat group in one "
            "all_gather_into_tensor call (DEEPSPEED_FACTS §4.1)"
        )
    if cand.stage == 3:
        g = result.space.grids
        pf = cand.prefetch_bucket_size
        bw = busbw_at(hw, "all_gather", pf * elem) if world > 1 else None
        bw_text = f", {bw[0] / bw[1]:.0%} of peak all-gather busbw at {fmt_bytes(pf * elem)}" if bw else ""
        if world == 1:
            fetch = (
                "one rank: nothing is gathered from other ranks; prefetch overlaps the next layer's "
                "host-to-device copy of its offloaded parameters with this one's compute"
                if cand.offload_param != "none"
                else "one rank: nothing is gathered from other ranks, so prefetch moves nothing"
            )
        else:
            fetch = f"the next layer's all-gather starts while this one computes{bw_text}"
        reasons["zero_optimization.stage3_prefetch_bucket_size"] = (
            f"{fmt_count(pf)} elements = {_layers(pf / block)} of {model.name} ({fmt_count(block)} "
            f"params/layer): {fetch}; "
            + _alternatives(result, best, "prefetch_bucket_size", g["prefetch_bucket_size"])
        )
        reasons["zero_optimization.stage3_param_persistence_threshold"] = (
            _persistence_reason(model, cand.param_persistence_threshold, elem)
            + "; "
            + _alternatives(result, best, "param_persistence_threshold", g["param_persistence_threshold"])
        )
        ml = cand.max_live_parameters
        reasons["zero_optimization.stage3_max_live_parameters"] = (
            f"{fmt_count(ml)} elements = {_layers(ml / block)} ({fmt_bytes(ml * elem)}) may be gathered at "
            "once: caps prefetch; " + _alternatives(result, best, "max_live_parameters", g["max_live_parameters"])
        )
        rd = cand.max_reuse_distance
        reasons["zero_optimization.stage3_max_reuse_distance"] = (
            (
                f"{fmt_count(rd)} elements: parameters needed again within {_layers(rd / block)} stay "
                "gathered instead of being re-fetched"
                if rd
                else "0: every parameter is released after use and re-gathered in backward (least memory)"
            )
            + "; "
            + _alternatives(result, best, "max_reuse_distance", g["max_reuse_distance"])
        )
        sg = cand.sub_group_size
        reasons["zero_optimization.sub_group_size"] = (
            f"the optimizer steps this rank's partition in sub-groups of {fmt_count(sg)} elements "
            f"(fp32 buffer up to {fmt_bytes(min(sg, model.params / world) * 4)}); "
            + _alternatives(result, best, "sub_group_size", g["sub_group_size"])
        )
        reasons["zero_optimization.stage3_gather_16bit_weights_on_model_save"] = (
            "true: save_16bit_model() / HF save_pretrained write one full 16-bit checkpoint that "
            "from_pretrained can load (false saves only ZeRO shards)"
        )

    # --- summary
    gpu_text = f"{hw.nodes * hw.gpus_per_node}x {gpu.name}" if gpu and hw.has_gpus else f"{world} CPU ranks"
    s = result.stats
    summary = (
        f"{model.name} ({fmt_count(model.params)} params) on {hw.name} ({gpu_text}): {group_label(key)}, "
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


def predicted_line(result: SearchResult, ev: Evaluation) -> str:
    """'predicted: 28.4 s per step, 73,733 tokens/s, MFU 40%; 50.0 GiB per GPU of 79.6 GiB (...)'."""
    cap = ev.memory.gpu_capacity_bytes
    margin = result.request.safety_margin
    fit = "fits" if ev.fits else "does not fit"
    if cap:
        fit_text = f"{fmt_gib(ev.per_gpu_bytes)} per GPU of {fmt_gib(cap)} ({fit} with the {margin:.0%} margin)"
    elif not result.hardware.has_gpus:
        host, why = host_rank_capacity(result.hardware, result.workload.gpus_per_node)
        fit_text = (
            f"{fmt_gib(ev.per_gpu_bytes)} per rank of {fmt_gib(host)} ({why}; {fit} with the {margin:.0%} margin)"
            if host
            else f"{fmt_gib(ev.per_gpu_bytes)} per rank (host RAM NOT checked: {why})"
        )
    else:
        fit_text = f"{fmt_gib(ev.per_gpu_bytes)} per rank (no GPU capacity to check against)"
    mfu = f", MFU {ev.step.mfu:.0%}" if ev.step.mfu is not None else ""
    return f"predicted: {ev.step_time_s:.3g} s per step, {ev.tokens_per_s:,.0f} tokens/s{mfu}; {fit_text}"


def _smallest_over(result: SearchResult, ev: Evaluation) -> str:
    """'its smallest variant (micro-batch 1, checkpointing on) needs ...': the least memory that option
    takes over every batch split and knob, which is why it can differ from the need at the chosen split."""
    c = ev.candidate
    return (
        f"its smallest variant (micro-batch {c.micro_batch}, checkpointing {'on' if c.checkpointing else 'off'}) "
        f"{_over(result, ev)}"
    )


def _over_no_offload(result: SearchResult, cand: Candidate) -> str:
    g = result.groups.get((cand.stage, "none", "none"))
    if g is None:
        return ""
    if g.fitting == 0 and g.smallest is not None:
        return f"without offload stage {cand.stage} does not fit: {_smallest_over(result, g.smallest)}"
    if g.best is not None:
        return f"without offload stage {cand.stage} fits but predicts {g.best.tokens_per_s:,.0f} tokens/s"
    return ""


def backward_order(model) -> list[int]:
    """Tensor numels in the order their gradients become ready: modules reversed, tensors reversed."""
    return [t for layer in reversed(model.layers) for t in reversed(layer.tensors)]


def _reduce_reason(result: SearchResult, best: Evaluation, elem: int, block: int, layers: int) -> str:
    cand = best.candidate
    model, hw = result.model, result.hardware
    r = cand.reduce_bucket_size
    nbytes = r * elem
    world = result.workload.world_size
    parts = [
        f"{fmt_count(r)} elements = {_layers(r / block)} of {model.name} ({fmt_count(block)} params/layer)"
    ]
    if world == 1:
        # One rank: DeepSpeed skips the gradient reduction (nothing to exchange); the bucket is only a
        # copy buffer, so bandwidth and overlap do not apply.
        parts.append("one rank: nothing is communicated, the bucket is only a gradient copy buffer")
        alt = _alternatives(result, best, "reduce_bucket_size", result.space.grids["reduce_bucket_size"])
        return "; ".join(parts + ([alt] if alt else []))
    # Stage 1/2 all-reduce each bucket in 0.19.8 (use_multi_rank_bucket_allreduce); stage 3 reduce-scatters.
    op = "reduce_scatter" if cand.stage == 3 else "all_reduce"
    op_text = op.replace("_", "-")
    bw = busbw_at(hw, op, nbytes)
    if bw:
        parts.append(
            f"{fmt_bytes(nbytes)} {cand.precision} reaches {bw[0] / bw[1]:.0%} of the "
            f"{bw[1] / GB:.0f} GB/s peak {op_text} busbw on {hw.name}"
        )
    order = backward_order(model)
    buckets = fill_buckets(order, r)
    if len(buckets) <= 1:
        parts.append(
            f"the whole model ({fmt_count(model.params)}) fits one bucket: it fires only after backward"
        )
    else:
        # the layer (counted from the end of backward) whose gradients flush the first bucket
        owner = [i for i, layer in reversed(list(enumerate(model.layers))) for _ in layer.tensors]
        first_layer = len(model.layers) - owner[buckets[0].after]
        text = (
            f"{len(buckets)} buckets per backward (DeepSpeed's fill rule: a bucket flushes before the "
            f"gradient that would overflow it); the first fires after the {_ordinal(first_layer)} module of backward"
        )
        if cand.overlap_comm and cand.stage >= 2:
            text += f", so the reductions of about {max(0, layers - first_layer)} of {layers} layers overlap compute"
        elif cand.stage == 1:
            text += " (stage 1 reduces at the accumulation boundary only)"
        parts.append(text)
    sat = result.space.grids.saturating_for(cand.stage)
    if sat:
        parts.append(f"90% of peak {op_text} busbw needs >= {fmt_count(sat)} elements")
    alt = _alternatives(result, best, "reduce_bucket_size", result.space.grids["reduce_bucket_size"])
    return "; ".join(parts + ([alt] if alt else []))


def _persistence_reason(model, threshold: int, elem: int) -> str:
    small = [t for layer in model.layers for t in layer.tensors if t <= threshold]
    if not small:
        return f"{fmt_count(threshold)}: every tensor is partitioned and gathered on use"
    sizes = sorted(set(small))
    size_text = ", ".join(fmt_count(s) for s in sizes[:3]) + (" ..." if len(sizes) > 3 else "")
    return (
        f"{fmt_count(threshold)}: {len(small)} tensors of <= {fmt_count(threshold)} elements ({size_text}) stay "
        f"gathered on every GPU ({fmt_bytes(sum(small) * elem)} per GPU): all-gathered once per step, after "
        f"the optimizer update, instead of before each forward and backward use"
    )


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
        return f"turning it off {_over(result, flipped)}{hint}"
    delta = flipped.step_time_s / best.step_time_s - 1
    return f"turning it {'off' if cand.checkpointing else 'on'} changes the step time by {signed_pct(delta)}{hint}"
