"""SpecDiff's knobs: draft length, denoising steps per draft, the proposal law rejection
sampling reads, the acceptance rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.knobs import bounds, check_draft_length, check_rule
from specbench.registry import METHOD_CONFIGS

Q_SOURCES = ("reveal_step", "final_step", "onehot")  # the proposal distributions


@METHOD_CONFIGS.register
@dataclass
class SpecDiffConfig:
    marker: ClassVar[str] = "^"  # its marker in Pareto plots
    name: str = "specdiff"
    gamma: int = 10  # draft length
    steps: int = 4  # T, denoising steps per draft
    q_source: str = "reveal_step"  # the proposal for rejection sampling: or final_step, onehot
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps
    # draw MDLM's whole-sequence uniforms (prefix rows too) so a seed reproduces upstream's
    # drafts token for token; off, a step draws uniforms for the block's rows only (same law)
    upstream_rng: bool = False

    def check(self, temperature: float, max_new: int) -> None:
        check_draft_length(self.gamma, max_new)
        bounds(
            (
                "method.steps",
                self.steps,
                self.steps >= 1,
                "must be an integer >= 1 (T, denoising steps)",
            ),
            (
                "method.q_source",
                self.q_source,
                self.q_source in Q_SOURCES,
                f"allowed: {', '.join(Q_SOURCES)}",
            ),
        )
        check_rule(self.rule, self.leniency, temperature)
