"""`MaskedDiffusionLM`: one interface over masked-diffusion LMs, so a drafter's sampler never
knows which model family it drives. The adapter facts (family, mask id, context) come from the
model's config entry (conf/drafter/*.yaml), never from code paths keyed on a model name.

Two roles share the adapters. As a drafter, a sampler fixes a clean prefix with `set_prefix` and
asks `block_logits` for a block of positions after it, some of them the mask token. As the
decoded model of a diffusion-LLM method (`dllm`, `psd`), a decoder asks `canvas_logits` for the
current block of a batch of canvases (prompt + generation region) that share everything before
the block. Adapters:

* `tiny`: the tiny world's TinyDLM in its block-causal form. The prefix is encoded once into an
  exact KV cache and extended with only the tokens appended since (verified tokens never change),
  inside the first denoising forward of a draft, so every denoising step is one forward over the
  block (plus, in the first, the tokens verified since the last draft).
  As a decoded model it is a block-diffusion LM: the canvas after the current block is not fed
  (its block-causal form never lets a block see later positions), and the prefix cache is exact.
* `mdlm`: kuleshov-group/mdlm-owt style models (`forward(input_ids, timesteps)`, bidirectional,
  no cache, time conditioning off so sigma is 0): every step reads prefix and block together.
* `dream`: Dream-org/Dream-v0-*-7B (full attention, no cache): its logits at position i predict
  the token at i + 1, as an AR model's do, so a block position j is read from row j - 1 (the
  right shift of Dream's own generate).
* `llada`: GSAI-ML/LLaDA-8B-* and LLaDA-1.5 (full attention, no shift, mask 126336): a position's
  logits are read from its own row. Its optional prefix cache is Fast-dLLM's: at a block's first
  forward the keys and values of every position before the block are kept and reused for the
  rest of the block, although the block's tokens change under them, so it is approximate.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModel, AutoModelForMaskedLM, PreTrainedModel

from specbench.models.tiny.dlm import PrefixCache, subs_parameterise


class MaskedDiffusionLM:
    """`calls` counts denoiser forwards (prefix encodings included; a batch is one call),
    `positions` the token positions those forwards fed (batch rows times sequence length)."""

    # whether `prefix_cache` is available, and whether its logits equal uncached ones
    supports_prefix_cache = False
    exact_prefix_cache = False
    # whether `tree_logits` reads the drafts in one sequence under a custom attention mask
    # (otherwise as batch rows of one forward, the same logits in exact arithmetic)
    tree_attention = False

    def __init__(self, model: PreTrainedModel, mask_id: int, context: int | None, name: str):
        self.model = model.eval()
        self.mask_id = mask_id
        self.context = context
        self.name = name
        self.device = model.get_input_embeddings().weight.device
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.eos_token_ids: set[int] = set()  # set by the loader from the tokenizer
        self.tokenizer = None  # set by the loader for a decoded model
        self.prefix_cache = False
        self.calls = 0
        self.positions = 0
        self.reset()

    @property
    def approximate_cache(self) -> bool:
        """Whether the logits read through the prefix cache can differ from a full forward's."""
        return self.prefix_cache and not self.exact_prefix_cache

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

    @torch.inference_mode()
    def canvas_logits(self, canvas: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """float32 [B, hi - lo, V] logits of positions lo..hi-1 of each canvas row ([B, L] ids;
        rows equal before `lo`), one forward; the mask token gets no mass."""
        self.calls += 1
        return self._no_mask(self._canvas_logits(canvas, lo, hi))

    @torch.inference_mode()
    def tree_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, drafts: torch.Tensor
    ) -> torch.Tensor:
        """[1 + D, hi - lo, V]: the logits of the real block (canvas row 0) and of each draft
        block ([D, hi - lo] ids replacing it), one forward. A draft sees the real context but
        not the real block; the real tokens never see a draft."""
        if self.tree_attention:
            self.calls += 1
            return self._no_mask(self._tree_logits(canvas, lo, hi, drafts))
        batch = canvas.expand(1 + len(drafts), -1).clone()
        batch[1:, lo:hi] = drafts
        return self.canvas_logits(batch, lo, hi)

    def _no_mask(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits[..., : self.vocab_size].float()
        logits[..., self.mask_id] = float("-inf")
        return logits

    def _canvas_logits(self, canvas: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} cannot be a decoded model")

    def _tree_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, drafts: torch.Tensor
    ) -> torch.Tensor:
        raise NotImplementedError

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], dtype=torch.long, device=self.device)


