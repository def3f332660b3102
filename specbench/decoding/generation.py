"""What every decoder returns, so the baseline and each method are counted the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import torch

from specbench.decoding.trees import node_depths
from specbench.metrics.speed import Stopwatch


@dataclass
class Draft:
    """A chain of tokens, or a tree of them when `parents` is set: node k's parent node, -1 for
    the root (the newest committed token), parents before their children. A chain is the tree
    whose parents are -1, 0, 1, ..."""

    tokens: list[int]
    q_probs: torch.Tensor | None  # [len(tokens), V] warped proposal, None when chosen by argmax
    nfe: int
    seconds: float
    # per-round facts a drafter reports (DiffuSpec: L_gen, k, ...)
    info: dict = field(default_factory=dict)
    parents: list[int] | None = None

    @property
    def depth(self) -> int:
        """The most tokens a round can accept: a chain's length, a tree's deepest path."""
        if self.parents is None:
            return len(self.tokens)
        return max(node_depths(self.parents), default=0)


@dataclass
class Generation:
    """One sample's output and counters. `tokens` holds the generated ids, a stop token included
    once. Per round, `draft_lengths[r]` units were proposed and `accepted[r]` kept, in the
    method's `round_unit` (tokens, or a diffusion LLM's denoising steps); `emitted[c]` is the
    number of tokens target forward c committed, in tokens for every method. A tree round's
    `draft_lengths[r]` is its depth (what it could accept) and `nodes[r]` its size."""

    tokens: list[int]
    wall_s: float
    ttft_s: float
    target_calls: int
    drafter_calls: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0  # where a method times its verification forwards apart (Spiffy)
    draft_lengths: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    rounds: list[dict] = field(default_factory=list)  # each round's Draft.info, when any
    emitted: list[int] = field(default_factory=list)
    positions: int = 0  # token positions the target's forwards fed (batch rows x length)
    nodes: list[int] = field(default_factory=list)  # per round of a tree draft: nodes verified


class Counted(Protocol):
    """A model whose calls a generation counts (a drafter)."""

    calls: int


class CountedTarget(Counted, Protocol):
    """A target: its calls, the positions they fed, and the device the clock waits for."""

    positions: int
    device: torch.device


class Meter:
    """One generation's clock and the counters it reads its costs from, started together. The
    models are shared by every arm and sample, so a generation's counts are what they add
    after this snapshot; every decoder measures the same way through it."""

    def __init__(self, target: CountedTarget, drafter: Counted | None = None):
        self.target, self.drafter = target, drafter
        self.clock = Stopwatch(target.device)
        self.calls, self.positions = target.calls, target.positions
        self.drafter_calls = drafter.calls if drafter is not None else 0
        self.clock.start()

    def first_token(self) -> None:
        self.clock.first_token()

    def generation(self, tokens: list[int], emitted: list, **counters) -> Generation:
        """The `Generation` of `tokens`. The clock stops first: `emitted` may hold counts still
        on the device, read back only then, outside the timed decode."""
        wall_s = self.clock.elapsed()
        drafter = self.drafter
        return Generation(
            tokens=tokens,
            wall_s=wall_s,
            ttft_s=self.clock.ttft_s,
            target_calls=self.target.calls - self.calls,
            drafter_calls=drafter.calls - self.drafter_calls if drafter is not None else 0,
            positions=self.target.positions - self.positions,
            emitted=[int(n) for n in emitted],
            **counters,
        )


@dataclass(frozen=True)
class Stop:
    """Where a generation ends: at a stop token, or at the token that completes a stop string
    in the decoded text; either token is kept. Every position is checked in order, so a method
    that emits several tokens per round stops exactly where plain decoding does."""

    ids: frozenset[int]
    strings: tuple[str, ...] = ()
    decode: Callable[[list[int]], str] | None = None

    @cached_property
    def window(self) -> int:
        """Tokens enough to spell the longest stop string (a token is at least one byte)."""
        return max((len(s.encode()) for s in self.strings), default=0) + 1

    def first(self, tokens: list[int], start: int = 0) -> int | None:
        """Index of the first token at or after `start` that ends the generation."""
        for i in range(start, len(tokens)):
            if tokens[i] in self.ids:
                return i
            if self.strings:
                text = self.decode(tokens[max(0, i + 1 - self.window) : i + 1])
                if any(s in text for s in self.strings):
                    return i
        return None


class Decoder(Protocol):
    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        generator: torch.Generator,
        stop: Stop | None = None,
    ) -> Generation: ...
