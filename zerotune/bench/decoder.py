"""The proxy model: a llama-style decoder built from a ModelSpec (torch, imported lazily).

Structure (Touvron et al. 2023, "LLaMA", §2.2; HF transformers `modeling_llama.py` read for
layout): token embedding; per block pre-norm RMSNorm -> attention with grouped-query K/V heads
and rotary position embeddings -> residual, RMSNorm -> SwiGLU MLP (gate, up, down) -> residual;
final RMSNorm; LM head (or the embedding matrix when tied). No biases. A spec with
`gated_mlp=False` gets a plain up/GELU/down MLP instead.

The module list follows `spec.layers` one to one (embedding, blocks, final norm, head), so the
parameter count equals `spec.params` exactly, tensor by tensor, and the runner can time each
module under the spec's own layer names. Initialisation is deterministic for a seed: N(0, 0.02) matrices
(GPT-2/llama convention), unit norm weights.

torch is imported inside `build_decoder` so that importing this module stays free of it
(tests/unit/test_pure_core.py); the classes are made once per process.
"""

from __future__ import annotations

import functools
from typing import Any

from zerotune.schema.model import ModelSpec

INIT_STD = 0.02
ROPE_THETA = 10_000.0
NORM_EPS = 1e-5


def build_decoder(spec: ModelSpec, *, seed: int, dtype: Any = None) -> Any:
    """A torch.nn.Module for `spec` whose forward(input_ids, labels) returns the mean LM loss."""
    import torch

    classes = _classes()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = classes.Decoder(spec)
    if dtype is not None:
        model = model.to(dtype)
    return model


def add_lora(model: Any, rank: int, targets: tuple[str, ...], *, seed: int) -> int:
    """Freeze `model` and wrap each of its linears named in `targets` (q_proj, v_proj, ...) in a rank-`rank`
    LoRA adapter, as HF peft's LoRA Linear computes it (peft tuners/lora/layer.py `Linear.forward`: the
    frozen base layer's output plus lora_B(lora_A(dropout(x))) x scaling; `lora_dropout` 0, peft's
    default, makes the dropout an identity; lora_A Kaiming-uniform, lora_B zeros, `reset_lora_parameters`).
    Every base parameter gets requires_grad=False (peft `_mark_only_adapters_as_trainable`). Returns the
    adapters' parameter count."""
    import torch

    classes = _classes()
    for param in model.parameters():
        param.requires_grad_(False)
    added = 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if name in targets and isinstance(child, torch.nn.Linear):
                    wrapped = classes.LoraLinear(child, rank)
                    setattr(module, name, wrapped)
                    added += sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    if not added:
        raise ValueError(f"no linear named {', '.join(targets)} in the proxy")
    return added


def module_names(spec: ModelSpec) -> list[str]:
    """Names of `timed_modules()` in order: the spec's layer names, plus the tied head's."""
    names = [layer.name for layer in spec.layers]
    return names + ["lm_head (tied)"] if spec.tied_embeddings else names


