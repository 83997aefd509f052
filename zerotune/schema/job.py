"""What a user says about a job (the CLI's job options, defined once: cli/options.py takes their help
from these field descriptions). zerotune.job.resolve_job decides what is not said."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from zerotune.errors import InputError

PRECISIONS = ("bf16", "fp16", "fp32")
OPTIMIZERS = ("adamw", "adam", "sgd", "lion", "adagrad")
OPTIMIZER_STATE_TWINS = {"lamb": "adam", "muadam": "adam", "muadamw": "adamw", "musgd": "sgd"}
"""DeepSpeed optimizer types (dsconfig/schema.py DEEPSPEED_OPTIMIZERS) that keep the state of one the model
costs: FusedLamb keeps Adam's two moments (deepspeed/ops/lamb/fused_lamb.py: exp_avg, exp_avg_sq); mup's
MuAdam/MuAdamW/MuSGD are torch's Adam/AdamW/SGD with per-group learning rates (the `mup` package)."""


def modelled_optimizer(config_type: str | None, said: str | None) -> tuple[str, str | None]:
    """The optimizer the model costs for a job (the config's `optimizer.type`, else --optimizer, else AdamW,
    HF Trainer's default) and a notice when the config names one it does not model (never silently)."""
    name = (config_type or said or "adamw").lower()
    if name in OPTIMIZERS:
        return name, None
    if name in OPTIMIZER_STATE_TWINS:
        twin = OPTIMIZER_STATE_TWINS[name]
        return twin, f"optimizer {config_type!r} keeps {twin}'s state: costed as {twin}"
    return "adamw", (
        f"optimizer {config_type!r} is not modelled: costed as AdamW (8 B of fp32 moments per parameter); "
        f"its own state and step time may differ"
    )
# The workload options' values, as zerotune.schema.workload spells them (a test holds the two equal).
ATTENTIONS = ("sdpa", "flash", "flash3", "flash4", "eager")
CROSS_ENTROPIES = ("fp32", "native", "fused", "fused_linear")
KERNELS = ("plain", "fused")
MOE_IMPLS = ("grouped", "loop")
LOGITS_HELD = ("none", "model", "fp32")
CHOICES = {
    "attention": ATTENTIONS,
    "cross_entropy": CROSS_ENTROPIES,
    "swiglu": KERNELS,
    "rmsnorm": KERNELS,
    "rotary": KERNELS,
    "moe_impl": MOE_IMPLS,
    "logits_held": LOGITS_HELD,
}
LIGER_KERNELS = {"cross_entropy": "fused_linear", "swiglu": "fused", "rmsnorm": "fused", "rotary": "fused"}
"""What `--liger` switches on: Liger's `apply_liger_kernel_to_llama` defaults (rope, swiglu, rms_norm,
fused_linear_cross_entropy all True, cross_entropy False), which HF Trainer's `use_liger_kernel` applies."""

WORKLOAD_OPTIONS = (
    "attention",
    "liger",
    *LIGER_KERNELS,
    "packing",
    "activation_offloading",
    "zero_init",
    "moe_impl",
    "logits_held",
    "omp_threads",
    "autocast",
    "deepspeed_version",
    "lora_rank",
    "lora_targets",
)
"""The JobInputs fields that describe how the job runs (set the Workload), in the order commands take them."""

SAFETY_MARGIN = 0.10
"""Predicted peak x (1 + margin) must fit (zerotune.model.fit). The margin covers the caching allocator's
fragmentation spikes and part of the memory model's own error. Measured against the 87 published memory
figures (scripts/evidence/loso.py, data/evidence/loso.json, 2026-11-28): memory MAPE 11.6%, median error
-0.2%; 70 of the 87 are under-predicted by less than this margin covers (predicted x 1.1 >= measured), 17 by
more (to -77%): the margin is a choice, not a bound, and each prediction states its category's memory band
(zerotune/model/band.py). PyTorch documents that reserved memory runs above allocated by fragmentation
the allocator cannot return (torch.cuda memory management notes). One number for every command, so a
config that `recommend` accepts never fails `validate`."""


