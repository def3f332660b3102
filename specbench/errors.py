"""The one error a user sees for a bad configuration: key, value, and what is allowed."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """Raised before any weight loads; `str()` is a single line a user can act on."""

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: {allowed}")
