"""Record Hugging Face's own parameter counts into tests/golden/hf_param_counts.json.

Each catalog model (profiles/models/*.yaml, turned into config.json fields by
zerotune.catalog.hf_config.to_hf_config) and each fixture config.json
(tests/fixtures/hf_configs/*.json) is instantiated by transformers on the meta device (no weights,
no download) and counted as `sum(p.numel() for p in model.parameters())`, which counts tied
weights once. The tests compare zerotune's computed counts with these numbers.

Buffers are not parameters and are not counted (DeepSeek-V3's router e_score_correction_bias,
rotary inv_freq, SigLIP's position_ids), as DeepSpeed does not partition them either.

Needs transformers and torch (not zerotune dependencies), best in a venv of their own:
    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install torch transformers pydantic pyyaml hjson
    PYTHONPATH=. /tmp/tfvenv/bin/python scripts/evidence/record_hf_counts.py [--check]
--check recomputes and compares without writing (exit 1 on a difference).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "hf_param_counts.json"
FIXTURES = REPO / "tests" / "fixtures" / "hf_configs"


def hf_param_numels(config: dict[str, Any], hf_class: str) -> list[int]:
    """numel of each parameter tensor transformers builds for a config.json dict (meta device)."""
    import torch
    import transformers

    fields = {k: v for k, v in config.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **fields)
    # a remote-code class (ChatGLM, Baichuan) is not in transformers: its profile describes the same tensors
    # in a supported family, whose causal-LM class builds them here
    model_class = getattr(transformers, hf_class, None)
    with torch.device("meta"):
        model = model_class(cfg) if model_class else transformers.AutoModelForCausalLM.from_config(cfg)
    return [p.numel() for p in model.parameters()]


def hf_param_count(config: dict[str, Any], hf_class: str) -> int:
    return sum(hf_param_numels(config, hf_class))


def catalog_configs() -> dict[str, tuple[dict[str, Any], str]]:
    """Catalog name -> (config.json fields, transformers class)."""
    from zerotune.catalog.hf_config import to_hf_config
    from zerotune.catalog.models import list_models, load_architecture

    out = {}
    for name in list_models():
        arch = load_architecture(name)
        out[name] = (to_hf_config(arch), arch.hf_class)
    return out


def fixture_configs() -> dict[str, tuple[dict[str, Any], str]]:
    """Fixture file name -> (its config.json, its first `architectures` class)."""
    out = {}
    for path in sorted(FIXTURES.glob("*.json")):
        config = json.loads(path.read_text())
        out[path.name] = (config, config["architectures"][0])
    return out


def record() -> dict[str, Any]:
    import torch
    import transformers

    return {
        "how": "scripts/evidence/record_hf_counts.py: transformers on the meta device, sum(p.numel() for p in parameters())",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "catalog": {name: hf_param_count(*args) for name, args in catalog_configs().items()},
        "fixtures": {name: hf_param_count(*args) for name, args in fixture_configs().items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the golden file, do not write")
    args = parser.parse_args()
    fresh = record()
    if args.check:
        old = json.loads(GOLDEN.read_text())
        diff = [
            f"{group}/{name}: golden {old[group].get(name)} != {count}"
            for group in ("catalog", "fixtures")
            for name, count in fresh[group].items()
            if old[group].get(name) != count
        ]
        print("\n".join(diff) or f"all {len(fresh['catalog']) + len(fresh['fixtures'])} counts match")
        return 1 if diff else 0
    GOLDEN.write_text(json.dumps(fresh, indent=2) + "\n")
    for group in ("catalog", "fixtures"):
        for name, count in fresh[group].items():
            print(f"{group:9s} {name:20s} {count:>18,d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