@functools.cache
def _classes() -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class RMSNorm(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            variance = x.pow(2).mean(-1, keepdim=True)
            return x * torch.rsqrt(variance + NORM_EPS) * self.weight

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Attention(nn.Module):
        def __init__(self, spec: ModelSpec) -> None:
            super().__init__()
            h, d = spec.hidden_size, spec.head_dim
            self.heads, self.kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, d
            self.q_proj = nn.Linear(h, spec.num_heads * d, bias=False)
            self.k_proj = nn.Linear(h, spec.num_kv_heads * d, bias=False)
            self.v_proj = nn.Linear(h, spec.num_kv_heads * d, bias=False)
            self.o_proj = nn.Linear(spec.num_heads * d, h, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
            k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            cos, sin = _rope(s, self.head_dim, x.device, x.dtype)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            if self.kv_heads != self.heads:  # grouped-query attention: share each K/V head
                repeat = self.heads // self.kv_heads
                k = k.repeat_interleave(repeat, dim=1)
                v = v.repeat_interleave(repeat, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(out.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))

    def _rope(s: int, d: int, device: Any, dtype: Any) -> tuple[torch.Tensor, torch.Tensor]:
        inv = 1.0 / (ROPE_THETA ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        angles = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    class MLP(nn.Module):
        def __init__(self, spec: ModelSpec) -> None:
            super().__init__()
            h, f = spec.hidden_size, spec.ffn_size
            self.gated = spec.gated_mlp
            if self.gated:
                self.gate_proj = nn.Linear(h, f, bias=False)
            self.up_proj = nn.Linear(h, f, bias=False)
            self.down_proj = nn.Linear(f, h, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.gated:
                return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
            return self.down_proj(F.gelu(self.up_proj(x)))

    class Block(nn.Module):
        def __init__(self, spec: ModelSpec) -> None:
            super().__init__()
            self.input_norm = RMSNorm(spec.hidden_size)
            self.attn = Attention(spec)
            self.post_attn_norm = RMSNorm(spec.hidden_size)
            self.mlp = MLP(spec)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.input_norm(x))
            return x + self.mlp(self.post_attn_norm(x))

    class Head(nn.Module):
        """The LM head; with tied embeddings it owns no weight and reuses the embedding's."""

        def __init__(self, spec: ModelSpec, embed: nn.Embedding) -> None:
            super().__init__()
            self.tied = spec.tied_embeddings
            self._embed = [embed]  # a list: not registered as a child, so not counted twice
            if not self.tied:
                self.weight = nn.Parameter(torch.empty(spec.vocab_size, spec.hidden_size))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            weight = self._embed[0].weight if self.tied else self.weight
            return F.linear(x, weight)

    class LoraLinear(nn.Module):
        """A frozen linear plus a rank-r adapter (`add_lora`); alpha = r, so the scaling is 1."""

        def __init__(self, base: nn.Linear, rank: int) -> None:
            super().__init__()
            self.base_layer = base
            self.lora_A = nn.Linear(base.in_features, rank, bias=False)
            self.lora_B = nn.Linear(rank, base.out_features, bias=False)
            nn.init.kaiming_uniform_(self.lora_A.weight, a=5**0.5)
            nn.init.zeros_(self.lora_B.weight)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base_layer(x) + self.lora_B(self.lora_A(x))

    class Decoder(nn.Module):
        def __init__(self, spec: ModelSpec) -> None:
            super().__init__()
            if spec.num_heads % spec.num_kv_heads:
                raise ValueError(
                    f"num_heads {spec.num_heads} is not a multiple of num_kv_heads {spec.num_kv_heads}"
                )
            if spec.num_experts > 1:
                raise ValueError("the proxy decoder has no MoE layers (num_experts > 1)")
            self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
            self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.num_layers))
            self.norm = RMSNorm(spec.hidden_size)
            self.head = Head(spec, self.embed)
            self.checkpointing = False
            for name, param in self.named_parameters():
                if param.dim() == 2:
                    nn.init.normal_(param, mean=0.0, std=INIT_STD)
                elif not name.endswith("norm.weight"):
                    raise AssertionError(f"unexpected parameter {name}")

        def timed_modules(self) -> list[nn.Module]:
            """Embedding, blocks, final norm, head: forward order, as ModelSpec.layers lists them
            (a tied head owns no tensor and has no entry there; see `module_names`)."""
            return [self.embed, *self.blocks, self.norm, self.head]

        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            x = self.embed(input_ids)
            for block in self.blocks:
                # activation checkpointing as HF's gradient_checkpointing_enable does it: each
                # block's activations are recomputed in backward (torch non-reentrant checkpoint)
                if self.checkpointing and self.training:
                    x = checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))

    return type("Classes", (), {"Decoder": Decoder, "RMSNorm": RMSNorm, "LoraLinear": LoraLinear})
