"""Spiffy's draft graph (Agrawal et al., arXiv 2509.18085): which future states of a block to
speculate, named so they can be filled from the model's current distribution.

A node is a future state reached `depth` denoising steps after the next real one, written as the
set of (position rank, vocabulary rank) pairs it adds: position rank i is the i-th most confident
masked position (by top-1 probability), vocabulary rank j the j-th most likely token there, both
under the distribution of the latest real state. A is a parent of B when B is one step deeper and
A's pairs are a subset of B's; several orders reach one set, so a node may have several parents
(a DAG). Graphs are saved as versioned JSON.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

Pair = tuple[int, int]
VERSION = 1


VOCAB_RANKS = 32  # a node naming a token ranked lower than this at its position is never kept


def real_log_probs(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Log-probabilities over real tokens: a draft never proposes the mask token."""
    mask = torch.tensor([mask_id], device=logits.device)
    return logits.float().index_fill(-1, mask, float("-inf")).log_softmax(-1)


def rankings(log_probs: torch.Tensor, masked: torch.Tensor, conf: torch.Tensor) -> tuple:
    """The masked positions by descending confidence, and each position's `VOCAB_RANKS` most
    likely real tokens in order: the ranks a node's pairs name, in calibration and decoding."""
    positions = conf.masked_fill(~masked, float("-inf")).argsort(descending=True, stable=True)
    tokens = log_probs.topk(min(VOCAB_RANKS, log_probs.shape[-1]), dim=-1).indices
    return positions[: int(masked.sum())], tokens


@dataclass(frozen=True)
class Node:
    depth: int
    pairs: frozenset[Pair]

    def key(self) -> tuple:
        """A total order for deterministic ties: shallow first, then by sorted pairs."""
        return (self.depth, sorted(self.pairs))


@dataclass
class DraftGraph:
    nodes: list[Node]
    meta: dict = field(default_factory=dict)  # what it was calibrated on

    def parents(self, k: int) -> list[int]:
        node = self.nodes[k]
        return [
            i
            for i, other in enumerate(self.nodes)
            if other.depth == node.depth - 1 and other.pairs < node.pairs
        ]

    def children(self, k: int) -> list[int]:
        return [i for i in range(len(self.nodes)) if k in self.parents(i)]

    @property
    def roots(self) -> list[int]:
        return [i for i, node in enumerate(self.nodes) if node.depth == 1]

    def save(self, path: Path) -> None:
        nodes = [{"depth": n.depth, "pairs": sorted(map(list, n.pairs))} for n in self.nodes]
        payload = {"format": "specbench-draft-graph", "version": VERSION, "meta": self.meta}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**payload, "nodes": nodes}, indent=1))

    @classmethod
    def load(cls, path: Path) -> DraftGraph:
        data = json.loads(Path(path).read_text())
        if data.get("format") != "specbench-draft-graph" or data.get("version") != VERSION:
            raise ValueError(
                f"{path}: not a version-{VERSION} specbench draft graph "
                f"(format {data.get('format')!r}, version {data.get('version')!r})"
            )
        nodes = [Node(n["depth"], frozenset(map(tuple, n["pairs"]))) for n in data["nodes"]]
        return cls(nodes, data["meta"])


def select(counts: Counter[Node], size: int) -> list[Node]:
    """A connected subgraph of `size` nodes by degree-1 accumulation: a node is worth its own
    count plus its parents' counts, and is added (best first) once it is a root or one of its
    parents is in; ties go to the shallower, then the lexicographically smaller, node."""
    by_depth: dict[int, list[Node]] = {}
    for node in sorted(counts, key=Node.key):
        by_depth.setdefault(node.depth, []).append(node)
    worth: dict[Node, int] = {}

    def value(node: Node) -> int:
        if node not in worth:
            parents = [p for p in by_depth.get(node.depth - 1, []) if p.pairs < node.pairs]
            worth[node] = counts[node] + sum(counts[p] for p in parents)
        return worth[node]

    chosen: list[Node] = []
    reachable = set(by_depth.get(1, []))
    while reachable and len(chosen) < size:
        best = min(reachable, key=lambda n: (-value(n), n.key()))
        chosen.append(best)
        reachable.remove(best)
        children = [c for c in by_depth.get(best.depth + 1, []) if best.pairs < c.pairs]
        reachable.update(c for c in children if c not in chosen)
    return chosen
