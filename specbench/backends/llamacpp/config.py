"""llama.cpp's knobs (`conf/backend/llamacpp.yaml`): which `llama-server` runs, the GGUF type the
checkpoints are exported in, its threads and how long a server may take to start. Torch-free,
so composing a config stays instant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbench.backends import BackendConfig
from specbench.errors import ConfigError
from specbench.registry import BACKEND_CONFIGS

# the GGUF types a checkpoint is exported in (specbench/models/gguf_export.py's QUANTS)
QUANTS = ("f32", "bf16", "q8_0", "q4_0")


@dataclass
class LlamaCppConfig(BackendConfig):
    name: str = "llamacpp"
    # a llama-server binary; null: the one `make llamacpp` builds (.llamacpp/bin/llama-server)
    server: str | None = None
    # the type of every weight matrix, target and drafter: f32 decodes as specbench's float32
    # engine does (the agreement cells); bf16, q8_0, q4_0 are what llama.cpp's users run
    quant: str = "f32"
    # compute threads per server (llama-server -t/-tb); null: run.threads, else llama.cpp's
    # own default (the machine's cores)
    threads: int | None = None
    startup_s: int = 120  # the longest a server may take to answer /health
    SHOWN: ClassVar[tuple[str, ...]] = ("quant",)

    def check(self) -> None:
        if self.quant not in QUANTS:
            raise ConfigError("backend.quant", self.quant, f"allowed: {', '.join(QUANTS)}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("backend.threads", self.threads, "must be an integer >= 1 or null")
        if self.startup_s < 1:
            raise ConfigError("backend.startup_s", self.startup_s, "must be >= 1")


BACKEND_CONFIGS.add("llamacpp", LlamaCppConfig)
