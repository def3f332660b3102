"""EAGLE-3's knobs: the dataclass Hydra validates `conf/method/eagle3.yaml` against.
Nothing here imports torch, so composing a config stays fast (`specbench.decoding.knobs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.knobs import bounds, check_draft_length, check_exact_rule, check_rule
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class Eagle3Config:
    """Defaults are upstream's `EaModel.from_pretrained` (total_token=60, depth=7, top_k=10):
    its depth 7 grows 8 levels, and its 60 tokens count the root."""

    marker: ClassVar[str] = "h"  # its marker in Pareto plots
    name: str = "eagle3"
    # dynamic: EAGLE-2/3's dynamic draft tree of depth gamma; null: a chain of gamma tokens
    tree: str | None = "dynamic"
    gamma: int = 8  # tokens per chain, or levels of the tree
    top_k: int = 10  # tree: children per expanded node, and nodes expanded per level
    budget: int = 59  # tree: nodes verified per round, the root (newest token) not counted
    rule: str = "auto"  # greedy at temperature 0, rejection above; a chain also takes a lenient one
    leniency: float = 1.0  # the lenient rules' knob (chain only)

    def check(self, temperature: float, max_new: int) -> None:
        check_draft_length(self.gamma, max_new)
        bounds(
            ("method.tree", self.tree, self.tree in (None, "dynamic"), "allowed: null, dynamic"),
            ("method.top_k", self.top_k, self.top_k >= 1, "must be an integer >= 1"),
            ("method.budget", self.budget, self.budget >= 1, "must be an integer >= 1"),
        )
        if self.tree is None:
            check_rule(self.rule, self.leniency, temperature)
        else:
            check_exact_rule(self.rule, temperature)