def _said(default, description: str):
    return field(default=default, metadata={"description": description})


@dataclass(frozen=True)
class JobInputs:
    """What a user says about the job. None means "not said": the config, the record `recommend`
    wrote, the profile or a stated default decides (resolve_job). A dataclass, not a pydantic model:
    the CLI reads these descriptions at start-up, and pydantic's import alone doubles that."""

    model: str | None = _said(None, "Catalog model name, model profile .yaml or HF config.json.")
    params: float | None = _said(None, "Ad-hoc model with this many parameters (e.g. 7.5e9).")
    layers: int | None = _said(None, "Ad-hoc model: transformer blocks.")
    hidden: int | None = _said(None, "Ad-hoc model: hidden size.")
    profile: str | None = _said(
        None,
        "Hardware profile: catalog name or file (default: the cached calibration or probe, else dgx-h100).",
    )
    gpus: int | None = _said(None, "GPUs (ranks) per node (default: the profile's).")
    nodes: int | None = _said(None, "Nodes (default: the profile's).")
    world_size: int | None = _said(None, "Data-parallel ranks in total (instead of --gpus/--nodes).")
    gpu_memory: float | None = _said(None, "GPU memory in GiB, overriding the profile's.")
    seq_len: int | None = _said(
        None, "Tokens per sequence (default: 2048, or the model's positions when fewer)."
    )
    micro_batch: int | None = _said(None, "Sequences per GPU per forward (default: the config's, else 1).")
    grad_accum: int | None = _said(None, "Gradient accumulation steps (default: the config's, else 1).")
    precision: str | None = _said(
        None,
        "bf16, fp16 or fp32: the job's, or what fills a config's \"auto\" (default: bf16 "
        "where the GPU has it, else fp16; fp32 on a CPU host).",
    )
    optimizer: str | None = _said(
        None, "adamw, adam, sgd, lion or adagrad when no config says (default adamw)."
    )
    checkpointing: bool | None = _said(
        None, "Activation checkpointing (recompute) in the training script (default: on)."
    )
    checkpoint_in_cpu: bool = _said(
        False,
        "The checkpoints wait for backward in host memory (DeepSpeed cpu_checkpointing, "
        "Megatron-DeepSpeed --checkpoint-in-cpu).",
    )
    attention: str | None = _said(
        None,
        "Attention kernel: flash (flash-attention 2), flash3 (flash-attention 3), flash4 (flash-attention 4), sdpa or eager "
        "(HF attn_implementation; default sdpa).",
    )
    liger: bool | None = _said(
        None,
        "Liger kernels on (HF use_liger_kernel): fused linear cross-entropy, SwiGLU, RMSNorm and rotary, "
        "unless a kernel option says otherwise (default: off).",
    )
    cross_entropy: str | None = _said(
        None,
        "Loss kernel: fp32 (HF's upcast loss, 12 B per logit), native (torch cross-entropy on 16-bit logits, "
        "3 copies), fused (16-bit logits) or fused_linear (no logits kept; default fp32, fused_linear with --liger).",
    )
    swiglu: str | None = _said(None, "SwiGLU kernel: plain or fused (default plain, fused with --liger).")
    rmsnorm: str | None = _said(None, "RMSNorm kernel: plain or fused (default plain, fused with --liger).")
    rotary: str | None = _said(None, "Rotary kernel: plain or fused (default plain, fused with --liger).")
    packing: bool | None = _said(
        None, "Packed / padding-free sequences (TRL packing, padding_free): every token is real (default: off)."
    )
    activation_offloading: bool | None = _said(
        None, "Activations wait for backward in host memory (TRL activation_offloading; default: off)."
    )
    zero_init: bool | None = _said(
        None,
        "Stage 3: the model is built under deepspeed.zero.Init (HF Trainer / accelerate with ZeRO-3; default). "
        "--no-zero-init: the script builds it before deepspeed.initialize, which moves it to the GPU whole.",
    )
    moe_impl: str | None = _said(
        None,
        "MoE experts: grouped (one grouped GEMM) or loop (HF transformers' per-expert loop; default grouped).",
    )
    logits_held: str | None = _said(
        None,
        "The training loop keeps the model's output (its logits) through backward and the step, as a loop "
        "binding `outputs = model(...)` does: none (HF Trainer; default), model (transformers >= 4.46 return "
        "them in the model's dtype) or fp32 (transformers < 4.46 upcast them).",
    )
    omp_threads: int | None = _said(
        None,
        "OpenMP threads per rank (OMP_NUM_THREADS) for an offloaded optimizer's CPU Adam (default: the "
        "deepspeed launcher's, every rank sharing the node's cores; torchrun and accelerate launch leave 1).",
    )
    autocast: bool | None = _said(
        None,
        "The forward runs under torch.autocast over 16-bit weights: eager attention's softmax and torch's loss on "
        "the logits keep fp32 copies (default: the config's torch_autocast.enabled).",
    )
    deepspeed_version: str | None = _said(
        None,
        "The DeepSpeed release the job runs (default: 0.19.8, the release zerotune models). Before 0.19.4 a "
        "stage-3 model built outside zero.Init keeps every gathered Linear weight from forward to backward.",
    )
    lora_rank: int | None = _said(
        None,
        "LoRA: rank-r adapters train on a frozen base (HF peft; trl --lora_r, LlamaFactory lora_rank); optimizer "
        "states, gradients and reductions cover the adapters only (default: full fine-tuning).",
    )
    lora_targets: str | None = _said(
        None,
        "LoRA: the block linears adapted, comma-separated (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj "
        "or all-linear; default: peft's for the family, q_proj,v_proj for Llama-style models).",
    )
    hf: bool = _said(False, 'The config goes through HF Trainer: fill "auto" values as HF does.')
    margin: float | None = _said(
        None,
        "Memory safety margin on top of the predicted peak, a fraction (default 0.1; predict: the one recommend "
        "recorded with the config). 0 asks whether the job can run at all.",
    )

    def check(self) -> None:
        """One-line input errors, before anything is loaded."""
        for name in (
            "layers",
            "hidden",
            "gpus",
            "nodes",
            "world_size",
            "seq_len",
            "micro_batch",
            "grad_accum",
            "omp_threads",
            "lora_rank",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        for name in ("params", "gpu_memory"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InputError(f"--{name.replace('_', '-')} must be positive, got {value:g}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise InputError(f"--precision must be bf16, fp16 or fp32, got {self.precision!r}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise InputError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value is not None and value not in allowed:
                flag = "--" + name.replace("_", "-")
                raise InputError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")
        if self.margin is not None and not 0 <= self.margin < 1:
            raise InputError(f"--margin must be in [0, 1), got {self.margin:g}")
        if self.lora_targets is not None and self.lora_rank is None:
            raise InputError("--lora-targets without --lora-rank", hint="give the adapters' rank, e.g. --lora-rank 8")
        if self.model is not None and self.adhoc:
            raise InputError("--model and --params/--layers/--hidden are exclusive", hint="choose one")

    def workload_options(self) -> dict[str, object]:
        """The Workload fields these inputs set (the kernels, packing, offloading, MoE experts): --liger
        first, each kernel option over it. Only what was said: the rest keeps its default or record."""
        out: dict[str, object] = {}
        if self.liger is not None:
            out |= LIGER_KERNELS if self.liger else {k: ("fp32" if k == "cross_entropy" else "plain") for k in LIGER_KERNELS}
        for name in WORKLOAD_OPTIONS:
            if name == "liger":  # applied above, before the kernels said one by one
                continue
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if "lora_targets" in out:  # as the Workload spells them: comma-separated, no blanks
            out["lora_targets"] = ",".join(t.strip() for t in str(out["lora_targets"]).split(",") if t.strip())
        return out

    @property
    def adhoc(self) -> bool:
        return self.params is not None or self.layers is not None or self.hidden is not None


def description(name: str) -> str:
    """A field's description: the CLI help of its option."""
    return next(f.metadata["description"] for f in fields(JobInputs) if f.name == name)
