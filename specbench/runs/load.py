"""The machine's load while a cell's arms are timed: what else ran beside them.

A timed arm on a shared machine competes with whatever else runs there, and a run says so
itself rather than leaving it to be guessed from odd numbers. Linux's counters are read
before the timed arms, across them and after them: the 1-minute load average, the share of
the machine's CPU time other processes used (all cores' busy time less this process's own
and its children's), and the share the hypervisor stole. A run whose arms shared the machine
past `CONTENDED` is marked `contended` in its summary, and the cost model is not fitted on its
timings. A window contended before or after the arms marks the run too: the machine was busy
around them. Where /proc is missing (macOS) nothing is sampled and nothing is marked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# other processes' share of all cores' CPU time, or stolen time, above which a run's timings
# shared the machine
CONTENDED = {"others": 0.25, "steal": 0.05}
# a contended summary's `prediction_refused`: the cost model is not fitted on its timings
REFUSED = "contended: other processes shared the machine with the timed arms"
WINDOW_S = 0.5  # the span sampled before and after the timed arms
MEASURABLE_S = 0.1  # all cores' seconds below which the counters' ticks say nothing


@dataclass(frozen=True)
class Snapshot:
    """Linux's cumulative CPU counters at one moment, in seconds."""

    busy: float  # all cores' non-idle time, steal excluded
    total: float  # all cores' time
    steal: float
    own: float  # this process's and its finished children's CPU time
    load_1m: float

    @classmethod
    def now(cls) -> Snapshot | None:
        """The counters now; None without /proc."""
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            load = float(Path("/proc/loadavg").read_text().split()[0])
        except OSError:
            return None
        ticks = [int(x) / os.sysconf("SC_CLK_TCK") for x in fields[:8]]
        user, nice, system, idle, iowait, irq, softirq, steal = ticks
        times = os.times()
        own = times.user + times.system + times.children_user + times.children_system
        return cls(
            busy=user + nice + system + irq + softirq,
            total=sum(ticks),
            steal=steal,
            own=own,
            load_1m=load,
        )


def between(a: Snapshot, b: Snapshot) -> dict[str, float] | None:
    """From `a` to `b`: the load average at the end, other processes' share of all cores' CPU
    time and the stolen share; None over too short a span to count (a resumed run with
    nothing left to time)."""
    total = b.total - a.total
    if total < MEASURABLE_S:
        return None
    others = (b.busy - a.busy) - (b.own - a.own)
    return {
        "load_1m": b.load_1m,
        "others": round(min(1.0, max(0.0, others / total)), 3),
        "steal": round((b.steal - a.steal) / total, 3),
    }


def contended(load: dict[str, Any]) -> bool | None:
    """Whether the timed arms shared the machine (`CONTENDED`) in any window sampled: before
    and after them too, since a resumed run may time nothing across its own block; None
    where nothing was sampled."""
    windows = [w for w in load.values() if w]
    if not windows:
        return None
    return any(w[k] > limit for w in windows for k, limit in CONTENDED.items())


def _window() -> dict[str, float] | None:
    start = Snapshot.now()
    time.sleep(WINDOW_S)
    end = Snapshot.now()
    return None if start is None or end is None else between(start, end)


@contextmanager
def sampled() -> Iterator[dict[str, Any]]:
    """Sample the machine before, across and after the block (the timed arms); the dict it
    yields holds `before`, `during` and `after` once the block ends, empty without /proc."""
    load: dict[str, Any] = {}
    if Snapshot.now() is None:
        yield load
        return
    load["before"] = _window()
    start = Snapshot.now()
    yield load
    end = Snapshot.now()
    load["during"] = between(start, end)
    load["after"] = _window()


def busiest(load: dict[str, Any]) -> dict[str, float]:
    """The sampled window in which other processes took the most of the machine."""
    return max((w for w in load.values() if w), key=lambda w: w["others"] + w["steal"])


def warning(load: dict[str, Any]) -> str:
    """The one line a contended run prints."""
    worst = busiest(load)
    return (
        f"specbench: warning: other processes used {worst['others']:.0%} of the machine's CPU "
        f"(steal {worst['steal']:.0%}, load average {worst['load_1m']:.1f}) beside the timed "
        "arms; the summary is marked contended and no cost model is fitted on its timings"
    )
