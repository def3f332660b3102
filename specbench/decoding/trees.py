"""Tree layout helpers of the draft-verify loop: where a draft tree's nodes sit (their position
ids and depths) when a target verifies it in one forward under `models.causal.ancestor_mask`."""

from __future__ import annotations


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
