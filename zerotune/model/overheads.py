"""Costs DeepSpeed adds beyond FLOPs and bytes on the wire, read from the profile's `overheads`
(zerotune/schema/hardware.py OverheadSpec: fitted by `zerotune calibrate` from real DeepSpeed steps,
or cited). A null term is left out and the estimate's notes say so: there is no hidden default.

How each term enters the step (predict_step; `calibrate` fits them through it, so the names and
places here are the contract):

- `per_step_s`: once per optimizer step, on the training thread (engine bookkeeping, timers,
  scheduler, `step()` Python) and, on a job of more than one rank, the ranks' synchronisation at the
  step; `single_rank_per_step_s` in its place for a job on one rank (`step_seconds` says which);
- `per_micro_step_s`: once per forward+backward micro-step (engine forward/backward wrappers, loss
  scaling, kernel launches that do not scale with the model);
- `per_module_hook_s` (stage 3): DeepSpeed registers its fetch/release hooks on every module,
  parameterless containers included (`parameter_offload.py _register_deepspeed_module`, recursive),
  and pays them in forward and again in backward: `hooked_modules` counts them per layer;
- `per_param_grad_hook_s` (stage 1/2): per parameter whose gradient is copied into a reduction
  bucket (`reduce_independent_p_g_buckets_and_remove_grads`): every backward at stage 2, the
  boundary backward at stage 1 (inside backward with `overlap_comm`, else in `reduce_gradients`
  after it);
- `per_layer_launch_s` (every stage, GPU boxes): the host time of one transformer block's forward
  (the module's Python, its kernel launches: tens per block, each a few microseconds of CUDA launch
  latency), paid again by backward (autograd launches the gradient kernels; with recompute the block's
  forward runs once more). The host runs ahead of the GPU's queue, so a block costs the larger of its
  kernels and this: hidden at large per-GPU work, dominant at small (flat step times from 256 to 2K
  tokens per GPU in several published sources). The term is a dense block's; a block that launches
  more kernels costs more in proportion (`launch_weight`: HF's per-expert MoE loop);
- `optimizer_params_per_s`: DeepSpeed's whole optimizer step in local-partition parameters per
  second (zerotune/model/optimizer.py).

Host work and device work: on a CPU host (DeepSpeed's CPU accelerator) hooks run on the thread
that computes, so their seconds add to the layer's. On a GPU the host enqueues kernels ahead of the
device, so a layer costs the larger of its kernels and its host work (`layer_seconds`), and a pass
the device's queue as it fills and drains across layers (`pass_seconds`): hooks are hidden at large
per-GPU work and dominate at small work (issue 10: small per-GPU steps measured 2-10x slower than
FLOPs predict).
"""

from __future__ import annotations

from dataclasses import dataclass

from zerotune.model.compute import is_matrix
from zerotune.schema.hardware import OverheadSpec
from zerotune.schema.model import LayerSpec, ModelSpec

BLOCK_EXTRA_MODULES = 6
"""Modules of a transformer block besides its weight matrices: the block itself, its attention and
MLP containers, the activation module and two norms (HF `LlamaDecoderLayer`: self_attn, mlp, act_fn,
input_layernorm, post_attention_layernorm; GPT-2's `GPT2Block` likewise, its dropouts aside)."""

EMBEDDING_MODULES = 3
"""The embedding plus the two containers entered before it (HF `*ForCausalLM` and `*Model`)."""


def hooked_modules(model: ModelSpec, layer: LayerSpec) -> int:
    """torch modules of one layer whose stage-3 hooks run in each pass. Sparse-MoE blocks are
    DeepSpeed leaf modules by default (one hook for the whole expert set: docs/deepspeed-facts.md §4.2)."""
    if layer.kind == "embedding":
        return EMBEDDING_MODULES
    if layer.kind == "vision":  # never run by text-only batches: no hooks fire
        return 0
    if layer.kind in ("norm", "head"):
        return 1
    matrices = sum(1 for t in layer.tensors if is_matrix(t, model))
    if layer.experts > 1:
        matrices = max(matrices - layer.experts * (3 if model.gated_mlp else 2), 0) + 1
    return matrices + BLOCK_EXTRA_MODULES


DENSE_BLOCK_KERNELS = 41
"""CUDA kernels one dense decoder block's forward launches in HF transformers' eager mode, counted in
modeling_llama.py (LlamaDecoderLayer with SDPA attention): two RMSNorms of 8 each (fp32 cast, pow,
mean, + eps, rsqrt, multiply, cast back, weight), the q/k/v/o projections (4), rotary embedding on q
and k (5 each: x cos, negate, cat, x sin, add), repeat_kv on k and v (2), the attention kernel (1), the
output transpose copy (1), the MLP (5: gate, activation, up, multiply, down) and two residual adds.
`per_layer_launch_s` is the host time of such a block; other blocks are weighed against it."""

