"""A causal n-gram LM over token ids with interpolated Kneser-Ney smoothing: the cheap left-to-
right prior DiffuSpec's path search mixes with the diffusion drafter's scores.

DiffuSpec uses a 3-gram KenLM. The `kenlm` Python module on PyPI only queries models (estimating
one needs KenLM's `lmplz` binary, which no package provides), so specbench estimates its own:
counts over the target tokenizer's ids (no text round trip), absolute discount 0.75 per order,
continuation counts below the top order, and a uniform floor, so every next-token law sums to 1.
"""

from __future__ import annotations

import hashlib
import math
import pickle
from collections import Counter, defaultdict
from collections.abc import Iterable

import torch

from specbench import paths

DISCOUNT = 0.75


class NgramLM:
    def __init__(self, order: int, vocab_size: int):
        self.order, self.vocab_size = order, vocab_size
        # counts[k][context of k-1 ids][next id]: raw counts at the top order, continuation
        # counts (distinct left extensions) below it.
        self.counts: list[dict[tuple[int, ...], Counter]] = [
            defaultdict(Counter) for _ in range(order + 1)
        ]
        self.memo: dict[tuple[int, tuple[int, ...]], float] = {}

    def fit(self, sequences: Iterable[list[int]]) -> NgramLM:
        n = self.order
        top: set[tuple[int, ...]] = set()
        for ids in sequences:
            for end in range(n, len(ids) + 1):
                gram = tuple(ids[end - n : end])
                self.counts[n][gram[:-1]][gram[-1]] += 1
                top.add(gram)
        seen = top
        for k in range(n - 1, 0, -1):  # continuation counts: one per distinct left extension
            lower: set[tuple[int, ...]] = set()
            for gram in seen:
                suffix = gram[1:]
                self.counts[k][suffix[:-1]][suffix[-1]] += 1
                lower.add(suffix)
            seen = lower
        self.totals = [{h: sum(c.values()) for h, c in level.items()} for level in self.counts]
        return self

    def logprob(self, token: int, context: list[int]) -> float:
        """Natural-log probability of `token` after `context` (its last order-1 ids count),
        memoised: a path search asks the same few histories again and again."""
        key = (token, tuple(context[len(context) - self.order + 1 :]))
        memo = self.memo
        if key not in memo:
            if len(memo) > 1_000_000:
                memo.clear()
            memo[key] = math.log(self._prob(*key))
        return memo[key]

    def _prob(self, token: int, history: tuple[int, ...]) -> float:
        k = len(history) + 1
        if k == 0 or k > self.order:
            return 1.0 / self.vocab_size
        lower = self._prob(token, history[1:]) if history else 1.0 / self.vocab_size
        followers = self.counts[k].get(history)
        if not followers:
            return lower
        total = self.totals[k][history]
        kept = max(followers.get(token, 0) - DISCOUNT, 0.0) / total
        return kept + DISCOUNT * len(followers) / total * lower

    def probs(self, context: list[int]) -> torch.Tensor:
        """The whole next-token law after `context` (for checks; the search uses `logprob`)."""
        history = tuple(context[len(context) - self.order + 1 :])
        law = torch.full((self.vocab_size,), 1.0 / self.vocab_size, dtype=torch.float64)
        for start in range(len(history), -1, -1):
            h = history[start:]
            followers = self.counts[len(h) + 1].get(h)
            if not followers:
                continue
            total = self.totals[len(h) + 1][h]
            kept = torch.zeros_like(law)
            for token, count in followers.items():
                kept[token] = max(count - DISCOUNT, 0.0) / total
            law = kept + DISCOUNT * len(followers) / total * law
        return law


def cached_ngram(key: str, order: int, vocab_size: int, sequences: Iterable[list[int]]) -> NgramLM:
    """Fit once per (corpus key, order, vocabulary) and keep it in specbench's cache."""
    digest = hashlib.sha256(f"{key}|{order}|{vocab_size}".encode()).hexdigest()[:16]
    path = paths.cache_dir() / "ngram" / f"{digest}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    model = NgramLM(order, vocab_size).fit(sequences)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(model))
    tmp.replace(path)
    return model
