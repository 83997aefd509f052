"""The timing instruments of a bench rank (zerotune.bench.step_worker): a clock, a recorder of
DeepSpeed's collective calls and per-module marks. torch and DeepSpeed are passed in or imported
lazily: the ranks import them, the parent never does.

Collective latency: the comms logger stops a per-name timer after each call and appends
`timers(name).elapsed(reset=False)`, which is cumulative over every call of that name
(deepspeed/comm/comm.py `timed_op` + utils/timer.py in 0.19.8). The per-call latency is the last
entry of that timer's `elapsed_records`, which is what is recorded here.

Module timing: a forward pre/post hook brackets each module's forward; an identity autograd
function on its output marks when its gradient arrives, i.e. when its backward starts. The
backward of module i therefore runs from its mark to the mark of module i-1 (the embedding's to
the end of `engine.backward`). Collectives issued inside an interval are subtracted from it.
"""

from __future__ import annotations

import time
from typing import Any


class Clock:
    """perf_counter, synchronising the device first on GPU so host stamps bracket the kernels."""

    def __init__(self, torch: Any, cuda: bool) -> None:
        self._torch, self._cuda = torch, cuda

    def sync(self) -> None:
        if self._cuda:
            self._torch.cuda.synchronize()

    def now(self) -> float:
        self.sync()
        return time.perf_counter()


class CommRecorder:
    """Wraps DeepSpeed's comms logger to keep every call in order with its time and phase."""

    def __init__(self, dscomm: Any, clock: Clock) -> None:
        self._dscomm, self._clock = dscomm, clock
        self._events: list[dict[str, Any]] = []
        self._origin = 0.0
        self.phase = "forward"
        logger = dscomm.comms_logger
        original = logger.append

        def append(raw_name: str, record_name: str, latency: float, msg_size: int) -> None:
            original(raw_name, record_name, latency, msg_size)
            records = dscomm.timers(record_name).elapsed_records or [latency]
            call_s = records[-1] / 1e3  # per-call ms (`latency` is cumulative, see module doc)
            end = time.perf_counter() - self._origin
            self._events.append(
                {
                    "op": raw_name,
                    "bytes": int(msg_size),
                    "latency_s": call_s,
                    "start_s": end - call_s,
                    "phase": self.phase,
                }
            )

        logger.append = append

    def start(self) -> None:
        self._dscomm.configure(enabled=True, prof_all=True, verbose=False)

    def stop(self) -> None:
        self._dscomm.configure(enabled=False)

    def reset(self, origin: float) -> None:
        self._origin, self._events = origin, []

    def take(self) -> list[dict[str, Any]]:
        events, self._events = self._events, []
        return events


class Marks:
    """Forward brackets and backward-start marks of each timed module (see module doc)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.enabled = False
        self._origin = 0.0
        self._names: list[str] = []
        self._rows: dict[str, list[float]] = {}

    def attach(self, modules: list[Any], names: list[str]) -> list[Any]:
        import torch

        class GradMark(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any, callback: Any) -> Any:
                ctx.callback = callback
                return x.view_as(x)

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                ctx.callback()
                return grad, None

        self._names = list(names)
        handles = []
        for index, module in enumerate(modules):

            def pre(mod: Any, args: Any, index: int = index) -> None:
                if self.enabled:
                    self._stamp("fwd_start", index)

            def post(mod: Any, args: Any, output: Any, index: int = index) -> Any:
                if not self.enabled:
                    return None
                self._stamp("fwd_end", index)
                if isinstance(output, torch.Tensor) and output.requires_grad:
                    return GradMark.apply(output, lambda index=index: self._stamp("bwd_start", index))
                return None

            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))
        return handles

    def _stamp(self, kind: str, index: int) -> None:
        self._rows[kind][index].append(self._clock.now() - self._origin)

    def _event(self, kind: str) -> None:
        if self.enabled:
            self._rows[kind].append(self._clock.now() - self._origin)

    def reset(self, origin: float) -> None:
        self._origin = origin
        n = len(self._names)
        self._rows = {k: [[] for _ in range(n)] for k in ("fwd_start", "fwd_end", "bwd_start")}
        self._rows.update({k: [] for k in ("bwd_begin", "bwd_end", "step_start", "step_end")})

    def backward_started(self) -> None:
        self._event("bwd_begin")

    def backward_ended(self) -> None:
        self._event("bwd_end")

    def step_started(self) -> None:
        self._event("step_start")

    def step_ended(self) -> None:
        self._event("step_end")

    def take(self) -> dict[str, Any]:
        return {"marks": self._rows, "names": self._names}
