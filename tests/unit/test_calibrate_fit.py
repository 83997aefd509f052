"""The calibration fitter against synthetic runs whose true numbers are known.

A stub step model stands in for zerotune.model.step (which gains the overhead terms on another
branch): it adds each overhead term times the count DeepSpeed pays it, so the fitter must recover
the true values from the design's step times alone. Records (per-layer times, per-bucket
latencies, optimizer segments) are generated from known FLOP/s, alpha/busbw and optimizer rates.
"""

from __future__ import annotations

import math

import pytest

from tests.conftest import cpu_probe_profile
from zerotune.calibrate.design import design
from zerotune.calibrate.fit import fit
from zerotune.calibrate.lsq import nnls
from zerotune.calibrate.overheads import OVERHEAD_TERMS, fit_overheads
from zerotune.calibrate.rates import collective_samples, fit_compute, optimizer_samples
from zerotune.catalog.hardware import dump_profile, load_profile
from zerotune.catalog.models import derive, load_model
from zerotune.collectives import busbw_factor
from zerotune.model.compute import layer_flops
from zerotune.schema.hardware import HardwareProfile

TRUE = {
    "per_step_s": 0.02,
    "per_micro_step_s": 0.011,
    "per_module_hook_s": 4e-4,
    "per_param_grad_hook_s": 3e-5,
}
FLOPS = {512: 8e10, 1024: 5e10}  # by hidden size
ALPHA, BUSBW = 2e-3, 9e8
OPT_RATE, OPT_FIXED = 6e7, 0.004  # the optimizer segments' records
STEP_OPT_RATE = 4.5e7  # what the step times say (the joint fit must find this one)


def _modules(spec) -> int:
    return sum(max(len(layer.tensors), 1) for layer in spec.layers)


def _tensors(spec) -> int:
    return sum(len(layer.tensors) for layer in spec.layers)


def stub(core: dict[int, float]):
    """A step model: a fixed core time per run plus each overhead term times its count."""

    def predict(run, profile: HardwareProfile) -> float:
        o = profile.overheads
        spec = run["_spec"]
        ga, stage = run["proxy"]["grad_accum"], run["config"]["zero_optimization"]["stage"]
        t = core[id(run)] + (o.per_step_s or 0) + ga * (o.per_micro_step_s or 0)
        if stage == 3:
            t += 2 * ga * _modules(spec) * (o.per_module_hook_s or 0)
        if stage in (1, 2):
            t += ga * _tensors(spec) * (o.per_param_grad_hook_s or 0)
        if o.optimizer_params_per_s:
            t += spec.params / (2 if stage else 1) / o.optimizer_params_per_s
        return t

    return predict


