"""The models' predictions next to a bench measurement: the step-time and memory models run on
the proxy, workload and config the ranks ran (zerotune.model.step, zerotune.model.memory), and
the scaling of a step measured with fewer micro-steps than the config asks for.

The models are other components: a failure there becomes a note, never a failed measurement.
"""

from __future__ import annotations

from typing import Any

from zerotune.bench.result import BenchResult, PredictedCall, Prediction, Proxy
from zerotune.dsconfig.settings import resolve
from zerotune.schema.model import ModelSpec


def proxy_workload(proxy: Proxy, *, torch_optimizer: bool = False) -> Any:
    """The Workload a bench proxy ran: its shape, accumulation, precision and world, and whether its
    optimizer was a torch one (`BenchResult.optimizer_class`: zerotune/bench/config.py passes torch's
    AdamW on a GPU without offload)."""
    from zerotune.schema.workload import Workload

    return Workload(
        torch_optimizer=torch_optimizer,
        seq_len=proxy.seq_len,
        micro_batch=proxy.micro_batch,
        grad_accum=proxy.grad_accum,
        precision=proxy.dtype,
        optimizer="adamw",
        activation_checkpointing=proxy.activation_checkpointing,
        gpus_per_node=max(1, proxy.nproc // proxy.nodes),
        nodes=proxy.nodes,
        lora_rank=proxy.lora["rank"] if proxy.lora else None,
        lora_targets=",".join(proxy.lora["targets"]) if proxy.lora else "",
    )


TORCH_OPTIMIZER_CLASSES = ("Adam", "AdamW")
"""`BenchResult.optimizer_class` of torch.optim's Adam/AdamW (DeepSpeed's are FusedAdam, DeepSpeedCPUAdam)."""


def predict(result: BenchResult, hardware: Any) -> Prediction:
    """The models' prediction for the same proxy, workload and config: step time when a profile is
    given, the per-GPU memory peak always (it needs no measured rate)."""
    prediction = _predict_step(result, hardware)
    return prediction.model_copy(update={"peak_memory_bytes": predict_memory(result, hardware)})


def ran_torch_optimizer(result: BenchResult) -> bool:
    """Whether the update ran in a torch optimizer: the class rank 0 recorded, else (results written
    before it was) whether `zerotune.bench.config.prepare` took the `optimizer` section out of the
    config it gave the engine, which it does exactly when it passes a torch optimizer."""
    if result.optimizer_class is not None:
        return result.optimizer_class in TORCH_OPTIMIZER_CLASSES
    return "optimizer" not in result.config


def with_predicted_phases(result: BenchResult, *, torch_optimizer: bool = True) -> BenchResult:
    """`result` with the memory model's timeline next to each measured phase (zerotune.model.memory:
    live bytes after init, the peaks of forward, backward and step). On CPU ranks the offload's host
    buffers share the one memory, so they are added."""
    if not result.memory_phases:
        return result
    try:
        from zerotune.model.memory import estimate_memory

        estimate = estimate_memory(
            ModelSpec.model_validate(result.proxy.model),
            proxy_workload(result.proxy),
            resolve(result.config).zero,
            torch_optimizer=torch_optimizer,
            gloo=result.device == "cpu",  # CPU ranks run gloo (step_worker)
        )
        predicted = estimate.bench_phases(host_is_device=result.device == "cpu")
    except Exception:  # noqa: BLE001 - the model is another component: never fail the measurement
        return result
    rows = [
        row.model_copy(
            update={
                "predicted_peak_bytes": predicted.get(row.phase, (None, None))[0],
                "predicted_end_bytes": predicted.get(row.phase, (None, None))[1],
            }
        )
        for row in result.memory_phases
    ]
    return result.model_copy(update={"memory_phases": rows})


def predict_memory(result: BenchResult, hardware: Any = None) -> int | None:
    """zerotune.model.memory's per-GPU peak (no safety margin) for the proxy the bench ran, as the
    bench's counter reads it: torch.cuda.max_memory_allocated, the live bytes at the peak phase
    without the CUDA context or the allocator's cached blocks (zerotune.model.counters), with the
    optimizer the ranks ran (a torch one's update temporaries) and the GPU's cuBLAS workspaces
    (`hardware`'s compute capability)."""
    try:
        from zerotune.model.counters import counter_bytes
        from zerotune.model.memory import estimate_memory

        estimate = estimate_memory(
            ModelSpec.model_validate(result.proxy.model),
            proxy_workload(result.proxy),
            resolve(result.config).zero,
            hardware=hardware,
            torch_optimizer=ran_torch_optimizer(result),
            gloo=result.device == "cpu",  # CPU ranks run gloo (step_worker)
        )
    except Exception:  # noqa: BLE001 - the model is another component: never fail the measurement
        return None
    return counter_bytes(estimate, "max_allocated")


def _predict_step(result: BenchResult, hardware: Any) -> Prediction:
    try:
        from zerotune.model.step import predict_step
    except ImportError:
        return Prediction(note="no step-time model in this build (zerotune.model.step)")
    if hardware is None:
        return Prediction(note="no hardware profile: run `zerotune probe` or pass --profile")
    proxy = result.proxy
    workload = proxy_workload(proxy, torch_optimizer=ran_torch_optimizer(result))
    model = ModelSpec.model_validate(proxy.model)
    zero = resolve(result.config).zero
    try:
        estimate = predict_step(
            model=model,
            workload=workload,
            zero=zero,
            hardware=hardware,
            detail=True,
        )
    except Exception as exc:  # the model is another component: report, never fail the measurement
        return Prediction(note=f"step-time model failed: {type(exc).__name__}: {exc}")
    predicted = _seconds(estimate, "step_time_s")
    parts = ("compute_s", "comm_s", "exposed_comm_s", "optimizer_s")
    phases = {k: v for k in parts if (v := _seconds(estimate, k)) is not None}
    error = (
        (predicted - result.step_time_s) / result.step_time_s * 100
        if predicted and result.step_time_s
        else None
    )
    calls = [
        PredictedCall(
            op=c.op, phase=c.phase, size_bytes=int(c.bytes), count=int(c.count), seconds=float(c.seconds)
        )
        for c in getattr(estimate, "collectives", ())
    ]
    from zerotune.catalog.trust import job_kind, provenance, quoted_error
    from zerotune.model.band import job_band

    offload = zero.offload_optimizer.device != "none" or zero.offload_param.device != "none"
    kind = job_kind(model.name, zero.stage, zero.offload_optimizer.device, zero.offload_param.device, workload.activation_checkpointing)  # fmt: skip
    return Prediction(
        expected_error_pct=quoted_error(hardware, job_band(model, workload, offload), kind).step_time_pct,
        step_time_s=predicted,
        phases=phases,
        collectives=calls,
        error_pct=error,
        profile=hardware.name,
        provenance=provenance(hardware),
    )


def _seconds(estimate: Any, name: str) -> float | None:
    value = estimate.get(name) if isinstance(estimate, dict) else getattr(estimate, name, None)
    return float(value) if isinstance(value, (int, float)) else None


def scale_micro_steps(result: BenchResult, full_grad_accum: int, hardware: Any) -> BenchResult:
    """The measured step of `result.proxy.grad_accum` micro-steps scaled to `full_grad_accum`:
    by the step-time model's ratio of the two (so per-step costs are not multiplied), else in
    proportion to the micro-steps."""
    measured = result.proxy.grad_accum
    ratio, how = full_grad_accum / measured, "in proportion to the micro-steps (no step-time model)"
    predicted = None
    if hardware is not None:
        try:
            from zerotune.model.step import predict_step

            zero = resolve(result.config).zero
            spec = ModelSpec.model_validate(result.proxy.model)
            short = proxy_workload(result.proxy, torch_optimizer=ran_torch_optimizer(result))
            predicted = predict_step(
                spec, short.model_copy(update={"grad_accum": full_grad_accum}), zero, hardware
            ).step_time_s
            ratio = predicted / predict_step(spec, short, zero, hardware).step_time_s
            how = f"by the step-time model's ratio ({ratio:.3g}x) on profile {hardware.name!r}"
        except Exception:  # noqa: BLE001 - the model is another component; fall back to the proportion
            predicted = None
    full = result.step_time_s * ratio
    note = (
        f"measured {measured} of {full_grad_accum} micro-steps per step (--max-micro-steps); "
        f"the full step ({full:.4g} s) is scaled from them {how}"
    )
    prediction = result.prediction
    if prediction is not None and prediction.step_time_s and predicted is not None:
        # compare like with like: the prediction for the full accumulation
        prediction = prediction.model_copy(
            update={"step_time_s": predicted, "error_pct": (predicted - full) / full * 100}
        )
    return result.model_copy(
        update={
            "full_grad_accum": full_grad_accum,
            "full_step_time_s": full,
            "prediction": prediction,
            "notes": [*result.notes, note],
        }
    )
