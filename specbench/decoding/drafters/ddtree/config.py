"""DDTree's knobs: DFlash's block, the tree's node budget, an exact rule (trees verify
exactly)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.drafters.dflash.config import DFlashConfig
from specbench.decoding.knobs import bounds, check_exact_rule
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class DDTreeConfig:
    marker: ClassVar[str] = "P"  # its marker in Pareto plots
    name: str = "ddtree"
    block_size: int | None = None  # as DFlash's: null uses the drafter checkpoint's
    budget: int = 32  # tree nodes verified per round, the root (newest token) not counted
    rule: str = "auto"  # greedy at temperature 0, exact tree sampling above; no lenient rules

    def check(self, temperature: float, max_new: int) -> None:
        DFlashConfig(block_size=self.block_size).check(temperature, max_new)
        check_exact_rule(self.rule, temperature)
        bounds(("method.budget", self.budget, self.budget >= 1, "must be an integer >= 1"))
