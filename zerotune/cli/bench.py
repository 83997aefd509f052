"""`zerotune bench`: run real DeepSpeed training steps on a proxy of a model and report per-phase,
per-bucket and per-layer times (zerotune.bench.run_bench does the work)."""

from __future__ import annotations

from typing import Annotated

import typer

from zerotune.cli import options as o
from zerotune.errors import InputError
from zerotune.files import refuse_overwrite

NAME = "bench"
HELP = (
    "Run a short real DeepSpeed training step on a proxy model: phases, per-bucket collectives, loss parity."
)


def command(
    model: Annotated[
        str, typer.Option(help="Catalog model name, profile .yaml or config.json (required, as in predict/recommend).")
    ],
    config: Annotated[
        str | None, typer.Option(help="DeepSpeed config (JSON/HJSON/YAML); default: ZeRO stage 2, fp32.")
    ] = None,
    stage: Annotated[int | None, typer.Option(help="Override zero_optimization.stage (0-3).")] = None,
    layers: Annotated[int, typer.Option(help="Transformer blocks in the proxy.")] = 2,
    width_scale: Annotated[
        float | None,
        typer.Option(help="Shrink hidden/FFN/heads/vocab by this factor; default 1 on GPU, 0.25 on CPU."),
    ] = None,
    seq_len: Annotated[
        int | None, typer.Option(help="Tokens per sequence; default 128 on CPU, 2048 on GPU.")
    ] = None,
    micro_batch: Annotated[
        int | None, typer.Option(help="Sequences per rank per forward; default: the config's, else 1.")
    ] = None,
    grad_accum: Annotated[
        int | None, typer.Option(help="Micro-steps per optimizer step; default: the config's, else 1.")
    ] = None,
    max_micro_steps: Annotated[
        int,
        typer.Option(help="Run at most this many micro-steps per step; a longer accumulation is scaled by the model."),
    ] = 4,
    nproc: o.ProxyRanks = None,
    device: o.Device = "auto",
    warmup: Annotated[int, typer.Option(help="Unmeasured warm-up steps.")] = 1,
    steps: Annotated[
        int, typer.Option(help="Measured steps without the comms logger (step time), at least.")
    ] = 3,
    max_steps: Annotated[
        int, typer.Option(help="Repeat measured steps up to this many until --target-rse is reached.")
    ] = 20,
    target_rse: Annotated[
        float, typer.Option(help="Target relative standard error of the median step time (0.02 = 2%).")
    ] = 0.02,
    time_cap: Annotated[float, typer.Option(help="Seconds of measured steps at most, whatever the precision.")] = 30.0,
    logged_steps: Annotated[
        int, typer.Option(help="Measured steps with DeepSpeed's comms logger on (per-bucket records).")
    ] = 2,
    seed: Annotated[int, typer.Option(help="Seed of the initial weights and the data.")] = 0,
    compare_stages: Annotated[
        bool,
        typer.Option(
            "--compare-stages",
            help="Also run stages 0-3 with the same seed and data; compare losses (exactly --steps measured steps).",
        ),
    ] = False,
    profile: Annotated[
        str | None, typer.Option(help="Hardware profile for predicted vs measured; default: the last probe.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Wall-clock limit per launch, seconds.")] = 600.0,
    out: Annotated[str | None, typer.Option(help="Also write the JSON result here.")] = None,
    log: Annotated[
        str | None,
        typer.Option(
            help="Also write rank 0's DeepSpeed output here (its wall_clock_breakdown timers, headed by the job "
            "it ran): a training log `zerotune calibrate --from-log` reads as it is."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out.")] = False,
    json_out: o.JsonOut = False,
    hf: Annotated[
        bool, typer.Option("--hf", help='Fill HF "auto" values as the Hugging Face Trainer would.')
    ] = False,
    checkpointing: Annotated[
        bool,
        typer.Option(
            "--checkpointing/--no-checkpointing",
            help="Recompute each block's activations in backward (HF gradient checkpointing).",
        ),
    ] = False,
    calibrate: Annotated[
        bool,
        typer.Option("--calibrate", help="Run `zerotune calibrate` instead (same --model, --nproc, --device)."),
    ] = False,
    memory_phases: Annotated[
        bool,
        typer.Option(
            "--memory-phases",
            help="Record the live bytes of every phase (init, forward, backward, step) next to the memory model's "
            "timeline (CPU: every allocation through torch.profiler; slower).",
        ),
    ] = False,
) -> None:
    from zerotune.bench import run_bench
    from zerotune.bench.config import user_config
    from zerotune.catalog.hardware import host_profile, load_profile
    from zerotune.catalog.models import load_model
    from zerotune.render import bench as render
    from zerotune.render import console

    if calibrate:
        from zerotune.calibrate.run import CalibrateOptions
        from zerotune.cli.calibrate import run as run_calibrate

        options = CalibrateOptions(
            model=model, nproc=nproc, device=device, layers=layers, width_scale=width_scale,
            seq_len=seq_len, micro_batch=micro_batch or 1, timeout_s=timeout, profile=profile,
        )  # fmt: skip
        run_calibrate(options, out=out, force=force, cache=True, json_out=json_out)
        return
    if stage is not None and stage not in (0, 1, 2, 3):
        raise InputError(f"--stage must be 0, 1, 2 or 3, got {stage}")
    o.check_proxy(device, width_scale)
    if not 0 <= target_rse < 1:
        raise InputError(f"--target-rse must be in [0, 1), got {target_rse:g}")
    o.at_least(1, layers=layers, steps=steps, logged_steps=logged_steps, max_micro_steps=max_micro_steps,
               grad_accum=grad_accum, nproc=nproc)  # fmt: skip
    refuse_overwrite(out, log, force=force)  # say so now, not after minutes of measuring
    spec = load_model(model)
    ds_config = user_config(config, stage)
    notices: list[str] = []
    hardware = load_profile(profile) if profile else host_profile(notices)

    err = console.err()
    for notice in notices:
        err.print(f"note: {notice}", markup=False)
    with err.status("bench: starting", spinner="dots") as status:
        result = run_bench(
            spec, ds_config, layers=layers, width_scale=width_scale, seq_len=seq_len, micro_batch=micro_batch,
            grad_accum=grad_accum, max_micro_steps=max_micro_steps, max_steps=max_steps, precision=target_rse,
            time_cap_s=time_cap, hf=hf, nproc=nproc, device=device, warmup=warmup, steps=steps,
            logged_steps=logged_steps, seed=seed, timeout_s=timeout, compare_stages=compare_stages,
            hardware=hardware, activation_checkpointing=checkpointing,
            memory_phases=memory_phases, log=log,
            progress=lambda message: status.update(f"bench: {message}"),
        )  # fmt: skip
    text = result.model_dump_json(indent=2)
    if out:
        from zerotune.files import write_atomic

        write_atomic(out, text + "\n", force=force)
    if json_out:
        console.print_json(text)
    else:
        render.report(console.out(), result)
    if result.parity is not None and not result.parity.agree:
        err.print(
            f"losses differ across ZeRO stages: max relative difference {result.parity.max_rel_diff:.2e} "
            f"> {result.parity.rtol:.0e}",
            markup=False,
        )
        raise typer.Exit(1)
