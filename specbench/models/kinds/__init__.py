"""Model kinds: each family of checkpoints specbench drives (a causal LM, a masked-diffusion
LM, a DFlash drafter, an EAGLE-3 drafter) is one `ModelKind` registered in `MODEL_KINDS` under
the `kind` its YAML names. A kind owns every fact the pipeline needs about it (the checks
before any weight loads, its tokenizer rule as a drafter, its dtype, its loader, its compile
hook), so the pipeline names no kind. Adding one (a Medusa head) is one module here."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from specbench.config import Config, ModelConfig
from specbench.errors import ConfigError
from specbench.registry import MODEL_KINDS


class ModelKind(ABC):
    """What the pipeline asks of one kind of model; the defaults are a plain model's."""

    name: ClassVar[str]
    # its compiled graphs are built by the run's warm-up decodes rather than by `compile`, so
    # a compiled run needs at least one
    compiles_in_warm_up: ClassVar[bool] = False

    def check(self, cfg: ModelConfig, key: str) -> None:
        """Raise `ConfigError` on knobs this kind rules out (no file read)."""
        return None

    def check_checkpoint(self, cfg: ModelConfig, key: str, config: Config) -> None:
        """Raise `ConfigError` on a checkpoint this kind cannot drive, from its config files
        (no weights)."""
        return None

    @abstractmethod
    def check_drafter(self, cfg: ModelConfig, tokenizer: Any) -> int | None:
        """Raise `ConfigError` unless this checkpoint can draft for a target with `tokenizer`;
        return the context length it imposes on prompt + generation (None: none)."""

    def dtype(self, cfg: ModelConfig, config: Config) -> str:
        """The run dtype it loads in (its own `dtype` key, if set, wins in the loader)."""
        return config.run.dtype

    @abstractmethod
    def load(self, cfg: ModelConfig, key: str, device: torch.device, dtype: str) -> Any:
        """The model, on `device`, ready for the methods of this kind."""

    def compile(self, lm: Any, max_length: int, hidden_layers: tuple[int, ...], trees: bool) -> Any:
        """The model under the compiled engine, its graphs built here where they can be:
        static caches of `max_length` positions, capturing `hidden_layers`, with tree masks
        if the method drafts trees."""
        return lm

    def reads_target_layers(self, lm: Any, target: Any) -> tuple[int, ...]:
        """The layers of `target` (a loaded `CausalLM`) a drafter of this kind reads (the
        target captures them)."""
        return ()


def kind_of(cfg: ModelConfig) -> ModelKind:
    """The registered kind a model's YAML names (validation checks it is the one its method
    takes)."""
    return MODEL_KINDS[cfg.kind]()


def tokenizer_mismatch(target: Any, drafter: Any, extra_ok: bool = False) -> str | None:
    """Why drafter tokenizer `drafter` cannot draft for `target`, or None. With `extra_ok` the
    drafter may add tokens of its own, its mask above all (Dream adds it to Qwen2.5's
    vocabulary), but every target token must keep its id."""
    va, vb = target.get_vocab(), drafter.get_vocab()
    if extra_ok:
        moved = [tok for tok, i in va.items() if vb.get(tok) != i]
        return f"{len(moved)} target tokens have other ids, e.g. {moved[:3]}" if moved else None
    if va != vb:
        return f"vocabularies differ ({len(vb)} vs {len(va)} entries)"
    for attr in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id"):
        if getattr(target, attr) != getattr(drafter, attr):
            return f"{attr} differs ({getattr(drafter, attr)} vs {getattr(target, attr)})"
    return None


def refuse_tokenizer(cfg: ModelConfig, why: str | None) -> None:
    if why:
        raise ConfigError(
            "drafter",
            cfg.name,
            f"its tokenizer differs from the target's: {why}; "
            "allowed: a drafter sharing the target's tokenizer",
        )