DENSE_MLP_KERNELS = 5
"""Of DENSE_BLOCK_KERNELS, the MLP's (gate, activation, up, multiply, down), which an MoE block replaces."""

MOE_ROUTER_KERNELS = 12
"""Kernels of HF's sparse-MoE block before its expert loop (modeling_mixtral.py MixtralSparseMoeBlock.forward):
router linear, softmax, top-k, sum, divide, cast, the zeros output, one_hot, the mask sum, greater and
the `nonzero` of hit experts (which syncs)."""

MOE_LOOP_EXPERT_KERNELS = 11
"""Kernels per hit expert in that loop: index the expert mask, one-argument `torch.where` (a nonzero,
which syncs), gather the expert's tokens, w1, activation, w3, multiply, w2, index the routing weights,
scale, `index_add_` into the output. A training micro-batch routes hundreds of tokens x top-k, so every
expert is hit (counted as all `experts` of the block). A shared expert (Qwen2-MoE, DeepSeek) adds a dense
MLP's kernels, left out (a few percent of such a block's 60-256 experts' launches)."""


def launch_weight(layer: LayerSpec, moe_loop: bool) -> float:
    """A block's host launch work in dense blocks (DENSE_BLOCK_KERNELS = 1): a sparse-MoE block run by
    HF's per-expert loop launches its router and every hit expert's kernels one by one (Mixtral's 8
    experts: 136 kernels, 3.3 dense blocks); a grouped-GEMM MoE block launches about a dense block's."""
    if layer.experts <= 1 or not moe_loop:
        return 1.0
    kernels = DENSE_BLOCK_KERNELS - DENSE_MLP_KERNELS + MOE_ROUTER_KERNELS + layer.experts * MOE_LOOP_EXPERT_KERNELS
    return kernels / DENSE_BLOCK_KERNELS


def layer_seconds(device_s: float, host_s: float, serial: bool) -> float:
    """One layer's time given its device work and its host (Python hook) work: the sum on a CPU
    host, the larger on a GPU (the host runs ahead of the device's queue)."""
    if host_s <= 0:
        return device_s
    return device_s + host_s if serial else max(device_s, host_s)


def pass_seconds(
    device_s: tuple[float, ...], host_s: tuple[float, ...], serial: tuple[bool, ...], reverse: bool
) -> tuple[float, ...]:
    """Each layer's share of one pass (forward in layer order, backward reversed) on a GPU, where a
    kernel launch returns before the kernel runs (CUDA Programming Guide §2.3 "Asynchronous Execution",
    https://docs.nvidia.com/cuda/cuda-programming-guide/02-basics/asynchronous-execution.html): the host
    queues layer after layer and the device runs them in stream order, so a layer's kernels end no
    earlier than the previous layer's (device busy) and no earlier than the host has launched them:
    device_end = max(device_end_prev + device_s, host_end). Where every layer is on the same side this
    is `layer_seconds` layer by layer; where they differ, a device-bound layer lets the host run ahead
    into the next ones (in backward, the head's gradient matmuls, first, hide the launches of the last
    blocks; per-layer maxima would count both). A serial layer (a CPU host; a forward that syncs,
    step.synced_blocks) adds its host work to its kernels and the host waits for the device there.
    Not modelled: the bound on how far the host may run ahead (the driver's launch queue), which a
    layer's worth of kernels (tens) does not reach."""
    out = [0.0] * len(device_s)
    host_end = device_end = 0.0
    order = range(len(device_s) - 1, -1, -1) if reverse else range(len(device_s))
    for k in order:
        before = device_end
        if serial[k]:
            device_end = max(device_end, host_end) + device_s[k] + host_s[k]
            host_end = device_end
        else:
            host_end += host_s[k]
            device_end = max(device_end + device_s[k], host_end)
        out[k] = device_end - before
    return tuple(out)


PRIOR_TERMS = (
    "per_step_s", "single_rank_per_step_s", "per_module_hook_s", "per_layer_launch_s", "cpu_adam_thread_params_per_s",
)  # fmt: skip
"""The terms the global prior states (the ones the published suite identifies: whole-step timings)."""

STEP_PAIR = ("per_step_s", "single_rank_per_step_s")
"""The per-step cost of a job on more than one rank and on one: `with_prior` fills them together or not at all."""

