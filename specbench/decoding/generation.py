"""What every decoder returns, so the baseline and each method are counted the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch


@dataclass
class Draft:
    tokens: list[int]
    q_probs: torch.Tensor | None  # [len(tokens), V] warped proposal, None when chosen by argmax
    nfe: int
    seconds: float


@dataclass
class Generation:
    """One sample's output and counters. `tokens` holds the generated ids, a stop token included
    once; per round, `draft_lengths[r]` tokens were proposed and `accepted[r]` kept."""

    tokens: list[int]
    wall_s: float
    ttft_s: float
    target_calls: int
    drafter_calls: int = 0
    draft_s: float = 0.0
    draft_lengths: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)


class Decoder(Protocol):
    def generate(
        self, prompt_ids: list[int], max_new_tokens: int, generator: torch.Generator
    ) -> Generation: ...


def cut_at_stop(tokens: list[int], stop_ids: set[int]) -> tuple[list[int], bool]:
    """Tokens up to and including the first stop token, and whether one was found."""
    for i, tok in enumerate(tokens):
        if tok in stop_ids:
            return tokens[: i + 1], True
    return tokens, False
