"""Record DeepSpeed 0.19.8's verdict on configs added to tests/fixtures/unseen_configs.

    python scripts/evidence/unseen_verdicts.py FILE...   # prints {name: {"1": verdict, "8": verdict}} as JSON

`DeepSpeedConfig(path)` at data-parallel world sizes 1 and 8 (differential_corpus.py's DeepSpeedParser;
None = accepted, else the exception). The path is given as is when the text is JSON, whatever the file's
name (DeepSpeed opens it with hjson.load, deepspeed/runtime/config.py:443-444); a real YAML file is loaded
with yaml.safe_load and dumped to JSON first, as a launcher that keeps its DeepSpeed config in YAML does
(of a SwissArmyTransformer YAML, its `deepspeed:` section as OmegaConf reads it; of a GPT-NeoX config, the
keys NeoX hands DeepSpeed; of a YAML with OmegaConf `${...}` interpolations, OmegaConf's reading: zerotune's
loader).
HF accelerate launcher configs, trainer's arguments files (`deepspeed: ds.json`) and launcher files handing HF
TrainingArguments their `deepspeed` mapping as a dict (IlyaGusev/rulm) are skipped: DeepSpeed never reads them,
it gets what HF builds or fills.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.evidence.differential_corpus import WORLDS, DeepSpeedParser  # noqa: E402
from zerotune.dsconfig import accelerate  # noqa: E402
from zerotune.dsconfig.load import load_path  # noqa: E402


def main(paths: list[str]) -> dict[str, dict[str, str | None]]:
    import yaml

    parser = DeepSpeedParser()
    out: dict[str, dict[str, str | None]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in paths:
            path = Path(name)
            text = path.read_text(encoding="utf-8")
            given = str(path)
            if load_path(path).trainer_args is not None:
                continue  # a trainer's arguments file: DeepSpeed reads the JSON it names, never this file
            try:
                json.loads(text)
            except ValueError:
                if path.suffix in (".yaml", ".yml"):
                    data = yaml.safe_load(text)
                    if isinstance(data, dict) and accelerate.is_accelerate_config(data):
                        continue
                    # what the launcher hands DeepSpeed, as zerotune's loader reads it: a
                    # `deepspeed:` section (SwissArmyTransformer), the keys GPT-NeoX passes on, a Hydra
                    # YAML as OmegaConf reads it (`1e-4` a float), else the YAML as PyYAML reads it
                    data = load_path(path).data
                    given = str(Path(tmp) / (path.stem + ".json"))
                    Path(given).write_text(json.dumps(data))
            out[path.name] = {str(w): parser.verdict(given, w) for w in WORLDS}
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1, sort_keys=True))
