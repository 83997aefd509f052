"""LoRA jobs: rank-r adapters trained on a frozen base (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
Language Models", arXiv:2106.09685), as HF peft builds them.

What the adapters are. peft wraps each targeted linear W [out, in] in a LoRA Linear whose forward is the frozen
base layer's output plus lora_B(lora_A(dropout(x))) x scaling, lora_A [r, in] and lora_B [out, r] (peft
src/peft/tuners/lora/layer.py `Linear.forward`, `update_layer`), and freezes every other parameter
(`LoraModel._mark_only_adapters_as_trainable`): r·(in + out) trainable elements per adapted matrix, the base's
Ψ frozen. Without `target_modules` peft takes its default for the model type,
TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (src/peft/utils/constants.py,
https://github.com/huggingface/peft/blob/main/src/peft/utils/constants.py): q_proj and v_proj for Llama,
Mistral, Mixtral, Qwen2/3, Gemma 1-3, StableLM; other layouts (GPT-2's c_attn, Falcon's query_key_value)
name other modules, which zerotune does not lay out: such a job names its targets.

What DeepSpeed 0.19.8 keeps for them (deepspeed/runtime/zero/):
- stage 1/2 build their flat groups from the optimizer's param groups, keeping only parameters with
  requires_grad (stage_1_and_2.py:379-385, `trainable_parameters`): fp32 master, moments, gradient buckets and
  partitions exist for the adapters only; the frozen base stays as the module holds it, whole on every rank in
  the model dtype;
- stage 3 partitions every module parameter, frozen or not (parameter_offload.py:252-255
  `_convert_to_zero_parameters` over `module.parameters()`), and gathers them for forward and backward, but
  builds its fp16/fp32 partitions, gradient partition buffer and sub-groups from the trainable ones only
  (stage3.py:677-690 `_get_trainable_parameter_groups`, used at stage3.py:433-436).

What autograd saves. A matmul saves its input only for its weight's gradient and its weight only for its
input's gradient (torch's generated autograd saves each operand under `should_compute_output` of the other,
tools/autograd/gen_variable_type.py `guard_for`), and so does an elementwise multiply by a weight. So through
a frozen base:
- a frozen linear keeps nothing of its input; the input stays saved only when an adapter on the same input
  keeps it (lora_A saves x for its weight gradient; with lora_dropout 0, peft's default, the dropout is an
  identity and x is the very tensor the base layer read);
- a frozen RMSNorm weight keeps no normalised tensor (HF `LlamaRMSNorm`: weight * x_normed in the input
  dtype; Gemma's (1 + weight) in fp32), so each plain RMSNorm keeps only its fp32 upcast (its input in fp32);
- without activation checkpointing the first block's input is the frozen embedding's output, which needs no
  gradient: its input norm keeps nothing, and q/k/v (and their adapters' lora_A) compute no input gradient.
  With checkpointing, transformers and peft hook the embedding to make its output require one
  (`PreTrainedModel.gradient_checkpointing_enable` -> `enable_input_require_grads` when a PEFT config is loaded;
  peft `PeftModel._prepare_model_for_gradient_checkpointing`), as reentrant checkpointing needs;
- each adapter keeps x·A (r per token) for lora_B's weight gradient;
- attention kernels (SDPA, flash) keep q, k, v and their output whatever the weights, and the activation
  function and the gate's product keep their operands: unchanged. The output projection's input is the
  kernel's output (a view), except in eager attention, where it is a copy only a trainable o_proj keeps.
Checked on the CPU DeepSpeed engine: scripts/evidence/memory_engine.py rows `s2-lora-r64`, `s3-lora-r64`.
"""

from __future__ import annotations

from typing import NamedTuple

from zerotune.errors import InputError
from zerotune.schema.model import ModelSpec

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
PROJECTIONS = ATTENTION + MLP
"""The Llama-layout linears of a block (transformers modeling_llama.py LlamaAttention, LlamaMLP), the names
peft's `target_modules` matches; `all-linear` (peft tuners_utils `_maybe_include_all_linear_layers`) is every
one of them, the output head excluded."""

PEFT_DEFAULT_TARGETS = ("q_proj", "v_proj")
PEFT_DEFAULT_FAMILIES = frozenset(
    "llama llama4 mistral mixtral qwen2 qwen3 gemma gemma2 gemma3_text stablelm opt gptj gpt_neo bart".split()
)
"""Model types whose peft default targets are q_proj and v_proj (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING,
module docstring). Families of the catalog spelled otherwise map onto these by their prefix (qwen2_moe -> qwen2)."""


class Lora(NamedTuple):
    rank: int
    targets: tuple[str, ...]


