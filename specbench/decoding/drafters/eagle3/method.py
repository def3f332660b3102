"""EAGLE-3 (Li, Wei, Zhang, Zhang 2025, arXiv 2503.01840): a one-layer drafter that reads the
target's low, middle and high layers, drafting a chain or EAGLE-2's dynamic tree (the model:
`specbench/models/eagle3.py`). Drafting follows upstream's `Model.topK_genrate`
(SafeAILab/EAGLE, `eagle/model/cnets.py`):

- the drafter's cache holds one position per committed target position p but the newest
  (the target's fused states at p with the token at p + 1); each round first feeds the
  positions the last verification committed, and the last of them predicts the token after
  the newest;
- a chain feeds each draft back with the drafter's own output state that predicted it, one
  position on; a tree grows one level per drafter forward as EAGLE-2 does (the `top_k` nodes
  of the newest level with the highest cumulative log-probability each get their `top_k` most
  probable children; after `gamma` levels the `budget` best nodes are verified), each fed
  node reading the context and its own ancestors in the drafter's cache;
- drafts live in the draft vocabulary and are mapped to target ids by `d2t`; the drafts'
  keys and values leave the cache after every round.

Verification is the shared loop's: greedy at temperature 0 (the target's greedy output, token
for token), exact speculative sampling above it (a chain's proposal is the drafter's warped law
over the target's vocabulary, zero off the draft vocabulary), the tree rules for a tree.
"""

from __future__ import annotations

import time

import torch

from specbench.decoding import cost
from specbench.decoding.drafters.eagle3.config import Eagle3Config
from specbench.decoding.drafters.sps.method import SpS
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import Drafter, GammaSchedule, SpeculativeDecoder
from specbench.decoding.trees import Candidates, node_depths
from specbench.decoding.verify import rule_label
from specbench.decoding.warp import Warp
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.eagle3 import Eagle3Drafter, target_reads
from specbench.registry import METHODS
from specbench.runs.summary import Summary

KV = tuple[torch.Tensor, torch.Tensor]


def extend(cache: KV | None, new: KV) -> KV:
    """A cache of keys and values with `new`'s positions appended."""
    if cache is None:
        return new
    return (torch.cat([cache[0], new[0]], -2), torch.cat([cache[1], new[1]], -2))


def bind(model: Eagle3Drafter, target: CausalLM) -> tuple[int, ...]:
    """Give the drafter the target's embeddings where its checkpoint has none; the target
    layers whose outputs it reads."""
    if model.embed_tokens is None:
        model.embedding = target.model.get_input_embeddings().weight
    return target_reads(model.config, target.model)


