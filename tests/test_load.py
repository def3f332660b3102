"""The machine's load beside the timed arms: other processes' CPU share from Linux's counters,
and a run timed beside a CPU-bound process marked contended."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from specbench.runs import load
from specbench.runs.load import Snapshot, between


def test_other_processes_share_is_busy_time_less_this_processs_own() -> None:
    """Over 10 s of 2 cores (20 core-seconds): 14 busy, 4 of them this process's, 1 stolen."""
    a = Snapshot(busy=100.0, total=1000.0, steal=5.0, own=50.0, load_1m=0.5)
    b = Snapshot(busy=114.0, total=1020.0, steal=6.0, own=54.0, load_1m=3.0)
    assert between(a, b) == {"load_1m": 3.0, "others": 0.5, "steal": 0.05}
    assert between(a, a) is None  # nothing timed: no share to give


def test_nothing_sampled_marks_nothing() -> None:
    assert load.contended({}) is None
    quiet = {"others": 0.1, "steal": 0.0, "load_1m": 1.0}
    busy = {"others": 0.9, "steal": 0.0, "load_1m": 4.0}
    assert load.contended({"before": quiet, "during": quiet, "after": quiet}) is False
    # a resumed run that timed nothing, on a busy machine: marked from the windows around it
    assert load.contended({"before": busy, "during": None, "after": busy}) is True


@pytest.mark.skipif(Snapshot.now() is None, reason="no /proc: nothing is sampled")
def test_arms_timed_beside_a_cpu_bound_process_are_contended() -> None:
    """A busy loop in another process for the whole timed block, on every core it can take."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        with load.sampled() as sampled:
            time.sleep(1.0)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert set(sampled) == {"before", "during", "after"}
    assert sampled["during"]["others"] > load.CONTENDED["others"]
    assert load.contended(sampled) is True
    assert "contended" in load.warning(sampled)
