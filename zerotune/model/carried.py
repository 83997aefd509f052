"""How much of a one-run calibration a job of another kind takes (pure).

A profile calibrated on one run's throughput figure (`calibrate --from-log`/`--measured`,
zerotune/calibrate/from_log.py) records the run's kind of job (`calibration.jobs`: model, ZeRO stage,
offload, activation checkpointing; zerotune.catalog.trust.job_kind). A job of that kind takes the fit in
full: the run measured that mix of costs on this machine. A job of another kind takes it at the weight
`calibration.other_job_weight` (from_log.py says how it is set) on the host costs the run moved
(HOST_TIMES): each sits at probed x (calibrated / probed)^w, the geometric point between the profile
before the run and the fit, so w = 1 is the fit and w = 0 the profile as it was; the rates stay as fitted. One figure cannot tell the machine's miss (which
carries to every job) from the run's own job's (which carries to its kind only); on published sources
about half of a run's miss carries to another kind (docs/accuracy.md, "Calibrating from a user's own
run").
"""

from __future__ import annotations

from zerotune.schema.hardware import HardwareProfile

HOST_TIMES = (
    "per_step_s", "single_rank_per_step_s", "per_micro_step_s", "per_layer_launch_s", "per_module_hook_s",
    "per_param_grad_hook_s", "step_scale",
)  # fmt: skip
"""The values of `overheads` a job of another kind takes at the weight: DeepSpeed's host costs per step,
micro-step, layer launch and hook (zerotune/model/overheads.py) and the step scale. Their priors are one
number per machine for every job (overheads.GLOBAL_PRIOR), where DeepSpeed's host work depends on the
job's code path; a rate (achieved FLOP/s, a link's bus bandwidth, CPU Adam, the host<->device copies,
the optimizer step) is the hardware's and carries in full. Measured on the published sources
(scripts/evidence/calibrate_from_log.py, docs/accuracy.md): the runs whose one-run fit moved FLOP/s
(ms-swift Megatron-SWIFT, ColossalAI issue 4719, Open-Llama: 80-97% of their predicted step is compute)
predict their other jobs within 1-20% with it in full and 10-33% at the weight, while those that moved
the host costs (bf16_master_weight's 254M runs, 72% of whose step is the per-step cost; BELLE's
launch-bound 512-token runs) carried misses their other jobs contradict."""

_CACHE: dict[int, tuple[HardwareProfile, HardwareProfile]] = {}
"""id(profile) -> (profile, the profile at the other-kind weight): the search predicts thousands of
candidates on one profile (the profile is kept so its id is not reused)."""
_CACHE_SIZE = 64


def for_job(profile: HardwareProfile, kind: str) -> HardwareProfile:
    """The profile a job of kind `kind` is predicted with: `profile` itself unless it is a one-run
    calibration with an other-kind weight and `kind` is not among its runs' kinds."""
    cal = profile.calibration
    if cal is None or cal.other_job_weight is None or not cal.jobs or kind in cal.jobs:
        return profile
    hit = _CACHE.get(id(profile))
    if hit is not None and hit[0] is profile:
        return hit[1]
    out = at_weight(profile, cal.other_job_weight)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[id(profile)] = (profile, out)
    return out


def at_weight(profile: HardwareProfile, weight: float) -> HardwareProfile:
    """Every host time (HOST_TIMES: all of them `overheads` values) fitted on the user's run (`source` set) at
    probed x (calibrated / probed)^weight; the rates as fitted."""
    update: dict[str, float] = {}
    for value in profile.calibration.values if profile.calibration else []:
        name = value.path.removeprefix("overheads.")
        if value.source is None or name not in HOST_TIMES or not value.probed or not value.calibrated:
            continue  # a rate, or no prior to weigh against (one-run fits move no such value)
        update[name] = getattr(profile.overheads, name) * (value.probed / value.calibrated) ** (1 - weight)
    if not update:
        return profile
    return profile.model_copy(update={"overheads": profile.overheads.model_copy(update=update)})
