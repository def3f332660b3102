"""What the code tasks (HumanEval, MBPP) share: the sandbox they refuse to run without, and the
code taken from an instruct model's reply."""

from __future__ import annotations

import re
from dataclasses import dataclass

from specbench import sandbox
from specbench.errors import ConfigError
from specbench.tasks.base import TaskConfig

FENCE = re.compile(r"```(?:python|py)?\n(.*?)(?:```|$)", re.DOTALL)


@dataclass
class CodeTaskConfig(TaskConfig):
    """A code task's knobs: the sandbox's limit on each check, in seconds of wall and CPU
    time (the CPU limit is whole seconds, so at least 1)."""

    timeout_s: float = 10.0

    def check(self) -> None:
        super().check()
        if not self.timeout_s >= 1:
            raise ConfigError("task.timeout_s", self.timeout_s, "must be a number of seconds >= 1")


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
