"""The model catalog: names, local config.json files and ad-hoc shapes -> ModelSpec.

Profiles live in `catalog_dir()` (profiles/models/<name>.yaml, or $ZEROTUNE_PROFILES/models). Each
holds an architecture (zerotune/catalog/architectures.py), never a parameter count: counts are
computed by `build_model` and checked against transformers (tests/golden/hf_param_counts.json).
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from zerotune.catalog import profiles_root
from zerotune.catalog.architectures import Architecture, build_model
from zerotune.catalog.hf_config import parse_hf_config
from zerotune.errors import InputError
from zerotune.files import is_readable_file, read_json, read_yaml
from zerotune.schema.model import ModelSpec
from zerotune.schema.workload import DEFAULT_SEQ_LEN

# ad-hoc models: the Llama-2 shape rules (Touvron et al. 2023, arXiv 2307.09288, Table 1 / config.json)
ADHOC_HEAD_DIM = 128
ADHOC_VOCAB = 32000
ADHOC_FFN_MULTIPLE = 256
ADHOC_TOLERANCE = 0.01  # a solved shape within 1% of --params, which people quote to 2-3 digits ("6.7B")
ADHOC_MAX_FFN_RATIO = 16  # ffn/hidden beyond any real model (Gemma-7B: 8) means the inputs disagree
ADHOC_MAX_WIDTH = 65536  # 4x the widest released dense model's hidden size (Llama-3.1-405B: 16384)
ADHOC_MAX_LAYERS = 10_000  # ~80x Llama-3.1-405B's 126 blocks; the spec lists every block, so cap it
ADHOC_MAX_PARAMS = 1e14  # 100T: reachable within ADHOC_MAX_LAYERS at ADHOC_MAX_WIDTH


def catalog_dir() -> Path:
    """Directory of the model profiles: <profiles root>/models (see zerotune.catalog.profiles_root)."""
    return profiles_root() / "models"


def list_models() -> list[str]:
    """Catalog names, sorted."""
    return sorted(_catalog(catalog_dir()))


def load_architecture(name: str) -> Architecture:
    """The catalog profile behind a name or alias (source URL, hf_class, dimensions)."""
    catalog = _catalog(catalog_dir())
    if name.strip().lower() in catalog:  # a catalog name is itself (no need to read every profile's aliases)
        return _read_profile(catalog[name.strip().lower()])
    aliases = _aliases(catalog)
    canonical = aliases.get(_key(name, strip=False)) or aliases.get(_key(name))
    if canonical is None:
        raise _unknown(name, catalog)
    return _read_profile(catalog[canonical])


def load_model(ref: str) -> ModelSpec:
    """A ModelSpec from a catalog name or alias (case-insensitive), a profile .yaml, or a local
    Hugging Face config.json (or a directory holding one)."""
    path = Path(ref).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if is_readable_file(path):
        if path.suffix in (".yaml", ".yml"):
            return build_model(_read_profile(path))
        return model_from_hf_config(read_json(path), name=_name_for(path))
    if path.suffix in (".json", ".yaml", ".yml"):
        raise InputError(
            f"model file not found: {ref}", hint="give a catalog name or an existing config.json"
        )
    return build_model(load_architecture(ref))


LEARNED_POSITIONS = frozenset({"gpt2", "opt"})
"""Families with a learned absolute position table (GPT-2's wpe: nn.Embedding(n_positions, hidden); OPT's
embed_positions, 2 rows more):
it has no row past max_positions, so a longer sequence fails in the forward. Rotary (Llama, Mistral,
Qwen2, Gemma, Phi-3, Falcon) and ALiBi (BLOOM) / relative (T5) positions run past it, untrained."""


def default_seq_len(model: ModelSpec) -> tuple[int, str | None]:
    """DEFAULT_SEQ_LEN, or the model's positions when it has fewer (GPT-2: 1024), with a note saying so."""
    limit = model.max_seq_len
    if limit is not None and limit < DEFAULT_SEQ_LEN:
        return limit, f"no --seq-len: using {model.name}'s {limit:,} positions (max_position_embeddings)"
    return DEFAULT_SEQ_LEN, None


def position_warning(model: ModelSpec, seq_len: int) -> str | None:
    """One line when `seq_len` is beyond the positions `model` was built for, else None."""
    limit = model.max_seq_len
    if limit is None or seq_len <= limit:
        return None
    if model.family in LEARNED_POSITIONS:
        return (
            f"--seq-len {seq_len:,} exceeds {model.name}'s {limit:,} positions (max_position_embeddings): "
            "its learned position table has no row past that, so the forward fails"
        )
    return (
        f"--seq-len {seq_len:,} exceeds {model.name}'s {limit:,} trained positions "
        "(max_position_embeddings): train past them only with position scaling (e.g. rope_scaling)"
    )