GLOBAL_PRIOR = OverheadSpec(
    per_step_s=0.24,
    single_rank_per_step_s=0.02,
    per_module_hook_s=2.0e-4,
    per_layer_launch_s=1.6e-3,
    cpu_adam_thread_params_per_s=2.0e8,
    origin="published",
    source="global prior fitted across all 45 timed published sources (153 timed runs, 2026-11-28; "
    "scripts/evidence/fit_published.py), judged leave-one-source-out (scripts/evidence/loso.py)",
)
"""One prior for every GPU profile that leaves a term null: fitted once across ALL published sources
by scripts/evidence/fit_published.py (never one constant per profile), judged source by source by
scripts/evidence/loso.py (each source predicted from the prior fitted without it). A host's own
`zerotune calibrate` values replace it; a host without GPUs keeps its nulls (the CPU testbed calibrates).

The per-step cost is two values, by whether the job runs on more than one rank (`step_seconds`):
`per_step_s` (0.24 s) fitted on the 132 multi-rank published runs, `single_rank_per_step_s` (0.02 s) on
the 12 one-rank ones (5 sources). The published suite alone cannot tell this from one constant
(scripts/evidence/per_step_candidates.py, row "more than one rank": leave-one-source-out 25.20% against
the constant's 25.17%, in sample 0.02 s + 0.22 s on more than one rank; loso.py with the split 25.25%
against 25.17%), but an independent source does: the first real GPU run (one H200, one rank,
DeepSpeed 0.19.8: data/gpu/2026-11-28-NVIDIA-H200/README.md, docs/gpu.md section 4), whose engine timers
leave 2-6 ms per step beyond fwd + bwd + step (`scripts/evidence/calibrate_from_log.py --gpu`), where
the one constant added 0.24 s and put its five benches' whole steps 32-377% slow (with the one-rank
term: -32..+35%, median |error| 14%; tests/unit/test_per_step_ranks.py). So the 0.24 s is not the
engine's bookkeeping on one rank; on more than one rank the step synchronises the ranks (ZeRO's
gradient-norm all-reduce, and fp16's overflow check, each waiting for the slowest rank: stage_1_and_2.py
`get_grad_norm_direct`, `has_overflow`), but a fixed 0.22 s of that
is not established either: DeepSpeed's bf16 example measured its 254M model 0.015 s slower on four H100s
than on one (docs/accuracy.md), and the multi-rank value still carries what the model misses at small
per-GPU work in several sources.

What the fit absorbs (issue 18): `per_layer_launch_s` sat at the top of LAUNCH_GRID (1.6 ms) while HF's
per-expert MoE loop was costed as one dense block's launches; with its kernels counted (`launch_weight`)
a grid allowed up to 3.2 ms still fits 1.6 ms in sample (an interior optimum), and finer grids only make
leave-one-source-out worse (27.8-28.5% against 27.6%), so the grid stays. `cpu_adam_thread_params_per_s`
(2e8) is identified by one source only, DeepCompile's Llama-3-70B offload runs (accelerate launch: one
OpenMP thread per rank); a leave-one-source-out fold without it falls back to the published one-thread rate, 2.8e8
(zerotune/model/offload.py CPU_ADAM_ONE_THREAD), which predicts those runs 24-34% fast. `per_module_hook_s` took
8e-4 while the HF MoE expert loop's host syncs were not modelled (the Mixtral rows' missing seconds
went into the stage-3 hook); with them modelled (step.py synced_blocks) it is 2e-4. `per_step_s` was 0.28 s
while a tied head's logits matmul was left out of the FLOPs (compute.model_flops) and a pass was composed
from per-layer maxima (pass_seconds): the refit on the same 141 runs gives 0.24 s (in-sample 24.2% -> 24.2%,
leave-one-source-out 25.12% -> 25.08%); with this session's 3 new timed runs (144, 42 sources) the refit gives
the same four values (in-sample 24.3%)."""


def with_prior(spec: OverheadSpec, has_gpus: bool) -> OverheadSpec:
    """The profile's terms, its null prior terms filled from GLOBAL_PRIOR on a GPU profile.

    The per-step pair (STEP_PAIR) is filled only where the profile states neither: a profile with a
    per-step cost of its own (measured by `zerotune calibrate` or `calibrate --from-log` on its machine,
    or cited) keeps it for one-rank jobs too rather than take the published one-rank value (a
    measurement on this machine beats a published prior; a multi-rank figure holds the one-rank
    bookkeeping and bounds it from above). One that states only the one-rank cost (a one-rank log)
    takes the published multi-rank value: one rank measures no synchronisation across ranks."""
    if not has_gpus:
        return spec
    skip = {"single_rank_per_step_s"} if spec.per_step_s is not None else set()
    missing = {
        name: getattr(GLOBAL_PRIOR, name) for name in PRIOR_TERMS if getattr(spec, name) is None and name not in skip
    }
    if not missing:
        return spec
    said = spec.source or ""
    source = f"{', '.join(missing)} from the {GLOBAL_PRIOR.source}" + (f"; {said}" if said else "")
    return spec.model_copy(update={**missing, "source": source, "origin": spec.origin or GLOBAL_PRIOR.origin})


