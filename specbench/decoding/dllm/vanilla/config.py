"""A diffusion LLM's own decoding's (`method=dllm`) knobs: the dataclass Hydra validates `conf/method/dllm.yaml` against.
Nothing here imports torch, so composing a config stays fast (`specbench.decoding.knobs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.decoding.knobs import SpatialConfig
from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class DLLMConfig(SpatialConfig):
    marker: ClassVar[str] = "*"  # its marker in Pareto plots
    name: str = "dllm"
