"""The training job a recommendation or prediction is for."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Precision = Literal["bf16", "fp16", "fp32"]
Optimizer = Literal["adamw", "adam", "sgd", "lion", "adagrad"]
Attention = Literal["sdpa", "flash", "flash3", "flash4", "eager"]
CrossEntropy = Literal["fp32", "native", "fused", "fused_linear"]
Kernel = Literal["plain", "fused"]
MoeImpl = Literal["grouped", "loop"]
LogitsHeld = Literal["none", "model", "fp32"]

DEFAULT_SEQ_LEN = 2048
"""Tokens per sequence when none is given: GPT-3's and LLaMA-1's pre-training context (Brown et al. 2020,
arXiv 2005.14165 §2.1: n_ctx = 2048 for every model; Touvron et al. 2023, arXiv 2302.13971: 2k tokens).
Llama 2 doubled it (arXiv 2307.09288 §2.2) and later models train longer: a job should state its own."""


class Workload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seq_len: int = Field(DEFAULT_SEQ_LEN, gt=0)
    micro_batch: int = Field(1, gt=0, description="sequences per GPU per forward")
    grad_accum: int = Field(1, gt=0)
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    torch_optimizer: bool = Field(
        False,
        description="the optimizer is a torch.optim one handed to deepspeed.initialize (what `zerotune bench` "
        "passes on a GPU without offload, and HF Trainer when the DeepSpeed config has no optimizer section): "
        "torch's Adam/AdamW steps in foreach kernels, one HBM pass per arithmetic op, and a 16-bit model at "
        "ZeRO stage 0 is wrapped in DeepSpeed's unfused FP16 optimizer; false = DeepSpeed's FusedAdam, built "
        "from the config's optimizer section",
    )
    activation_checkpointing: bool = True
    checkpoint_in_cpu: bool = Field(
        False,
        description="with activation checkpointing, the block inputs wait for backward in pinned host memory: "
        "DeepSpeed's cpu_checkpointing (Megatron-DeepSpeed --checkpoint-in-cpu; HF via DeepSpeed's "
        "CheckpointHiddenStatesOffload), copied on a side stream",
    )
    gpus_per_node: int = Field(8, gt=0, description="ranks per node (gloo ranks on a CPU host)")
    nodes: int = Field(1, gt=0)
    # Kernels that change what autograd keeps (zerotune/model/activations.py). Defaults are what HF
    # Trainer runs today: transformers picks `attn_implementation="sdpa"` when torch provides it
    # (modeling_utils `_check_and_adjust_attn_implementation`; SDPA keeps no s x s scores); the
    # causal-LM loss upcasts logits to fp32 (`loss_utils.ForCausalLMLoss`); RMSNorm, rotary and SwiGLU
    # run as plain PyTorch ops, Liger's fused kernels being off (`TrainingArguments.use_liger_kernel`
    # defaults to False).
    attention: Attention = Field(
        "sdpa",
        description="sdpa | flash (flash-attention 2) | flash3 (flash-attention 3, Hopper) | flash4 (flash-attention 4, "
        "Blackwell) | eager (s x s scores "
        "and repeated K/V kept)",
    )
    cross_entropy: CrossEntropy = Field(
        "fp32",
        description="fp32: HF's upcast loss, 12 B/logit | native: torch cross-entropy on the 16-bit logits, "
        "3 copies | fused: in-place softmax CE, 16-bit logits | "
        "fused_linear: fused linear + CE, no logits kept",
    )
    autocast: bool = Field(
        False,
        description="the forward runs under torch.autocast over 16-bit weights (DeepSpeed's torch_autocast "
        "section): eager attention's softmax and torch's cross-entropy on the logits keep fp32 copies",
    )
    logits_held: LogitsHeld = Field(
        "none",
        description="the training loop keeps the model's output, its logits, alive from the forward through "
        "backward and the optimizer step until the next forward returns (a loop that binds `outputs = "
        "model(...)` and calls backward on `outputs.loss`; HF Trainer's compute_loss returns only the loss): "
        "none | model (logits in the model's dtype: transformers >= 4.46, whose loss upcasts a copy) | fp32 "
        "(transformers < 4.46 upcast the returned logits themselves when labels are given)",
    )
    swiglu: Kernel = Field("plain", description="fused: one kernel that recomputes act(gate) in backward")
    rmsnorm: Kernel = Field("plain", description="fused: a kernel that keeps only its input (no fp32 copy)")
    rotary: Kernel = Field(
        "plain", description="recorded for completeness: HF's rotary keeps only cos/sin either way"
    )
    packing: bool = Field(
        False,
        description="sequences packed / padding-free (TRL `packing`, `padding_free`): every token of "
        "seq_len is real. The model costs seq_len tokens per sequence either way and the attention "
        "span as seq_len (an upper bound when packed documents are shorter)",
    )
    activation_offloading: bool = Field(
        False,
        description="TRL `activation_offloading`: saved activations wait for backward in pinned host "
        "memory (torch saved-tensor hooks on a side stream); with checkpointing those are the block "
        "inputs, as with checkpoint_in_cpu",
    )
    zero_init: bool = Field(
        True,
        description="stage 3: the model is built under deepspeed.zero.Init, as HF Trainer and accelerate do "
        "with a ZeRO-3 config; a model built before deepspeed.initialize is moved to the GPU whole and "
        "partitioned there (its 16-bit weights must fit one GPU at init)",
    )
    deepspeed_version: str | None = Field(
        None,
        description="the DeepSpeed release the job runs (null: 0.19.8, the release zerotune models); before "
        "0.19.4 a model built outside zero.Init runs torch's linear, whose saved weight views keep stage 3's "
        "gathered weights until backward",
    )
    omp_threads: int | None = Field(
        None,
        gt=0,
        description="OpenMP threads of each rank's host-side optimizer step (OMP_NUM_THREADS): null = the "
        "deepspeed launcher's default, each rank's pool spans the node and its ranks share the node's cores; "
        "torchrun and accelerate launch export OMP_NUM_THREADS=1 when a node runs several processes, so "
        "DeepSpeedCPUAdam runs on one thread per rank",
    )
    moe_impl: MoeImpl = Field(
        "grouped",
        description="MoE experts: grouped (one grouped GEMM over every expert, MegaBlocks / ScatterMoE / "
        "torch grouped_mm) | loop (HF transformers' per-expert Python loop)",
    )

    lora_rank: int | None = Field(
        None,
        gt=0,
        description="LoRA: the base is frozen and rank-r adapters train on `lora_targets` (HF peft; LlamaFactory "
        "`lora_rank`, trl `lora_r` with `use_peft`); null = full fine-tuning (zerotune/model/lora.py)",
    )
    lora_targets: str = Field(
        "",
        description="the block linears LoRA adapts, comma-separated (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, "
        "or all-linear); empty = peft's default for the family (q_proj, v_proj for Llama-style models)",
    )

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.micro_batch * self.grad_accum * self.world_size