def step_seconds(spec: OverheadSpec, ranks: int) -> tuple[str, float | None]:
    """The per-step cost a job on `ranks` ranks pays, and the term it comes from: `single_rank_per_step_s`
    on one rank where the profile has it, else `per_step_s` (null: left out)."""
    if ranks == 1 and spec.single_rank_per_step_s is not None:
        return "single_rank_per_step_s", spec.single_rank_per_step_s
    return "per_step_s", spec.per_step_s


def step_term(ranks: int) -> str:
    """The per-step term a job of `ranks` ranks measures (`calibrate --from-log` fits it)."""
    return "single_rank_per_step_s" if ranks == 1 else "per_step_s"


def with_measured_pair(spec: OverheadSpec, measured: set[str]) -> OverheadSpec:
    """`spec` after a calibration on this machine that measured the terms `measured` (names): a measured
    `per_step_s` without a measured one-rank term clears the one-rank term (the published prior's, which
    `with_prior` filled when the profile had neither), so the machine's own value serves one-rank jobs,
    the rule `with_prior` applies to a profile that states `per_step_s`."""
    if "per_step_s" in measured and "single_rank_per_step_s" not in measured:
        return spec.model_copy(update={"single_rank_per_step_s": None})
    return spec


@dataclass(frozen=True)
class Overheads:
    """The profile's terms as the step applies them (0 where the profile has none)."""

    per_step_s: float
    """The job's per-step cost (`step_seconds`: the one-rank term on one rank where the profile has it)."""
    per_micro_step_s: float
    module_hook_s: tuple[float, ...]
    """Per layer: stage-3 hook seconds of one pass (forward or backward)."""
    grad_hook_s: tuple[float, ...]
    """Per layer: stage 1/2 gradient-hook seconds of one reducing backward."""
    launch_s: tuple[float, ...]
    """Per layer: host seconds of one forward's Python and kernel launches (transformer blocks only)."""
    missing: tuple[str, ...]
    """The terms this stage uses that the profile leaves null."""
    included: tuple[str, ...]
    """The terms this stage uses that the profile sets, as "name value"."""


def overheads(spec: OverheadSpec, model: ModelSpec, stage: int, ranks: int, moe_loop: bool = False) -> Overheads:
    """The terms per layer; `moe_loop`: the job runs sparse-MoE blocks through HF's per-expert loop
    (`Workload.moe_impl`), whose launches `launch_weight` counts; `ranks`: the job's world size, which
    picks the per-step cost (`step_seconds`)."""
    term, step_s = step_seconds(spec, ranks)
    used = [
        name
        for name, on in (
            (term, True),
            ("per_micro_step_s", True),
            ("per_module_hook_s", stage == 3),
            ("per_param_grad_hook_s", stage in (1, 2)),
            ("per_layer_launch_s", spec.per_layer_launch_s is not None),
        )
        if on
    ]
    missing = [name for name in used if getattr(spec, name) is None]
    included = [f"{name} {getattr(spec, name):.3g} s" for name in used if getattr(spec, name) is not None]
    hook = spec.per_module_hook_s if stage == 3 and spec.per_module_hook_s else 0.0
    grad = spec.per_param_grad_hook_s if stage in (1, 2) and spec.per_param_grad_hook_s else 0.0
    return Overheads(
        per_step_s=step_s or 0.0,
        per_micro_step_s=spec.per_micro_step_s or 0.0,
        module_hook_s=tuple(hook * hooked_modules(model, layer) for layer in model.layers),
        grad_hook_s=tuple(grad * len(layer.tensors) for layer in model.layers),
        launch_s=tuple(
            (spec.per_layer_launch_s or 0.0) * launch_weight(layer, moe_loop) if layer.kind.endswith("block") else 0.0
            for layer in model.layers
        ),
        missing=tuple(missing),
        included=tuple(included),
    )


def _origin(source: str) -> str:
    """Where the profile's terms come from, in a few words: `with_prior` writes "<terms> from the
    <prior's source>", so the words after "from the" up to the first parenthesis or semicolon, else the
    source's first clause; cut at a word, never inside a term's name."""
    text = source.split(" from the ", 1)[1] if " from the " in source else source
    text = text.split("(")[0].split(";")[0].split(":")[0].strip()
    if len(text) <= 70:
        return text
    return text[:70].rsplit(" ", 1)[0] + " ..."


def overhead_notes(terms: Overheads, source: str | None) -> list[str]:
    """What the estimate's notes say about the overhead terms: which it used (with the start of the
    profile's stated source) and which it left out."""
    notes = []
    if terms.included:
        origin = f" ({_origin(source)})" if source else ""
        notes.append(f"overheads from the profile{origin}: {', '.join(terms.included)}")
    if terms.missing:
        notes.append(
            "left out (null in the profile's overheads; `zerotune calibrate` fits them): "
            + ", ".join(terms.missing)
        )
    return notes
