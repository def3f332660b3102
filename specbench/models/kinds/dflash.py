"""The dflash kind: a DFlash or DFlash 2 drafter checkpoint (the `dflash` package's classes). It
has no tokenizer of its own and computes on the target's hidden states, in the target's dtype;
under the compiled engine its drafting loop compiles on the target's static engine when the
method builds it (`specbench/decoding/drafters/dflash/`)."""

from __future__ import annotations

from typing import Any

import torch

from specbench.config import Config, ModelConfig
from specbench.errors import ConfigError
from specbench.models import loading
from specbench.models.kinds import ModelKind
from specbench.registry import MODEL_KINDS

ARCHITECTURES = ("DFlashDraftModel", "DFlash2DraftModel")


def check_reads_target(cfg: ModelConfig, target: ModelConfig) -> None:
    """One line, before any weight loads, for a DFlash checkpoint that cannot read this target:
    another architecture, another hidden size, a target layer it does not have, a mask id past
    its vocabulary, or a dtype of its own (it consumes the target's hidden states)."""
    config = loading.checkpoint_config(cfg, "drafter")
    where = ("drafter.name_or_path", cfg.name_or_path)
    architectures = config.get("architectures") or []
    if not set(architectures) & set(ARCHITECTURES):
        raise ConfigError(
            *where,
            f"is a {architectures or 'checkpoint without architectures'}, not a DFlash drafter "
            f"({' or '.join(ARCHITECTURES)})",
        )
    text = loading.model_config(target, "target").get_text_config()
    settings = {**config, **config.get("dflash_config", {})}
    layers = settings.get("target_layer_ids") or []
    if config.get("hidden_size") != text.hidden_size:
        raise ConfigError(
            *where,
            f"has hidden size {config.get('hidden_size')}, the target {text.hidden_size}: "
            "a DFlash drafter reads the hidden states of the target it was trained on",
        )
    if any(not 0 <= layer < text.num_hidden_layers for layer in layers):
        raise ConfigError(
            *where,
            f"reads target layers {layers}; the target has {text.num_hidden_layers}",
        )
    mask = settings.get("mask_token_id")
    if not isinstance(mask, int) or not 0 <= mask < text.vocab_size:
        raise ConfigError(
            *where, f"has mask_token_id {mask!r}; the target's vocabulary is {text.vocab_size}"
        )
    if cfg.dtype:
        raise ConfigError(
            "drafter.dtype",
            cfg.dtype,
            "a DFlash drafter runs in the target's dtype (it reads its hidden states); "
            "leave it null and set target.dtype",
        )


def check_compilable(cfg: ModelConfig) -> None:
    """The compiled drafter masks its static cache with one mask for all layers: every layer
    must read the whole cache both ways, as z-lab's full-attention checkpoints do."""
    settings = loading.checkpoint_config(cfg, "drafter")
    layer_types = set(settings.get("layer_types") or ["full_attention"])
    if layer_types != {"full_attention"} or settings.get("is_causal"):
        raise ConfigError(
            "run.engine",
            "compiled",
            f"compiles DFlash drafters whose layers are all bidirectional full attention; "
            f"{cfg.name} has {sorted(layer_types)}, is_causal={settings.get('is_causal')}; "
            "allowed: run.engine=eager",
        )


def load(cfg: ModelConfig, key: str, device: torch.device, dtype: str) -> torch.nn.Module:
    """A DFlash or DFlash 2 drafter (the `dflash` package's classes, as its checkpoint's
    `architectures` names), bound to the target by the method; `dtype` is the target's."""
    from dflash.model import DFlash2DraftModel, DFlashDraftModel

    architectures = loading.checkpoint_config(cfg, key).get("architectures") or []
    cls = DFlash2DraftModel if "DFlash2DraftModel" in architectures else DFlashDraftModel
    return loading.load_weights(cls, cfg, key, device, dtype).eval()


@MODEL_KINDS.register
class DFlash(ModelKind):
    name = "dflash"

    def check_checkpoint(self, cfg: ModelConfig, key: str, config: Config) -> None:
        check_reads_target(cfg, config.target)
        if config.run.engine == "compiled":
            check_compilable(cfg)

    def check_drafter(self, cfg: ModelConfig, tokenizer: Any) -> int | None:
        """No tokenizer to compare (it drafts through the target's embeddings and head); its
        positions are the target's."""
        return None

    def dtype(self, cfg: ModelConfig, config: Config) -> str:
        return config.target.dtype or config.run.dtype

    def load(self, cfg: ModelConfig, key: str, device: torch.device, dtype: str) -> Any:
        return load(cfg, key, device, dtype)

    def reads_target_layers(self, lm: Any, target: Any) -> tuple[int, ...]:
        return tuple(lm.target_layer_ids)
