"""What the memory model reads from a ModelSpec, once per model, and the per-model caches built on it:
activation bytes (zerotune.model.activations) and the stage-3 parameters kept gathered
(persistent tensors, reuse distance, prefetch)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

from zerotune.dsconfig.settings import ZeroSettings
from zerotune.model.activations import (
    ACTIVATION_TENSORS,
    CPU_CHECKPOINT_GPU_INPUTS,
    DEFAULT_ACTIVATION_TENSORS,
    EAGER_16BIT_SOFTMAX,
    EAGER_FP32_QK,
    GEMMA_RMSNORM_EXTRA_BYTES,
    LOGIT_BYTES,
    NATIVE_LOGIT_COPIES,
    RMSNORM_EXTRA_BYTES,
    activation_bytes,
    autocast_loss,
    head_activation_bytes,
)
from zerotune.model.lora import Lora, adapter_tensors, saved_delta
from zerotune.schema.model import ModelSpec
from zerotune.units import DTYPE_BYTES, fmt_count


@dataclass(frozen=True, eq=False)
class Facts:
    """What the estimate needs from a ModelSpec, read once per model (one instance per model, so
    it hashes by identity: cheap as an lru_cache key)."""

    psi: int
    largest_layer: int
    largest_tensor: int
    tensors: tuple[int, ...]
    layer_tensors: tuple[tuple[int, ...], ...]
    """Per layer (forward order): its tensors."""
    layer_kinds: tuple[str, ...]
    """Per layer (forward order): its LayerSpec kind (embedding, block, norm, head, ...)."""
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    gated: bool
    vocab: int
    experts_per_token: int
    rms_norm: bool
    attention_width: int | None = None
    """MLA: elements per token its attention keeps (ModelSpec.attention_activation_width)."""
    act_tensors: int = DEFAULT_ACTIVATION_TENSORS
    """MLP-width tensors its activation keeps (activations.ACTIVATION_TENSORS[ModelSpec.activation])."""
    dropout: bool = False
    """Nonzero dropout on the blocks' attention and MLP outputs (ModelSpec.dropout): a 1-byte mask each."""
    attention_dropout: bool = False
    """Nonzero dropout on the attention probabilities (ModelSpec.attention_dropout): a mask per score, eager only."""
    shared_norm: bool = False
    """One norm feeds the parallel attention and MLP (ModelSpec.shared_block_norm)."""
    rmsnorm_extra: int = RMSNORM_EXTRA_BYTES
    """Bytes per element its unfused RMSNorm keeps beyond the input (GEMMA_RMSNORM_EXTRA_BYTES for Gemma's)."""
    eager_fp32_softmax: bool = True
    """Its HF eager attention takes the softmax in fp32 (all but activations.EAGER_16BIT_SOFTMAX)."""
    sdpa: bool = True
    """transformers has an SDPA path for it (not NO_SDPA_FAMILIES): asked for sdpa, it runs eager otherwise."""
    flash: bool = True
    """transformers has a flash-attention path for it (not NO_FLASH_FAMILIES): asked for flash, eager otherwise."""
    qk_norm: bool = False
    """An RMSNorm over q and over k in each block (ModelSpec.qk_norm)."""
    post_norms: int = 0
    """Norms on the attention's and MLP's outputs beyond the two input norms (ModelSpec.block_norms - 2, Gemma 2/3)."""
    softcap: bool = False
    """Its eager attention soft-caps the logits with a tanh (SOFTCAP_FAMILIES)."""
    fp32_qk: bool = False
    """Its eager attention takes the scores from fp32 copies of q and k (activations.EAGER_FP32_QK)."""

    lora: Lora | None = None
    """A LoRA job (zerotune.model.lora): the base frozen, adapters in each block's tensors."""
    layer_trainable: tuple[int, ...] = ()
    """With `lora`: per layer (forward order), its trainable elements (the adapters')."""
    adapter_tensors: tuple[int, ...] = ()
    """With `lora`: every adapter tensor, in forward order (what stage 3 groups into sub-groups)."""

    @cached_property
    def trainable(self) -> int:
        """Elements with requires_grad: all of them, or the adapters of a LoRA job."""
        return sum(self.layer_trainable) if self.lora is not None else self.psi

    @property
    def largest_trainable(self) -> int:
        """The largest tensor that gets a gradient."""
        return max(self.adapter_tensors, default=0) if self.lora is not None else self.largest_tensor

    @cached_property
    def layer_is_block(self) -> tuple[bool, ...]:
        """Per layer (forward order): whether it is a transformer block (its kind ends in "block")."""
        return tuple(kind.endswith("block") for kind in self.layer_kinds)


