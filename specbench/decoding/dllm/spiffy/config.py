"""Spiffy's knobs: the draft graph's size and pruning, and the data it is calibrated on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from specbench.decoding.dllm.vanilla.config import DLLMConfig
from specbench.decoding.knobs import bounds
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class SpiffyConfig(DLLMConfig):
    marker: ClassVar[str] = "P"  # its marker in Pareto plots
    name: str = "spiffy"
    nodes: int = 5  # D, the calibrated graph's size
    keep: int | None = None  # D*, nodes kept per call after online pruning; null = ceil(D / 2)
    graph: str | None = None  # a saved graph (JSON); null = calibrate (cached)
    # "task": the measured task's held-out samples (`Task.heldout`), in its own prompt format;
    # or a JSONL file of {"prompt"} rows. Either is refused if it overlaps the measured samples.
    calibration: str = "task"
    calibration_samples: int = 50
    calibration_new_tokens: int = 128

    def check(self, temperature: float, max_new: int) -> None:
        super().check(temperature, max_new)
        self.check_replayable()
        bounds(
            ("method.nodes", self.nodes, self.nodes >= 1, "must be >= 1"),
            (
                "method.keep",
                self.keep,
                self.keep is None or 1 <= self.keep <= self.nodes,
                f"must be null or in [1, nodes={self.nodes}]",
            ),
            (
                "method.graph",
                self.graph,
                self.graph is None or Path(self.graph).exists(),
                "no such file; null calibrates a graph",
            ),
            (
                "method.calibration",
                self.calibration,
                self.calibration == "task" or Path(self.calibration).exists(),
                "allowed: task, or a JSONL file of prompts",
            ),
            *(
                (f"method.{key}", getattr(self, key), getattr(self, key) >= 1, "must be >= 1")
                for key in ("calibration_samples", "calibration_new_tokens")
            ),
        )
