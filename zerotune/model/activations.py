"""Activation memory of a decoder-only transformer per GPU, after Korthikanti et al. 2022.

Source: V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198, Sec. 4.1. For a GPT block in 16-bit with tensor parallel size 1 they count
the bytes autograd keeps for backward as

    s·b·h·(34 + 5·a·s/h)

(s sequence length, b micro-batch, h hidden size, a attention heads): 11·s·b·h + 5·a·s²·b for
attention, 19·s·b·h for the MLP (ffn = 4h), 4·s·b·h for the two layer norms. This module keeps
their term-by-term accounting and generalises it to today's models:

- Attention kernel. Default: FlashAttention / PyTorch SDPA, which recompute the s×s scores in
  backward and store only the output and a per-row log-sum-exp (4·a·s·b bytes, fp32). The
  5·a·s²·b term (softmax output 2, dropout mask 1, dropout output 2) applies only with
  `flash=False` (eager attention).
- Grouped-query attention: K and V are s·b·h·kv/a each.
- MLP of intermediate size f: plain (GeLU) stores fc1's output and the activation's output,
  2·E·s·b·f; gated (SwiGLU/GeGLU, Llama-style `down(act(gate(x)) * up(x))`) stores gate, up,
  act(gate) and their product, 4·E·s·b·f (what each activation keeps: ACTIVATION_TENSORS; ReLU 1 and
  GPT-2's Python gelu_new 5 instead of GELU's 2); a fused SwiGLU kernel (Liger `LigerSiLUMulFunction`)
  saves only gate and up and recomputes act(gate) in backward, 3·E·s·b·f with the product that
  down_proj keeps. MoE: each token runs `experts_per_token` MLPs, and the routing keeps each
  dispatched input copy and each expert's output (weighted by its routing probability).
- Dropout masks (1 byte per element) only where the model's config has nonzero dropout (OPT, GPT-2, Phi-2,
  Megatron's GPT): HF keeps dropout on in training (`model.train()`); Llama-family configs set none. T5's blocks
  (cross-attention, a dropout inside the MLP) are not measured and keep the plain GELU, no-dropout accounting.
- E is the activation dtype's size: 2 for bf16/fp16, 4 for fp32.

With activation checkpointing (full recomputation per block, as HF `gradient_checkpointing`
and Megatron's "full" mode do) each block keeps only its input, E·s·b·h (Korthikanti's 2·s·b·h·L),
and backward re-materialises one block at a time, so one block's full activations are added.
With the checkpoints kept in host memory (`checkpoint_in_cpu`: DeepSpeed's cpu_checkpointing, whose
`_ActivationOffloadEngine` in runtime/activation_checkpointing/offload_activations.py copies them to
pinned buffers on a side stream) the GPU holds at most CPU_CHECKPOINT_GPU_INPUTS of them and the host
the other L - 1 (`checkpoint_host_bytes`).

The head is never checkpointed. Its logits and the cross-entropy buffers dominate for large
vocabularies: HF's causal-LM loss (transformers `loss_utils.ForCausalLMLoss`) upcasts the
16-bit logits to fp32, log-softmax saves its fp32 output, and backward builds an fp32 gradient
of it, then a 16-bit one. The peak is ≈ 12 bytes per logit in every precision (bf16: 2 + 4 + 4
+ 2; fp32: the upcast is a no-op, 4 + 4 + 4), i.e. 12·s·b·V (V vocabulary size). A fused
linear + cross-entropy kernel (Liger `LigerFusedLinearCrossEntropyLoss`, Apple's Cut Cross-Entropy)
never materialises the logits: it computes them in chunks and keeps the input's gradient, so only
the E·s·b·h head input and its gradient remain (FUSED_CE_BYTES_PER_HIDDEN); a fused softmax
cross-entropy (flash-attn `CrossEntropyLoss(inplace_backward=True)`, Liger `LigerCrossEntropyLoss`)
keeps the 16-bit logits and writes the gradient into them: E bytes per logit.

HF kernels (transformers' Llama-family modeling code, what runs unless a source says otherwise):
- eager attention gets K and V after `repeat_kv`, expanded to all heads, and keeps them; SDPA
  passes grouped K/V with `enable_gqa` (transformers `sdpa_attention.use_gqa_in_sdpa`, torch >= 2.5)
  and flash-attention 2 takes them natively;
- `LlamaRMSNorm` upcasts to fp32 and keeps that copy and the normalised 16-bit tensor
  (RMSNORM_EXTRA_BYTES more per element per norm than a fused kernel keeping its input), for the
  families that use it (Llama, Mistral, Mixtral, Qwen2, Gemma, Phi-3);
- `apply_rotary_pos_emb` multiplies by cos/sin, which need no gradient, so autograd keeps only
  cos/sin: plain and fused rotary keep the same (`rotary` is accepted and changes nothing).

Autocast (`autocast`: DeepSpeed's `torch_autocast` section, which runs the module's forward under
`torch.autocast`, DeepSpeed 0.19.8 runtime/engine.py:3006 `autocast_if_enabled`) with 16-bit weights:
ops on torch's fp32 autocast lists run in fp32 whatever their input (ATen/autocast_mode.h
`AT_FORALL_FP32`: nll_loss, layer_norm; `AT_FORALL_FP32_SET_OPT_DTYPE`: softmax, log_softmax), and the
matmuls after them cast back to 16-bit (`AT_FORALL_LOWER_PRECISION_FP`: bmm, matmul, linear). So
- eager attention's softmax keeps its fp32 output for backward and the next bmm keeps the 16-bit copy
  it cast: 4 + E bytes per score (AUTOCAST_SOFTMAX_BYTES + E) instead of E;
- torch's cross-entropy on the 16-bit logits (`native`) becomes an fp32 log-softmax and loss: the
  LOGIT_BYTES of an upcast loss (`autocast_loss`).
Not modelled: an nn.LayerNorm's fp32 output (layer_norm is on the fp32 list) feeding an fp32 residual
stream, which depends on the block's code; autocast over fp32 weights (only 16-bit weights here).

The options come from the Workload (`attention`, `cross_entropy`, `fused_swiglu`, `autocast`); their
defaults are what HF Trainer runs today (zerotune/schema/workload.py).
"""