def synthetic_runs(width: float = 0.125) -> tuple[list[dict], list[str], dict[int, float]]:
    base_model = load_model("llama-7b")
    runs, names, core = [], [], {}
    for i, d in enumerate(design()):
        spec = derive(base_model, num_layers=2, width_scale=width * d.width_factor)
        tokens, seq = d.micro_batch * d.seq_len, d.seq_len
        layers = []
        for layer in spec.layers:
            f = layer_flops(spec, layer).forward_flops(tokens, seq) / FLOPS[spec.hidden_size]
            layers.append({"name": layer.name, "forward_s": f, "backward_s": 2 * f})
        n, params = 2, spec.params
        local = params / n if d.stage else params
        sizes = [d.bucket * 4, d.bucket * 4 // 3, 4]  # two bucket sizes and the grad-norm scalar
        buckets = [
            {"op": "all_reduce", "bytes": s, "phase": "backward", "start_s": 0.0,
             "latency_s": ALPHA + s * busbw_factor("all_reduce", n) / BUSBW}
            for s in sizes
        ]  # fmt: skip
        buckets.append(
            {
                "op": "all_gather_into_tensor",
                "bytes": 999,
                "phase": "forward",
                "start_s": 0.0,
                "latency_s": 5.0,
            }
        )
        opt = OPT_FIXED + local / OPT_RATE
        timeline = [
            {"label": "optimizer", "phase": "step", "start_s": 1.0, "end_s": 1.0 + opt + 0.01},
            {"label": "optimizer", "phase": "step", "start_s": 0.1, "end_s": 0.1001},
        ]
        buckets.append({"op": "all_reduce", "bytes": 4, "phase": "step", "start_s": 1.001, "latency_s": 0.01})
        run = {
            "proxy": {"model": spec.model_dump(mode="json"), "layers": 2, "micro_batch": d.micro_batch,
                      "seq_len": d.seq_len, "grad_accum": d.grad_accum, "dtype": "fp32", "nproc": n},
            "config": d.config(), "nproc": n, "backend": "gloo", "layers": layers, "buckets": buckets,
            "timeline": timeline, "step_time_s": 0.0, "_spec": spec,
        }  # fmt: skip
        core[id(run)] = 0.05 + 0.01 * i
        runs.append(run)
        names.append(d.name)
    predict = stub(core)
    truth = cpu_probe_profile().model_copy(deep=True)
    truth.overheads = truth.overheads.model_copy(update={**TRUE, "optimizer_params_per_s": STEP_OPT_RATE})
    for run in runs:
        run["step_time_s"] = predict(run, truth)
    return runs, names, core


def _with_memory(memory_Bps: float = 8e9) -> HardwareProfile:
    """The test CPU probe with a host memory bandwidth (the optimizer's physical bound)."""
    base = cpu_probe_profile()
    return base.model_copy(update={"host": base.host.model_copy(update={"memory_Bps": memory_Bps})})


def test_overheads_recovered_exactly_from_the_design() -> None:
    runs, _, core = synthetic_runs()
    result = fit_overheads(runs, cpu_probe_profile(), stub(core), [])
    fitted, rms = result.values, result.rms
    assert set(result.fitted) == {*TRUE, "optimizer_s_per_param"}
    for name, value in TRUE.items():
        assert fitted[name] == pytest.approx(value, rel=1e-6), name
    assert fitted["optimizer_s_per_param"] == pytest.approx(1 / STEP_OPT_RATE, rel=1e-6)
    assert rms < 1e-9


def test_without_accumulation_2_the_step_and_micro_step_costs_are_not_separable() -> None:
    """The design needs GA 1 vs 2: with only GA-1 runs the two columns are equal, and the fit can
    no longer tell the costs apart (it puts their sum on one of them)."""
    runs, _, core = synthetic_runs()
    ga1 = [r for r in runs if r["proxy"]["grad_accum"] == 1]
    fitted = fit_overheads(ga1, cpu_probe_profile(), stub(core), []).values
    assert fitted.get("per_step_s", 0) + fitted.get("per_micro_step_s", 0) == pytest.approx(
        TRUE["per_step_s"] + TRUE["per_micro_step_s"], rel=1e-6
    )
    assert min(fitted.get("per_step_s", 0), fitted.get("per_micro_step_s", 0)) == 0


def test_terms_the_model_ignores_are_named_not_fitted() -> None:
    runs, _, core = synthetic_runs()
    inner = stub(core)

    def no_hooks(run, profile):
        o = profile.overheads.model_copy(update={"per_module_hook_s": 0.0, "per_param_grad_hook_s": 0.0})
        return inner(run, profile.model_copy(update={"overheads": o}))

    notes: list[str] = []
    fitted = fit_overheads(runs, cpu_probe_profile(), no_hooks, notes).values
    assert "per_module_hook_s" not in fitted and "per_param_grad_hook_s" not in fitted
    assert any("per_module_hook_s" in n and "per_param_grad_hook_s" in n for n in notes)


def test_nnls_never_returns_negative_costs() -> None:
    # y = 1*a - 1*b has a negative LS solution for b; NNLS keeps b at 0
    cols = [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
    ys = [1.0, -1.0, 0.0]
    x = nnls(cols, ys)
    assert all(v >= 0 for v in x)
    assert x[1] == 0


def test_compute_shape_points_from_stage0_layer_records() -> None:
    runs, _, _ = synthetic_runs()
    # stage 2/3 layers include hook time: make them slower; only stage-0 runs may be used
    for run in runs:
        if run["config"]["zero_optimization"]["stage"]:
            for layer in run["layers"]:
                layer["backward_s"] *= 3
    dtype, points, _ = fit_compute(runs, [])
    assert dtype == "fp32"
    got = {(p.tokens, p.hidden): p.flops for p in points}
    assert got == {
        (128, 512): pytest.approx(FLOPS[512]),
        (512, 512): pytest.approx(FLOPS[512]),
        (128, 1024): pytest.approx(FLOPS[1024]),
    }


def test_collective_samples_keep_synchronous_messages_only() -> None:
    runs, _, _ = synthetic_runs()
    samples = collective_samples(runs)
    assert set(samples) == {"all_reduce"}  # forward all-gathers are async launches on CPU
    sizes = [s for s, _ in samples["all_reduce"]]
    assert 4 not in sizes  # the grad-norm scalar measures skew
    for size, seconds in samples["all_reduce"]:
        assert seconds == pytest.approx(ALPHA + size / BUSBW)  # factor 1 at 2 ranks


def test_optimizer_segment_minus_its_collectives() -> None:
    runs, _, _ = synthetic_runs()
    samples = optimizer_samples(runs)
    for (local, seconds), run in zip(samples, runs, strict=True):
        assert seconds == pytest.approx(OPT_FIXED + local / OPT_RATE)
        stage = run["config"]["zero_optimization"]["stage"]
        assert local == run["_spec"].params / (2 if stage else 1)


def test_full_fit_writes_values_and_provenance(tmp_path) -> None:
    runs, names, core = synthetic_runs()
    result = fit(runs, _with_memory(), names=names, predictor=stub(core), now="2026-11-23T18:00:00+00:00")
    profile = result.profile
    assert profile.compute.achieved_flops["fp32"] == pytest.approx(FLOPS[512])
    assert len(profile.compute.shape_points["fp32"]) == 3
    perf = profile.intra_node.collectives["all_reduce"]
    assert perf.alpha_s == pytest.approx(ALPHA) and perf.busbw_Bps == pytest.approx(BUSBW)
    # the step times decide the optimizer rate (jointly with the overheads), not its segment
    assert profile.overheads.optimizer_params_per_s == pytest.approx(STEP_OPT_RATE, rel=1e-6)
    assert any("optimizer segments: ZeRO stage 1-3 step" in n for n in result.notes)
    for name, value in TRUE.items():
        assert getattr(profile.overheads, name) == pytest.approx(value, rel=1e-6)
    cal = profile.calibration
    assert cal is not None and cal.created.startswith("2026-11-23")
    assert len(cal.runs) == len(runs) and cal.runs[0].startswith("s0: stage 0")
    paths = cal.calibrated_paths()
    assert {
        "compute.achieved_flops.fp32",
        "overheads.per_step_s",
        "intra_node.collectives.all_reduce.busbw_Bps",
    } <= paths
    assert all(math.isfinite(r.calibrated_s) and abs(r.error_pct) < 1e-6 for r in result.runs)
    # the profile round-trips through the YAML the cache holds
    path = tmp_path / "c.yaml"
    path.write_text(dump_profile(profile))
    assert load_profile(str(path)) == profile


def test_design_covers_every_unknown() -> None:
    runs = design()
    stages = {r.stage for r in runs}
    assert {0, 2, 3} <= stages
    assert {r.grad_accum for r in runs} == {1, 2}
    assert len({r.bucket for r in runs}) == 2
    assert len({(r.micro_batch * r.seq_len, r.width_factor) for r in runs if r.stage == 0}) == 3
    for r in runs:  # every stage-3 config gathers the matrices: persistence below them
        z = r.config()["zero_optimization"]
        if r.stage == 3:
            assert z["stage3_param_persistence_threshold"] < 512 * 512
    assert [name for name, _ in OVERHEAD_TERMS] == [
        "per_step_s", "per_micro_step_s", "per_module_hook_s", "per_param_grad_hook_s", "optimizer_s_per_param"
    ]  # fmt: skip


def test_gpu_design_runs_in_the_training_dtype() -> None:
    runs = design(2, 2048, wide=False, precision="bf16")
    assert all(r.config()["bf16"] == {"enabled": True} for r in runs)
    assert not any(r.width_factor != 1 for r in runs)  # the real width only on a GPU
    assert "bf16" not in design()[0].config()  # the CPU proxy stays fp32


def test_real_model_overheads_recovered_with_host_memory_terms() -> None:
    """With the probed host memory rates in the profile (bucket copies, first touch of fresh
    buffers: zerotune/model/host_memory.py) the step model is still linear in the overhead terms,
    so the NNLS fit through the real predictor recovers them from steps the model itself produced."""
    from zerotune.calibrate.fit import predict_run

    runs, _, _ = synthetic_runs()
    base = cpu_probe_profile()
    base = base.model_copy(update={"host": base.host.model_copy(update={"memory_Bps": 8e9, "first_touch_Bps": 2e9})})
    truth = base.model_copy(update={"overheads": base.overheads.model_copy(update=TRUE)})
    for run in runs:
        run["proxy"] = {**run["proxy"], "width_scale": 0.125}
        run["step_time_s"] = predict_run(run, truth)
    result = fit_overheads(runs, base, predict_run, [])
    fitted, rms = result.values, result.rms
    for name, value in TRUE.items():
        assert fitted[name] == pytest.approx(value, rel=1e-4, abs=1e-7), name
    assert rms < 1e-6
