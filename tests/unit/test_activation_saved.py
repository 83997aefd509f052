"""zerotune's per-block activation bytes against what autograd saves in transformers' own blocks.

tests/golden/activation_saved.json holds the bytes scripts/evidence/activation_saved.py measured (torch's
saved_tensors_hooks around one real HF block per family, bf16, seq 256, micro 2, hidden 512, the catalog entry's
dropout, CUDA's dropout kernel); these tests rebuild the same shrunk shapes and need no torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.evidence.activation_saved import shrunk, zerotune_block
from zerotune.catalog.architectures import build_model
from zerotune.catalog.hf_config import parse_hf_config, to_hf_config
from zerotune.catalog.models import load_architecture
from zerotune.model.memory_facts import activations_of, facts_of

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "activation_saved.json").read_text())
FIXTURES = Path(__file__).parents[1] / "fixtures" / "hf_configs"
CASES = [(b["model"], kernel, bytes_) for b in GOLDEN["blocks"] for kernel, bytes_ in b["measured"].items()]

TOLERANCE = 0.01
KNOWN_GAPS = {
    ("gpt2", "sdpa"): "use_cache (on by default in training) copies K and V into the DynamicCache (torch.cat) while "
    "SDPA's q, a view of the fused c_attn output, keeps all of that output alive: two more s·b·h tensors",
    ("phi-2", "sdpa"): "the CPU SDPA kernel's output and its transpose(1, 2).contiguous() copy for the output "
    "projection are two tensors (--detail: clone); whether CUDA's kernels return a layout needing the copy is unmeasured",
    ("pythia-160m", "eager"): "GPT-NeoX's parallel residual normalises one input twice: one norm input less",
}
"""Residuals left (under 7%), each with its cause; the report says why they are not modelled yet."""


@pytest.mark.parametrize(("model", "kernel", "measured"), CASES, ids=[f"{m}-{k}" for m, k, _ in CASES])
def test_block_bytes_match_what_autograd_saved(model: str, kernel: str, measured: int) -> None:
    arch = shrunk(model)
    assert (GOLDEN["seq"], GOLDEN["micro"], arch.hidden) == (256, 2, GOLDEN["hidden"])
    error = zerotune_block(arch, kernel) / measured - 1
    bound = 0.07 if (model, kernel) in KNOWN_GAPS else TOLERANCE
    assert abs(error) < bound, f"{model} {kernel}: {error:+.1%}"


def test_the_measurement_tells_the_activations_and_dropout_apart() -> None:
    """OPT's block with GELU's two MLP tensors and no dropout masks (zerotune's old reading) is 23% over the bytes
    measured; the same block as it is (ReLU's one tensor, 0.1 dropout) is within 0.1%."""
    measured = next(b for b in GOLDEN["blocks"] if b["model"] == "opt-125m")["measured"]["sdpa"]
    arch = shrunk("opt-125m")
    assert abs(zerotune_block(arch, "sdpa") / measured - 1) < 0.001
    old = arch.model_copy(update={"activation": "gelu", "dropout": 0.0})
    assert zerotune_block(old, "sdpa") / measured - 1 > 0.2


def test_configs_give_activation_and_dropout() -> None:
    gpt2 = parse_hf_config(json.loads((FIXTURES / "gpt2-medium.json").read_text()), "gpt2-medium")
    assert (gpt2.activation, gpt2.dropout, gpt2.attention_dropout) == ("gelu_new", 0.1, 0.1)
    phi2 = parse_hf_config(json.loads((FIXTURES / "phi-2.json").read_text()), "phi-2")
    assert (phi2.activation, phi2.dropout, phi2.attention_dropout) == ("gelu_new", 0.1, 0.0)
    qwen = parse_hf_config(json.loads((FIXTURES / "qwen2.5-0.5b.json").read_text()), "qwen")
    assert (qwen.activation, qwen.dropout, qwen.attention_dropout) == ("silu", 0.0, 0.0)
    # OPTConfig's defaults when the config leaves them out: relu, dropout 0.1 (configuration_opt.py)
    opt = parse_hf_config({"model_type": "opt", "num_hidden_layers": 2, "vocab_size": 100}, "opt")
    assert (build_model(opt).activation, opt.dropout) == ("relu", 0.1)
    # the catalog entries say what their config.json says, and to_hf_config carries it back
    for name in ("opt-1.3b", "gpt2-xl", "phi-2", "llama3-8b"):
        arch = load_architecture(name)
        again = parse_hf_config(to_hf_config(arch), arch.name)
        assert (again.dropout, again.attention_dropout) == (arch.dropout, arch.attention_dropout)
    assert load_architecture("opt-13b").dropout == 0.1 and load_architecture("phi-1.5").dropout == 0.0


def test_bloom_keeps_its_scores_whatever_the_workload_asks() -> None:
    """transformers' BLOOM has no SDPA/flash path: asking for sdpa gives the eager bytes (s x s scores); Gemma 2
    has no SDPA path (soft-capping) but a flash one."""
    facts = facts_of(build_model(load_architecture("bloom-560m")))
    acts = lambda attention: activations_of(facts, 1024, 1, "bf16", False, attention)  # noqa: E731
    assert acts("sdpa") == acts("eager") == acts("flash")
    gemma2 = facts_of(build_model(load_architecture("gemma-2-9b")))
    acts = lambda attention: activations_of(gemma2, 1024, 1, "bf16", False, attention)  # noqa: E731
    assert acts("sdpa") == acts("eager") > acts("flash")
    llama = facts_of(build_model(load_architecture("llama3-8b")))
    assert activations_of(llama, 1024, 1, "bf16", False, "sdpa") < activations_of(llama, 1024, 1, "bf16", False, "eager")
