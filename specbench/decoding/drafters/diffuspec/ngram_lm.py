"""A causal n-gram LM over token ids with interpolated Kneser-Ney smoothing: the cheap left-to-
right prior DiffuSpec's path search mixes with the diffusion drafter's scores.

DiffuSpec uses a 3-gram KenLM. The `kenlm` Python module on PyPI only queries models (estimating
one needs KenLM's `lmplz` binary, which no package provides), so specbench estimates its own:
counts over the target tokenizer's ids (no text round trip), absolute discount 0.75 per order,
continuation counts below the top order, and a uniform floor, so every next-token law sums to 1.

Layout (why it is fast): a k-gram is one integer, its ids in base V behind a leading 1
(V^k + packed ids), so the k-grams of every order share one sorted array, and so do their
histories. Fitting stores, per k-gram, the whole interpolated log-probability
log p_k(t | h) and, per history, its back-off weight log(0.75 * followers / total). A query is a
binary search per order: the deepest order that has seen (h, t) gives log p, plus the weights
of the deeper histories that were seen without t. The query is compiled (numba), so the path
search that asks it a few hundred times per draft runs as machine code.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Iterable

import numba
import numpy as np

from specbench import paths
from specbench.errors import ConfigError

DISCOUNT = 0.75
KEY_BITS = 62  # V^order must stay below 2^62: a marked top-order key (< 2 V^order) fits int64


def max_order(vocab_size: int) -> int:
    """The highest order whose marked keys fit `KEY_BITS`."""
    order = 1
    while vocab_size ** (order + 1) < 2**KEY_BITS:
        order += 1
    return order


@numba.njit(cache=True)
def search(keys: np.ndarray, key: int) -> int:
    """The index of `key` in the sorted `keys`, or -1."""
    at = np.searchsorted(keys, key)
    return at if at < len(keys) and keys[at] == key else -1


@numba.njit(cache=True)
def logprob(tables: tuple, vocab_size: int, history: np.ndarray, token: int) -> float:
    """log p(token | history): `tables` = (keys, log_probs, histories, log_backoff) of a fitted
    NgramLM, `history` its marked history per order (negative where missing)."""
    keys, log_probs, histories, log_backoff = tables
    order, depth, value = len(history), 0, -np.log(vocab_size)
    while depth < order and history[depth] >= 0:
        at = search(keys, history[depth] * vocab_size + token)
        if at < 0:  # (h, t) seen at an order implies it at every order below
            break
        depth, value = depth + 1, log_probs[at]
    for k in range(depth, order):
        at = search(histories, history[k]) if history[k] >= 0 else -1
        if at >= 0:
            value += log_backoff[at]
    return value


@numba.njit(cache=True)
def logprobs_of(tables: tuple, vocab_size: int, histories: np.ndarray, tokens: np.ndarray):
    out = np.empty(len(tokens))
    for i in range(len(tokens)):
        out[i] = logprob(tables, vocab_size, histories[i], tokens[i])
    return out


class NgramLM:
    def __init__(self, order: int, vocab_size: int):
        if order > max_order(vocab_size):
            raise ConfigError(
                "method.ngram_order",
                order,
                f"at most {max_order(vocab_size)} for a {vocab_size}-token vocabulary",
            )
        self.order, self.vocab_size = order, vocab_size
        empty = np.empty(0, dtype=np.int64)
        self.keys, self.log_probs = empty, np.empty(0)  # every order's (h, t), marked
        self.histories, self.log_backoff = empty, np.empty(0)  # every order's h, marked

    def fit(self, sequences: Iterable[list[int]]) -> NgramLM:
        """Raw counts of the top order's n-grams; below it, continuation counts: a k-gram
        counts the distinct (k + 1)-grams it ends (its distinct left extensions)."""
        n, V = self.order, self.vocab_size
        windows = [
            np.lib.stride_tricks.sliding_window_view(np.asarray(ids, dtype=np.int64), n)
            for ids in sequences
            if len(ids) >= n
        ]
        grams = np.concatenate(windows) if windows else np.empty((0, n), dtype=np.int64)
        packed = np.zeros(len(grams), dtype=np.int64)
        for j in range(n):
            packed = packed * V + grams[:, j]
        counted = {n: np.unique(packed, return_counts=True)}
        for k in range(n - 1, 0, -1):
            counted[k] = np.unique(counted[k + 1][0] % V**k, return_counts=True)
        keys, log_probs, histories, log_backoff = [], [], [], []
        lower = (np.empty(0, dtype=np.int64), np.empty(0))  # level k - 1: unmarked keys, probs
        for k in range(1, n + 1):  # marked ranges [V^k, 2 V^k) rise with k: concatenation sorts
            gram, count = counted[k]
            history, inverse, followers = np.unique(
                gram // V, return_inverse=True, return_counts=True
            )
            total = np.bincount(inverse, weights=count, minlength=len(history))
            backoff = DISCOUNT * followers / total
            below = 1.0 / V if k == 1 else lower[1][np.searchsorted(lower[0], gram % V ** (k - 1))]
            prob = (count - DISCOUNT) / total[inverse] + backoff[inverse] * below
            keys.append(gram + V**k)
            log_probs.append(np.log(prob))
            histories.append(history + V ** (k - 1))
            log_backoff.append(np.log(backoff))
            lower = (gram, prob)
        self.keys, self.log_probs = np.concatenate(keys), np.concatenate(log_probs)
        self.histories, self.log_backoff = np.concatenate(histories), np.concatenate(log_backoff)
        return self

    def history(self, context: list[int]) -> np.ndarray:
        """int64 [order]: the marked history of every order k = 1..order after `context` (its
        last k - 1 ids), -1 where the context is too short for that order."""
        V, keys = self.vocab_size, []
        for k in range(1, self.order + 1):
            if len(context) < k - 1:
                keys.append(-1)
                continue
            key = 1  # the marker
            for token in context[len(context) - k + 1 :] if k > 1 else []:
                key = key * V + token
            keys.append(key)
        return np.array(keys, dtype=np.int64)

    @property
    def tables(self) -> tuple:
        """What the compiled query reads."""
        return self.keys, self.log_probs, self.histories, self.log_backoff

    def logprobs(self, tokens: np.ndarray, histories: np.ndarray) -> np.ndarray:
        """float64 [N] natural-log probabilities of `tokens` [N] after `histories` [N, order]."""
        return logprobs_of(self.tables, self.vocab_size, histories, tokens)

    def probs(self, context: list[int]) -> np.ndarray:
        """The whole next-token law after `context` (for checks; the search uses `logprobs`)."""
        tokens = np.arange(self.vocab_size)
        return np.exp(self.logprobs(tokens, np.tile(self.history(context), (len(tokens), 1))))


def cached_ngram(key: str, order: int, vocab_size: int, sequences: Iterable[list[int]]) -> NgramLM:
    """Fit once per (corpus key, order, vocabulary) and keep it in specbench's cache."""
    digest = hashlib.sha256(f"{key}|{order}|{vocab_size}|marked".encode()).hexdigest()[:16]
    path = paths.cache_dir() / "ngram" / f"{digest}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    model = NgramLM(order, vocab_size).fit(sequences)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(model))
    tmp.replace(path)
    return model
