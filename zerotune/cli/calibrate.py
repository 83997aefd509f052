"""`zerotune calibrate`: fit the hardware profile to real DeepSpeed steps on this machine (probe if
needed, a designed set of short runs, a least-squares fit), cache it for predict/recommend/bench."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from zerotune.cli import options as o
from zerotune.cli.options import Distributed, Fault, check_proxy
from zerotune.errors import InputError
from zerotune.files import refuse_overwrite

NAME = "calibrate"
HELP = "Fit the step-time model's numbers to short real DeepSpeed steps on this machine; cache the profile."


def command(
    model: Annotated[
        str | None, typer.Option(help="Model whose layers the runs use (catalog name or file); default llama-7b.")
    ] = None,
    nproc: o.ProxyRanks = None,
    device: o.Device = "auto",
    layers: Annotated[int, typer.Option(help="Transformer blocks in the runs.")] = 2,
    width_scale: Annotated[
        float | None, typer.Option(help="Shrink hidden/FFN/heads/vocab; default 1 on GPU, 0.125 on CPU.")
    ] = None,
    seq_len: Annotated[
        int | None, typer.Option(help="Tokens per sequence; default 128 on CPU, 2048 on GPU.")
    ] = None,
    micro_batch: Annotated[int, typer.Option(help="Base micro-batch of the design runs.")] = 1,
    profile: Annotated[
        str | None, typer.Option(help="Calibrate this profile instead of a --quick probe run now.")
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Wall-clock limit for the whole calibration, seconds.")
    ] = 600.0,
    out: Annotated[str | None, typer.Option(help="Also write the calibrated profile as YAML here.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out.")] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not cache the result for commands without --profile.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON only, on stdout.")] = False,
    save_runs: Annotated[
        str | None, typer.Option(help="Also write the measured runs (JSON) for a later --from-runs.")
    ] = None,
    from_runs: Annotated[
        str | None, typer.Option(help="Re-fit the runs a --save-runs file holds; measure nothing.")
    ] = None,
    repeats: Annotated[
        int, typer.Option(help="Measure the whole design this many times (interleaved); more runs, less noise.")
    ] = 1,
    force_cache: Annotated[
        bool,
        typer.Option("--force-cache", help="Cache the profile even when the self-check says it should not be (every design run is measured, load or not)."),
    ] = False,
    distributed: Distributed = False,
    fault: Fault = None,
    from_log: o.FromLog = None,
    measured: o.Measured = None,
    config: o.RunConfig = None,
    world_size: o.RunWorld = None,
    checkpointing: o.Checkpointing = None,
) -> None:
    from zerotune.calibrate.run import CalibrateOptions

    if from_log or measured:
        from zerotune.cli.calibrate_log import run_from_log

        said = dict(config=config, model=model, profile=profile, world_size=world_size, seq_len=seq_len)
        run_from_log(from_log or [], measured, said | {"checkpointing": checkpointing}, out=out, force=force,
                     cache=not no_cache, json_out=json_out)  # fmt: skip
        return
    check_proxy(device, width_scale)
    if timeout <= 0:
        raise InputError(f"--timeout must be positive, got {timeout:g}")
    o.at_least(1, repeats=repeats)
    refuse_overwrite(out, save_runs, force=force)
    options = CalibrateOptions(
        model=model or "llama-7b",
        nproc=nproc,
        device=device,
        layers=layers,
        width_scale=width_scale,
        seq_len=seq_len,
        micro_batch=micro_batch,
        timeout_s=timeout,
        profile=profile,
        from_runs=from_runs,
        fault=o.fault_json(fault),
        repeats=repeats,
        complete=force_cache,
    )
    run(
        options,
        out=out,
        force=force,
        cache=not no_cache,
        json_out=json_out,
        save_runs=save_runs,
        distributed=distributed,
        force_cache=force_cache,
    )


def run(
    options: Any,
    *,
    out: str | None,
    force: bool,
    cache: bool,
    json_out: bool,
    save_runs: str | None = None,
    distributed: bool = False,
    force_cache: bool = False,
) -> None:
    """Calibrate, write, report (shared with `bench --calibrate`). A calibration whose self-check
    failed is not cached (unless `force_cache`) and exits 1 with the one-line reason."""
    from zerotune.calibrate.outputs import write_outputs
    from zerotune.calibrate.run import calibrate
    from zerotune.render import calibrate as render
    from zerotune.render import console

    err = console.err()
    if distributed:
        from zerotune.calibrate.distributed import run_distributed

        found = run_distributed(options, say=lambda message: err.print(f"calibrate: {message}", markup=False))
        if found is None:  # not rank 0: rank 0 reports for everyone
            return
        outcome = found
    else:
        with err.status("calibrate: starting", spinner="dots") as status:
            outcome = calibrate(options, say=lambda message: status.update(f"calibrate: {message}"))
    written, cached, refused = write_outputs(
        outcome, out=out, save_runs=save_runs, cache=cache, force=force, force_cache=force_cache
    )
    if json_out:
        console.print_json(json.dumps(render.payload(outcome, cached), indent=1))
    else:
        render.report(console.out(), outcome)
    for line in written:
        err.print(line, markup=False)
    if refused and not force_cache:
        raise typer.Exit(1)
