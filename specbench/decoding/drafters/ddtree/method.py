"""DDTree (Ringel et al. 2026, arXiv 2604.12989): a draft *tree* from one DFlash drafter
forward, verified in one target forward under an ancestor mask. No retraining: any DFlash
drafter's per-position distributions are the input.

The tree is the `budget` most probable prefixes of the block under the drafter's factorised
law, prob(x_1..x_d) = prod_i q_i(x_i): found best-first from a heap over (depth, rank among the
depth's top tokens), each pop adding the next most probable prefix and pushing its next
sibling and its first child. Scores are log-softmax sums of the drafter's raw logits (no
temperature, as upstream builds it), and equal scores fall by the rank path, as upstream's heap
tuples order them, so the trees are the authors' `build_ddtree_tree`'s node for node
(tests/goldens/ddtree, from liranringel/ddtree).

Verification is the decoding core's tree rule: greedy follows the target's argmax down the
tree; above temperature 0 the target samples each node's next token and the walk follows it
while it is a child, which is exact (see `verify.sampled_tree`).
"""

from __future__ import annotations

import heapq

import torch

from specbench.decoding.drafters.ddtree.config import DDTreeConfig
from specbench.decoding.drafters.dflash.config import DFlashConfig
from specbench.decoding.drafters.dflash.method import DFlash, DFlashDrafter
from specbench.decoding.generation import Decoder, Draft
from specbench.decoding.speculative import GammaSchedule, SpeculativeDecoder
from specbench.decoding.verify import make_rule, make_tree_rule
from specbench.decoding.warp import Warp
from specbench.models.causal import CausalLM
from specbench.registry import METHODS


def best_first_tree(logits: torch.Tensor, budget: int) -> tuple[list[int], list[int]]:
    """The `budget` most probable prefixes of a block whose depth-d token is drawn from
    softmax(logits[d - 1]), as a tree: (tokens, parents), node k's parent -1 for the root,
    nodes in decreasing probability (parents first). Row d - 1 of `logits` is depth d's."""
    depth_limit = logits.shape[0]
    if budget <= 0 or depth_limit == 0:
        return [], []
    k = min(budget, logits.shape[-1])
    logits = logits.float()
    top_logits, top_ids = torch.topk(logits, k, dim=-1)
    log_probs = (top_logits - torch.logsumexp(logits, -1, keepdim=True)).cpu().numpy()
    top_ids = top_ids.cpu().numpy()
    first = float(log_probs[0, 0])
    # (-score, rank path, parent node, depth, rank, score): equal scores fall by rank path
    heap = [(-first, (0,), -1, 1, 0, first)]
    tokens: list[int] = []
    parents: list[int] = []
    while heap and len(tokens) < budget:
        _, ranks, parent, depth, rank, score = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(int(top_ids[depth - 1, rank]))
        parents.append(parent)
        if rank + 1 < k:
            sibling = (
                score - float(log_probs[depth - 1, rank]) + float(log_probs[depth - 1, rank + 1])
            )
            heapq.heappush(
                heap, (-sibling, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, sibling)
            )
        if depth < depth_limit:
            child = score + float(log_probs[depth, 0])
            heapq.heappush(heap, (-child, ranks + (0,), node, depth + 1, 0, child))
    return tokens, parents


class DDTreeDrafter(DFlashDrafter):
    """A DFlash drafter whose round proposes the best-first tree of its block's marginals."""

    def __init__(
        self, model: torch.nn.Module, target: CausalLM, block_size: int, warp: Warp, budget: int
    ):
        self.budget = budget
        super().__init__(model, target, block_size, warp)

    def choose(
        self, state: torch.Tensor, logits: torch.Tensor, anchor: int, generator: torch.Generator
    ) -> Draft:
        tokens, parents = best_first_tree(logits, self.budget)
        return Draft(tokens, None, 1, 0.0, parents=parents)


@METHODS.register
class DDTree(DFlash):
    """DDTree: DFlash's drafter, its block's most probable prefixes verified as one tree,
    measured against DFlash's chain from the same drafter and block on every sample
    (`vs.dflash`)."""

    name = "ddtree"
    Config = DDTreeConfig

    def build(self, target: CausalLM, drafter: torch.nn.Module, task: object) -> SpeculativeDecoder:
        cfg, warp = self.cfg, self.warp
        block_size = cfg.block_size or drafter.block_size
        return SpeculativeDecoder(
            target,
            DDTreeDrafter(drafter, target, block_size, warp, cfg.budget),
            make_rule(cfg.rule, 1.0, warp),
            warp,
            GammaSchedule(block_size - 1, "constant"),
            tree_rule=make_tree_rule(cfg.rule, warp),
        )

    def references(self, target: CausalLM, drafter: torch.nn.Module) -> dict[str, Decoder | None]:
        chain = DFlashConfig(block_size=self.cfg.block_size, rule=self.cfg.rule)
        return {"dflash": DFlash(chain, self.warp).build(target, drafter, None)}

    def tree_nodes(self) -> int:
        return self.cfg.budget

    def label(self) -> str:
        block = [] if self.cfg.block_size is None else [f"b{self.cfg.block_size}"]
        return " ".join(["ddtree", *block, f"N{self.cfg.budget}"])
