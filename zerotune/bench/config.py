"""The DeepSpeed config a bench run actually gives the engine, made from the user's (pure).

`prepare()` keeps the ZeRO section as written (the thing being measured) and changes only what a
short, comparable, CPU-runnable measurement needs, saying so in `notes`:

- the batch triple is made consistent for the proxy's micro-batch, accumulation and rank count;
- on CPU precision is fp32: bf16 matmul runs ~150x slower than fp32 on a CPU without AVX-512 and
  fp16 is unsupported by DeepSpeed's CPU accelerator (docs/deepspeed-facts.md §8, "fp16/bf16 requested
  but unsupported");
- on CPU the `optimizer` section becomes a torch optimizer passed to `deepspeed.initialize`:
  DeepSpeed's own Adam on CPU is FusedAdam/CPUAdam, JIT-compiled at first use (~90 s). Adam/AdamW
  stay on ZeRO's tested-optimizer list (deepspeed/runtime/engine.py `_do_optimizer_sanity_check`);
- on CUDA with the optimizer offloaded, the `optimizer` section stays (made Adam/AdamW if it is
  missing or not an Adam) so that DeepSpeed builds DeepSpeedCPUAdam, the SIMD kernel real offload
  runs use: a torch AdamW on the host is several times slower and would make the measured step
  say nothing about the user's (deepspeed/runtime/engine.py `_configure_basic_optimizer` picks
  DeepSpeedCPUAdam when `zero_cpu_offload()`; `torch_adam` is dropped because it forces torch);
- on CUDA without offload an Adam/AdamW section stays too: DeepSpeed builds its FusedAdam from it
  (`_configure_basic_optimizer`, JIT-compiled once per machine), the kernel a user with that config
  runs; without an optimizer section the bench passes torch AdamW, as HF's Trainer passes its own;
- the `scheduler` is dropped (a few steps measure time, not a schedule; HF "auto" values there
  would not resolve);
- `wall_clock_breakdown` is switched on (DeepSpeed's fwd/bwd/step timers) and the comms logger is
  driven by the runner rather than by the config.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from zerotune.dsconfig import hf_auto
from zerotune.dsconfig.load import read_config
from zerotune.dsconfig.settings import resolve
from zerotune.errors import InputError
from zerotune.schema.model import ModelSpec

DEFAULT_LR = 1e-3
_TORCH_OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "sgd": "sgd", "adagrad": "adagrad"}
_OPTIMIZER_PARAMS = {
    # `foreach` picks torch's multi-tensor Adam (None: torch's choice by device); DeepSpeed's config
    # passes it to a torch Adam too (runtime/engine.py `_configure_basic_optimizer`)
    "adam": ("lr", "betas", "eps", "weight_decay", "foreach"),
    "adamw": ("lr", "betas", "eps", "weight_decay", "foreach"),
    "sgd": ("lr", "momentum", "weight_decay", "nesterov"),
    "adagrad": ("lr", "eps", "weight_decay"),
}
# Keys the runner owns, removed from the user's config.
_RUNNER_KEYS = (
    "comms_logger",
    "flops_profiler",
    "tensorboard",
    "wandb",
    "csv_monitor",
    "comet",
    "autotuning",
)


@dataclass
class Prepared:
    config: dict[str, Any]
    optimizer: dict[str, Any] | None
    """{"type": "adamw" | "adam" | "sgd" | "adagrad", "params": {...}} for torch.optim; None when
    DeepSpeed builds the optimizer from the config's `optimizer` section (CUDA, offloaded)."""
    micro_batch: int
    grad_accum: int
    notes: list[str] = field(default_factory=list)


