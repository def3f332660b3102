"""SuffixDecoding (Oliaro et al., NeurIPS 2025, arXiv 2411.04975; code
snowflakedb/ArcticInference `arctic_inference/suffix_decoding/`): no drafter model. Suffix
trees over the request's prompt and response so far (a local tree) and over the responses of
earlier requests (one global tree) count how often each continuation followed each pattern;
every round matches the context's tail against both trees and drafts the continuation with the
best frequency score, as a speculation tree (best-first by estimated probability) or a chain
(the likeliest path). A longer match may draft more (`max_spec_factor` per matched token plus
`max_spec_offset`): the adaptive draft length. `tree.py` holds the trees and the cache, ported
from upstream; this module drives them from the draft-verify loop as upstream's vLLM plugin
does: the request starts with its prompt, the tokens each round commits are added to both
trees before the next draft (the last round's when the generation ends), and the request stops
when the next one starts.

A request is identified by its prompt, so decoding a prompt again (the warm-up's decode of a
sample, then its timed one) evicts the response cached the first time, as upstream evicts a
restarted request's: a sample never drafts from its own earlier output. The responses of the
other samples decoded earlier in the cell stay cached, which is the method; so a sample's
acceptance (never its tokens) depends on the samples before it, and a resumed cell starts
with an empty global tree.

Verification is the shared loop's and exact: the tree by the tree rules (greedy: the target's
argmax walk; sampling: a draw of the target's law at every node), the chain by greedy or
rejection sampling of a point-mass draft.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from specbench.decoding.drafters.suffix.config import SuffixConfig
from specbench.decoding.drafters.suffix.tree import SuffixCache
from specbench.decoding.generation import Decoder, Draft
from specbench.decoding.speculative import (
    Drafter,
    DraftVerifyMethod,
    GammaSchedule,
    SpeculativeDecoder,
)
from specbench.decoding.verify import make_rule, make_tree_rule
from specbench.models.causal import CausalLM
from specbench.registry import METHODS


class SuffixDrafter(Drafter):
    """Drafts from a `SuffixCache` that lives as long as the decoder, across its samples."""

    def __init__(self, cfg: SuffixConfig):
        self.cfg = cfg
        self.cache = SuffixCache(cfg.max_tree_depth, cfg.max_cached_requests)
        self.request: tuple[int, ...] | None = None
        self.seen = 0  # context tokens already in the trees
        self.calls = 0  # no model: a lookup is not a forward

    def finish(self, context: list[int]) -> None:
        self.cache.add_active_response(self.request, context[self.seen :])
        self.seen = len(context)

    def reset(self) -> None:
        if self.request is not None:
            self.cache.stop_request(self.request)
        self.request = None

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        """The first draft of a generation sees the prompt alone and starts its request."""
        t0 = time.perf_counter()
        cfg, cache = self.cfg, self.cache
        if self.request is None:
            self.request = tuple(context)
            cache.start_request(self.request, context)
        else:
            cache.add_active_response(self.request, context[self.seen :])
        self.seen = len(context)
        found = cache.speculate(
            self.request,
            context,
            n,
            cfg.max_spec_factor,
            cfg.max_spec_offset,
            cfg.min_token_prob,
            cfg.use_tree_spec,
        )
        parents = found.parents if cfg.use_tree_spec else None
        return Draft(found.token_ids, None, 0, time.perf_counter() - t0, parents=parents)


@METHODS.register
class Suffix(DraftVerifyMethod):
    """SuffixDecoding: drafts from suffix trees over the prompt and earlier responses, a tree
    verified in one forward (or a chain); a round without a match is a plain step. A tree is
    measured against the chain of the same knobs on the same samples (`vs.chain`)."""

    name = "suffix"
    Config = SuffixConfig

    def build(self, target: CausalLM, drafter: None, task: object) -> SpeculativeDecoder:
        cfg, warp = self.cfg, self.warp
        return SpeculativeDecoder(
            target,
            SuffixDrafter(cfg),
            make_rule("auto", 1.0, warp),
            warp,
            GammaSchedule(cfg.max_spec_tokens, "constant"),
            tree_rule=make_tree_rule("auto", warp) if cfg.use_tree_spec else None,
        )

    def references(self, target: CausalLM, drafter: None) -> dict[str, Decoder | None]:
        if not self.cfg.use_tree_spec:
            return {}
        chain = type(self)(replace(self.cfg, use_tree_spec=False), self.warp)
        return {"chain": chain.build(target, None, None)}

    def tree_nodes(self) -> int:
        return self.cfg.max_spec_tokens if self.cfg.use_tree_spec else 0

    def label(self) -> str:
        cfg = self.cfg
        shape = "tree" if cfg.use_tree_spec else "chain"
        cached = [] if cfg.max_cached_requests < 0 else [f"c{cfg.max_cached_requests}"]
        knobs = [
            f"{shape}{cfg.max_spec_tokens}",
            f"d{cfg.max_tree_depth}",
            f"α{cfg.max_spec_factor:g}+{cfg.max_spec_offset:g}",
            f"p{cfg.min_token_prob:g}",
        ]
        return " ".join(["suffix", *knobs, *cached])
