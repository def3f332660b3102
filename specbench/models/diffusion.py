"""`MaskedDiffusionLM`: one interface over masked-diffusion LMs, so a drafter's sampler never
knows which model family it drives. The adapter facts (family, mask id, context) come from the
model's config entry (conf/drafter/*.yaml), never from code paths keyed on a model name.

A sampler fixes a clean prefix with `set_prefix` and then asks `block_logits` for the logits of
a block of positions after it, some of them the mask token. Adapters:

* `tiny`: the tiny world's TinyDLM in its block-causal form. The prefix is encoded once into an
  exact KV cache and extended with only the tokens appended since (verified tokens never change),
  inside the first denoising forward of a draft, so every denoising step is one forward over the
  block (plus, in the first, the tokens verified since the last draft).
* `mdlm`: kuleshov-group/mdlm-owt style models (`forward(input_ids, timesteps)`, bidirectional,
  no cache, time conditioning off so sigma is 0): every step reads prefix and block together.
* `dream`: Dream-org/Dream-v0-*-7B (full attention, no cache): its logits at position i predict
  the token at i + 1, as an AR model's do, so a block position j is read from row j - 1 (the
  right shift of Dream's own generate).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModel, AutoModelForMaskedLM, PreTrainedModel

from specbench.models.tiny.dlm import PrefixCache, subs_parameterise


class MaskedDiffusionLM:
    """`calls` counts denoiser forwards (prefix encodings included)."""

    def __init__(self, model: PreTrainedModel, mask_id: int, context: int | None, name: str):
        self.model = model.eval()
        self.mask_id = mask_id
        self.context = context
        self.name = name
        self.device = model.get_input_embeddings().weight.device
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.calls = 0
        self.reset()

    def reset(self) -> None:
        self.prefix: list[int] = []

    def set_prefix(self, ids: list[int], room: int = 0) -> list[int]:
        """Fix the clean prefix, left-truncated so `room` block positions still fit the model's
        context; returns the prefix kept."""
        if self.context is not None and len(ids) + room > self.context:
            ids = ids[len(ids) + room - self.context :]
        self.prefix = list(ids)
        return self.prefix

    @torch.inference_mode()
    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        """float32 [len(block), V] logits for the block placed after the prefix; with `subs`,
        the mask token gets no mass and unmasked block positions copy themselves."""
        raise NotImplementedError

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], dtype=torch.long, device=self.device)


class TinyDiffusionLM(MaskedDiffusionLM):
    def reset(self) -> None:
        super().reset()
        self.cache: PrefixCache | None = None
        self.cached: list[int] = []  # the tokens the cache holds; `prefix[len(cached):]` waits

    def set_prefix(self, ids: list[int], room: int = 0) -> list[int]:
        """Keep the cache if the prefix extends what it holds (a new sample, or a left-truncated
        window, starts over); the tokens after it are encoded by the next `block_logits`."""
        prefix = super().set_prefix(ids, room)
        if prefix[: len(self.cached)] != self.cached:
            self.cache, self.cached = None, []
        return prefix

    @torch.inference_mode()
    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        """One forward over the prefix tokens not yet cached (causal among themselves) and the
        block (attending to everything); the cache then grows by the prefix tokens only."""
        pending = self.prefix[len(self.cached) :]
        self.calls += 1
        if not pending:
            return self.model(self._tensor(block), cache=self.cache, subs=subs).logits[0].float()
        total = len(self.prefix) + len(block)
        rows = torch.arange(len(self.cached), total, device=self.device)[:, None]
        keys = torch.arange(total, device=self.device)[None, :]
        mask = (keys <= rows) | (rows >= len(self.prefix))
        out = self.model(
            self._tensor(pending + block),
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
            subs=subs,
            cache_upto=len(pending),
        )
        self.cache, self.cached = out.cache, list(self.prefix)
        return out.logits[0, len(pending) :].float()


class MDLMDiffusionLM(MaskedDiffusionLM):
    @torch.inference_mode()
    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        ids = self._tensor(self.prefix + block)
        sigma = torch.zeros(1, device=self.device)  # MDLM-OWT: time conditioning off
        self.calls += 1
        logits = self.model(ids, sigma).logits[0, len(self.prefix) :].float()
        logits = logits[:, : self.vocab_size]
        if subs:
            logits = subs_parameterise(logits, ids[0, len(self.prefix) :], self.mask_id)
        return logits


class DreamDiffusionLM(MaskedDiffusionLM):
    @torch.inference_mode()
    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        if not self.prefix:
            raise ValueError("the dream adapter reads a block position from the one before it")
        ids = self._tensor(self.prefix + block)
        self.calls += 1
        start = len(self.prefix) - 1  # row start predicts the first block position
        logits = self.model(ids).logits[0, start : start + len(block)].float()
        if subs:
            logits = subs_parameterise(logits, ids[0, len(self.prefix) :], self.mask_id)
        return logits


ADAPTERS: dict[str, tuple[type[MaskedDiffusionLM], Any]] = {
    "tiny": (TinyDiffusionLM, AutoModel),
    "mdlm": (MDLMDiffusionLM, AutoModelForMaskedLM),
    "dream": (DreamDiffusionLM, AutoModel),
}
