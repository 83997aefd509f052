"""What a finished calibration writes: the measured runs (--save-runs, for a later --from-runs), the
cached profile and its runs (what predict, recommend and bench use without --profile, and what later
measurements re-fit with), and --out. Atomic writes; nothing but the cache is overwritten without --force."""

from __future__ import annotations

import json
from typing import Any

from zerotune.files import write_atomic


def write_outputs(
    outcome: Any, *, out: str | None, save_runs: str | None, cache: bool, force: bool, force_cache: bool = False
) -> tuple[list[str], bool, bool]:
    """Write what was asked: (one line per file written or not cached, for people; whether the profile
    was cached; whether the self-check refused it). A refused calibration is cached only with
    `force_cache`; the previous cached profile stays otherwise."""
    from zerotune.calibrate.run import saved_runs
    from zerotune.catalog.hardware import calibrated_cache_path, dump_profile

    text = dump_profile(outcome.fit.profile)
    written = []
    if save_runs:
        write_atomic(save_runs, json.dumps(saved_runs(outcome)) + "\n", force=force)
        written.append(f"runs written to {save_runs}")
    decision = outcome.decision
    refused = decision is not None and not decision.cache
    cached = False
    if refused and not force_cache:
        from zerotune.calibrate import feedback

        found = calibrated_cache_path()
        keep = f"the previous {found}" if found.is_file() else "the previous profile (no calibration cached)"
        # the refused runs stay next to the cache, so they can be re-fitted or inspected (--from-runs)
        refused_runs = feedback.refused_runs_path()
        write_atomic(refused_runs, json.dumps(saved_runs(outcome)) + "\n", force=True)
        written.append(
            f"{decision.line} (commands without --profile keep {keep}; --force-cache caches anyway; "
            f"the runs are in {refused_runs} for --from-runs)"
        )
    elif cache:
        from zerotune.calibrate import feedback

        write_atomic(calibrated_cache_path(), text, force=True)
        feedback.save_runs(saved_runs(outcome))  # later measurements re-fit with these (recommend --measure)
        cached = True
        written.append(
            f"profile cached as {calibrated_cache_path()} (predict, recommend and bench use it without --profile)"
            + (" despite the self-check (--force-cache)" if refused else "")
        )
    if out:
        write_atomic(out, text, force=force)
        written.append(f"profile written to {out}")
    return written, cached, refused
