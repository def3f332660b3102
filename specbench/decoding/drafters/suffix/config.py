"""SuffixDecoding's knobs, named as upstream's `SuffixDecodingCache` and its `speculate` name
them (snowflakedb/ArcticInference `arctic_inference/suffix_decoding/cache.py`), with their
defaults there, but two: `use_tree_spec` is true (the paper's speculation tree and upstream's
simulator default; `speculate`'s own default, false, is the chain vLLM verifies), and
`max_spec_tokens`, which `speculate` needs, is the draft budget ArcticInference's vLLM plugin
gives `method: suffix` (16)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.knobs import bounds
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class SuffixConfig:
    marker: ClassVar[str] = "<"  # its marker in Pareto plots
    name: str = "suffix"
    # the most tokens (tree nodes, or chain tokens) one round drafts
    max_spec_tokens: int = 16
    # the suffix trees' depth: the longest cached pattern, and the context tail matched
    max_tree_depth: int = 64
    # previous responses kept in the global tree (FIFO); -1: all, 0: no global tree
    max_cached_requests: int = -1
    # a match of m tokens drafts at most max_spec_factor * m + max_spec_offset tokens
    max_spec_factor: float = 1.0
    max_spec_offset: float = 0.0
    # a token whose estimated probability (its path's count ratios) is below this is not drafted
    min_token_prob: float = 0.1
    # a speculation tree, best-first by estimated probability; false: the single likeliest path
    use_tree_spec: bool = True

    def check(self, temperature: float, max_new: int) -> None:
        bounds(
            (
                "method.max_spec_tokens",
                self.max_spec_tokens,
                1 <= self.max_spec_tokens <= max_new,
                f"must be an integer in [1, max_new_tokens={max_new}]",
            ),
            (
                "method.max_tree_depth",
                self.max_tree_depth,
                self.max_tree_depth >= 2,
                "must be an integer >= 2 (a match needs one token and one to draft)",
            ),
            (
                "method.max_cached_requests",
                self.max_cached_requests,
                -1 <= self.max_cached_requests <= 0x7FFFFFFF,
                "must be -1 (no limit), 0 (no global tree) or a count up to 2^31 - 1",
            ),
            (
                "method.max_spec_factor",
                self.max_spec_factor,
                self.max_spec_factor >= 0,
                "must be >= 0",
            ),
            (
                "method.min_token_prob",
                self.min_token_prob,
                0 <= self.min_token_prob <= 1,
                "must be in [0, 1]",
            ),
        )