from __future__ import annotations

from zerotune.units import DTYPE_BYTES

LOGIT_BYTES = 12
"""Peak bytes per logit of the head + cross-entropy loss (module docstring)."""

RMSNORM_EXTRA_BYTES = 4
"""Per element, what HF's unfused RMSNorm (`LlamaRMSNorm.forward`) keeps beyond a fused kernel's
16-bit input: the fp32 upcast (4 B, saved by pow and mul) and the normalised 16-bit tensor before the
weight (2 B), less the input a fused kernel would keep (2 B)."""

FUSED_CE_BYTES_PER_HIDDEN = 4
"""Fused linear cross-entropy: the fp32 gradient of the head input it computes in forward (Liger
`fused_linear_cross_entropy_forward` keeps `grad_input` for backward), per token per hidden unit."""

NATIVE_LOGIT_COPIES = 3
"""torch's F.cross_entropy on 16-bit logits without an upcast: the logits (E bytes), log_softmax's saved
output (E, in the input's dtype: aten log_softmax keeps its result for backward) and, in backward, the
gradient of the logits (E): three E-byte copies per logit at the peak."""

ACTIVATION_TENSORS = {"relu": 1, "gelu_new": 5, "gelu_python_tanh": 5, "gelu_accurate": 5}
"""MLP-width tensors a plain MLP keeps from fc1's output to fc2's input, by the activation's HF name (transformers
activations.py ACT2CLS); any other (gelu, gelu_pytorch_tanh, silu: one aten kernel that saves its input) keeps
DEFAULT_ACTIVATION_TENSORS, fc1's output and fc2's input. ReLU saves its own output for backward
(tools/autograd/derivatives.yaml: relu's `threshold_backward(grad, result, 0)`), the very tensor fc2 keeps: 1.
`gelu_new` (NewGELUActivation, GPT-2/GPT-J/Phi) is tanh-GELU written in Python ops, each op keeping its operands:
pow keeps x, tanh its output t, the final product 0.5·x and 1 + t, and fc2 the result: 5. A gated MLP keeps
these plus `up` and the product: +2 (scripts/evidence/activation_saved.py measures all three)."""
DEFAULT_ACTIVATION_TENSORS = 2

