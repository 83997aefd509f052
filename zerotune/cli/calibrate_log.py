"""`zerotune calibrate --from-log LOG` / `--measured ...`: fit the profile to runs the user already has
(parse -> zerotune.calibrate.from_log -> zerotune.render.calibrate_log). A run that contradicts the
profile is a finding: reported, exit 1, and the profile is written to --out but not cached."""

from __future__ import annotations

import json
from typing import Any

import typer

from zerotune.files import refuse_overwrite, write_atomic


def run_from_log(
    logs: list[str], measured_text: str | None, said: dict[str, Any], *, out: str | None, force: bool, cache: bool, json_out: bool
) -> None:
    from zerotune import __version__
    from zerotune.calibrate.from_log import fit_logs
    from zerotune.calibrate.observe import observations
    from zerotune.catalog.hardware import calibrated_cache_path, default_profile, dump_profile, load_profile
    from zerotune.diagnose.analyse import Options
    from zerotune.diagnose.measure import parse_measured
    from zerotune.render import calibrate_log as render
    from zerotune.render import console

    refuse_overwrite(out, force=force)
    measured = parse_measured(measured_text) if measured_text else None
    notices: list[str] = []
    base = load_profile(said["profile"]) if said["profile"] else default_profile(notices)[0]
    options = Options(
        config=said["config"],
        model=said["model"],
        profile=said["profile"],
        seq_len=said["seq_len"],
        world_size=said["world_size"],
        checkpointing=said["checkpointing"],
    )
    runs = observations(logs, measured, options, base, notices)
    fitted = fit_logs(runs, base, version=__version__)
    text = dump_profile(fitted.profile)
    written = []
    if out:
        write_atomic(out, text, force=force)
        written.append(f"profile written to {out}")
    if cache and not fitted.findings:
        write_atomic(calibrated_cache_path(), text, force=True)
        written.append(f"profile cached as {calibrated_cache_path()} (predict, recommend and bench use it without --profile)")
    elif cache:
        written.append("not cached: the runs contradict the profile (findings above); --out writes it anyway")
    if json_out:
        console.print_json(json.dumps(render.payload(fitted, runs, notices), indent=1))
    else:
        render.report(console.out(), fitted, runs, notices)
    err = console.err()
    for line in written:
        err.print(line, markup=False)
    if fitted.findings:
        raise typer.Exit(1)
