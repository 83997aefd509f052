"""What autograd saves in one Hugging Face decoder block, measured, against zerotune's per-block estimate.

For each family, one block of the real transformers model (a 1-layer *ForCausalLM on CPU, bf16, real tensors) is
built from its catalog profile shrunk to hidden 512 (8 heads of 64; kv heads, MLP width and every structural switch
in proportion to the profile), with the dropout its catalog entry says (ModelSpec.dropout, from the checkpoint's
config.json), in training mode. `torch.autograd.graph.saved_tensors_hooks` is entered for the block's forward only;
every tensor it packs is counted once per storage (a view shares its base's bytes), leaving out parameters and what
the block received besides its hidden states (rotary cos/sin, masks, position ids: made once per model, shared by
every block). The block's input hidden states are counted: its first norm keeps them.

Two CPU-vs-GPU differences are emulated so that the bytes are the GPU's:
- dropout: ATen's `dropout` (aten/src/ATen/native/Dropout.cpp) takes the fused `native_dropout`, which saves a
  bool mask (1 B per element), only on CUDA/XPU (`is_fused_kernel_acceptable`); on CPU it multiplies by a noise
  tensor of the input's dtype (2 B in bf16). The script routes F.dropout to `torch.native_dropout`, what CUDA runs.
- SDPA with dropout: CUDA's flash / memory-efficient kernels regenerate the dropout mask from a Philox seed in
  backward (`_scaled_dot_product_flash_attention` returns philox_seed/offset), keeping nothing s x s; the CPU
  dispatcher falls back to the math kernel, which materialises the scores. Under `sdpa` the attention dropout is
  therefore measured at 0 (and the eager run keeps it: eager attention calls F.dropout on the probabilities).

Run with a Python that has torch and transformers (the project's core needs neither):

    PYTHONPATH=. /tmp/tfvenv/bin/python scripts/evidence/activation_saved.py            # table
    PYTHONPATH=. /tmp/tfvenv/bin/python scripts/evidence/activation_saved.py --record   # + tests/golden json
    PYTHONPATH=. /tmp/tfvenv/bin/python scripts/evidence/activation_saved.py --detail opt-125m   # tensor list

`--detail` lists each saved storage with the aten op that produced it (a TorchDispatchMode): what tells ReLU's one
MLP tensor from gelu_new's five, the fp32 softmax of eager attention, and the residuals the tests list (KNOWN_GAPS).
The models run as HF runs them in training, use_cache included (its K/V concatenation copies K and V).

`--record` writes tests/golden/activation_saved.json (shapes, dropout, measured bytes per attention kernel), which
tests/unit/test_activation_saved.py compares with zerotune's estimate without torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zerotune.catalog.architectures import build_model
from zerotune.catalog.models import load_architecture
from zerotune.model.activations import head_activation_bytes
from zerotune.model.memory_facts import activations_of, facts_of

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "activation_saved.json"
SEQ, MICRO, HIDDEN, HEAD_DIM = 256, 2, 512, 64
MODELS = (
    "opt-125m", "gpt2", "gpt-j-6b", "bloom-560m", "falcon-7b", "pythia-160m", "phi-2", "starcoder2-3b",
    "llama3-8b", "qwen2.5-0.5b", "gemma-2b", "qwen3-8b", "gemma-2-9b",
)  # fmt: skip
KERNELS = ("sdpa", "eager")


def shrunk(name: str):
    """The catalog architecture at hidden 512, 8 heads of 64, kv heads and MLP in the profile's proportion."""
    arch = load_architecture(name)
    heads = HIDDEN // HEAD_DIM
    kv = max(1, round(heads * arch.n_kv_heads / arch.heads))
    ffn = max(HEAD_DIM, round(HIDDEN * arch.ffn / arch.hidden / HEAD_DIM) * HEAD_DIM)
    return arch.model_copy(
        update=dict(layers=1, hidden=HIDDEN, heads=heads, kv_heads=kv, head_dim=None, ffn=ffn, vocab=1024)
    )


def zerotune_block(arch, attention: str) -> int:
    """zerotune's bytes for one block of `arch` at SEQ x MICRO in bf16 (the model's activations less its head)."""
    model = build_model(arch)
    total = activations_of(facts_of(model), SEQ, MICRO, "bf16", False, attention)
    return total - head_activation_bytes(SEQ, MICRO, arch.hidden, arch.vocab, elem_bytes=2)