def prepare(
    user: dict[str, Any],
    *,
    nproc: int,
    micro_batch: int | None = None,
    grad_accum: int | None = None,
    device: str = "cpu",
    stage: int | None = None,
    keep_precision: bool = False,
    cpu_adam: bool = False,
) -> Prepared:
    """A copy of `user` ready for the bench's engine, and what changed (`keep_precision`: a 16-bit
    precision stays on CPU, and `cpu_adam` lets DeepSpeed build its CPU Adam under optimizer offload
    on CPU too, as on CUDA: for memory measurements)."""
    if not isinstance(user, dict):
        raise InputError("the DeepSpeed config must be a JSON object")
    config = copy.deepcopy(user)
    notes: list[str] = []

    zero = config.get("zero_optimization")
    if stage is not None:
        zero = dict(zero) if isinstance(zero, dict) else {}
        zero["stage"] = stage
        config["zero_optimization"] = zero

    read = resolve(config)  # the batch keys, precision and offload as DeepSpeed reads them
    mb = micro_batch or read.micro_batch or 1
    ga = grad_accum or read.grad_accum or 1
    if mb < 1 or ga < 1:
        raise InputError(f"micro-batch ({mb}) and gradient accumulation ({ga}) must be positive")
    given = read.train_batch_size
    if given is not None and given != mb * ga * nproc:
        notes.append(
            f"train_batch_size {given} -> {mb * ga * nproc} (= micro {mb} x accum {ga} x {nproc} ranks)"
        )
    config["train_batch_size"] = mb * ga * nproc
    config["train_micro_batch_size_per_gpu"] = mb
    config["gradient_accumulation_steps"] = ga

    if device == "cpu" and not keep_precision:
        for key in ("fp16", "bf16", "bfloat16"):
            section = config.get(key)
            if isinstance(section, dict) and resolve({key: section}).precision != "fp32":
                notes.append(f"{key} disabled: the CPU proxy runs fp32")
                config[key] = {"enabled": False}
            elif key in config and not isinstance(section, dict):
                config.pop(key)
    optimizer: dict[str, Any] | None
    deepspeed_builds = read.zero.optimizer_offloaded or (device == "cuda" and _is_adam(config.get("optimizer")))
    if (device == "cuda" or cpu_adam) and deepspeed_builds:  # what users run: DeepSpeed's CPU or fused Adam
        config["optimizer"] = _deepspeed_adam(config.get("optimizer"), notes)
        optimizer = None
    else:
        if read.zero.cpu_optimizer:  # the engine refuses a client optimizer other than its CPU ones
            config["zero_force_ds_cpu_optimizer"] = False
            notes.append("optimizer offload with a torch optimizer: zero_force_ds_cpu_optimizer set to false")
        optimizer = _torch_optimizer(config.pop("optimizer", None), notes)
    if "scheduler" in config:
        config.pop("scheduler")
        notes.append("scheduler dropped (constant learning rate for the measured steps)")
    for key in _RUNNER_KEYS:
        if key in config:
            config.pop(key)
            notes.append(f"{key} removed (the bench drives its own measurement)")
    if optimizer is not None and optimizer["type"] not in ("adam", "adamw"):
        config["zero_allow_untested_optimizer"] = True
    config["wall_clock_breakdown"] = True
    config["steps_per_print"] = 1_000_000
    return Prepared(config, optimizer, mb, ga, notes)


def fill_auto(config: dict[str, Any], model: ModelSpec, *, hf: bool) -> tuple[dict[str, Any], list[str]]:
    """`config` with HF "auto" values resolved, or an InputError naming them by JSON pointer (exit 2 up
    front, not a crash inside a rank). Batch keys are always the bench's to set; the rest only with --hf,
    for the keys HF fills (hf_auto.HF_AUTO_KEYS), as the HF Trainer would for `model` (the hidden-size
    formulas; the Trainer's defaults: gradient_clipping = max_grad_norm 1.0, fp16/bf16 off)."""
    batch = ("/train_batch_size", "/train_micro_batch_size_per_gpu", "/gradient_accumulation_steps")
    owned = ("/optimizer/", "/scheduler/")  # prepare() replaces/drops these sections
    found = [p for p in hf_auto.auto_pointers(config) if p not in batch and not p.startswith(owned)]
    if not found:
        return config, []
    if not hf:
        raise InputError(
            f"the DeepSpeed config has \"auto\" values DeepSpeed cannot run: {', '.join(found)}",
            hint="pass --hf to fill them as the Hugging Face Trainer would, or write numbers",
        )
    trainer = {"/gradient_clipping": 1.0, "/fp16/enabled": False, "/bf16/enabled": False}
    hidden = hf_auto.hf_hidden_size_values(model)
    values = {f"/zero_optimization/{key}": value for key, value in hidden.items()} | trainer
    for pointer in found:
        # a stage-3-only key at another stage: HF leaves it "auto" and DeepSpeed drops it; filling it
        # instead changes nothing, since no other stage reads it
        if pointer not in hf_auto.HF_AUTO_KEYS or pointer not in values:
            raise InputError(f'--hf: no Hugging Face rule fills {pointer} = "auto"', hint="write a number for it")
    done = ", ".join(f"{pointer}={values[pointer]}" for pointer in found)
    return hf_auto.fill(config, values), [f'HF "auto" values filled as the Trainer would for {model.name}: {done}']


