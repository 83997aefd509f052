"""The torch proxy decoder has exactly the tensors of the derived ModelSpec, and a deterministic init."""

from __future__ import annotations

import math

import pytest

from zerotune.bench.decoder import build_decoder, module_names
from zerotune.catalog.models import derive, load_model

torch = pytest.importorskip("torch")

MODELS = ["llama-7b", "llama3-8b", "mistral-7b", "gemma-7b", "qwen2.5-7b", "mixtral-8x7b", "gpt2"]


@pytest.mark.parametrize("name", MODELS)
def test_parameter_count_equals_the_spec_module_by_module(name: str) -> None:
    spec = derive(load_model(name), num_layers=2, width_scale=0.0625)
    model = build_decoder(spec, seed=0)
    assert sum(p.numel() for p in model.parameters()) == spec.params
    modules = model.timed_modules()
    assert len(modules) == len(module_names(spec)) == len(spec.layers) + spec.tied_embeddings
    for module, layer in zip(modules, spec.layers, strict=False):
        assert sum(p.numel() for p in module.parameters()) == layer.params, layer.name
        # Tensor by tensor, in the spec's order (the order DeepSpeed fills buckets in).
        assert tuple(p.numel() for p in module.parameters()) == layer.tensors, layer.name


def test_tied_head_reuses_the_embedding() -> None:
    spec = derive(load_model("gemma-7b"), num_layers=1, width_scale=0.0625)
    assert spec.tied_embeddings
    model = build_decoder(spec, seed=0)
    assert list(model.head.parameters()) == []
    x = torch.randint(0, spec.vocab_size, (1, 8))
    model(x, x).backward()
    assert model.embed.weight.grad is not None


def test_init_is_deterministic_per_seed_and_the_loss_starts_near_log_vocab() -> None:
    spec = derive(load_model("llama-7b"), num_layers=2, width_scale=0.0625)
    a, b, c = (build_decoder(spec, seed=s) for s in (0, 0, 1))
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.embed.weight, c.embed.weight)
    tokens = torch.randint(0, spec.vocab_size, (2, 17), generator=torch.Generator().manual_seed(0))
    loss = a(tokens[:, :-1], tokens[:, 1:])
    # N(0, 0.02) weights give near-uniform logits: cross-entropy ~ ln(V) + var(logit)/2, and the
    # logits of unit-RMS hidden states have variance 0.02^2 * hidden (0.1 at hidden 256).
    expected = math.log(spec.vocab_size) + 0.02**2 * spec.hidden_size / 2
    assert loss.item() == pytest.approx(expected, abs=0.03)


def test_attention_is_causal() -> None:
    spec = derive(load_model("llama3-8b"), num_layers=1, width_scale=0.0625)
    model = build_decoder(spec, seed=0)
    captured = {}
    model.norm.register_forward_hook(lambda m, i, o: captured.__setitem__("h", o.detach()))
    x = torch.randint(0, spec.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    model(x, x)
    first = captured["h"].clone()
    y = x.clone()
    y[0, -1] = (y[0, -1] + 1) % spec.vocab_size  # change only the last token
    model(y, y)
    assert torch.allclose(first[:, :-1], captured["h"][:, :-1], atol=1e-6)
    assert not torch.allclose(first[:, -1], captured["h"][:, -1])
