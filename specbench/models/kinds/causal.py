"""The causal kind: any `AutoModelForCausalLM` checkpoint, on the verifier contract
(`CausalLM`), compiled onto a static cache (`CompiledCausalLM`)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModelForCausalLM

from specbench.config import ModelConfig
from specbench.models import compiled, loading
from specbench.models.causal import CausalLM
from specbench.models.kinds import ModelKind, refuse_tokenizer, tokenizer_mismatch
from specbench.registry import MODEL_KINDS


def load_causal_lm(cfg: ModelConfig, key: str, device: torch.device, run_dtype: str) -> CausalLM:
    """Any `AutoModelForCausalLM` checkpoint with its tokenizer, on the verifier contract."""
    model = loading.load_weights(
        AutoModelForCausalLM, cfg, key, device, run_dtype, trust_remote_code=cfg.trust_remote_code
    )
    return CausalLM(model, loading.load_tokenizer(cfg, key), cfg.name)


@MODEL_KINDS.register
class Causal(ModelKind):
    name = "causal"

    def check_drafter(self, cfg: ModelConfig, tokenizer: Any) -> int | None:
        """The target's tokenizer exactly; its context bounds the whole sequence."""
        refuse_tokenizer(cfg, tokenizer_mismatch(tokenizer, loading.load_tokenizer(cfg, "drafter")))
        return loading.context_length(cfg, "drafter")

    def load(self, cfg: ModelConfig, key: str, device: torch.device, dtype: str) -> CausalLM:
        return load_causal_lm(cfg, key, device, dtype)

    def compile(
        self, lm: CausalLM, max_length: int, hidden_layers: tuple[int, ...], trees: bool
    ) -> compiled.CompiledCausalLM:
        lm = compiled.CompiledCausalLM.from_eager(lm, max_length)
        lm.warm_up(hidden_layers, trees=trees)
        return lm
