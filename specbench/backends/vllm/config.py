"""vLLM's knobs (`conf/backend/vllm.yaml`): which python runs it and how long a server may take
to start. Torch-free, so composing a config stays instant."""

from __future__ import annotations

from dataclasses import dataclass

from specbench.backends import BackendConfig
from specbench.errors import ConfigError
from specbench.registry import BACKEND_CONFIGS


@dataclass
class VLLMConfig(BackendConfig):
    name: str = "vllm"
    # a python with vllm installed; null: the environment `make vllm` builds (.venv-vllm)
    python: str | None = None
    startup_s: int = 900  # the longest a server may take to answer /health

    def check(self) -> None:
        if self.startup_s < 1:
            raise ConfigError("backend.startup_s", self.startup_s, "must be >= 1")


BACKEND_CONFIGS.add("vllm", VLLMConfig)
