"""The published suite as `zerotune predict` command lines: every run of data/published/runs.yaml said with
the CLI's own options, so a user reproduces any row without the Python API.

    .venv/bin/python scripts/evidence/published.py --commands          # write the files, print one line a run
    .venv/bin/python scripts/evidence/published_cli.py --out DIR        # the same, files under DIR

Each command needs two files a user would have, written under `--out` (default data/published/cli/,
not tracked: regenerated from runs.yaml): the run's DeepSpeed config (`configs/<id>.json`, what
`Run.ds_config` holds) and, where the run's hardware is not a catalog profile as is, the profile it runs
on (`profiles/<id>.yaml`): the catalog profile at the run's counts with the source's own measurements
of its box (`same_box`, published.run_hardware), standing in for the profile `zerotune probe` writes on a
real box. Everything else is an option: model (catalog name or the suite's model .yaml), GPUs and nodes,
sequence length, micro-batch, accumulation, precision, optimizer, checkpointing, and each workload
option the run sets (attention and the other kernels, packing, activation offloading, zero.Init, MoE
experts). `--margin 0` asks for the verdict the suite judges ("could the run have run at all",
published.OVER_CAPACITY). tests/unit/test_published_cli.py runs every command and holds its numbers
equal to published.predict_run's.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from scripts.evidence import published  # noqa: E402
from zerotune.catalog.hardware import load_profile, with_counts  # noqa: E402
from zerotune.dsconfig.settings import resolve  # noqa: E402

OUT = REPO / "data" / "published" / "cli"


def _shown(path: Path) -> str:
    """A path as the command shows it: relative to the repository root (where the commands run) when
    inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def run_profile(run: published.Run, out: Path) -> str:
    """The --profile a run's command names: the catalog name where the run's hardware is the catalog
    profile at its counts, else a profile file written under `out`/profiles."""
    spec = published.load_run_model(run)
    precision = resolve(run.ds_config()).precision
    hardware = published.run_hardware(run, spec, precision)
    catalog = load_profile(run.profile)
    if (run.gpus_per_node, run.nodes) != (catalog.gpus_per_node, catalog.nodes):
        catalog = with_counts(catalog, gpus_per_node=run.gpus_per_node, nodes=run.nodes)
    if hardware == catalog:
        return run.profile
    box = run.same_box
    why = f"; {box.derivation}" if box is not None else ""
    hardware = hardware.model_copy(
        update={
            "name": f"{run.profile}+{run.id}",
            "description": f"catalog profile {run.profile} at {run.nodes}x{run.gpus_per_node} GPUs with what the "
            f"source measured on its own box (data/published/runs.yaml run {run.id}: same_box){why}",
        }
    )
    path = out / "profiles" / f"{run.id}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f"# written by scripts/evidence/published_cli.py from data/published/runs.yaml ({run.id}); do not edit\n"
    path.write_text(head + yaml.safe_dump(hardware.model_dump(mode="json"), sort_keys=False))
    return _shown(path)


def workload_options(run: published.Run) -> list[str]:
    """The job options (zerotune/cli/options.py) for what the run's workload sets beyond the shape."""
    args: list[str] = []
    for name, value in sorted(run.kernels.items()):
        args += [f"--{name.replace('_', '-')}", value]
    if run.packing is not None:
        args.append("--packing" if run.packing else "--no-packing")
    if run.activation_offloading:
        args.append("--activation-offloading")
    if run.moe_impl is not None:
        args += ["--moe-impl", run.moe_impl]
    if run.logits_held != "none":
        args += ["--logits-held", run.logits_held]
    if run.omp_threads is not None:
        args += ["--omp-threads", str(run.omp_threads)]
    if not run.zero_init:
        args.append("--no-zero-init")
    if run.deepspeed_version is not None:
        args += ["--deepspeed-version", run.deepspeed_version]
    return args


DEEPSPEED_OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam", "adagrad": "Adagrad", "lion": "Lion", "sgd": "SGD"}
"""The config's optimizer `type` for the run's optimizer (DeepSpeed's names, docs/config-json#optimizer-parameters)."""


def run_config(run: published.Run) -> dict:
    """The run's DeepSpeed config as a file holds it: Run.ds_config, with an `optimizer` section where
    the run offloads the optimizer. DeepSpeed steps offloaded states only with its own CPU optimizer,
    built from that section; without one it refuses the client's optimizer (ZeRORuntimeException,
    engine.py zero_force_ds_cpu_optimizer; zerotune's ZT305), so the source's config had one."""
    config = run.ds_config()
    if resolve(config).zero.cpu_optimizer and "optimizer" not in config:
        config["optimizer"] = {"type": DEEPSPEED_OPTIMIZERS[run.optimizer]}
    return config


def command(run: published.Run, out: Path = OUT) -> list[str]:
    """`zerotune predict ...` for one run (the arguments after `zerotune`), writing its files under `out`."""
    config = out / "configs" / f"{run.id}.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(run_config(run), indent=2) + "\n")
    model = _shown(published.SUITE.parent / run.model) if run.model.endswith((".yaml", ".yml")) else run.model
    args = [
        "predict",
        "--config", _shown(config),
        "--model", model,
        "--profile", run_profile(run, out),
        "--nodes", str(run.nodes),
        "--gpus", str(run.gpus_per_node),
        "--seq-len", str(run.seq_len),
        "--micro-batch", str(run.micro_batch),
        "--grad-accum", str(run.grad_accum),
        "--precision", run.precision,
        "--optimizer", run.optimizer,
        "--checkpointing" if run.activation_checkpointing else "--no-checkpointing",
    ]  # fmt: skip
    if run.checkpoint_in_cpu:
        args.append("--checkpoint-in-cpu")
    return [*args, *workload_options(run), "--margin", "0"]


def commands(out: Path = OUT, runs: list[published.Run] | None = None) -> list[tuple[published.Run, list[str]]]:
    return [(run, command(run, out)) for run in (published.load_suite() if runs is None else runs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the files go (default {_shown(OUT)})")
    args = parser.parse_args(argv)
    print(f"# run from {REPO}; files written under {_shown(args.out)}")
    for run, argv_ in commands(args.out):
        print(f"# {run.id}")
        print(shlex.join(["zerotune", *argv_]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
