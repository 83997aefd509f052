"""How busy the machine was while a calibration measured (stdlib only; Linux's /proc, else the load
average alone).

A measurement's own ranks keep cores busy, so the whole machine's busy share says little; what
matters is the CPU time *other* processes took meanwhile (`foreign_cores`): the busy jiffies of
/proc/stat over the interval (proc(5): user + nice + system + irq + softirq + steal) minus the
CPU time of this process and of the children it waited for (os.times(), whose children fields
count waited-for descendants: the ranks zerotune.launch reaps), over the interval's seconds.
`os.getloadavg()` is recorded next to it (the 1-minute average of runnable tasks, ours included).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
"""user, nice, system, irq, softirq, steal of /proc/stat's `cpu` line (idle 3 and iowait 4 are not
busy; guest time is already inside user)."""


def parse_proc_stat(text: str) -> tuple[float, float] | None:
    """(busy, total) clock ticks of the aggregate `cpu` line of /proc/stat; None when absent."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [float(v) for v in fields[1:9]]
            if len(values) < 8:
                values += [0.0] * (8 - len(values))
            return sum(values[i] for i in _BUSY_FIELDS), sum(values)
    return None


def _ticks() -> tuple[float, float] | None:
    try:
        with open("/proc/stat") as handle:
            return parse_proc_stat(handle.read())
    except OSError:
        return None


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@dataclass(frozen=True)
class Load:
    """The machine during one measurement."""

    seconds: float
    loadavg_1m: float | None
    """os.getloadavg()[0] at the end (runnable tasks, this measurement's own included)."""
    busy_cores: float | None
    """Cores kept busy by every process, on average over the interval (/proc/stat)."""
    foreign_cores: float | None
    """Cores kept busy by processes other than this one and its waited-for children."""

    def as_dict(self) -> dict[str, float | None]:
        return {
            "seconds": self.seconds,
            "loadavg_1m": self.loadavg_1m,
            "busy_cores": self.busy_cores,
            "foreign_cores": self.foreign_cores,
        }


def foreign_cores(busy_ticks: float, own_cpu_s: float, seconds: float, hz: float) -> float:
    """Average cores used by other processes: (all busy CPU seconds - our CPU seconds) / seconds,
    never below 0 (tick accounting rounds: a few ticks either way)."""
    if seconds <= 0:
        return 0.0
    return max(0.0, (busy_ticks / hz - own_cpu_s) / seconds)


class LoadMeter:
    """`meter = LoadMeter(); ...measure...; load = meter.stop()`."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._ticks0 = _ticks()
        self._own0 = _own_cpu_s()

    def stop(self, ranks_cpu_s: float = 0.0) -> Load:
        """`ranks_cpu_s`: CPU time of our ranks that are not yet reaped (zerotune/calibrate/pool.py)."""
        seconds = time.monotonic() - self._t0
        ticks, own = _ticks(), _own_cpu_s() - self._own0 + ranks_cpu_s
        busy = foreign = None
        if ticks is not None and self._ticks0 is not None and seconds > 0:
            hz = float(os.sysconf("SC_CLK_TCK"))
            d_busy = ticks[0] - self._ticks0[0]
            busy = d_busy / hz / seconds
            foreign = foreign_cores(d_busy, own, seconds, hz)
        return Load(seconds, _loadavg(), busy, foreign)
