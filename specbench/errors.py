"""The errors a user sees as one line: a bad configuration (key, value, and what is allowed),
and a full disk."""

from __future__ import annotations

import argparse
import errno
from typing import Any, NoReturn

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class ConfigError(ValueError):
    """Raised before any weight loads; `str()` is a single line a user can act on."""

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: {allowed}")


def user_line(err: BaseException) -> str | None:
    """The one line for an error a user can act on; None for a bug, whose traceback shows."""
    if isinstance(err, ConfigError):
        return str(err)
    if isinstance(err, OSError) and err.errno in DISK_FULL:
        where = f" writing {err.filename}" if err.filename else ""
        return (
            f"no space left on the device{where}: free some and rerun the same command "
            "(every recorded sample is kept)"
        )
    return None


class OneLineParser(argparse.ArgumentParser):
    """argparse whose refusals are one line, `prog: error: why` (exit 2), without the usage
    block above it (`--help` still prints the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")
