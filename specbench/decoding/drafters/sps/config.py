"""SpS's knobs: draft length and its schedule, the acceptance rule, an EAGLE-2 tree's width
and budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.knobs import bounds, check_draft_length, check_exact_rule, check_rule
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class SpSConfig:
    marker: ClassVar[str] = "o"  # its marker in Pareto plots
    name: str = "sps"
    gamma: int = 4  # tokens drafted per round (the first round's, under `heuristic`)
    schedule: str = "constant"  # or heuristic: HF's (+2 after a fully accepted draft, -1 else)
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps
    # null: a chain of gamma tokens; dynamic: EAGLE-2's dynamic draft tree of depth gamma
    tree: str | None = None
    top_k: int = 4  # tree: children per expanded node, and nodes expanded per depth
    budget: int = 16  # tree: nodes verified per round, the root (newest token) not counted

    def check(self, temperature: float, max_new: int) -> None:
        check_draft_length(self.gamma, max_new)
        tree = self.tree is not None
        bounds(
            (
                "method.schedule",
                self.schedule,
                self.schedule in ("constant", "heuristic"),
                "allowed: constant, heuristic",
            ),
            ("method.tree", self.tree, self.tree in (None, "dynamic"), "allowed: null, dynamic"),
            ("method.top_k", self.top_k, self.top_k >= 1, "must be an integer >= 1"),
            ("method.budget", self.budget, self.budget >= 1, "must be an integer >= 1"),
            (
                "method.schedule",
                self.schedule,
                not tree or self.schedule == "constant",
                "a tree's depth is gamma every round; allowed with a tree: constant",
            ),
        )
        if tree:
            check_exact_rule(self.rule, temperature)
        else:
            check_rule(self.rule, self.leniency, temperature)