RMSNORM_FAMILIES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma", "gemma2", "phi3",
    "qwen3", "qwen3_moe", "gemma3_text", "gemma3", "deepseek_v2", "deepseek_v3", "gpt_oss", "olmo2",
)  # fmt: skip
"""Families whose HF blocks use the fp32-upcasting RMSNorm (T5's variant is not a decoder LM here):
Qwen2MoeRMSNorm, Gemma2RMSNorm (x.float(), then (1 + weight) in fp32: transformers PR #29402),
Qwen3RMSNorm, Gemma3RMSNorm, DeepseekV3RMSNorm, GptOssRMSNorm and Olmo2RMSNorm upcast to fp32 as
LlamaRMSNorm does."""


NO_FLASH_FAMILIES = ("bloom", "mpt")
"""Families whose transformers model has no flash-attention path (modeling_bloom.py and modeling_mpt.py set no
`_supports_flash_attn`, v5.24): their attention keeps the s x s scores whatever the workload asks for."""
NO_SDPA_FAMILIES = NO_FLASH_FAMILIES + ("gemma2",)
"""... nor an SDPA path (loading BLOOM with attn_implementation="sdpa" raises; Gemma2PreTrainedModel sets
`_supports_sdpa = False`, "sdpa does not support softcapping"): HF's default for them is eager."""

SOFTCAP_FAMILIES = ("gemma2",)
"""Families whose eager attention soft-caps the logits (Gemma2Config.attn_logit_softcapping, 50.0 by default and in
the released configs; modeling_gemma2.py eager_attention_forward: tanh(scores / cap) x cap). Gemma 3 sets it None."""

GEMMA_FAMILIES = ("gemma", "gemma2", "gemma3_text", "gemma3")
"""Families whose RMSNorm multiplies by 1 + weight in fp32 before casting (GEMMA_RMSNORM_EXTRA_BYTES)."""

_FACTS: dict[tuple, Facts] = {}


def facts_of(model: ModelSpec) -> Facts:
    # keyed on the name and the numbers that shape memory: specs are frozen, so equal keys
    # describe the same model (a resized proxy differs in layers or params)
    key = (
        model.name,
        model.family,
        model.activation,
        model.dropout,
        model.attention_dropout,
        model.shared_block_norm,
        model.qk_norm,
        model.block_norms,
        model.params,
        model.num_layers,
        model.hidden_size,
        model.vocab_size,
        model.largest_layer,
    )
    facts = _FACTS.get(key)
    if facts is None:
        family = model.family.split("-")[0]
        # T5's encoder and decoder blocks (cross-attention, a dropout inside the MLP) are not what the per-block
        # accounting or scripts/evidence/activation_saved.py measure: they keep the GELU, no-dropout default
        measured = family != "t5"
        facts = Facts(
            psi=model.params,
            largest_layer=model.largest_layer,
            largest_tensor=model.largest_tensor,
            tensors=tuple(t for layer in model.layers for t in layer.tensors),
            layer_tensors=tuple(tuple(layer.tensors) for layer in model.layers),
            layer_kinds=tuple(layer.kind for layer in model.layers),
            num_layers=len(model.blocks) or model.num_layers,
            hidden=model.hidden_size,
            heads=model.num_heads,
            kv_heads=model.num_kv_heads,
            ffn=model.ffn_size,
            gated=model.gated_mlp,
            vocab=model.vocab_size,
            experts_per_token=max(1, model.experts_per_token),
            rms_norm=family in RMSNORM_FAMILIES,
            attention_width=model.attention_activation_width,
            act_tensors=ACTIVATION_TENSORS.get(model.activation, DEFAULT_ACTIVATION_TENSORS) if measured else DEFAULT_ACTIVATION_TENSORS,
            dropout=measured and model.dropout > 0,
            attention_dropout=measured and model.attention_dropout > 0,
            shared_norm=model.shared_block_norm,
            rmsnorm_extra=GEMMA_RMSNORM_EXTRA_BYTES if family in GEMMA_FAMILIES else RMSNORM_EXTRA_BYTES,
            eager_fp32_softmax=family not in EAGER_16BIT_SOFTMAX,
            sdpa=family not in NO_SDPA_FAMILIES,
            flash=family not in NO_FLASH_FAMILIES,
            qk_norm=model.qk_norm,
            post_norms=max(model.block_norms - 2, 0) if family in RMSNORM_FAMILIES else 0,
            softcap=family in SOFTCAP_FAMILIES,
            fp32_qk=family in EAGER_FP32_QK,
        )
        _FACTS[key] = facts
    return facts