def hf_model(arch, attention: str):
    """A 1-layer transformers model of `arch` (its family's config class; dropout as ModelSpec says) and its block."""
    import transformers as tf

    m = build_model(arch)
    h, a, kv, f = arch.hidden, arch.heads, arch.n_kv_heads, arch.ffn
    p = m.dropout
    # attention-probability dropout: measured under eager only (module docstring)
    pa = m.attention_dropout if attention == "eager" else 0.0
    common = dict(vocab_size=arch.vocab, attn_implementation=attention)
    fam = arch.family
    if fam == "opt":
        cfg = tf.OPTConfig(hidden_size=h, num_attention_heads=a, ffn_dim=f, num_hidden_layers=1,
                           word_embed_proj_dim=h, dropout=p, attention_dropout=pa, **common)
        model = tf.OPTForCausalLM(cfg)
        return model, model.model.decoder.layers[0]
    if fam == "gpt2":
        cfg = tf.GPT2Config(n_embd=h, n_head=a, n_inner=f, n_layer=1, resid_pdrop=p, embd_pdrop=p,
                            attn_pdrop=pa, **common)
        model = tf.GPT2LMHeadModel(cfg)
        return model, model.transformer.h[0]
    if fam == "gptj":
        cfg = tf.GPTJConfig(n_embd=h, n_head=a, n_inner=f, n_layer=1, rotary_dim=HEAD_DIM // 2, resid_pdrop=p,
                            embd_pdrop=p, attn_pdrop=pa, **common)
        model = tf.GPTJForCausalLM(cfg)
        return model, model.transformer.h[0]
    if fam == "bloom":
        cfg = tf.BloomConfig(hidden_size=h, n_head=a, n_layer=1, hidden_dropout=p, attention_dropout=pa, **common)
        model = tf.BloomForCausalLM(cfg)
        return model, model.transformer.h[0]
    if fam == "falcon":
        cfg = tf.FalconConfig(hidden_size=h, num_attention_heads=a, num_hidden_layers=1, multi_query=kv == 1,
                              num_kv_heads=kv, new_decoder_architecture=kv not in (1, a), parallel_attn=True,
                              bias=arch.qkv_bias, hidden_dropout=p, attention_dropout=pa, ffn_hidden_size=f,
                              **common)
        model = tf.FalconForCausalLM(cfg)
        return model, model.transformer.h[0]
    if fam == "gpt_neox":
        cfg = tf.GPTNeoXConfig(hidden_size=h, num_attention_heads=a, intermediate_size=f, num_hidden_layers=1,
                               hidden_dropout=p, attention_dropout=pa, use_parallel_residual=True, **common)
        model = tf.GPTNeoXForCausalLM(cfg)
        return model, model.gpt_neox.layers[0]
    if fam == "phi":
        cfg = tf.PhiConfig(hidden_size=h, num_attention_heads=a, num_key_value_heads=kv, intermediate_size=f,
                           num_hidden_layers=1, resid_pdrop=p, embd_pdrop=0.0, attention_dropout=pa, **common)
        model = tf.PhiForCausalLM(cfg)
        return model, model.model.layers[0]
    if fam == "starcoder2":
        cfg = tf.Starcoder2Config(hidden_size=h, num_attention_heads=a, num_key_value_heads=kv,
                                  intermediate_size=f, num_hidden_layers=1, residual_dropout=p,
                                  embedding_dropout=0.0, attention_dropout=pa, **common)
        model = tf.Starcoder2ForCausalLM(cfg)
        return model, model.model.layers[0]
    classes = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
               "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM), "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM),
               "gemma2": (tf.Gemma2Config, tf.Gemma2ForCausalLM)}
    config_cls, model_cls = classes[fam]
    cfg = config_cls(hidden_size=h, num_attention_heads=a, num_key_value_heads=kv, head_dim=HEAD_DIM,
                     intermediate_size=f, num_hidden_layers=1, attention_dropout=pa, **common)
    model = model_cls(cfg)
    return model, model.model.layers[0]


