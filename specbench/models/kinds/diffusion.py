"""The diffusion kind: a masked-diffusion LM (LLaDA, Dream, MDLM, the tiny world's) behind the
adapter its YAML names, loaded by specbench's native classes (no remote code)."""

from __future__ import annotations

from typing import Any

import torch

from specbench.config import Config, ModelConfig
from specbench.errors import ConfigError
from specbench.models import compiled, loading
from specbench.models.causal import eos_token_ids
from specbench.models.diffusion import ADAPTERS, MaskedDiffusionLM
from specbench.models.kinds import ModelKind, refuse_tokenizer, tokenizer_mismatch
from specbench.registry import MODEL_KINDS

# the model types each adapter drives: the hub checkpoints' own, loaded by the native classes;
# `specbench-*` are the tiny world's and the random-init stand-ins'
MODEL_TYPES = {
    "tiny": ("specbench-tiny-dlm",),
    "llada": ("llada",),
    "dream": ("Dream",),
    "mdlm": ("mdlm",),
}


def load_diffusion_lm(
    cfg: ModelConfig, key: str, device: torch.device, run_dtype: str
) -> MaskedDiffusionLM:
    """A masked-diffusion LM behind the adapter its config names (`adapter`, `mask_token_id`,
    `context_length` are facts about the checkpoint, kept in its YAML)."""
    if cfg.adapter not in ADAPTERS:
        raise ConfigError(f"{key}.adapter", cfg.adapter, f"allowed: {', '.join(ADAPTERS)}")
    wrapper, auto = ADAPTERS[cfg.adapter]
    model = loading.load_weights(
        auto, cfg, key, device, run_dtype, trust_remote_code=cfg.trust_remote_code
    )
    mask_id = cfg.mask_token_id
    if mask_id is None:
        mask_id = getattr(model.config, "mask_token_id", None)
    # a decoded model stops at its tokenizer's EOS; a drafter needs the tokenizer only when the
    # mask id lives there (Dream)
    tokenizer = loading.load_tokenizer(cfg, key) if key == "target" or mask_id is None else None
    if mask_id is None:
        mask_id = tokenizer.mask_token_id
    context = cfg.context_length or loading.max_positions(model.config)
    lm = wrapper(model, mask_id, context, cfg.name)
    if tokenizer is not None:
        lm.eos_token_ids = eos_token_ids(model, tokenizer)
        lm.tokenizer = tokenizer
    return lm


def check_checkpoint(cfg: ModelConfig, key: str) -> dict:
    """One line, before any weight loads, for a checkpoint its adapter cannot drive: a model type
    specbench has no native class for, or a mask id that contradicts the checkpoint's."""
    config = loading.checkpoint_config(cfg, key)
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES[cfg.adapter]:
        known = ", ".join(f"{t} ({a})" for a, types in MODEL_TYPES.items() for t in types)
        raise ConfigError(
            f"{key}.name_or_path",
            cfg.name_or_path,
            f"has model_type {model_type!r}, which adapter {cfg.adapter} cannot drive "
            f"(remote code is not run); supported model types: {known}",
        )
    own = config.get("mask_token_id")
    if cfg.mask_token_id is not None and own is not None and own != cfg.mask_token_id:
        raise ConfigError(
            f"{key}.mask_token_id",
            cfg.mask_token_id,
            f"the checkpoint's config says {own}; set {key}.mask_token_id={own} or null",
        )
    return config


@MODEL_KINDS.register
class Diffusion(ModelKind):
    name = "diffusion"
    compiles_in_warm_up = True  # symbolic-shape graphs over the adapter's growing caches

    def check(self, cfg: ModelConfig, key: str) -> None:
        if cfg.adapter not in ADAPTERS:
            raise ConfigError(f"{key}.adapter", cfg.adapter, f"allowed: {', '.join(ADAPTERS)}")

    def check_checkpoint(self, cfg: ModelConfig, key: str, config: Config) -> None:
        check_checkpoint(cfg, key)

    def check_drafter(self, cfg: ModelConfig, tokenizer: Any) -> int | None:
        """The target's tokens at their ids (tokens of its own allowed), and logits covering the
        target's vocabulary (MDLM-OWT's 50258 = GPT-2's 50257 + the mask); no context bound,
        since it left-truncates its prefix."""
        own = loading.load_tokenizer(cfg, "drafter")
        refuse_tokenizer(cfg, tokenizer_mismatch(tokenizer, own, extra_ok=True))
        size = loading.vocabulary_size(loading.checkpoint_config(cfg, "drafter"))
        if size is not None and size < len(tokenizer):
            raise ConfigError(
                "drafter",
                cfg.name,
                f"its {size} logits do not cover the target tokenizer's {len(tokenizer)} "
                "tokens; allowed: a drafter over the target's vocabulary",
            )
        return None

    def load(
        self, cfg: ModelConfig, key: str, device: torch.device, dtype: str
    ) -> MaskedDiffusionLM:
        return load_diffusion_lm(cfg, key, device, dtype)

    def compile(
        self, lm: MaskedDiffusionLM, max_length: int, hidden_layers: tuple[int, ...], trees: bool
    ) -> MaskedDiffusionLM:
        compiled.compile_diffusion(lm)
        return lm
