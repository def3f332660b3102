"""FailFast's knobs: its draft-length rule (fail fast, win big) and the Fast-dLLM v2
block decoding it drafts with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.knobs import EXACT_RULES, bounds, is_greedy
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class FailFastConfig:
    """FailFast's knobs, named as in its code (ruipeterpan/failfast `failfast.py` and its
    Fast-dLLM v2 fork's `generate_draft_tokens_arbitrary_length`), defaults its CLI's."""

    marker: ClassVar[str] = "X"  # its marker in Pareto plots
    name: str = "failfast"
    spec_len: int = 10  # the draft length every round starts from (`--spec_len`)
    incr_len: int = 10  # N: tokens a confident draft grows by (`--sweep_incr_len`)
    max_spec_len: int = 60  # N_max: stop growing once this many confidences were seen
    lowconf_threshold: float = 0.45  # tau: any draft confidence below it ends the draft
    threshold: float = 0.05  # Fast-dLLM's unmasking threshold (`--drafter_thresholds`)
    block_size: int = 32  # Fast-dLLM v2's block, aligned to absolute positions
    small_block_size: int = 8  # denoised left to right inside a block
    rule: str = "auto"  # greedy at temperature 0, rejection (one-hot proposal) above

    def check(self, temperature: float, max_new: int) -> None:
        bounds(
            *(
                (f"method.{key}", getattr(self, key), getattr(self, key) >= 1, "must be >= 1")
                for key in ("spec_len", "incr_len", "max_spec_len", "small_block_size")
            ),
            *(
                (
                    f"method.{key}",
                    getattr(self, key),
                    0 <= getattr(self, key) <= 1,
                    "must be in [0, 1]",
                )
                for key in ("lowconf_threshold", "threshold")
            ),
            (
                "method.block_size",
                self.block_size,
                self.block_size >= self.small_block_size
                and self.block_size % self.small_block_size == 0,
                f"must be a multiple of method.small_block_size ({self.small_block_size})",
            ),
            (
                "method.rule",
                self.rule,
                self.rule in ("auto", *EXACT_RULES),
                f"failfast verifies exactly; allowed: auto, {', '.join(EXACT_RULES)}",
            ),
            (
                "method.rule",
                self.rule,
                self.rule != "greedy" or is_greedy(temperature),
                "greedy acceptance needs run.temperature=0; use auto or rejection",
            ),
        )
