"""The eagle3 kind: an EAGLE-3 drafter checkpoint, in EAGLE's own layout or vLLM's speculators
format (`specbench/models/eagle3.py`). It has no tokenizer of its own (it drafts the target's
ids, through its draft vocabulary's map), reads the target's hidden states, and runs in the
target's dtype. It runs eager under either engine, as upstream's drafting loop does: under the
compiled engine the target compiles (capturing the layers it reads) and the drafter does not, and
env.json's engine says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from specbench.config import Config, ModelConfig
from specbench.errors import ConfigError
from specbench.models import loading
from specbench.models.eagle3 import (
    Eagle3Drafter,
    aux_layer_ids,
    eagle3_config,
    is_speculators,
    load_eagle3,
    target_reads,
)
from specbench.models.kinds import ModelKind
from specbench.models.rotary import cast
from specbench.registry import MODEL_KINDS

WEIGHTS = ("config.json", "*.safetensors", "pytorch_model.bin")


def check_reads_target(cfg: ModelConfig, target: ModelConfig) -> None:
    """One line, before any weight loads, for an EAGLE-3 checkpoint that cannot draft for this
    target: not EAGLE-3, another hidden size or vocabulary, a layer the target lacks."""
    raw = loading.checkpoint_config(cfg, "drafter")
    where = ("drafter.name_or_path", cfg.name_or_path)
    if not (is_speculators(raw) or "draft_vocab_size" in raw):
        raise ConfigError(
            *where,
            "is not an EAGLE-3 checkpoint (no draft_vocab_size, not speculators_model_type eagle3)",
        )
    config = eagle3_config(raw)
    text = loading.model_config(target, "target").get_text_config()
    if config.target_hidden_size != text.hidden_size:
        raise ConfigError(
            *where,
            f"reads target states of size {config.target_hidden_size}, the target's are "
            f"{text.hidden_size}: an EAGLE-3 drafter reads the target it was trained on",
        )
    if config.vocab_size != text.vocab_size:
        raise ConfigError(
            *where,
            f"maps its drafts into a vocabulary of {config.vocab_size}; the target's is "
            f"{text.vocab_size}",
        )
    layers = aux_layer_ids(config, text.num_hidden_layers)
    if len(set(layers)) < len(layers):
        raise ConfigError(
            *where,
            f"reads target layers {layers} by upstream's rule (2, n // 2, n - 3), naming one "
            f"twice for a target of {text.num_hidden_layers}; allowed: a checkpoint naming "
            "three in eagle_aux_hidden_state_layer_ids",
        )
    if any(not 1 <= layer < text.num_hidden_layers for layer in layers):
        raise ConfigError(
            *where,
            f"reads the inputs of target layers {layers}; the target has "
            f"{text.num_hidden_layers} (allowed: 1 to {text.num_hidden_layers - 1})",
        )


def local_directory(cfg: ModelConfig, key: str) -> Path:
    """The checkpoint's directory: local, or the hub's snapshot of its config and weights."""
    ref = loading.resolve(cfg, key)
    if Path(ref).is_dir():
        return Path(ref)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(ref, revision=cfg.revision, allow_patterns=list(WEIGHTS)))


@MODEL_KINDS.register
class Eagle3(ModelKind):
    name = "eagle3"

    def check(self, cfg: ModelConfig, key: str) -> None:
        if cfg.dtype:
            raise ConfigError(
                f"{key}.dtype",
                cfg.dtype,
                "an EAGLE-3 drafter runs in the target's dtype (it reads its hidden states); "
                "leave it null and set target.dtype",
            )

    def check_checkpoint(self, cfg: ModelConfig, key: str, config: Config) -> None:
        check_reads_target(cfg, config.target)

    def check_drafter(self, cfg: ModelConfig, tokenizer: Any) -> int | None:
        """No tokenizer to compare: it drafts target ids through its draft vocabulary's map."""
        return None

    def dtype(self, cfg: ModelConfig, config: Config) -> str:
        return config.target.dtype or config.run.dtype

    def load(self, cfg: ModelConfig, key: str, device: torch.device, dtype: str) -> Any:
        model = load_eagle3(local_directory(cfg, key))
        return cast(model, loading.resolve_dtype(dtype, device), device)

    def reads_target_layers(self, lm: Eagle3Drafter, target: Any) -> tuple[int, ...]:
        return target_reads(lm.config, target.model)
