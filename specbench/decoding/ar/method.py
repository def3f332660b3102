"""`method=ar`: the target's own plain decoding as a method (specbench/decoding/plain.py)."""

from __future__ import annotations

from specbench.decoding.ar.config import ARConfig
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.method import Method
from specbench.models.causal import CausalLM
from specbench.registry import METHODS


@METHODS.register
class AR(Method):
    """The target's own decoding as a method: a cell whose speedup is 1 by construction, so a
    table shows the baseline's speed and quality beside the methods'."""

    name = "ar"
    Config = ARConfig

    def build(self, target: CausalLM, drafter: None, task: object) -> AutoregressiveDecoder:
        return AutoregressiveDecoder(target, self.warp)
