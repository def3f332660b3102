"""PSD's knobs: the spatial policy it replays to draft, the draft depth and how wide each
deeper draft is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.dllm.vanilla.config import DLLMConfig
from specbench.decoding.knobs import bounds
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class PSDConfig(DLLMConfig):
    marker: ClassVar[str] = "D"  # its marker in Pareto plots
    name: str = "psd"
    policy: str = "threshold"  # PSD(Confidence), the paper's main variant (threshold 0.9)
    depth: int = 3  # d: drafts D_1 .. D_d per iteration (0 = the policy's decoder); paper: 3
    # tokens each deeper draft adds under a confidence-driven policy: `last` (as many as the
    # policy's step just committed) or `replay` (the policy on the stale scores); quota
    # policies always replay (their counts are known)
    draft_width: str = "last"

    def check(self, temperature: float, max_new: int) -> None:
        super().check(temperature, max_new)
        self.check_replayable()
        bounds(
            (
                "method.depth",
                self.depth,
                self.depth >= 0,
                "must be >= 0 (0 = the policy's decoder)",
            ),
            (
                "method.draft_width",
                self.draft_width,
                self.draft_width in ("last", "replay"),
                "allowed: last, replay",
            ),
        )
