"""specbench's own engine takes no backend knobs: how its models run (eager or compiled) is
`run.engine`, which every backend that loads a specbench model obeys (the vLLM backend's target
for tie checks too)."""

from __future__ import annotations

from dataclasses import dataclass

from specbench.backends import BackendConfig
from specbench.registry import BACKEND_CONFIGS


@dataclass
class SpecbenchConfig(BackendConfig):
    name: str = "specbench"


BACKEND_CONFIGS.add("specbench", SpecbenchConfig)