def model_from_hf_config(config: dict, name: str) -> ModelSpec:
    """ModelSpec of a Hugging Face config.json dict (parsed without transformers)."""
    if not isinstance(config, dict):
        raise InputError(f"{name}: a config.json must hold a JSON object")
    try:
        return build_model(parse_hf_config(config, name))
    except InputError as exc:
        same = _same_architecture(config) if "unsupported architecture" in exc.message else []
        if not same:
            raise
        raise InputError(f"{exc.message.split('; closest supported')[0]}; the catalog has it: --model {same[0]}") from None


def _same_architecture(config: dict) -> list[str]:
    """Catalog names whose class is this remote-code config's (architectures, or auto_map's causal-LM entry:
    ChatGLM's config names ChatGLMModel there) and whose width, depth and vocabulary are its own: a remote-code model the
    catalog describes in a supported family (chatglm3-6b, baichuan2-7b/13b); the vocabulary tells Baichuan-13B
    (64000) from Baichuan2-13B (125696)."""
    classes = {str(c) for c in config.get("architectures") or []}
    classes |= {str(v).rsplit(".", 1)[-1] for v in (config.get("auto_map") or {}).values()}
    shape = (
        config.get("hidden_size"),
        config.get("num_hidden_layers") or config.get("num_layers"),
        config.get("vocab_size") or config.get("padded_vocab_size"),
    )
    return [
        name
        for name, path in _catalog(catalog_dir()).items()
        if (arch := _read_profile(path)).hf_class in classes and (arch.hidden, arch.layers, arch.vocab) == shape
    ]


# --- ad-hoc models ---------------------------------------------------------------------------


def adhoc_model(
    *,
    params: float | None = None,
    layers: int | None = None,
    hidden: int | None = None,
    name: str = "custom",
) -> ModelSpec:
    """A Llama-shaped model from `--params` and/or `--layers`/`--hidden`.

    Missing dimensions follow Llama-2's shape rules: head_dim 128 (heads = hidden/128, no GQA),
    ffn = 8/3·hidden rounded up to a multiple of 256, vocab 32000, untied head, and a width of
    about 128·layers when both are free (Llama-2 7B: 32 layers × 4096). With `params`, the free
    dimensions are searched so that the total lands within 1% of it: hidden over multiples of 128,
    layers by division, then ffn (multiples of 256) takes up the remainder.
    """
    for flag, value in (("--params", params), ("--layers", layers), ("--hidden", hidden)):
        if value is not None and not value > 0:
            raise InputError(f"{flag} must be positive, got {value:g}")
    if params is not None and params > ADHOC_MAX_PARAMS:
        raise InputError(f"--params must be at most {ADHOC_MAX_PARAMS:g}, got {params:g}")
    if layers is not None and layers > ADHOC_MAX_LAYERS:
        raise InputError(f"--layers must be at most {ADHOC_MAX_LAYERS}, got {layers}")
    if hidden is not None and hidden % 64:
        raise InputError(f"--hidden must be a multiple of 64 (the head size), got {hidden}")
    if params is None:
        if layers is None and hidden is None:
            raise InputError("give --params, or --layers and/or --hidden", hint="e.g. --params 7e9")
        hidden = hidden or ADHOC_HEAD_DIM * layers  # type: ignore[operator]
        layers = layers or max(1, round(hidden / ADHOC_HEAD_DIM))
        if layers > ADHOC_MAX_LAYERS:
            raise InputError(f"--hidden {hidden} implies {layers} layers, more than {ADHOC_MAX_LAYERS}")
        return _llama_shape(name, layers, hidden, _standard_ffn(hidden))
    shape = _fit(params, layers, hidden)
    if shape is None:
        given = " ".join(f"{f} {v:g}" for f, v in (("--layers", layers), ("--hidden", hidden)) if v)
        smallest = _llama_shape(name, layers or 1, hidden or ADHOC_HEAD_DIM, ADHOC_FFN_MULTIPLE).params
        why = f"with {given}" if given else f"(the smallest such model has {smallest:.3g})"
        raise InputError(
            f"--params {params:g} cannot be reached within 1% by a llama-shaped model {why}",
            hint="drop --layers/--hidden to let zerotune choose them, or pass a config.json",
        )
    return _llama_shape(name, *shape)


