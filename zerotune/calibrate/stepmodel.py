"""The step model a calibration fits (pure): predict_step's time for the proxy, workload and config a
bench run measured, and the facts of a run record every part of the fit reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zerotune.schema.hardware import HardwareProfile
from zerotune.schema.model import ModelSpec

Run = dict[str, Any]
"""A bench result (BenchResult as a JSON dict) of one design run."""
Predictor = Callable[[Run, HardwareProfile], float]


def proxy_workload(run: Run) -> Any:
    """The Workload the bench run measured (its proxy, world and micro-steps)."""
    from zerotune.bench.predicted import TORCH_OPTIMIZER_CLASSES
    from zerotune.bench.predicted import proxy_workload as of_proxy
    from zerotune.bench.result import Proxy

    torch_optimizer = run.get("optimizer_class") in TORCH_OPTIMIZER_CLASSES
    return of_proxy(Proxy.model_validate(run["proxy"]), torch_optimizer=torch_optimizer)


def predict_run(run: Run, profile: HardwareProfile) -> float:
    """predict_step's step time for the proxy, workload and config a bench run measured."""
    from zerotune.dsconfig.settings import resolve
    from zerotune.model.step import predict_step

    spec = spec_of(run)
    return predict_step(spec, proxy_workload(run), resolve(run["config"]).zero, profile).step_time_s


_SPECS: dict[int, tuple[dict[str, Any], ModelSpec]] = {}


def spec_of(run: Run) -> ModelSpec:
    """One ModelSpec object per run's model dict (the step model caches per-model work by object
    identity); the dict is kept referenced so its id() is not reused while cached."""
    data = run["proxy"]["model"]
    hit = _SPECS.get(id(data))
    if hit is not None and hit[0] is data:
        return hit[1]
    if len(_SPECS) > 256:
        _SPECS.clear()
    spec = ModelSpec.model_validate(data)
    _SPECS[id(data)] = (data, spec)
    return spec


def stage_of(run: Run) -> int:
    zero = run["config"].get("zero_optimization") or {}
    return int(zero.get("stage", 0))


def measured_s(run: Run) -> float:
    # the step as run (proxy.grad_accum micro-steps), never a model-scaled full step
    return float(run["step_time_s"])