EAGER_16BIT_SOFTMAX = ("gpt2", "falcon", "gpt_oss")
"""Families whose HF eager attention takes the softmax in the scores' dtype (modeling_gpt2.py
`eager_attention_forward`: softmax(attn_weights, dim=-1); modeling_falcon.py: dtype=hidden_states.dtype;
modeling_gpt_oss.py: combined_logits.dtype). Every other family's eager path calls softmax(..., dtype=torch.float32)
and casts back (modeling_llama.py, modeling_opt.py, ...; GPT-J upcasts q and k first): autograd keeps the fp32
probabilities and the 16-bit copy the next matmul takes, AUTOCAST_SOFTMAX_BYTES + E per score, autocast or not."""

EAGER_FP32_QK = ("gptj",)
"""Families whose eager attention upcasts q and k to fp32 before the scores (modeling_gptj.py `GPTJAttention._attn`:
query.to(torch.float32), key.to(torch.float32)): the score matmul keeps the fp32 copies, 4 - E bytes more per
element of q and k."""

GEMMA_RMSNORM_EXTRA_BYTES = 6
"""Per element, what Gemma's RMSNorm (GemmaRMSNorm.forward: x.float(), normalise, multiply by 1 + weight in fp32,
cast at the end) keeps beyond a fused kernel's 16-bit input: the fp32 upcast (4 B) and the fp32 normalised tensor
(4 B) instead of LlamaRMSNorm's 16-bit one, less the input (2 B)."""

AUTOCAST_SOFTMAX_BYTES = 4
"""Eager attention under autocast: the fp32 softmax output autograd keeps per score (softmax is on
torch's fp32 autocast list, ATen/autocast_mode.h `AT_FORALL_FP32_SET_OPT_DTYPE`), on top of the
E-byte copy the following bmm casts and keeps (module docstring)."""


def autocast_loss(cross_entropy: str, elem_bytes: int, autocast: bool) -> str:
    """The loss as it runs: under autocast with 16-bit activations torch's cross-entropy on the logits
    (`native`) is an fp32 log-softmax and nll_loss (both on torch's fp32 autocast lists), the bytes of
    HF's upcast loss (`fp32`); fused kernels and an explicit upcast are what they are."""
    return "fp32" if autocast and elem_bytes < 4 and cross_entropy == "native" else cross_entropy


CPU_CHECKPOINT_GPU_INPUTS = 3
"""Block inputs still on the GPU under cpu_checkpointing: the last one, never offloaded because the
first backward needs it at once (`keep_last_count=1`), and up to two whose copy to the host is in
flight (`max_fwd_stash_count=2`), as checkpointing.py builds the engine (DeepSpeed 0.19.8
runtime/activation_checkpointing/checkpointing.py:510; offload_activations.py:70-72 defaults)."""

ASSUMPTIONS = (
    "activations: HF Trainer's kernels unless the workload names others (SDPA attention, fp32 loss at "
    f"{LOGIT_BYTES} B per logit, unfused RMSNorm and SwiGLU), dropout as the model's config says, no "
    "tensor/sequence parallelism, "
    "full per-block recompute when checkpointing"
)
"""One line stating what `activation_bytes` assumes by default, for reports."""


