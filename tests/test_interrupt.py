"""Ctrl-C (`specbench.interrupt`), in subprocesses: the exit code survives an interrupt that
lands in code compiled from a string, and one that Python swallows still stops the run, with
no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import SWALLOWS_CTRL_C

# the signal lands while `exec` runs a string, as when a lazily imported library builds a
# dataclass; CPython then ends a `python -m` program by SIGINT unless the exception is ours
IN_EXEC = """
import os, signal
from specbench.interrupt import on_ctrl_c
try:
    with on_ctrl_c():
        exec("os.kill(os.getpid(), signal.SIGINT)\\nwhile True: pass")
except KeyboardInterrupt:
    raise SystemExit(130)
"""

# the signal lands in a finalizer, where Python prints the exception and carries on
SWALLOWED = f"""
import os, signal
from specbench import interrupt
{SWALLOWS_CTRL_C}
with interrupt.on_ctrl_c():
    Swallows()
    print("went on")
    try:
        interrupt.check()
    except interrupt.Interrupted:
        print("stopped")
"""


def run_module(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """`python -m` on `source`: the launch `specbench`'s own `python -m specbench` uses."""
    (tmp_path / "scenario.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "scenario"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def test_an_interrupt_inside_exec_still_exits_130(tmp_path: Path) -> None:
    done = run_module(tmp_path, IN_EXEC)
    assert done.returncode == 130, done.stderr


def test_a_swallowed_interrupt_is_remembered_and_its_traceback_dropped(tmp_path: Path) -> None:
    done = run_module(tmp_path, SWALLOWED)
    assert (done.returncode, done.stdout, done.stderr) == (0, "went on\nstopped\n", "")
