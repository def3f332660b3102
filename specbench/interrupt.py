"""Ctrl-C as one exception of our own, and remembered.

Python's default SIGINT handler raises a plain KeyboardInterrupt wherever the main thread is,
and in a long run two things then go wrong:

- If it passes through code compiled from a string (`exec` in `dataclasses`, which a lazily
  imported library may be running at that moment), CPython records an "unhandled
  KeyboardInterrupt" even though we catch it further up, and `python -m specbench` then ends by
  killing itself with SIGINT instead of exiting with the 130 we chose. CPython checks for the
  exact class, so a subclass is not recorded.
- A library's finalizer or callback may swallow it, and the run goes on as if nothing happened.

So `on_ctrl_c` raises `Interrupted` and remembers that it did; the sample loop calls `check`
between samples, which stops a run whose interrupt was swallowed. Where Python itself swallows
it (an exception in a weakref callback is "ignored" with a traceback on stderr), the traceback is
dropped: the run stops at the next sample all the same, and the user still reads one line.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_CODE = 130  # the shell's code for a command ended by SIGINT


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, raised by `on_ctrl_c`'s handler."""


_requested = threading.Event()


def _raise(signum: int, frame: FrameType | None) -> None:
    _requested.set()
    raise Interrupted


@contextmanager
def on_ctrl_c() -> Iterator[None]:
    """SIGINT raises `Interrupted` inside; the previous handlers are restored on leaving."""
    _requested.clear()
    previous_hook = sys.unraisablehook

    def report_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            previous_hook(unraisable)

    previous = signal.signal(signal.SIGINT, _raise)
    sys.unraisablehook = report_unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook


def check() -> None:
    """Raise `Interrupted` if a Ctrl-C arrived and its exception was swallowed."""
    if _requested.is_set():
        raise Interrupted