class TinyDiffusionLM(MaskedDiffusionLM):
    supports_prefix_cache = True
    exact_prefix_cache = True
    tree_attention = True

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
        self.calls += 1
        return self._blocks(self._tensor(block), subs)[0]

    def _canvas_logits(self, canvas: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        if not self.prefix_cache:
            self.reset()
        self.set_prefix(canvas[0, :lo].tolist())
        return self._blocks(canvas[:, lo:hi], subs=False)

    def _blocks(self, blocks: torch.Tensor, subs: bool) -> torch.Tensor:
        """One forward over the prefix tokens not yet cached (causal among themselves) and each
        row of `blocks` [B, n] (attending to the prefix and its own block); the cache then grows
        by the prefix tokens only."""
        rows, n = blocks.shape
        pending = self.prefix[len(self.cached) :]
        self.positions += rows * (len(pending) + n)
        cache = self.cache
        if cache is not None and rows > 1:
            cache = PrefixCache(
                kv=[(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in cache.kv],
                last=cache.last.expand(rows, -1, -1),
            )
        if not pending:
            return self.model(blocks, cache=cache, subs=subs).logits.float()
        total = len(self.prefix) + n
        query = torch.arange(len(self.cached), total, device=self.device)[:, None]
        key = torch.arange(total, device=self.device)[None, :]
        mask = (key <= query) | (query >= len(self.prefix))
        inputs = torch.cat([self._tensor(pending).expand(rows, -1), blocks], dim=1)
        out = self.model(
            inputs,
            attention_mask=mask,
            cache=cache,
            use_cache=True,
            subs=subs,
            cache_upto=len(pending),
        )
        kept = [(k[:1], v[:1]) for k, v in out.cache.kv]
        self.cache, self.cached = PrefixCache(kv=kept, last=out.cache.last[:1]), list(self.prefix)
        return out.logits[:, len(pending) :].float()

    def _tree_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, drafts: torch.Tensor
    ) -> torch.Tensor:
        """One sequence: the prefix tokens not yet cached, the real block, then every draft
        block at the real block's positions, under `tree_mask`. Each block's first position
        is read from the prefix's last state, as in `_blocks`."""
        if not self.prefix_cache:
            self.reset()
        self.set_prefix(canvas[0, :lo].tolist())
        pending, cached, n = self.prefix[len(self.cached) :], len(self.cached), hi - lo
        blocks = torch.cat([canvas[:1, lo:hi], drafts]).reshape(1, -1)
        inputs = torch.cat([self._tensor(pending), blocks], dim=1)
        self.positions += inputs.shape[1]
        positions = torch.cat(
            [
                torch.arange(cached, lo, device=self.device),
                torch.arange(lo, hi, device=self.device).repeat(1 + len(drafts)),
            ]
        )
        mask = tree_mask(cached, lo, n, len(drafts), self.device)
        hidden, kv = self.model.hidden_states(
            inputs, mask, positions, self.cache.kv if self.cache else None
        )
        last = hidden[:, len(pending) - 1 : len(pending)] if pending else self.cache.last
        if pending:
            kept = [(k[:, :, :lo], v[:, :, :lo]) for k, v in kv]
            self.cache, self.cached = PrefixCache(kv=kept, last=last), list(self.prefix)
        rows = hidden[0, len(pending) :].reshape(1 + len(drafts), n, -1)
        before = torch.cat([last[0].expand(len(rows), 1, -1), rows[:, :-1]], dim=1)
        return self.model.lm_head(before)


def tree_mask(
    cached: int, lo: int, n: int, drafts: int, device: torch.device | None = None
) -> torch.Tensor:
    """Boolean [queries, keys] for `_tree_logits`: queries are the prefix tokens from `cached`
    to `lo`, the real block and `drafts` draft blocks of `n`; keys are the whole prefix and
    the same blocks. The prefix is causal; a block (real or draft) sees the prefix and itself."""
    total = lo + n * (1 + drafts)
    query = torch.arange(cached, total, device=device)[:, None]
    key = torch.arange(total, device=device)[None, :]

    def block_of(i: torch.Tensor) -> torch.Tensor:
        return torch.where(i < lo, -1, (i - lo) // n)

    prefix_causal = (query < lo) & (key <= query)
    sees_prefix = (query >= lo) & (key < lo)
    same_block = (query >= lo) & (block_of(query) == block_of(key))
    return prefix_causal | sees_prefix | same_block


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

    def _canvas_logits(self, canvas: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        self.positions += canvas.numel()
        sigma = torch.zeros(canvas.shape[0], device=self.device)
        return self.model(canvas, sigma).logits[:, lo:hi]


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

    def _canvas_logits(self, canvas: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        self.positions += canvas.numel()
        return self.model(canvas).logits[:, lo - 1 : hi - 1]


class LLaDADiffusionLM(MaskedDiffusionLM):
    supports_prefix_cache = True

    @torch.inference_mode()
    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        ids = self._tensor(self.prefix + block)
        self.calls += 1
        logits = self.model(ids).logits[0, len(self.prefix) :].float()
        if subs:
            logits = subs_parameterise(logits, ids[0, len(self.prefix) :], self.mask_id)
        return logits

    def reset(self) -> None:
        super().reset()
        self.block_start: int | None = None
        self.past: list[tuple[torch.Tensor, torch.Tensor]] = []

    def _canvas_logits(self, canvas: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """Without the cache every call reads the whole canvas. With it, a block's first call
        does too and keeps the keys and values before the block; later calls feed the canvas
        from the block on (Fast-dLLM's prefix cache, LLaDA's `past_key_values` tuples)."""
        rows = canvas.shape[0]
        if not self.prefix_cache or self.block_start != lo:
            self.positions += canvas.numel()
            out = self.model(canvas, use_cache=self.prefix_cache)
            if self.prefix_cache:
                self.block_start = lo
                self.past = [(k[:1, :, :lo], v[:1, :, :lo]) for k, v in out.past_key_values]
            return out.logits[:, lo:hi]
        self.positions += rows * (canvas.shape[1] - lo)
        past = [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.past]
        return self.model(canvas[:, lo:], past_key_values=past).logits[:, : hi - lo]


ADAPTERS: dict[str, tuple[type[MaskedDiffusionLM], Any]] = {
    "tiny": (TinyDiffusionLM, AutoModel),
    "mdlm": (MDLMDiffusionLM, AutoModelForMaskedLM),
    "dream": (DreamDiffusionLM, AutoModel),
    "llada": (LLaDADiffusionLM, AutoModel),
}
