"""Prompt lookup's knobs, named as vLLM's `ngram` proposer names them: the draft length and
the n-gram lengths looked up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.knobs import bounds, check_draft_length
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class PLDConfig:
    marker: ClassVar[str] = "P"  # its marker in Pareto plots
    name: str = "pld"
    # tokens drafted per round at most (vLLM's num_speculative_tokens; Spec-Bench's PLD: 10)
    gamma: int = 10
    # the n-gram lengths looked up, longest first (vLLM's prompt_lookup_min/max; PLD's max: 3)
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 3

    def check(self, temperature: float, max_new: int) -> None:
        check_draft_length(self.gamma, max_new)
        bounds(
            (
                "method.prompt_lookup_min",
                self.prompt_lookup_min,
                self.prompt_lookup_min >= 1,
                "must be an integer >= 1",
            ),
            (
                "method.prompt_lookup_max",
                self.prompt_lookup_max,
                self.prompt_lookup_max >= self.prompt_lookup_min,
                f"must be an integer >= method.prompt_lookup_min ({self.prompt_lookup_min})",
            ),
        )