def targets_of(model: ModelSpec, said: str) -> tuple[str, ...]:
    """The projections a LoRA job adapts: the ones it names, comma-separated (`all-linear`: every block linear),
    else peft's default for the model's family. Raises InputError for a name zerotune does not lay out."""
    targets = tuple(t.strip() for t in said.split(",") if t.strip())
    if not targets:
        family = model.family.split("-")[0]
        if family in PEFT_DEFAULT_FAMILIES or family.split("_")[0] in PEFT_DEFAULT_FAMILIES:
            return PEFT_DEFAULT_TARGETS
        raise InputError(
            f"LoRA on family {model.family!r}: peft's default targets for it are not Llama-style projections",
            hint="name them with --lora-targets (" + ",".join(PROJECTIONS) + ", or all-linear)",
        )
    if "all-linear" in targets:
        return PROJECTIONS
    unknown = [t for t in targets if t not in PROJECTIONS]
    if unknown:
        raise InputError(
            f"LoRA target {', '.join(unknown)}: zerotune lays out only the Llama-style block linears",
            hint="use " + ",".join(PROJECTIONS) + " or all-linear",
        )
    return tuple(t for t in PROJECTIONS if t in targets)


def projection_shape(model: ModelSpec, name: str) -> tuple[int, int]:
    """(in, out) features of one block linear (transformers LlamaAttention / LlamaMLP)."""
    h = model.hidden_size
    q = model.num_heads * model.head_dim
    v = model.num_kv_heads * (model.v_head_dim or model.head_dim)
    return {
        "q_proj": (h, q),
        "k_proj": (h, model.num_kv_heads * model.head_dim),
        "v_proj": (h, v),
        "o_proj": (model.num_heads * (model.v_head_dim or model.head_dim), h),
        "gate_proj": (h, model.ffn_size),
        "up_proj": (h, model.ffn_size),
        "down_proj": (model.ffn_size, h),
    }[name]


def adapter_tensors(model: ModelSpec, lora: Lora) -> tuple[int, ...]:
    """Elements of one block's adapter tensors, lora_A then lora_B of each target in block order."""
    if model.attention_activation_width is not None and any(t in ATTENTION for t in lora.targets):
        raise InputError(
            f"LoRA on {model.name}'s attention: its MLA projections are not the q/k/v/o layout zerotune lays out",
            hint="target its MLP (--lora-targets gate_proj,up_proj,down_proj)",
        )
    if model.num_experts > 1 and any(t in MLP for t in lora.targets):
        raise InputError(
            f"LoRA on {model.name}'s MLP: adapters on routed experts are not modelled",
            hint="target its attention (--lora-targets q_proj,v_proj)",
        )
    if not model.gated_mlp and "gate_proj" in lora.targets:
        raise InputError(f"LoRA target gate_proj: {model.name} has no gated MLP", hint="drop gate_proj")
    out: list[int] = []
    for name in lora.targets:
        fan_in, fan_out = projection_shape(model, name)
        out += [lora.rank * fan_in, lora.rank * fan_out]
    return tuple(out)


def saved_delta(
    lora: Lora,
    *,
    tokens: int,
    hidden: int,
    ffn: int,
    elem: int,
    gated: bool,
    act_tensors: int,
    flash: bool,
    plain_rmsnorm: bool,
    rmsnorm_extra: int,
    gemma_norm: bool,
    norms: int,
    shared_norm: bool,
) -> tuple[int, int, int]:
    """(bytes per block, bytes of the first block beyond that, bytes of the head) that a LoRA job saves for
    backward beyond (negative: below) what full fine-tuning saves (module docstring, "What autograd saves");
    `tokens` = s·b. Signs: the frozen base drops inputs and normalised tensors, the adapters add x·A."""
    t = set(lora.targets)
    sbh = tokens * hidden
    block = 0
    # the normalised tensor each frozen RMSNorm weight no longer keeps: in the input dtype (LlamaRMSNorm),
    # in fp32 for Gemma's 1 + weight
    normalised = (4 if gemma_norm else elem) if plain_rmsnorm else 0
    block -= norms * normalised * sbh
    attention_input = bool(t & {"q_proj", "k_proj", "v_proj"}) or (shared_norm and bool(t & {"gate_proj", "up_proj"}))
    if not attention_input:
        block -= elem * sbh
    if not flash and "o_proj" not in t:
        block -= elem * sbh  # eager attention's output copy, kept only by a trainable o_proj
    if not shared_norm and not t & {"gate_proj", "up_proj"}:
        block -= elem * sbh  # the MLP's input
    if "down_proj" not in t and (gated or act_tensors > 1):
        block -= elem * tokens * ffn  # down_proj's input (ReLU keeps its output, the same tensor, itself)
    block += len(lora.targets) * elem * tokens * lora.rank  # x·A, kept by lora_B
    # the first block's input norm: its input (the frozen embedding's output) needs no gradient
    first = -((elem + rmsnorm_extra - normalised) if plain_rmsnorm else elem) * sbh
    head = -elem * sbh  # the frozen head keeps no input
    return block, first, head


def first_block_skipped_flops(model: ModelSpec, lora: Lora) -> float:
    """Backward FLOPs per token the first block does not run when its input needs no gradient (module
    docstring): the input gradients of q, k and v (frozen: their weight gradients are not run either) and of the
    lora_A adapters that read the same input (2 FLOPs per element of each matrix)."""
    total = 0.0
    for name in ("q_proj", "k_proj", "v_proj"):
        fan_in, fan_out = projection_shape(model, name)
        total += 2.0 * fan_in * fan_out + (2.0 * lora.rank * fan_in if name in lora.targets else 0.0)
    return total
