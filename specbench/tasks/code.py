"""What the code tasks (HumanEval, MBPP) share: the sandbox they refuse to run without, and the
code taken from an instruct model's reply."""

from __future__ import annotations

import re

from specbench.errors import ConfigError
from specbench.metrics import sandbox

FENCE = re.compile(r"```(?:python|py)?\n(.*?)(?:```|$)", re.DOTALL)


def require_sandbox(task: str) -> None:
    """A code task refuses a machine without its sandbox, in one line, before any model loads."""
    try:
        sandbox.require()
    except sandbox.SandboxUnavailable as err:
        raise ConfigError("task", task, str(err)) from None


def code_of(reply: str) -> str:
    """The first fenced code block of a chat reply, else the reply itself."""
    match = FENCE.search(reply)
    return match.group(1) if match else reply
