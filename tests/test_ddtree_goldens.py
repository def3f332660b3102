"""DDTree's tree builder and tree walk against the authors' code, and the builder against brute
force.

tests/goldens/ddtree/goldens.json is written by tools/goldens/ddtree.py, which runs
liranringel/ddtree's `build_ddtree_tree` and `follow_verified_tree` (ddtree.py at c96427a) on
seeded logits: each tree case stores its logits recipe (seed, L, V, scale, round), its budget
and upstream's node tokens, depths and parents; each walk case a target-token row over one of
those trees and upstream's accepted indices and next token. Here the logits are regenerated
from the recipe and

  * `best_first_tree` gives upstream's tree node for node: the same tokens in the same order,
    parents[k] == upstream parents[k + 1] - 1 (upstream's tree index 0 is the root, node k its
    index k + 1), and the depths read off our parents equal upstream's depths. The cases span
    L 1 to 15, V 2 to 32000, budgets 0 to 256, heaps that empty before the budget, peaked
    logits that make deep trees, and logits on an integer grid (or all equal) whose exact ties
    are settled by the rank-path order;
  * `follow` walks upstream's trees as `follow_verified_tree` does (upstream's accepted indices
    are tree indices from the root's 0; ours is the node path without the root);
  * the budget-B tree is exactly the set of the B most probable prefixes, enumerated by brute
    force on tiny L and V (budgets whose B-th and (B + 1)-th prefixes tie are left out).

Ties among equal logits in one row are ordered by `torch.topk` on both sides, so the tie cases
assume the CPU topk of the torch the goldens were made with (recorded in the file).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from specbench.decoding.drafters.ddtree.method import best_first_tree
from specbench.decoding.verify import follow

GOLDENS = json.loads((Path(__file__).parent / "goldens" / "ddtree" / "goldens.json").read_text())
TREES = {tree["name"]: tree for tree in GOLDENS["trees"]}


def recipe_logits(case: dict) -> torch.Tensor:
    generator = torch.Generator().manual_seed(case["seed"])
    logits = torch.randn(case["L"], case["V"], generator=generator) * case["scale"]
    return torch.round(logits) if case["round"] else logits


def depths_of(parents: list[int]) -> list[int]:
    depths: list[int] = []
    for parent in parents:
        assert parent < len(depths), "a parent comes before its child"
        depths.append(1 if parent == -1 else depths[parent] + 1)
    return depths


def ours_from_upstream(tree: dict) -> tuple[list[int], list[int]]:
    """Upstream's tree in specbench's format: (tokens, parents with -1 for the root)."""
    assert tree["parents"][0] == -1
    return tree["node_token_ids"], [parent - 1 for parent in tree["parents"][1:]]


def test_goldens_are_upstreams() -> None:
    assert GOLDENS["upstream"] == {
        "repo": "liranringel/ddtree",
        "commit": "c96427a185677bf4133ed865dd1626a5041aef9b",
        "file": "ddtree.py",
    }
    trees = GOLDENS["trees"]
    assert any(len(tree["node_token_ids"]) < tree["budget"] for tree in trees)  # heap empties
    assert any(tree["round"] for tree in trees) and any(tree["scale"] == 0 for tree in trees)
    assert max(max(tree["node_depths"], default=0) for tree in trees) == 15
    assert max(len(walk["accepted_indices"]) for walk in GOLDENS["walks"]) > 10


@pytest.mark.parametrize("name", list(TREES))
def test_best_first_tree_is_upstreams(name: str) -> None:
    tree = TREES[name]
    tokens, parents = best_first_tree(recipe_logits(tree), tree["budget"])
    want_tokens, want_parents = ours_from_upstream(tree)
    assert tokens == want_tokens
    assert parents == want_parents
    assert depths_of(parents) == tree["node_depths"]


@pytest.mark.parametrize(
    "walk", GOLDENS["walks"], ids=[f"{w['tree']}-{w['seed']}" for w in GOLDENS["walks"]]
)
def test_follow_is_upstreams_walk(walk: dict) -> None:
    tokens, parents = ours_from_upstream(TREES[walk["tree"]])
    path, next_token = follow(walk["posterior"], tokens, parents)
    assert walk["accepted_indices"][0] == 0
    assert path == [index - 1 for index in walk["accepted_indices"][1:]]
    assert next_token == walk["next_token"]


@pytest.mark.parametrize(("depth", "vocab"), [(1, 5), (2, 4), (3, 3), (3, 6), (4, 2)])
def test_budget_tree_is_the_most_probable_prefixes(depth: int, vocab: int) -> None:
    checked = 0
    for seed in range(6):
        generator = torch.Generator().manual_seed(1000 + seed)
        logits = torch.randn(depth, vocab, generator=generator) * (1.0 + seed)
        log_probs = torch.log_softmax(logits, -1).double().tolist()
        score = {
            prefix: sum(log_probs[d][token] for d, token in enumerate(prefix))
            for length in range(1, depth + 1)
            for prefix in itertools.product(range(vocab), repeat=length)
        }
        ranked = sorted(score.values(), reverse=True)
        for budget in range(1, len(score) + 2):
            tokens, parents = best_first_tree(logits, budget)
            assert len(tokens) == min(budget, len(score))
            prefixes: list[tuple[int, ...]] = []
            for token, parent in zip(tokens, parents, strict=True):
                prefixes.append((prefixes[parent] if parent >= 0 else ()) + (token,))
            scores = [score[prefix] for prefix in prefixes]
            assert all(a >= b - 1e-9 for a, b in itertools.pairwise(scores))
            if budget < len(score) and ranked[budget - 1] - ranked[budget] < 1e-6:
                continue  # the B-th and (B + 1)-th prefixes tie: either is a top-B set
            cutoff = ranked[min(budget, len(score)) - 1]
            assert set(prefixes) == {p for p, s in score.items() if s >= cutoff}
            checked += 1
    assert checked > 0