def _torch_optimizer(section: Any, notes: list[str]) -> dict[str, Any]:
    if not isinstance(section, dict):
        return {"type": "adamw", "params": {"lr": DEFAULT_LR}}
    name = str(section.get("type", "adamw")).lower()
    kind = _TORCH_OPTIMIZERS.get(name)
    if kind is None:
        notes.append(f"optimizer {section.get('type')!r} measured as torch AdamW (lr {DEFAULT_LR:g})")
        return {"type": "adamw", "params": {"lr": DEFAULT_LR}}
    raw = section.get("params") if isinstance(section.get("params"), dict) else {}
    params: dict[str, Any] = {}
    for key in _OPTIMIZER_PARAMS[kind]:
        value = raw.get(key)
        if value is None or value == "auto":
            continue
        params[key] = tuple(value) if key == "betas" else value
    params.setdefault("lr", DEFAULT_LR)
    dropped = sorted(set(raw) - set(params))
    if dropped:
        notes.append(f"optimizer params ignored by the torch {kind}: {', '.join(dropped)}")
    notes.append(f"optimizer {section.get('type')!r} runs as torch.optim.{kind} (no JIT-built DeepSpeed op)")
    return {"type": kind, "params": params}


def _is_adam(section: Any) -> bool:
    return isinstance(section, dict) and str(section.get("type", "")).lower() in ("adam", "adamw")


def _deepspeed_adam(section: Any, notes: list[str]) -> dict[str, Any]:
    """The config's Adam/AdamW section for DeepSpeed to build (DeepSpeedCPUAdam under offload,
    FusedAdam on the GPU without); under offload any other optimizer, or none, becomes AdamW: the
    offload path the bench can measure."""
    if not _is_adam(section):
        what = f"optimizer {section.get('type')!r}" if isinstance(section, dict) else "no optimizer section"
        notes.append(f"{what}: measured as DeepSpeed AdamW (DeepSpeedCPUAdam under offload, lr {DEFAULT_LR:g})")
        return {"type": "AdamW", "params": {"lr": DEFAULT_LR}}
    raw = section.get("params") if isinstance(section.get("params"), dict) else {}
    kept = set(_OPTIMIZER_PARAMS["adamw"]) - {"foreach"}  # a torch Adam's knob, not DeepSpeed's CPU Adam's
    params = {k: v for k, v in raw.items() if k in kept and v not in (None, "auto")}
    params.setdefault("lr", DEFAULT_LR)
    dropped = sorted(set(raw) - set(params))
    if dropped:
        notes.append(f"optimizer params dropped so DeepSpeed builds its CPU Adam: {', '.join(dropped)}")
    notes.append(f"optimizer {section.get('type')!r} built by DeepSpeed (DeepSpeedCPUAdam under offload, else FusedAdam)")
    return {"type": section.get("type"), "params": params}


def user_config(path: str | None, stage: int | None) -> dict[str, Any]:
    """The config a bench measures: the file (JSON, hjson or YAML) with --stage applied, or ZeRO stage 2
    (the default, stage 2 partitions gradients and states without stage 3's gathers) when none is given."""
    if path is None:
        return {"zero_optimization": {"stage": 2 if stage is None else stage}}
    from pathlib import Path

    data = read_config(Path(path).expanduser())
    if stage is not None:
        zero = data.get("zero_optimization")
        data["zero_optimization"] = {**(zero if isinstance(zero, dict) else {}), "stage": stage}
    return data