_LORA_FACTS: dict[tuple, Facts] = {}


def with_lora(facts: Facts, model: ModelSpec, lora: Lora) -> Facts:
    """`facts` of the model with LoRA adapters in every block (zerotune.model.lora): their tensors join the
    block's (the parameter count, stage 3's partitions and persistence see them), and only they are trainable."""
    key = (id(facts), lora)
    out = _LORA_FACTS.get(key)
    if out is None:
        adapters = adapter_tensors(model, lora)
        layers = tuple(
            tensors + adapters if block else tensors
            for tensors, block in zip(facts.layer_tensors, facts.layer_is_block, strict=True)
        )
        out = replace(
            facts,
            psi=facts.psi + sum(adapters) * sum(facts.layer_is_block),
            tensors=tuple(t for layer in layers for t in layer),
            layer_tensors=layers,
            lora=lora,
            layer_trainable=tuple(sum(adapters) if block else 0 for block in facts.layer_is_block),
            adapter_tensors=adapters * sum(facts.layer_is_block),
        )
        _LORA_FACTS[key] = out
    return out


def persistent_elements(tensors: tuple[int, ...], threshold: int, model_threshold: int) -> int:
    """Elements stage 3 keeps gathered on every rank: tensors of ≤ `threshold` elements, in module
    order, while the running total stays ≤ `model_threshold`
    (deepspeed/runtime/zero/parameter_offload.py `mark_persistent_parameters`)."""
    total = 0
    for numel in tensors:
        if numel <= threshold and total + numel <= model_threshold:
            total += numel
    return total


@lru_cache(maxsize=4096)
def persistent_of(facts: Facts, threshold: int, model_threshold: int) -> int:
    return persistent_elements(facts.tensors, threshold, model_threshold)


