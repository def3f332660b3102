"""SpS: a small causal LM drafts gamma tokens one at a time, keeping its own KV cache; or, with
`tree=dynamic`, a dynamic draft tree of depth gamma (EAGLE-2, Li et al. 2024).

The tree grows one depth per drafter forward: the `top_k` nodes of the newest depth with the
highest cumulative log-probability (the drafter's raw log-softmax summed along the path) each
get their `top_k` most probable children; after depth gamma every candidate is reranked by the
same score and the `budget` best are verified. A child never scores above its parent, so the
best nodes, ties going to the earlier (shallower) node, are a tree.

The drafter's cache takes new tokens at explicit positions under an ancestor mask, but every
new token reads every cached slot: a frontier node cannot be kept from reading the other
branches cached before it. So each depth's forward re-reads its frontier's ancestors with it,
over the committed context only, and the cache is rolled back to that context after every
forward.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from specbench.decoding.drafters.logits import fit_vocab
from specbench.decoding.drafters.sps.config import SpSConfig
from specbench.decoding.generation import Decoder, Draft
from specbench.decoding.speculative import (
    Drafter,
    DraftVerifyMethod,
    GammaSchedule,
    SpeculativeDecoder,
)
from specbench.decoding.trees import Candidates, tree_positions
from specbench.decoding.verify import is_lossless, make_rule, make_tree_rule, rule_label
from specbench.decoding.warp import Warp
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM, ancestor_mask
from specbench.registry import METHODS


def common_prefix_len(a: list[int], b: list[int], known: int = 0) -> int:
    """Length of the longest common prefix, trusting `a[:known] == b[:known]` after a C-speed check."""
    n = min(len(a), len(b))
    known = min(known, n)
    i = known if a[:known] == b[:known] else 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CachedDrafter(Drafter):
    """A causal drafter keeping its KV cache across rounds: `cached` is what the cache holds,
    and a round rolls back only what its context changed. Its logits are cut or padded to the
    target's vocabulary size (checkpoints of one tokenizer may pad their embedding matrices
    differently)."""

    def __init__(self, lm: CausalLM, stop_ids: set[int], vocab_size: int):
        self.lm, self.stop_ids, self.vocab_size = lm, stop_ids, vocab_size
        self.reset()

    @property
    def calls(self) -> int:
        return self.lm.calls

    def reset(self) -> None:
        self.lm.reset()
        self.cached, self.context_len = [], 0
        self.own_calls = self.lm.calls

    def resume(self, context: list[int]) -> list[int]:
        """Roll the cache back to its longest prefix of `context`, one token short at most so
        that a forward reads the newest; the context's tokens still to feed. A cache another
        drafter fed since (a reference arm's, on the same model) holds nothing of ours."""
        if self.lm.calls != self.own_calls:
            self.cached, self.context_len = [], 0
        keep = min(common_prefix_len(self.cached, context, self.context_len), len(context) - 1)
        self.lm.rollback(keep)
        return context[keep:]

    def remember(self, cached: list[int], context_len: int) -> None:
        """After a draft: the tokens the cache holds, of which the first `context_len` are the
        context's."""
        self.cached, self.context_len, self.own_calls = cached, context_len, self.lm.calls


class ARDrafter(CachedDrafter):
    """Drafts autoregressively, stopping early at a stop token. Its cache holds the last context
    plus all but the last draft token."""

    def __init__(self, lm: CausalLM, warp: Warp, stop_ids: set[int], vocab_size: int):
        super().__init__(lm, stop_ids, vocab_size)
        self.warp = warp

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        if n == 0:
            return Draft([], None, 0, 0.0)
        synchronize(self.lm.device)
        t0 = time.perf_counter()
        feed = self.resume(context)
        tokens: list[int] = []
        q_rows: list[torch.Tensor] = []
        for _ in range(n):
            logits = fit_vocab(self.lm.forward_tokens(feed, keep=1)[0], self.vocab_size)
            if self.warp.greedy:
                token = int(logits.argmax())
            else:
                q = self.warp.probs(logits)
                token = int(torch.multinomial(q, 1, generator=generator))
                q_rows.append(q)
            tokens.append(token)
            if token in self.stop_ids:
                break
            feed = [token]
        self.remember(context + tokens[:-1], len(context))
        synchronize(self.lm.device)
        q_probs = torch.stack(q_rows) if q_rows else None
        return Draft(tokens, q_probs, len(tokens), time.perf_counter() - t0)


class TreeDrafter(CachedDrafter):
    """EAGLE-2's dynamic draft tree from a causal drafter (the module docstring has the
    algorithm). Nodes are chosen by argmax ranks, whatever the temperature: the tree rules
    verify any tree fixed before the target reads it exactly. Between forwards the cache holds
    the committed context but its newest token, which every forward reads first."""

    def __init__(self, lm: CausalLM, stop_ids: set[int], vocab_size: int, top_k: int, budget: int):
        super().__init__(lm, stop_ids, vocab_size)
        self.top_k, self.budget = top_k, budget

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        if n == 0:
            return Draft([], None, 0, 0.0)
        synchronize(self.lm.device)
        t0 = time.perf_counter()
        tree = Candidates()
        frontier = tree.grow([-1], self.read(self.resume(context), [], [], 1), self.top_k)
        forwards = 1
        for _ in range(n - 1):
            unstopped = [node for node in frontier if tree.tokens[node] not in self.stop_ids]
            expand = tree.best(unstopped, self.top_k)
            if not expand:
                break
            tokens, parents = tree.subtree(tree.with_ancestors(expand))  # expand: the last nodes
            logits = self.read(context[-1:], tokens, parents, len(expand))
            frontier = tree.grow(expand, logits, self.top_k)
            forwards += 1
        tokens, parents = tree.subtree(tree.best(range(len(tree.tokens)), self.budget))
        self.remember(context[:-1], len(context) - 1)
        synchronize(self.lm.device)
        return Draft(tokens, None, forwards, time.perf_counter() - t0, parents=parents)

    def read(
        self, chain: list[int], tokens: list[int], parents: list[int], last: int
    ) -> torch.Tensor:
        """One forward over the context's uncached `chain` (the newest token last) and a tree
        of `tokens` hanging off it, at tree positions under the ancestor mask: the logits of
        the `last` rows. The cache then drops the tree and the newest token again."""
        layout = {}
        if parents:
            layout = {
                "positions": tree_positions(self.lm.length, len(chain), parents),
                "ancestors": ancestor_mask(len(chain), parents, self.lm.device),
            }
        logits = self.lm.forward(chain + tokens, last=last, **layout).logits
        self.lm.rollback(self.lm.length - len(tokens) - 1)
        return fit_vocab(logits, self.vocab_size)


@METHODS.register
class SpS(DraftVerifyMethod):
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a small causal LM drafts
    gamma tokens, the target verifies them in one forward; with `tree=dynamic` it drafts an
    EAGLE-2 tree of depth gamma instead, measured against its own chain (`vs.chain`)."""

    name = "sps"
    Config = SpSConfig
    drafter_kind = "causal"

    def build(self, target: CausalLM, drafter: CausalLM, task: object) -> SpeculativeDecoder:
        cfg, warp = self.cfg, self.warp
        return SpeculativeDecoder(
            target,
            self.proposer(target, drafter),
            make_rule(cfg.rule, cfg.leniency, warp),
            warp,
            self.schedule(),
            tree_rule=None if cfg.tree is None else make_tree_rule(cfg.rule, warp),
        )

    def proposer(self, target: CausalLM, drafter: CausalLM) -> Drafter:
        """The chain's or the tree's drafter (`method.tree`)."""
        if self.cfg.tree is None:
            return ARDrafter(drafter, self.warp, target.eos_token_ids, target.vocab_size)
        cfg = self.cfg
        return TreeDrafter(drafter, target.eos_token_ids, target.vocab_size, cfg.top_k, cfg.budget)

    def schedule(self) -> GammaSchedule:
        return GammaSchedule(self.cfg.gamma, self.cfg.schedule)

    def references(self, target: CausalLM, drafter: CausalLM) -> dict[str, Decoder | None]:
        """A tree is measured against the chain of its own depth on the same samples."""
        if self.cfg.tree is None:
            return {}
        chain = type(self)(replace(self.cfg, tree=None), self.warp)
        return {"chain": chain.build(target, drafter, None)}

    def tree_nodes(self) -> int:
        return 0 if self.cfg.tree is None else self.cfg.budget

    def exact(self) -> bool:
        return is_lossless(self.cfg.rule, self.warp)

    def label(self) -> str:
        cfg = self.cfg
        schedule = [] if cfg.schedule == "constant" else [cfg.schedule]
        tree = [] if cfg.tree is None else ["tree", f"k{cfg.top_k}", f"N{cfg.budget}"]
        rule = rule_label(cfg.rule, cfg.leniency, self.warp)
        return " ".join(["sps", f"γ{cfg.gamma}", *schedule, *tree, *rule])
