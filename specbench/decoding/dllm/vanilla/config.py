"""`method=dllm`'s knobs: the spatial knobs every diffusion-LLM decoder shares
(`knobs.SpatialConfig`), under the method's name and marker."""

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