def layer_activation_bytes(
    seq: int,
    micro: int,
    hidden: int,
    heads: int,
    *,
    kv_heads: int | None = None,
    ffn: int | None = None,
    gated: bool = False,
    elem_bytes: int = 2,
    flash: bool = True,
    dropout: bool = False,
    experts_per_token: int = 1,
    fused_swiglu: bool = False,
    repeat_kv: bool = False,
    plain_rmsnorm: bool = False,
    attention_width: int | None = None,
    fp32_softmax: bool = False,
    act_tensors: int = DEFAULT_ACTIVATION_TENSORS,
    attention_dropout: bool | None = None,
    shared_norm: bool = False,
    rmsnorm_extra: int = RMSNORM_EXTRA_BYTES,
    qk_norm: bool = False,
    post_norms: int = 0,
    softcap: bool = False,
    fp32_qk: bool = False,
) -> int:
    """Bytes one transformer block keeps for backward (Korthikanti et al. 2022, Sec. 4.1, generalised).

    `attention_width`: elements per token the attention sub-layer keeps (its norm's input through the
    output projection's input) where the layout is not q/k/v of H·d = h: DeepSeek's MLA
    (ModelSpec.attention_activation_width, counted in zerotune/catalog/architectures.py).

    With `ffn=4h`, `kv_heads=heads`, `gated=False`, `elem_bytes=2`, `dropout=True`, `flash=False`
    this is exactly their s·b·h·(34 + 5·a·s/h). The HF-kernel terms (module docstring, "HF
    kernels") are off by default: `repeat_kv` (eager attention keeps K and V expanded to all heads)
    and `plain_rmsnorm` (two unfused RMSNorms). `fp32_softmax`: eager attention's softmax ran in fp32
    under autocast or in HF's eager code (AUTOCAST_SOFTMAX_BYTES more per score).

    Model facts (zerotune/model/memory_facts.py reads them from the ModelSpec): `act_tensors`, the MLP-width
    tensors the activation keeps (ACTIVATION_TENSORS); `dropout`, a 1-byte mask per element of each block's attention
    and MLP outputs (CUDA's native_dropout keeps a bool mask, aten/src/ATen/native/Dropout.cpp) and, in eager
    attention, of the probabilities unless `attention_dropout` says otherwise; `shared_norm`, one norm feeding a
    parallel block's attention and MLP (its input and its output kept once, not twice); `rmsnorm_extra`, bytes per
    element each unfused RMSNorm keeps beyond its input (RMSNORM_EXTRA_BYTES, GEMMA_RMSNORM_EXTRA_BYTES); `qk_norm`,
    an RMSNorm over q and one over k (Qwen3Attention q_norm/k_norm): each keeps its input, and unfused its fp32
    copy and normalised tensor besides (rmsnorm_extra + E per element of q and of k); `post_norms`, norms on the
    attention's and the MLP's outputs (Gemma 2/3's post_attention_layernorm, post_feedforward_layernorm), whose
    inputs nothing else keeps (rmsnorm_extra + E per element each); `softcap`, eager attention's logit
    soft-capping (Gemma 2: scores / cap -> tanh -> x cap), whose tanh keeps its output, E more per score;
    `fp32_qk`, eager attention's scores from fp32 copies of q and k (EAGER_FP32_QK).
    """
    kv = grouped_kv = heads if kv_heads is None else kv_heads
    if repeat_kv:
        kv = heads
    f = 4 * hidden if ffn is None else ffn
    e = elem_bytes
    sbh = seq * micro * hidden
    mask = 1 if dropout else 0
    probs_mask = mask if attention_dropout is None else int(attention_dropout)
    # Attention: layer-norm input, QKV input, Q, K, V, output-projection input, output dropout mask.
    if attention_width is None:
        attention = e * sbh * 4 + 2 * e * sbh * kv // heads + mask * sbh
    else:
        attention = e * seq * micro * attention_width + mask * sbh
    if flash:
        attention += 4 * heads * seq * micro  # fp32 log-sum-exp per row
    else:
        probs = e + (AUTOCAST_SOFTMAX_BYTES if fp32_softmax else 0) + (e if softcap else 0)
        attention += (probs + probs_mask * (1 + e)) * heads * seq * seq * micro  # softmax out (+ mask, output)
        if fp32_qk:
            attention += max(4 - e, 0) * (sbh + sbh * kv // heads)
    # MLP: layer-norm input, fc1 input, intermediate tensors, output dropout mask.
    tensors = (3 if fused_swiglu else act_tensors + 2) if gated else act_tensors
    intermediate = tensors * e * seq * micro * f * experts_per_token
    mlp = 2 * e * sbh + intermediate + mask * sbh
    norms = 1 if shared_norm else 2
    if shared_norm:  # the MLP's norm input and fc1's input are the attention's norm input and QKV input
        mlp -= 2 * e * sbh
    if experts_per_token > 1:
        # a routed MLP keeps, per token and expert it is sent to, the dispatched copy of its input
        # (`hidden_states[None, top_x]`, an index that copies) and the expert's output, which the
        # routing-weight multiply saves (`expert_layer(current_state) * routing_weights[...]`,
        # transformers MixtralSparseMoeBlock.forward): k inputs and k outputs where a dense MLP keeps
        # its one input
        mlp += (2 * experts_per_token - 1) * e * sbh
    extra = 0
    if plain_rmsnorm:
        extra += norms * rmsnorm_extra * sbh
    if post_norms:  # a fused kernel keeps only its input
        extra += post_norms * ((rmsnorm_extra if plain_rmsnorm else 0) + e) * sbh
    if qk_norm:  # q is s·b·h elements, k s·b·h·kv/a (normalised before repeat_kv), as the terms above count them
        per_element = e + (rmsnorm_extra if plain_rmsnorm else 0)
        extra += per_element * (sbh + sbh * grouped_kv // heads)
    return attention + mlp + extra


def head_activation_bytes(
    seq: int, micro: int, hidden: int, vocab: int, *, elem_bytes: int = 2, cross_entropy: str = "fp32"
) -> int:
    """Final norm input and LM-head input (E·s·b·h each) plus the logits/loss buffers: HF's fp32 loss
    12·s·b·V; a fused softmax cross-entropy that writes its gradient into the 16-bit logits E·s·b·V;
    a fused linear cross-entropy only the fp32 input gradient, 4·s·b·h; torch's cross-entropy on the
    logits as they are (no upcast: a script calling F.cross_entropy under DeepSpeed's fp16/bf16 engine
    without autocast) NATIVE_LOGIT_COPIES·E·s·b·V."""
    inputs = 2 * elem_bytes * seq * micro * hidden
    if cross_entropy == "fused_linear":
        return inputs + FUSED_CE_BYTES_PER_HIDDEN * seq * micro * hidden
    per_logit = {"fused": elem_bytes, "native": NATIVE_LOGIT_COPIES * elem_bytes}.get(cross_entropy, LOGIT_BYTES)
    return inputs + per_logit * seq * micro * vocab


def activation_bytes(
    *,
    num_layers: int,
    seq: int,
    micro: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    gated: bool,
    vocab: int,
    precision: str,
    checkpointing: bool,
    experts_per_token: int = 1,
    flash: bool = True,
    dropout: bool = False,
    fused_swiglu: bool = False,
    cross_entropy: str = "fp32",
    repeat_kv: bool = False,
    plain_rmsnorm: bool = False,
    checkpoint_in_cpu: bool = False,
    attention_width: int | None = None,
    autocast: bool = False,
    act_tensors: int = DEFAULT_ACTIVATION_TENSORS,
    attention_dropout: bool | None = None,
    shared_norm: bool = False,
    rmsnorm_extra: int = RMSNORM_EXTRA_BYTES,
    eager_fp32_softmax: bool = False,
    qk_norm: bool = False,
    post_norms: int = 0,
    softcap: bool = False,
    fp32_qk: bool = False,
) -> int:
    """Peak activation bytes per GPU for one micro-batch (no tensor/sequence parallelism).

    Without checkpointing: L blocks' full activations + the head. With checkpointing: L block
    inputs (E·s·b·h each; at most CPU_CHECKPOINT_GPU_INPUTS of them with `checkpoint_in_cpu`) + one
    block re-materialised in backward + the head. `autocast`: the forward runs under torch.autocast
    (module docstring).
    """
    # `eager_fp32_softmax`: the model's eager attention takes its softmax in fp32 (EAGER_16BIT_SOFTMAX); the other
    # model facts as layer_activation_bytes takes them
    e = DTYPE_BYTES[precision]
    cross_entropy = autocast_loss(cross_entropy, e, autocast)
    block = layer_activation_bytes(
        seq,
        micro,
        hidden,
        heads,
        kv_heads=kv_heads,
        ffn=ffn,
        gated=gated,
        elem_bytes=e,
        flash=flash,
        dropout=dropout,
        experts_per_token=experts_per_token,
        fused_swiglu=fused_swiglu,
        repeat_kv=repeat_kv,
        plain_rmsnorm=plain_rmsnorm,
        attention_width=attention_width,
        fp32_softmax=(autocast or eager_fp32_softmax) and e < 4,
        act_tensors=act_tensors,
        attention_dropout=attention_dropout,
        shared_norm=shared_norm,
        rmsnorm_extra=rmsnorm_extra,
        qk_norm=qk_norm,
        post_norms=post_norms,
        softcap=softcap,
        fp32_qk=fp32_qk,
    )
    head = head_activation_bytes(seq, micro, hidden, vocab, elem_bytes=e, cross_entropy=cross_entropy)
    if checkpointing:
        kept = min(num_layers, CPU_CHECKPOINT_GPU_INPUTS) if checkpoint_in_cpu else num_layers
        return kept * e * seq * micro * hidden + block + head
    return num_layers * block + head


def checkpoint_host_bytes(num_layers: int, seq: int, micro: int, hidden: int, precision: str) -> int:
    """Pinned host bytes of one rank's checkpointed block inputs under cpu_checkpointing: all but the
    last, which stays on the GPU (module docstring). Each crosses PCIe twice per micro-step: to the
    host in forward, back in backward."""
    return max(num_layers - 1, 0) * DTYPE_BYTES[precision] * seq * micro * hidden
