"""The acceptance view of a summary or a category's metrics, the one that the console, W&B and
the report render: rounds by units accepted (counts and shares), the last bin any round reached,
and both per-position rates (specbench's conditional one, vLLM's unconditional one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Acceptance:
    unit: str | None  # what a round's accepted units are: tokens or denoising steps
    counts: dict[int, int]  # units accepted in a round -> rounds
    by_position: list[float]  # P(i accepted | i drafted, 1..i-1 accepted)
    at_position: list[float]  # vLLM's: P(i accepted) over drafting rounds

    @classmethod
    def of(cls, metrics: Any) -> Acceptance:
        """From a `Metrics` (a summary is one): its histogram keyed by integers."""
        return cls(
            unit=metrics.round_unit,
            counts={int(k): v for k, v in metrics.accepted_hist.items()},
            by_position=list(metrics.accept_by_position or []),
            at_position=list(metrics.accepted_at_position or []),
        )

    @property
    def rounds(self) -> int:
        return sum(self.counts.values())

    @property
    def shares(self) -> dict[int, float]:
        """Each bin's share of the rounds (empty without rounds)."""
        rounds = self.rounds
        return {k: v / rounds for k, v in self.counts.items()} if rounds else {}

    @property
    def reached(self) -> dict[int, float]:
        """`shares` up to the last bin a round reached (the bins past it say nothing)."""
        last = max((k for k, v in self.counts.items() if v), default=0)
        return {k: share for k, share in self.shares.items() if k <= last}