def shape_note(model: ModelSpec) -> str:
    """One line stating the shape an ad-hoc model was given (--params/--layers/--hidden)."""
    return (
        f"ad-hoc shape (Llama-2 rules): {model.num_layers} layers x hidden {model.hidden_size:,}, "
        f"{model.num_heads} heads of {model.head_dim}, MLP {model.ffn_size:,} (SwiGLU), vocab {model.vocab_size:,}, "
        f"untied head = {model.params:,} params; pass --model with a config.json for a real architecture"
    )


def _standard_ffn(hidden: int) -> int:
    return -(-8 * hidden // (3 * ADHOC_FFN_MULTIPLE)) * ADHOC_FFN_MULTIPLE


def _fit(params: float, layers: int | None, hidden: int | None) -> tuple[int, int, int] | None:
    """(layers, hidden, ffn) within 1% of `params`, closest to the standard shape; None if none is."""
    candidates = []
    widths = [hidden] if hidden else range(ADHOC_HEAD_DIM, ADHOC_MAX_WIDTH + 1, ADHOC_HEAD_DIM)
    for h in widths:
        rest = params - 2 * ADHOC_VOCAB * h - h  # embedding, head, final norm
        per_block_fixed = 4 * h * h + 2 * h  # q, k, v, o, two norms
        f = _standard_ffn(h)
        n = layers or max(1, round(rest / (per_block_fixed + 3 * h * f)))
        if n > ADHOC_MAX_LAYERS:
            continue
        if layers or hidden:  # one dimension is pinned: let ffn absorb the remainder
            units = round((rest / n - per_block_fixed) / (3 * h * ADHOC_FFN_MULTIPLE))
            f = max(1, units) * ADHOC_FFN_MULTIPLE
        total = n * (per_block_fixed + 3 * h * f) + 2 * ADHOC_VOCAB * h + h
        error = abs(total - params) / params
        if error <= ADHOC_TOLERANCE and f <= ADHOC_MAX_FFN_RATIO * h:
            aspect = abs(h / (ADHOC_HEAD_DIM * n) - 1) + abs(f / _standard_ffn(h) - 1)
            candidates.append((aspect, error, (n, h, f)))
    return min(candidates)[2] if candidates else None


def _llama_shape(name: str, layers: int, hidden: int, ffn: int) -> ModelSpec:
    head_dim = ADHOC_HEAD_DIM if hidden % ADHOC_HEAD_DIM == 0 else 64
    arch = Architecture(
        name=name,
        family="llama",
        hf_class="LlamaForCausalLM",
        layers=layers,
        hidden=hidden,
        heads=hidden // head_dim,
        kv_heads=hidden // head_dim,
        ffn=ffn,
        vocab=ADHOC_VOCAB,
        tied_embeddings=False,
        gated_mlp=True,
        norm="rmsnorm",
        position="rope",
    )
    return build_model(arch).model_copy(update={"family": "custom"})


# --- bench proxies ---------------------------------------------------------------------------


def derive(
    model: ModelSpec,
    *,
    num_layers: int | None = None,
    width_scale: float = 1.0,
    vocab_size: int | None = None,
) -> ModelSpec:
    """A Llama-structured proxy of `model` for `zerotune bench`.

    The bench builds a torch decoder with exactly these tensors: embed [V, h]; per block an input
    RMSNorm [h], q [h, H·d], k and v [h, Hkv·d], o [H·d, h], a post-attention RMSNorm [h], gate and
    up [h, f], down [f, h] (no biases); a final RMSNorm [h]; lm_head [V, h] unless tied.

    - `num_layers` replaces the block count (T5: encoder + decoder blocks become that many
      decoder blocks).
    - `width_scale` < 1 shrinks the width: kv heads = max(1, round(Hkv·s)), heads keep the
      heads/kv-heads ratio, head_dim is kept, hidden = heads·head_dim, ffn = round(f·s), and vocab =
      round(V·s) unless `vocab_size` is given. At 1 the dimensions are copied unchanged.
    - Family quirks (biases, fused tensors, LayerNorm, learned positions, MoE experts and router)
      are not reproduced: an MoE model becomes a dense model with one expert-sized MLP.

    The result has family "llama-proxy" and a name like "llama-7b/2L/w0.125".
    """
    layers = model.num_layers if num_layers is None else num_layers
    if layers < 1:
        raise InputError(f"num_layers must be at least 1, got {layers}")
    if not 0 < width_scale <= 1:
        raise InputError(f"width_scale must be in (0, 1], got {width_scale:g}")
    if vocab_size is not None and vocab_size < 1:
        raise InputError(f"vocab_size must be positive, got {vocab_size}")
    h, heads, kv, d, f, vocab = (
        model.hidden_size,
        model.num_heads,
        model.num_kv_heads,
        model.head_dim,
        model.ffn_size,
        model.vocab_size,
    )
    if width_scale < 1:
        group = heads // kv
        kv = max(1, round(kv * width_scale))
        heads = kv * group
        h = heads * d
        f = max(1, round(f * width_scale))
        vocab = max(1, round(vocab * width_scale))
    arch = Architecture(
        name=f"{model.name}/{layers}L/w{width_scale:g}",
        family="llama",
        hf_class="LlamaForCausalLM",
        source=model.source,
        layers=layers,
        hidden=h,
        heads=heads,
        kv_heads=kv,
        head_dim=d,
        ffn=f,
        vocab=vocab_size or vocab,
        tied_embeddings=model.tied_embeddings,
        gated_mlp=True,
        norm="rmsnorm",
        position="rope",
        max_positions=model.max_seq_len,
    )
    return build_model(arch).model_copy(update={"family": "llama-proxy"})


# --- profile files ---------------------------------------------------------------------------


@cache
def _catalog(directory: Path) -> dict[str, Path]:
    """Catalog name -> profile path (the name is the file's stem)."""
    if not directory.is_dir():
        return {}
    return {path.stem: path for path in sorted(directory.glob("*.yaml"))}


def _aliases(catalog: dict[str, Path]) -> dict[str, str]:
    """Normalised name or alias -> catalog name, each as written and without its fine-tune suffixes. A name
    as written wins (Mistral-7B-Instruct-v0.3 is mistral-7b-v0.3, whose vocabulary differs), then a base
    name's stripped form (Mistral-7B-Instruct-v0.2 is mistral-7b), then a fine-tune alias's stripped form."""
    pairs = [(n, a) for n, path in catalog.items() for a in (n, *_read_profile(path).aliases)]
    variants = {_key(a): n for n, a in pairs if _key(a) != _key(a, strip=False)}
    bases = {_key(a): n for n, a in pairs if _key(a) == _key(a, strip=False)}
    return variants | bases | {_key(a, strip=False): n for n, a in pairs}


_FINE_TUNE_SUFFIXES = frozenset({"hf", "chat", "instruct", "it", "base", "thinking"})
"""Trailing name parts of Hugging Face ids that name a variant with its base's shapes: the "-hf"
conversions and chat/instruction/reasoning fine-tunes (Llama-2-7b-chat-hf, Meta-Llama-3-8B-Instruct,
gemma-3-27b-it, Qwen3-30B-A3B-Thinking-2507)."""


def _key(name: str, strip: bool = True) -> str:
    """Lower case, no org prefix or separators, without fine-tune suffixes (and a fine-tune release's
    version or YYMM date): "meta-llama/Llama-2-7b-chat-hf" -> "llama27b", "Mistral-7B-Instruct-v0.2" ->
    "mistral7b", "Qwen3-30B-A3B-Instruct-2507" -> "qwen330ba3b"."""
    name = name.strip().lower().rsplit("/", 1)[-1]
    tokens = [t for t in re.split(r"[-_ ]", name) if t]
    while strip and len(tokens) > 1:
        last = tokens[-1]
        versioned = (
            re.fullmatch(r"v\d+(\.\d+)*|\d{4}", last) and len(tokens) > 2 and tokens[-2] in _FINE_TUNE_SUFFIXES
        )
        if last not in _FINE_TUNE_SUFFIXES and not versioned:
            break
        tokens.pop()
    return "".join(tokens)


def _unknown(name: str, catalog: dict[str, Path]) -> InputError:
    aliases = _aliases(catalog)
    close = difflib.get_close_matches(_key(name), list(aliases), n=6, cutoff=0.6)
    names = list(dict.fromkeys(aliases[key] for key in close))[:3]
    known = f"catalog: {', '.join(sorted(catalog))}; or the path of a config.json or profile .yaml"
    hint = f"did you mean: {', '.join(names)}? {known}" if names else known
    return InputError(f"unknown model '{name}'", hint=hint)


@cache
def _read_profile(path: Path) -> Architecture:
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: a model profile must be a YAML mapping")
    data.setdefault("name", path.stem)
    try:
        return Architecture(**data)
    except ValidationError as exc:
        lines = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'profile'}: {e['msg']}" for e in exc.errors())
        raise InputError(f"{path}: invalid model profile: {lines}") from None


def _name_for(path: Path) -> str:
    """A config.json is named after its directory (HF snapshots keep it as <model>/config.json)."""
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem
