"""What binds the chosen configuration, and the phrases explanations share about options.

The binding constraint is
- "memory" when a configuration that shards or offloads less than the chosen one (a lower rung
  of LADDER) fits nowhere and would be faster by more than TIE_BAND (the model's ranking resolution):
  the summary says which and by how much it is over;
- otherwise what bounds the predicted step: "bandwidth" when exposed communication is more than
  BANDWIDTH_SHARE of the step (or the step model calls it communication-bound), "offload" /
  "optimizer" / "overhead" when the step model says so, else "compute".
"""

from __future__ import annotations

from zerotune.model.fit import host_rank_capacity
from zerotune.search.evaluate import Evaluation
from zerotune.search.objective import LADDER, TIE_BAND
from zerotune.search.rank import SearchResult
from zerotune.units import fmt_gib

BANDWIDTH_SHARE = 0.10
"""Exposed communication above this share of the step makes bandwidth the binding constraint."""


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


def _capacity(result: SearchResult) -> int | None:
    gpu = result.hardware.gpu
    return gpu.memory_bytes if gpu is not None else None


def over_capacity(result: SearchResult, ev: Evaluation) -> str:
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
        if ev.tokens_per_s > best.tokens_per_s * (1 + TIE_BAND):  # closer is a tie, not a loss to memory
            faster.append((ev.tokens_per_s, k, ev))
    if faster:
        tps, k, ev = max(faster, key=lambda r: LADDER.index(r[1]))  # the nearest rung below the choice
        names = ", ".join(group_label(b) for b in blocked)
        return "memory", (
            f"memory: {names} cannot fit; {group_label(k)} would run at {tps:,.0f} tokens/s "
            f"({signed_pct(tps / best.tokens_per_s - 1)}) but at the chosen micro-batch {cand.micro_batch}"
            f"{', checkpointing on' if cand.checkpointing else ''} it {over_capacity(result, ev)}"
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


def smallest_over(result: SearchResult, ev: Evaluation) -> str:
    """'its smallest variant (micro-batch 1, checkpointing on) needs ...': the least memory that option
    takes over every batch split and knob, which is why it can differ from the need at the chosen split."""
    c = ev.candidate
    return (
        f"its smallest variant (micro-batch {c.micro_batch}, checkpointing {'on' if c.checkpointing else 'off'}) "
        f"{over_capacity(result, ev)}"
    )
