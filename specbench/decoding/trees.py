"""Tree helpers of the draft-verify loop: where a draft tree's nodes sit (their position ids and
depths) when a target verifies it in one forward under `models.causal.ancestor_mask`, and the
candidates an EAGLE-2 dynamic tree grows (SpS's tree, EAGLE-3's)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def tree_positions(length: int, n_chain: int, parents: list[int]) -> list[int]:
    """Position ids of a chain of `n_chain` tokens after `length` cached ones, then of a tree's
    nodes hanging off the chain's last token: that token's position plus the node's depth."""
    last = length + n_chain - 1
    return list(range(length, length + n_chain)) + [last + d for d in node_depths(parents)]


def node_depths(parents: list[int]) -> list[int]:
    """Each tree node's depth (the root's children: 1), parents listed before children."""
    depths: list[int] = []
    for parent in parents:
        depths.append(1 + (depths[parent] if parent >= 0 else 0))
    return depths


@dataclass
class Candidates:
    """Every node a round's tree grew: node k's token, parent node (-1: the root, the newest
    committed token) and cumulative log-probability, nodes numbered as grown, depth by depth,
    so parents come before their children."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def grow(self, nodes: list[int], logits: torch.Tensor, k: int) -> list[int]:
        """Give node `nodes[i]` the `k` most probable children of `logits[i]`; the new nodes."""
        log_probs, ids = logits.log_softmax(-1).topk(min(k, logits.shape[-1]), -1)
        grown = []
        for node, row_scores, row_ids in zip(nodes, log_probs.tolist(), ids.tolist()):
            base = self.scores[node] if node >= 0 else 0.0
            for score, token in zip(row_scores, row_ids):
                grown.append(len(self.tokens))
                self.tokens.append(token)
                self.parents.append(node)
                self.scores.append(base + score)
        return grown

    def best(self, nodes: list[int] | range, k: int) -> list[int]:
        """The `k` highest-scoring of `nodes`, ties to the earlier node, in node order."""
        return sorted(sorted(nodes, key=lambda i: (-self.scores[i], i))[:k])

    def with_ancestors(self, nodes: list[int]) -> list[int]:
        """`nodes` and all their ancestors, in node order."""
        closed = set()
        for node in nodes:
            while node >= 0 and node not in closed:
                closed.add(node)
                node = self.parents[node]
        return sorted(closed)

    def subtree(self, nodes: list[int]) -> tuple[list[int], list[int]]:
        """(tokens, parents) of `nodes` (in node order, closed under ancestors), parents
        re-indexed into the list."""
        index = {node: i for i, node in enumerate(nodes)}
        assert all(self.parents[n] in index for n in nodes if self.parents[n] >= 0), nodes
        tokens = [self.tokens[n] for n in nodes]
        return tokens, [index[self.parents[n]] if self.parents[n] >= 0 else -1 for n in nodes]
