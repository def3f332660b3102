"""`method=ar` has no knobs: its config only names it and gives its plot marker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class ARConfig:
    marker: ClassVar[str] = "s"  # its marker in Pareto plots
    name: str = "ar"

    def check(self, temperature: float, max_new: int) -> None:
        return None
