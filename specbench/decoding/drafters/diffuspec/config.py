"""DiffuSpec's knobs: causal-consistency path search (CPS) with its n-gram mix, and the
adaptive draft length (ADL)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from specbench.decoding.knobs import bounds, is_greedy
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class DiffuSpecConfig:
    marker: ClassVar[str] = "v"  # its marker in Pareto plots
    name: str = "diffuspec"
    cps: bool = True
    adl: bool = True
    k: int = 20  # the fixed draft length when adl is off
    k_min: int = 20
    k_max: int = 30
    delta: int = 10
    rho: float = 0.5
    m_max: int = 15
    tau: float = 0.8
    beam: int = 3
    lam: float = 0.5
    refine_steps: int = 1
    ngram_order: int = 3
    # "task": the measured task's training text (`Task.train_texts`); or a text/JSONL file
    ngram_corpus: str = "task"

    def uses_ngram(self) -> bool:
        """CPS mixes the n-gram model in unless its weight is the drafter's alone."""
        return self.cps and self.lam < 1

    def check(self, temperature: float, max_new: int) -> None:
        bounds(
            (
                "run.temperature",
                temperature,
                is_greedy(temperature),
                "diffuspec verifies greedily here: use 0",
            ),
            ("method.k_min", self.k_min, 1 <= self.k_min <= self.k_max, "must be in [1, k_max]"),
            ("method.k", self.k, self.k >= 1, "must be >= 1"),
            ("method.rho", self.rho, 0 < self.rho <= 1, "must be in (0, 1]"),
            ("method.tau", self.tau, 0 < self.tau <= 1, "must be in (0, 1]"),
            ("method.lam", self.lam, 0 <= self.lam <= 1, "must be in [0, 1]"),
            ("method.m_max", self.m_max, self.m_max >= 1, "must be >= 1"),
            ("method.beam", self.beam, self.beam >= 1, "must be >= 1"),
            ("method.refine_steps", self.refine_steps, self.refine_steps >= 1, "must be >= 1"),
            ("method.ngram_order", self.ngram_order, self.ngram_order >= 1, "must be >= 1"),
            (
                "method.ngram_corpus",
                self.ngram_corpus,
                not self.uses_ngram()
                or self.ngram_corpus == "task"
                or Path(self.ngram_corpus).is_file(),
                "allowed: task, or a text/JSONL file",
            ),
        )