def measure(arch, attention: str, detail: bool = False) -> int:
    """Bytes autograd keeps for backward from one block's forward (module docstring)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model, block = hf_model(arch, attention)
    model = model.to(torch.bfloat16).train()
    excluded = {t.untyped_storage().data_ptr() for t in model.parameters()}
    excluded |= {t.untyped_storage().data_ptr() for t in model.buffers()}
    saved: dict[int, tuple[int, str]] = {}
    made: dict[int, str] = {}  # storage -> the aten op that last wrote it (--detail)
    producer: dict[int, str] = {}
    scores: list[str] = []
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: keep(t), lambda t: t)

    def keep(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in excluded and storage.data_ptr() not in saved:
            saved[storage.data_ptr()] = (storage.nbytes(), f"{tuple(t.shape)} {t.dtype}")
            producer[storage.data_ptr()] = made.get(storage.data_ptr(), "?")
            if t.dim() >= 2 and tuple(t.shape[-2:]) == (SEQ, SEQ):
                scores.append(str(t.dtype))
        return t

    def tensors(x):
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (tuple, list)):
            for y in x:
                yield from tensors(y)
        elif isinstance(x, dict):
            for y in x.values():
                yield from tensors(y)

    def enter(module, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        others = [t for t in tensors((args[1:], kwargs)) if t is not hidden]
        excluded.update(t.untyped_storage().data_ptr() for t in others)
        hooks.__enter__()

    def leave(module, args, kwargs, output):
        hooks.__exit__(None, None, None)

    block.register_forward_pre_hook(enter, with_kwargs=True)
    block.register_forward_hook(leave, with_kwargs=True)
    ids = torch.randint(0, arch.vocab, (MICRO, SEQ))
    fused_dropout = F.dropout
    # CUDA's dropout: native_dropout and its bool mask (module docstring)
    F.dropout = lambda x, p=0.5, training=True, inplace=False: (
        torch.native_dropout(x, p, True)[0] if training and 0 < p < 1 else fused_dropout(x, p, training, inplace)
    )
    try:
        if detail:
            from torch.utils._python_dispatch import TorchDispatchMode

            class Producers(TorchDispatchMode):
                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    out = func(*args, **(kwargs or {}))
                    returns = func._schema.returns
                    if returns and returns[0].alias_info is not None:  # a view: its producer made the storage
                        return out
                    for t in tensors(out):
                        made[t.untyped_storage().data_ptr()] = str(func.overloadpacket.__name__)
                    return out

            with Producers():
                model(input_ids=ids)
        else:
            model(input_ids=ids)
    finally:
        F.dropout = fused_dropout
    if detail:
        for ptr, (nbytes, what) in sorted(saved.items(), key=lambda kv: -kv[1][0]):
            print(f"  {nbytes:>12,}  {what:<36} from {producer[ptr]}")
    elif attention == "sdpa" and scores:
        raise ValueError(f"SDPA kept {scores[0]} s x s scores: the CPU math kernel, not what CUDA runs")
    return sum(nbytes for nbytes, _ in saved.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help=f"write {GOLDEN.relative_to(GOLDEN.parents[2])}")
    parser.add_argument("--detail", metavar="MODEL", help="list the tensors saved for one model's block")
    args = parser.parse_args(argv)
    if args.detail:
        for attention in KERNELS:
            print(f"{args.detail} {attention}:")
            measure(shrunk(args.detail), attention, detail=True)
        return 0
    rows, worst = [], 0.0
    print(f"one block, bf16, seq {SEQ}, micro {MICRO}, hidden {HIDDEN}, heads of {HEAD_DIM}; bytes autograd saves")
    print(f"{'model':<15} {'family':<11} {'kernel':<6} {'measured':>12} {'zerotune':>12} {'error':>7}")
    for name in MODELS:
        arch = shrunk(name)
        spec = build_model(arch)
        row = dict(model=name, kv_heads=arch.n_kv_heads, ffn=arch.ffn, dropout=spec.dropout,
                   attention_dropout=spec.attention_dropout, measured={})
        for attention in KERNELS:
            try:
                want = measure(arch, attention)
            except ValueError as exc:  # BLOOM: no SDPA path in transformers; Falcon: its explicit mask sends the
                # CPU dispatcher to the math kernel (in fp32), where CUDA runs the memory-efficient one
                print(f"{name:<15} {arch.family:<11} {attention:<6} {'n/a':>12}  ({str(exc)[:60]}...)")
                continue
            got = zerotune_block(arch, attention)
            row["measured"][attention] = want
            worst = max(worst, abs(got / want - 1))
            print(f"{name:<15} {arch.family:<11} {attention:<6} {want:>12,} {got:>12,} {got / want - 1:>+7.1%}")
        rows.append(row)
    print(f"worst |error| {worst:.1%}")
    if args.record:
        import torch
        import transformers

        GOLDEN.write_text(
            json.dumps(
                dict(
                    source="scripts/evidence/activation_saved.py --record",
                    torch=torch.__version__.split("+")[0],
                    transformers=transformers.__version__,
                    seq=SEQ, micro=MICRO, hidden=HIDDEN, head_dim=HEAD_DIM, precision="bf16",
                    blocks=rows,
                ),
                indent=1,
            )
            + "\n"
        )
        print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
