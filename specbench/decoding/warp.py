"""Temperature / top-k / top-p warping, shared by target and drafter so the acceptance test is
exact with respect to the warped target distribution."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbench.decoding.knobs import is_greedy


@dataclass(frozen=True)
class Warp:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return is_greedy(self.temperature)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped next-token distributions for each row of `logits`; one-hot at temperature 0."""
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
        scaled = logits / self.temperature
        if 0 < self.top_k < scaled.shape[-1]:
            kth = scaled.topk(self.top_k, dim=-1).values[..., -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_logits, order = scaled.sort(dim=-1, descending=True)
            sorted_probs = sorted_logits.softmax(-1)
            mass_before = sorted_probs.cumsum(-1) - sorted_probs
            drop_sorted = mass_before >= self.top_p  # the top token always survives
            drop = drop_sorted.scatter(-1, order, drop_sorted)
            scaled = scaled.masked_fill(drop, float("-inf"))
        return scaled.softmax(-1)

    def sample(self, logits: torch.Tensor, generator: torch.Generator) -> int:
        """One token from a single row of logits."""
        if self.greedy:
            return int(logits.argmax())
        return int(torch.multinomial(self.probs(logits), 1, generator=generator))