class Eagle3Proposer(Drafter):
    """Drafts a chain (`top_k` None) or a dynamic tree from an EAGLE-3 drafter; verification
    captures the target's `hidden_layers` for it."""

    def __init__(
        self,
        model: Eagle3Drafter,
        hidden_layers: tuple[int, ...],
        warp: Warp,
        stop_ids: set[int],
        top_k: int | None = None,
        budget: int = 0,
    ):
        self.model, self.hidden_layers, self.warp, self.stop_ids = (
            model,
            hidden_layers,
            warp,
            stop_ids,
        )
        self.top_k, self.budget = top_k, budget
        self.device = model.fc.weight.device
        self.calls = 0
        self.reset()

    def reset(self) -> None:
        self.cache: KV | None = None
        self.cached = 0  # drafter positions in the cache: committed target positions
        self.unseen: torch.Tensor | None = None  # their states after those, not yet fed

    def observe(self, hidden: torch.Tensor) -> None:
        self.unseen = hidden if self.unseen is None else torch.cat([self.unseen, hidden])

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        if n == 0 or self.unseen is None:  # the first round is the target's prefill alone
            return Draft([], None, 0, 0.0)
        with torch.inference_mode():
            synchronize(self.device)
            t0 = time.perf_counter()
            state = self.read_context(context)
            calls = self.calls
            if self.top_k is None:
                draft = self.chain(state, len(context) - 1, n, generator)
            else:
                draft = self.tree(state, len(context) - 1, n)
            draft.nfe = 1 + self.calls - calls
            synchronize(self.device)
            draft.seconds = time.perf_counter() - t0
            return draft

    def forward(
        self, ids: list[int], hidden: torch.Tensor, positions: list[int], visible: torch.Tensor
    ) -> tuple[torch.Tensor, KV]:
        """One drafter forward of `ids` with states `hidden` [n, h] at `positions`, reading the
        cache and, per row of `visible` [n, cached + n], what it marks: output states [n, h]
        and the new positions' keys and values (the caller decides whether they stay)."""
        states, kv = self.model(
            torch.tensor([ids], device=self.device),
            hidden[None],
            torch.tensor([positions], device=self.device),
            visible[None],
            self.cache,
        )
        self.calls += 1
        return states[0], kv

    def read_context(self, context: list[int]) -> torch.Tensor:
        """Feed the committed positions not yet in the cache (their fused target states, each
        with the token after it); the output state of the last, which predicts the token after
        the newest, [1, h]."""
        newest = len(context) - 1
        assert self.cached + len(self.unseen) == newest, "observe() missed committed positions"
        new = len(self.unseen)
        visible = torch.ones(new, newest, dtype=torch.bool, device=self.device)
        visible[:, self.cached :] = torch.ones(new, new, dtype=torch.bool).tril()
        hidden = self.model.fuse(self.unseen.to(self.model.fc.weight.dtype))
        states, kv = self.forward(
            context[self.cached + 1 :], hidden, list(range(self.cached, newest)), visible
        )
        self.cache, self.cached, self.unseen = extend(self.cache, kv), newest, None
        return states[-1:]

    def chain(self, state: torch.Tensor, newest: int, n: int, generator: torch.Generator) -> Draft:
        """Up to `n` tokens, each fed back with the state that predicted it (stopping at a stop
        token); the cache is the context's again afterwards."""
        context_cache, tokens, q_rows = self.cache, [], []
        for i in range(n):
            logits = self.model.target_logits(state)[0].float()
            if self.warp.greedy:
                token = int(logits.argmax())
            else:
                q = self.warp.probs(logits)
                token = int(torch.multinomial(q, 1, generator=generator))
                q_rows.append(q)
            tokens.append(token)
            if token in self.stop_ids or i == n - 1:
                break
            visible = torch.ones(1, self.cached + i + 1, dtype=torch.bool, device=self.device)
            state, kv = self.forward([token], state, [newest + i], visible)
            self.cache = extend(self.cache, kv)
        self.cache = context_cache
        return Draft(tokens, torch.stack(q_rows) if q_rows else None, 0, 0.0)

    def tree(self, state: torch.Tensor, newest: int, n: int) -> Draft:
        """EAGLE-2's dynamic tree of `n` levels: every expanded node is fed once, with its
        parent's output state, at its depth's position, reading its ancestors fed before it."""
        tree, fed = Candidates(), []  # fed: expanded nodes, in cache order after the context
        states = {-1: state[0]}  # node -> its output state (-1: the context's last)
        frontier = tree.grow([-1], self.model.target_logits(state).float(), self.top_k)
        context_cache = self.cache
        for _ in range(n - 1):
            unstopped = [node for node in frontier if tree.tokens[node] not in self.stop_ids]
            expand = tree.best(unstopped, self.top_k)
            if not expand:
                break
            depths = node_depths(tree.parents)
            hidden = torch.stack([states[tree.parents[node]] for node in expand])
            out, kv = self.forward(
                [tree.tokens[node] for node in expand],
                hidden,
                [newest + depths[node] - 1 for node in expand],
                self.tree_visible(tree, fed, expand),
            )
            self.cache = extend(self.cache, kv)
            fed += expand
            states.update(zip(expand, out))
            frontier = tree.grow(expand, self.model.target_logits(out).float(), self.top_k)
        self.cache = context_cache
        tokens, parents = tree.subtree(tree.best(range(len(tree.tokens)), self.budget))
        return Draft(tokens, None, 0, 0.0, parents=parents)

    def tree_visible(self, tree: Candidates, fed: list[int], expand: list[int]) -> torch.Tensor:
        """[len(expand), cached + len(fed) + len(expand)]: each node reads the context, its
        fed ancestors and itself."""
        visible = torch.zeros(len(expand), self.cached + len(fed) + len(expand), dtype=torch.bool)
        visible[:, : self.cached] = True
        slot = {node: self.cached + i for i, node in enumerate(fed + expand)}
        for row, node in enumerate(expand):
            for member in tree.with_ancestors([node]):
                visible[row, slot[member]] = True
        return visible.to(self.device)


@METHODS.register
class Eagle3(SpS):
    """EAGLE-3: a one-layer drafter over the target's fused low, middle and high layers drafts
    a dynamic tree (or a chain) that the target verifies in one forward. SpS's in all but the
    drafter: the tree against its own chain, the verification rules, losslessness."""

    name = "eagle3"
    Config = Eagle3Config
    drafter_kind = "eagle3"

    def proposer(self, target: CausalLM, drafter: Eagle3Drafter) -> Eagle3Proposer:
        tree = self.cfg.tree is not None
        return Eagle3Proposer(
            drafter,
            bind(drafter, target),
            self.warp,
            target.eos_token_ids,
            top_k=self.cfg.top_k if tree else None,
            budget=self.cfg.budget,
        )

    def schedule(self) -> GammaSchedule:
        return GammaSchedule(self.cfg.gamma, "constant")

    def label(self) -> str:
        cfg = self.cfg
        tree = [] if cfg.tree is None else ["tree", f"k{cfg.top_k}", f"N{cfg.budget}"]
        rule = [] if cfg.tree is not None else rule_label(cfg.rule, cfg.leniency, self.warp)
        return " ".join(["eagle3", f"γ{cfg.gamma}", *tree, *rule])

    def cost_model(
        self, decoder: SpeculativeDecoder, prompt_ids: list[int], summary: Summary
    ) -> dict:
        """Leviathan et al.'s model with the drafter's forwards per round; each timed draft
        first sees states for the positions its context added (their values do not change the
        cost)."""
        proposer = decoder.drafter
        width = len(proposer.hidden_layers) * proposer.model.config.target_hidden_size

        def show_states(context: list[int]) -> None:
            seen = proposer.cached + (0 if proposer.unseen is None else len(proposer.unseen))
            if len(context) - 1 <= seen:  # the timed contexts started again: so does the drafter
                proposer.reset()
                seen = 0
            states = torch.zeros(len(context) - 1 - seen, width, device=proposer.device)
            proposer.observe(states)

        proposer.reset()
        return cost.speculative(decoder, prompt_ids, summary, before_draft=show_states)
