"""Prompt lookup decoding (PLD; Saxena 2023): no drafter model. The draft is what followed the
context's own latest n-gram where it occurred before, so it pays where outputs copy their
input (code edits, summaries, retrieval answers).

The lookup is vLLM's `ngram` proposer's (vllm/v1/spec_decode/ngram_proposer.py,
`_find_longest_matched_ngram_and_propose_tokens`), so the same config means the same drafts on
both backends: the longest suffix n-gram, n in [prompt_lookup_min, prompt_lookup_max], that
occurs earlier in the context (an occurrence may overlap the suffix, never be it); among
occurrences of that length the earliest; the draft is up to k tokens after it, fewer where the
context ends first, none where nothing matches (that round is one plain step). Saxena's
original tries n from the largest down and skips occurrences that overlap the suffix; vLLM's
rule is the one named here.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from specbench.decoding.drafters.pld.config import PLDConfig
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import (
    Drafter,
    DraftVerifyMethod,
    GammaSchedule,
    SpeculativeDecoder,
)
from specbench.decoding.verify import is_lossless, make_rule
from specbench.models.causal import CausalLM
from specbench.registry import METHODS


def lookup(context: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """Up to `k` tokens after the earliest earlier occurrence of the context's longest matching
    suffix n-gram, min_n <= n <= max_n (the module docstring has the rule)."""
    tokens = np.asarray(context, dtype=np.int64)
    total = len(tokens)
    if total < min_n or k <= 0:
        return []
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        # windows starting at 0 .. total - n - 1: every occurrence but the suffix itself
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: total - 1], n)
        hits = np.flatnonzero((windows == tokens[total - n :]).all(axis=1))
        if len(hits):
            start = int(hits[0]) + n
            return tokens[start : start + k].tolist()
    return []


class LookupDrafter(Drafter):
    """Drafts by `lookup` over the prompt and the tokens generated so far."""

    def __init__(self, min_n: int, max_n: int):
        self.min_n, self.max_n = min_n, max_n
        self.calls = 0  # no model: a lookup is not a forward

    def reset(self) -> None:
        return None

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        t0 = time.perf_counter()
        tokens = lookup(context, self.min_n, self.max_n, n)
        return Draft(tokens, None, 0, time.perf_counter() - t0)


@METHODS.register
class PLD(DraftVerifyMethod):
    """Prompt lookup decoding: drafts copied from the context, verified by the target in one
    forward; a round without a match is a plain step."""

    name = "pld"
    Config = PLDConfig

    def build(self, target: CausalLM, drafter: None, task: object) -> SpeculativeDecoder:
        cfg = self.cfg
        return SpeculativeDecoder(
            target,
            LookupDrafter(cfg.prompt_lookup_min, cfg.prompt_lookup_max),
            make_rule("auto", 1.0, self.warp),
            self.warp,
            GammaSchedule(cfg.gamma, "constant"),
        )

    def exact(self) -> bool:
        return is_lossless("auto", self.warp)

    def label(self) -> str:
        cfg = self.cfg
        return f"pld γ{cfg.gamma} n{cfg.prompt_lookup_min}-{cfg.prompt_lookup_max}"
