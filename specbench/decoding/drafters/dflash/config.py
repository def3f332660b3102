"""DFlash's knobs: the drafter's block size (null: its checkpoint's) and the acceptance rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.knobs import bounds, check_rule
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class DFlashConfig:
    marker: ClassVar[str] = "*"  # its marker in Pareto plots
    name: str = "dflash"
    # positions per drafter block (the anchor token plus block_size - 1 drafts); null: the
    # checkpoint's own (z-lab's Qwen3 checkpoints: 16)
    block_size: int | None = None
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps

    def check(self, temperature: float, max_new: int) -> None:
        bounds(
            (
                "method.block_size",
                self.block_size,
                self.block_size is None or self.block_size >= 2,
                "must be >= 2, or null (the checkpoint's)",
            )
        )
        check_rule(self.rule, self.leniency, temperature)