@lru_cache(maxsize=4096)
def largest_sub_group(facts: Facts, n_d: int, sub_group_size: int) -> int:
    """Elements of the largest stage-3 sub-group one rank steps at once. DeepSpeed 0.19.8
    runtime/zero/stage3.py `_create_fp16_sub_groups` walks the parameters in order, adding each one's
    partition (⌈numel/N_d⌉ elements, `partition_numel`), and closes a sub-group once it holds at least
    `sub_group_size` elements: a sub-group overshoots by up to its last tensor's partition. The
    rank's whole partition is one sub-group when it holds no more than `sub_group_size`."""
    parts = [-(-t // n_d) for t in (facts.adapter_tensors if facts.lora is not None else facts.tensors)]
    if sum(parts) <= sub_group_size:
        return sum(parts)
    largest = group = 0
    for numel in parts:
        group += numel
        if group >= sub_group_size:
            largest, group = max(largest, group), 0
    return max(largest, group)


@lru_cache(maxsize=4096)
def activations_of(
    facts: Facts,
    seq: int,
    micro: int,
    precision: str,
    checkpointing: bool,
    attention: str = "sdpa",
    cross_entropy: str = "fp32",
    swiglu: str = "plain",
    rmsnorm: str = "plain",
    checkpoint_in_cpu: bool = False,
    autocast: bool = False,
) -> int:
    if (attention == "sdpa" and not facts.sdpa) or (attention.startswith("flash") and not facts.flash):
        attention = "eager"
    return activation_bytes(
        num_layers=facts.num_layers,
        seq=seq,
        micro=micro,
        hidden=facts.hidden,
        heads=facts.heads,
        kv_heads=facts.kv_heads,
        ffn=facts.ffn,
        gated=facts.gated,
        vocab=facts.vocab,
        precision=precision,
        checkpointing=checkpointing,
        experts_per_token=facts.experts_per_token,
        flash=attention != "eager",
        fused_swiglu=swiglu == "fused",
        cross_entropy=cross_entropy,
        repeat_kv=attention == "eager" and facts.kv_heads < facts.heads,
        plain_rmsnorm=rmsnorm == "plain" and facts.rms_norm,
        checkpoint_in_cpu=checkpoint_in_cpu,
        attention_width=facts.attention_width,
        autocast=autocast,
        act_tensors=facts.act_tensors,
        dropout=facts.dropout,
        attention_dropout=facts.attention_dropout,
        shared_norm=facts.shared_norm,
        rmsnorm_extra=facts.rmsnorm_extra,
        eager_fp32_softmax=facts.eager_fp32_softmax,
        qk_norm=facts.qk_norm,
        post_norms=facts.post_norms,
        softcap=facts.softcap,
        fp32_qk=facts.fp32_qk,
    )


LOGIT_GRAD_BYTES = {"fp32": 4, "bf16": 6, "fp16": 6}
"""Of the LOGIT_BYTES per logit of HF's fp32 loss, what only backward builds: the fp32 gradient of the
log-softmax output (4 B), and under 16-bit training the 16-bit gradient of the logits too (2 B)
(zerotune.model.activations' module docstring). The rest is live at the end of forward."""


@dataclass(frozen=True, eq=False)
class ActivationPhases:
    """Activation bytes at the phases of forward and backward where they peak, and how backward frees
    them: per layer in backward order, (parameter elements, activation bytes freed by its backward).
    One instance per distinct input (activation_phases is cached), so it hashes by identity: cheap as
    part of a cache key.

    Autograd runs backward one node at a time, so the loss's buffers, the head's weight gradient and
    the recomputed last block are never live together (torch/csrc/autograd/engine.cpp evaluates the
    graph node by node and frees a node's saved tensors and its input gradients once it has run):
    - `backward`: the loss's backward, the activation peak: the loss buffers at their fullest, the
      checkpoints (or every block's activations), nothing recomputed yet;
    - `head`: the head's backward, which makes the head's weight gradient: the loss has freed its
      buffers but the gradient of the logits (`head_freed`);
    - `recompute`: with checkpointing, the last block re-materialised (transformers'
      `GradientCheckpointingLayer` / torch.utils.checkpoint run its forward again when autograd
      reaches it, after the head's backward), the head's activations gone; 0 without checkpointing."""

    forward: int
    backward: int
    walk: tuple[tuple[int, int], ...]
    head: int = 0
    recompute: int = 0
    after_head: int = 0
    """once the head's backward is done, before any block's: the checkpoints (or every block's
    activations), the head's own freed"""


def head_freed(cross_entropy: str, elem_bytes: int) -> int:
    """Bytes per logit the loss's backward frees before the head's backward runs: of the loss's peak
    (zerotune.model.activations `head_activation_bytes`) only the gradient of the logits, in the
    logits' dtype, is left for the head's matmul. HF's fp32 loss: LOGIT_BYTES less the E-byte gradient
    (the fp32 gradients are cast back to E bytes, `ToCopyBackward`); torch's loss on the 16-bit
    logits: NATIVE_LOGIT_COPIES·E less one E; a fused softmax cross-entropy writes its gradient into
    the logits (nothing freed); a fused linear cross-entropy keeps no logits."""
    if cross_entropy == "fp32":
        return LOGIT_BYTES - elem_bytes
    if cross_entropy == "native":
        return (NATIVE_LOGIT_COPIES - 1) * elem_bytes
    return 0


@lru_cache(maxsize=4096)
def activation_phases(
    facts: Facts,
    seq: int,
    micro: int,
    precision: str,
    checkpointing: bool,
    attention: str = "sdpa",
    cross_entropy: str = "fp32",
    swiglu: str = "plain",
    rmsnorm: str = "plain",
    checkpoint_in_cpu: bool = False,
    autocast: bool = False,
) -> ActivationPhases:
    """`activations_of` (every activation backward ever holds) split into the phases where they are
    live (ActivationPhases): at the end of forward the loss's backward buffers (LOGIT_GRAD_BYTES) and,
    with checkpointing, the block recomputed in backward are not allocated yet; the loss's backward
    holds the loss buffers but no recomputed block; the head's backward the gradient of the logits
    only; the recomputed block comes after both. Backward frees the head's share first, then one
    block's share per block (`walk`)."""
    total = activations_of(
        facts,
        seq,
        micro,
        precision,
        checkpointing,
        attention,
        cross_entropy,
        swiglu,
        rmsnorm,
        checkpoint_in_cpu,
        autocast,
    )
    e = DTYPE_BYTES[precision]
    cross_entropy = autocast_loss(cross_entropy, e, autocast)
    head = head_activation_bytes(seq, micro, facts.hidden, facts.vocab, elem_bytes=e, cross_entropy=cross_entropy)
    if facts.lora is not None:
        eager = attention == "eager" or (attention == "sdpa" and not facts.sdpa) or (attention.startswith("flash") and not facts.flash)
        block, first, head_delta = saved_delta(
            facts.lora,
            tokens=seq * micro,
            hidden=facts.hidden,
            ffn=facts.ffn,
            elem=e,
            gated=facts.gated,
            act_tensors=facts.act_tensors,
            flash=not eager,
            plain_rmsnorm=rmsnorm == "plain" and facts.rms_norm,
            rmsnorm_extra=facts.rmsnorm_extra,
            gemma_norm=facts.rmsnorm_extra == GEMMA_RMSNORM_EXTRA_BYTES,
            norms=(1 if facts.shared_norm else 2) + facts.post_norms,
            shared_norm=facts.shared_norm,
        )
        # with checkpointing only the recomputed (last) block keeps a block's tensors
        blocks_kept = 1 if checkpointing else facts.num_layers
        total += blocks_kept * block + (0 if checkpointing else first) + head_delta
        head += head_delta
    logit_grad = LOGIT_GRAD_BYTES.get(precision, 4) * seq * micro * facts.vocab if cross_entropy == "fp32" else 0
    blocks = max(total - head, 0)
    recompute = 0
    if checkpointing and facts.num_layers:
        # activation_bytes under checkpointing: the kept block inputs plus the one block recomputed
        inputs = min(facts.num_layers, CPU_CHECKPOINT_GPU_INPUTS) if checkpoint_in_cpu else facts.num_layers
        recompute = max(blocks - inputs * e * seq * micro * facts.hidden, 0)
    forward = total - logit_grad - recompute
    per_block = blocks // facts.num_layers if facts.num_layers else 0
    walk = []
    trainable = facts.layer_trainable if facts.lora is not None else tuple(map(sum, facts.layer_tensors))
    for elements, is_block in zip(reversed(trainable), reversed(facts.layer_is_block), strict=True):
        walk.append((elements, per_block if is_block else 0))
    loss = total - recompute
    freed = head_freed(cross_entropy, e) * seq * micro * facts.vocab
    if walk:
        # the head (or final norm) frees the rest of the head's share; the loss's own buffers are gone
        # before any parameter gradient exists (the head's backward follows the loss's)
        first = walk[0]
        walk[0] = (first[0], first[1] + max(head - freed, 0))
    return ActivationPhases(
        forward=max(forward, 0),
        backward=loss,
        walk=tuple(walk),
        head=max(loss - freed, 0),
        recompute=blocks if recompute else 0,
        after_head=blocks - recompute,
    )


def reuse_distances(
    layer_tensors: tuple[tuple[int, ...], ...], layer_is_block: tuple[bool, ...], checkpointing: bool
) -> tuple[int, ...]:
    """Per layer (forward order): trace elements from its forward to its next use (`reuse_kept_elements`)."""
    out = []
    after = recompute = 0
    for tensors, is_block in zip(reversed(layer_tensors), reversed(layer_is_block), strict=True):
        own = sum(tensors)
        out.append(0 if not is_block and len(tensors) == 1 and after == 0 else own + 2 * after + recompute)
        after += own
        if checkpointing and is_block:
            recompute += own
    return tuple(reversed(out))


LINEAR_WRAPPER_FOR_BUILT_MODELS = (0, 19, 4)
"""The first DeepSpeed release whose ZeRO-3 installs its memory-efficient linear (`zero3_linear_wrap`,
runtime/zero/linear.py) for a model built before `deepspeed.initialize`: PR #8189 (commit 617061d6b,
2026-07-31) added the `Init(module=...)` call of `_enable_mem_efficient_linear` (DeepSpeed 0.19.8
runtime/zero/partition_parameters.py:1090); up to 0.19.3 only entering a `zero.Init` context replaced
`torch.nn.functional.linear` (`patch_init_and_builtins`)."""


def release_version(version: str) -> tuple[int, ...]:
    """'0.18.3' / 'v0.14.2+cu121' -> (0, 18, 3): the leading numeric components of a DeepSpeed release."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def linear_keeps_gathered(deepspeed_version: str | None, zero_init: bool, memory_efficient_linear: bool = True) -> bool:
    """Stage 3: torch's own linear runs the forward, so every gathered Linear weight outlives its release.

    torch's `linear` saves `weight.t()` for backward, a view that shares the gathered weight's storage;
    DeepSpeed releases a parameter by pointing `param.data` at an empty tensor, which frees nothing
    while that view lives (deepspeedai/DeepSpeed#1465; PR #8189: "the standard Linear implementation can
    retain the gathered weight storage until backward completes"). ZeRO-3's `LinearFunctionForZeroStage3`
    saves the parameter itself instead. It is missing with `memory_efficient_linear: false` (Init installs
    it only when that is true: partition_parameters.py `Init.__init__`, `patch_init_and_builtins`), and
    for a model built outside `zero.Init` on a release before LINEAR_WRAPPER_FOR_BUILT_MODELS (None:
    DeepSpeed 0.19.8, the release this model follows). Measured on 0.19.8's CPU engine
    (scripts/evidence/zero3_release.py): with `memory_efficient_linear: false` the end of forward holds
    8.98 MiB more of a 16 MiB model's weights."""
    if not memory_efficient_linear:
        return True
    if zero_init or deepspeed_version is None:
        return False
    return release_version(deepspeed_version) < LINEAR_WRAPPER_FOR_BUILT_MODELS


def linear_weight_elements(facts: Facts, tensors: tuple[int, ...]) -> int:
    """Elements of a layer's Linear weights: its tensors larger than any vector a block owns (biases and
    norms are at most max(hidden, 3·hidden fused qkv, ffn) elements; the smallest weight, a GQA key
    projection, is hidden × hidden / heads × kv_heads)."""
    vector = max(3 * facts.hidden, facts.ffn)
    return sum(t for t in tensors if t > vector)


@lru_cache(maxsize=4096)
def reuse_kept_elements(
    facts: Facts, max_reuse_distance: int, threshold: int, checkpointing: bool, linear_views: bool = False
) -> int:
    """Stage 3: gathered elements kept at the end of forward because they are reused soon.

    After a module runs, DeepSpeed releases its parameters unless they reappear within
    `max_reuse_distance` elements of the upcoming module trace
    (`partitioned_param_coordinator.py __params_to_release`). From layer i's forward, the trace runs
    through the rest of layer i, the later layers' forwards (A_i elements), their backwards (A_i
    again) plus, with checkpointing, the later blocks' recomputed forwards (R_i), before layer i's
    own backward or recompute: distance ≈ P_i + 2·A_i + R_i. The head is followed directly by its
    own backward (distance 0). Layers closer than the limit stay gathered into backward, at the
    activation peak: the tail of the model (the head and the last block of llama-7b at the default
    1e9, about 0.6 GiB in bf16; nothing at 0). Persistent tensors (≤ `threshold`) are counted
    elsewhere.

    `linear_views` (`linear_keeps_gathered`): the Linear weights of every layer whose forward autograd
    records (all but the embeddings, which save only their indices, and, with checkpointing, the
    recomputed blocks, whose forward saves nothing) stay gathered until their backward too.
    """
    if max_reuse_distance <= 0 and not linear_views:
        return 0
    distances = reuse_distances(facts.layer_tensors, facts.layer_is_block, checkpointing)
    kept = 0
    for tensors, distance, kind, block in zip(
        facts.layer_tensors, distances, facts.layer_kinds, facts.layer_is_block, strict=True
    ):
        if 0 < max_reuse_distance and distance < max_reuse_distance:
            kept += sum(t for t in tensors if t > threshold)
        elif linear_views and kind not in ("embedding", "vision") and not (checkpointing and block):
            kept += linear_weight_elements(facts, tuple(t for t in tensors if t > threshold))
    return kept


def gathered_elements(facts: Facts, zero: ZeroSettings, persistent: int, kept: int = 0) -> int:
    """Stage 3: full (gathered) parameter elements live at once, besides the persistent ones, at the
    activation peak (end of forward, start of backward), all-gathers in flight included.

    What `reuse_kept_elements` keeps, or the module being computed if larger (a whole block, whose
    modules are reused within the distance when it covers a block; one tensor when it does not), plus
    what the prefetcher has issued ahead. Once the trace is complete, every module's fetch issues one
    more prefetch of ≤ prefetch_bucket_size elements (at least one parameter), capped by
    max_live_parameters minus what is already available or in flight (partitioned_param_coordinator.py
    `_fetch_sub_module_impl`, DeepSpeed 0.19.8 lines 453-457), and every module, parameter-less ones (rotary,
    activation, attention wrappers) included, calls it from its pre-forward and pre-backward hooks
    (parameter_offload.py `_register_deepspeed_module`, which hooks each child recursively). A block
    runs far more modules than it has prefetch buckets of parameters, so from the first blocks on the
    available-or-in-flight count sits at max_live_parameters (`first_fetch_elements`), not one bucket
    above what is in use: the kept tail plus one bucket, or that fill if larger. `allgather_sequential`
    turns prefetch off. Never more than the model.
    """
    block = facts.largest_layer if zero.max_reuse_distance >= facts.largest_layer else facts.largest_tensor
    current = max(block, kept)
    prefetch = 0 if zero.allgather_sequential else zero.prefetch_bucket_size
    prefetch = min(prefetch, max(0, zero.max_live_parameters - current))
    return min(max(current + prefetch, first_fetch_elements(facts, zero, persistent)), facts.psi - persistent)


def first_fetch_elements(facts: Facts, zero: ZeroSettings, persistent: int) -> int:
    """Stage 3: parameter elements in flight at once at the start of a traced forward (step 2 on).

    Once the trace is complete, every `fetch_sub_module` issues one more coalesced all-gather of
    ≤ prefetch_bucket_size elements, capped only by max_live_parameters minus what is already
    gathered or in flight (DeepSpeed 0.19.8 partitioned_param_coordinator.py `_fetch_sub_module_impl`,
    the prefetch loop after `is_complete_trace()`; `__n_available_params` is reset to 0 by
    `reset_step` and grows at each issue in `__all_gather_params_`). A module waits only for its own
    parameters, so a trace of many small modules has issued the whole model within the first few
    fetches. Each issue allocates a flat buffer of its elements (partition_parameters.py
    `_all_gather_dtype`) that lives until the last of its parameters is waited and popped from
    `__inflight_param_registry`. `allgather_sequential` (or a zero prefetch bucket) turns this off.
    """
    if zero.allgather_sequential or zero.prefetch_bucket_size <= 0:
        return 0
    return min(facts.psi - persistent, max(zero.max_live_parameters, facts.largest_tensor))


@lru_cache(maxsize=4096)
def stage3_note(gathered: int, persistent: int, prefetch: int, max_live: int) -> str:
    return (
        f"stage 3 keeps up to {fmt_count(gathered)} gathered + {fmt_count(persistent)} persistent "
        f"parameter elements on each GPU (prefetch {fmt_count(prefetch)}, max_live {fmt_count(max_live)})"
    )


@lru_cache(maxsize=4096)
def reuse_note(max_reuse_distance: int, kept: int) -> str:
    return (
        f"stage3_max_reuse_distance {fmt_count(max_reuse_distance)} keeps the last "
        f"{fmt_count(kept)} parameter elements gathered from forward into backward"
    )
