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
* `mdlm`: kuleshov-group/mdlm-owt through the native class (`forward(input_ids, timesteps)`,
  bidirectional, no cache): every step reads prefix and block together.
* `llada`, `dream`: GSAI-ML/LLaDA-8B-*, LLaDA-1.5 and Dream-org/Dream-v0-*-7B through the native
  classes (`specbench.models.native`): full attention over the canvas. LLaDA reads a position's
  logits from its own row; Dream's row i predicts position i + 1, as an AR model's does, so a
  block position j is read from row j - 1 (the right shift of Dream's own generate). Their
  optional prefix cache is Fast-dLLM's: at a block's first forward the keys and values of every
  position before the block are kept and reused for the rest of the block, although the block's
  tokens change under them, so it is approximate; later steps feed the canvas from the block on
  (Dream: from the row before it, which predicts the block's first position).

A decoded model's logits reach the decoders as the model computed them (its dtype, the mask
token included), because the reference decoders rank them that way; a drafter's go through
SUBS (the mask token gets no mass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoModel, PreTrainedModel

import specbench.models.native  # noqa: F401  (registers LLaDA, Dream and MDLM with AutoModel)
from specbench.models.tiny.dlm import PrefixCache, subs_parameterise


@dataclass
class Reading:
    """One generation's reading of a decoded model: the cache its forwards go through and what
    that cache holds. A decoder asks the model for one per generation (`MaskedDiffusionLM.reading`)
    and passes it to every call; arms share the model but never a reading, so no decoder's cache
    settings or contents live on the model."""

    prefix_cache: bool = False
    dual_cache: bool = False  # Fast-dLLM's DualCache: the suffix's keys and values kept too
    approximate: bool = False  # whether its logits can differ from a full forward's
    kv: Any = None  # the cached keys and values, in the adapter's own form
    cached: list[int] = field(default_factory=list)  # tiny: the tokens `kv` holds
    block_start: int | None = None  # native: the block whose first forward filled `kv`


class MaskedDiffusionLM:
    """`calls` counts denoiser forwards (prefix encodings included; a batch is one call),
    `positions` the token positions those forwards fed (batch rows times sequence length)."""

    # whether a reading's prefix cache is available, and whether its logits equal uncached ones
    supports_prefix_cache = False
    supports_dual_cache = False
    exact_prefix_cache = False
    # whether the denoiser reads the diffusion time (`block_logits` then takes `t=`)
    time_conditioned = False
    # the model methods every call runs through: what the compiled engine compiles
    hot_methods: tuple[str, ...] = ("forward",)

    def __init__(self, model: PreTrainedModel, mask_id: int, context: int | None, name: str):
        self.model = model.eval()
        self.mask_id = mask_id
        self.context = context
        self.name = name
        self.device = next(model.parameters()).device
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.eos_token_ids: set[int] = set()  # set by the loader from the tokenizer
        self.tokenizer = None  # set by the loader for a decoded model
        self.compiled = False  # set by the compiled engine (`compiled.compile_diffusion`)
        self.calls = 0
        self.positions = 0
        self.reset()

    def reference(self, policy: str, cached: bool = False, asked: str = "auto") -> str:
        """Whose decoding code `policy`'s confidences follow on this model (policies.py):
        `asked` unless auto; else LLaDA's `generate` for the quota policy without a cache,
        Fast-dLLM's for the others (its cached decoders rank in float64 on a fixed schedule)."""
        if asked != "auto":
            return asked
        return "llada" if policy == "quota" and not cached else "fast_dllm"

    def reading(self, prefix_cache: bool = False, dual_cache: bool = False) -> Reading:
        """A fresh reading for one generation, through the caches asked for."""
        approximate = prefix_cache and not self.exact_prefix_cache
        return Reading(prefix_cache, dual_cache, approximate)

    def tree_attention(self, reading: Reading) -> bool:
        """Whether `tree_logits` reads the drafts in one sequence under a custom attention mask
        (otherwise as batch rows of one forward, the same logits in exact arithmetic)."""
        return False

    def reset(self) -> None:
        """Forget the drafter role's prefix."""
        self.prefix: list[int] = []

    def set_prefix(self, ids: list[int], room: int = 0) -> list[int]:
        """Fix the clean prefix, left-truncated so `room` block positions still fit the model's
        context; returns the prefix kept."""
        self.prefix = self.fitted(ids, room)
        return self.prefix

    def fitted(self, ids: list[int], room: int = 0) -> list[int]:
        """`ids` left-truncated so `room` more positions fit the model's context."""
        if self.context is not None and len(ids) + room > self.context:
            ids = ids[len(ids) + room - self.context :]
        return list(ids)

    @torch.inference_mode()
    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        """float32 [len(block), V] logits for the block placed after the prefix; with `subs`,
        the mask token gets no mass and unmasked block positions copy themselves."""
        raise NotImplementedError

    @torch.inference_mode()
    def canvas_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, reading: Reading | None = None
    ) -> torch.Tensor:
        """[B, hi - lo, V] logits of positions lo..hi-1 of each canvas row ([B, L] ids; rows
        equal before `lo`), one forward through `reading` (none: no cache), in the model's
        dtype."""
        self.calls += 1
        return self._canvas_logits(canvas, lo, hi, reading or Reading())

    @torch.inference_mode()
    def tree_logits(
        self,
        canvas: torch.Tensor,
        lo: int,
        hi: int,
        drafts: torch.Tensor,
        reading: Reading | None = None,
    ) -> torch.Tensor:
        """[1 + D, hi - lo, V]: the logits of the real block (canvas row 0) and of each draft
        block ([D, hi - lo] ids replacing it), one forward through `reading`. A draft sees the
        real context but not the real block; the real tokens never see a draft."""
        reading = reading or Reading()
        if self.tree_attention(reading):
            self.calls += 1
            return self._tree_logits(canvas, lo, hi, drafts, reading)
        batch = canvas.expand(1 + len(drafts), -1).clone()
        batch[1:, lo:hi] = drafts
        return self.canvas_logits(batch, lo, hi, reading)

    def _canvas_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, reading: Reading
    ) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} cannot be a decoded model")

    def _tree_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, drafts: torch.Tensor, reading: Reading
    ) -> torch.Tensor:
        raise NotImplementedError

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], dtype=torch.long, device=self.device)


class TinyDiffusionLM(MaskedDiffusionLM):
    """The drafter role reads through a reading of its own (`drafting`), which always keeps
    its prefix cache; a decoder passes one per generation."""

    supports_prefix_cache = True
    exact_prefix_cache = True
    # the transformer stack, which both `forward` and `_tree_logits` run through
    hot_methods = ("hidden_states",)

    def tree_attention(self, reading: Reading) -> bool:
        return True

    def reset(self) -> None:
        super().reset()
        self.drafting = Reading(prefix_cache=True)

    def set_prefix(self, ids: list[int], room: int = 0) -> list[int]:
        """The tokens after what the cache holds are encoded by the next `block_logits`."""
        prefix = super().set_prefix(ids, room)
        follow(self.drafting, prefix)
        return prefix

    @torch.inference_mode()
    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        self.calls += 1
        return self._blocks(self.prefix, self._tensor(block), subs, self.drafting)[0]

    def _canvas_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, reading: Reading
    ) -> torch.Tensor:
        prefix = self._canvas_prefix(canvas, lo, reading)
        return self._no_mask(self._blocks(prefix, canvas[:, lo:hi], False, reading))

    def _canvas_prefix(self, canvas: torch.Tensor, lo: int, reading: Reading) -> list[int]:
        """The canvas before the block, fitted to the context; `reading`'s cache is kept only
        under a prefix cache, and only while the prefix extends what it holds."""
        if not reading.prefix_cache:
            reading.kv, reading.cached = None, []
        prefix = self.fitted(canvas[0, :lo].tolist())
        follow(reading, prefix)
        return prefix

    def _no_mask(self, logits: torch.Tensor) -> torch.Tensor:
        """TinyDLM is trained with SUBS: its mask token is never a prediction."""
        logits[..., self.mask_id] = -torch.inf  # a fresh tensor from the forward: no copy
        return logits

    def _blocks(
        self, prefix: list[int], blocks: torch.Tensor, subs: bool, reading: Reading
    ) -> torch.Tensor:
        """One forward over the prefix tokens not yet in `reading`'s cache (causal among
        themselves) and each row of `blocks` [B, n] (attending to the prefix and its own block);
        the cache then grows by the prefix tokens only."""
        rows, n = blocks.shape
        pending = prefix[len(reading.cached) :]
        self.positions += rows * (len(pending) + n)
        cache = reading.kv
        if cache is not None and rows > 1:
            cache = PrefixCache(
                kv=[(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in cache.kv],
                last=cache.last.expand(rows, -1, -1),
            )
        if not pending:
            return self.model(blocks, cache=cache, subs=subs).logits.float()
        total = len(prefix) + n
        query = torch.arange(len(reading.cached), total, device=self.device)[:, None]
        key = torch.arange(total, device=self.device)[None, :]
        mask = (key <= query) | (query >= len(prefix))
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
        reading.kv, reading.cached = PrefixCache(kv=kept, last=out.cache.last[:1]), list(prefix)
        return out.logits[:, len(pending) :].float()

    def _tree_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, drafts: torch.Tensor, reading: Reading
    ) -> torch.Tensor:
        """One sequence: the prefix tokens not yet cached, the real block, then every draft
        block at the real block's positions, under `tree_mask`. Each block's first position
        is read from the prefix's last state, as in `_blocks`."""
        prefix = self._canvas_prefix(canvas, lo, reading)
        pending, cached, n = prefix[len(reading.cached) :], len(reading.cached), hi - lo
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
            inputs, mask, positions, reading.kv.kv if reading.kv else None
        )
        last = hidden[:, len(pending) - 1 : len(pending)] if pending else reading.kv.last
        if pending:
            kept = [(k[:, :, :lo], v[:, :, :lo]) for k, v in kv]
            reading.kv, reading.cached = PrefixCache(kv=kept, last=last), list(prefix)
        rows = hidden[0, len(pending) :].reshape(1 + len(drafts), n, -1)
        before = torch.cat([last[0].expand(len(rows), 1, -1), rows[:, :-1]], dim=1)
        return self._no_mask(self.model.lm_head(before))


def follow(reading: Reading, prefix: list[int]) -> None:
    """Keep `reading`'s cache if `prefix` extends what it holds (a new sample, or a
    left-truncated window, starts over)."""
    if prefix[: len(reading.cached)] != reading.cached:
        reading.kv, reading.cached = None, []


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
    @property
    def time_conditioned(self) -> bool:
        return bool(getattr(self.model.config, "time_conditioning", False))

    @torch.inference_mode()
    def block_logits(
        self, block: list[int], subs: bool = True, t: torch.Tensor | None = None
    ) -> torch.Tensor:
        """`t` is the draft's diffusion time: a time-conditioned MDLM reads MDLM's loglinear
        total noise sigma(t) = -log1p(-(1 - 1e-3) t), as upstream feeds its backbone; without
        time conditioning sigma plays no part."""
        ids = self._tensor(self.prefix + block)
        sigma = None if t is None else -torch.log1p(-(1 - 1e-3) * t).reshape(-1)
        self.calls += 1
        self.positions += ids.shape[1]
        logits = self.model(ids, timesteps=sigma).logits[0, len(self.prefix) :].float()
        if subs:
            logits = subs_parameterise(logits, ids[0, len(self.prefix) :], self.mask_id)
        return logits

    def _canvas_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, reading: Reading
    ) -> torch.Tensor:
        if self.time_conditioned:
            raise ValueError("a time-conditioned MDLM cannot be a decoded model: no time here")
        self.positions += canvas.numel()
        return self.model(canvas).logits[:, lo:hi]


class NativeDiffusionLM(MaskedDiffusionLM):
    """LLaDA and Dream on the native classes. `shift` is how many rows before a position its
    logits are read from (Dream 1, LLaDA 0).

    Under a cache, a block's first forward reads the whole canvas and keeps (from row 0) the
    keys and values outside the window later steps feed: the window is the block's rows
    (from `lo - shift`) to the end of the canvas under the prefix cache, or to the block's end
    under Fast-dLLM's dual cache, which keeps the stale suffix too."""

    supports_prefix_cache = True
    supports_dual_cache = True
    shift = 0

    def tree_attention(self, reading: Reading) -> bool:
        """One sequence for every draft only over a cache: without it a draft's prefix rows
        would have to see the draft, i.e. a whole canvas per draft."""
        return reading.prefix_cache

    @torch.inference_mode()
    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        if self.shift and not self.prefix:
            raise ValueError("dream reads a block position from the row before it: no prefix")
        ids = self._tensor(self.prefix + block)
        self.calls += 1
        self.positions += ids.shape[1]
        start = len(self.prefix) - self.shift
        logits = self.model(ids).logits[0, start : start + len(block)].float()
        if subs:
            logits = subs_parameterise(logits, ids[0, len(self.prefix) :], self.mask_id)
        return logits

    def _window(self, canvas: torch.Tensor, lo: int, hi: int, reading: Reading) -> tuple[int, int]:
        return lo - self.shift, hi if reading.dual_cache else canvas.shape[1]

    def _canvas_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, reading: Reading
    ) -> torch.Tensor:
        start, end = self._window(canvas, lo, hi, reading)
        if reading.prefix_cache and reading.block_start == lo:
            window = canvas[:, start:end]
            positions = torch.arange(start, end, device=self.device)[None]
            return self._over_cache(window, positions, None, reading)[:, : hi - lo]
        self.positions += canvas.numel()
        out = self.model(canvas, use_cache=reading.prefix_cache)
        if reading.prefix_cache:
            reading.block_start = lo
            reading.kv = tuple(
                tuple(torch.cat([t[:1, :, :start], t[:1, :, end:]], dim=2) for t in layer)
                for layer in out.past_key_values
            )
        return out.logits[:, start : hi - self.shift]

    def _over_cache(
        self,
        window: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        reading: Reading,
    ) -> torch.Tensor:
        """Logits of `window` ([B, n] ids at `positions`) read over `reading`'s cached keys."""
        self.positions += window.numel()
        rows = window.shape[0]
        past = tuple(tuple(t.expand(rows, -1, -1, -1) for t in layer) for layer in reading.kv)
        return self.model(
            window, attention_mask=mask, position_ids=positions, past_key_values=past
        ).logits

    def _tree_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, drafts: torch.Tensor, reading: Reading
    ) -> torch.Tensor:
        """One sequence over the cache: the real window, then a copy of it per draft with the
        draft in the block, each copy at the window's positions and seeing the cache and
        itself only."""
        if reading.block_start != lo:
            # the block's first forward fills the cache
            self.canvas_logits(canvas[:1], lo, hi, reading)
        start, end = self._window(canvas, lo, hi, reading)
        copies = canvas[:1, start:end].repeat(1 + len(drafts), 1)
        copies[1:, self.shift : self.shift + hi - lo] = drafts
        n, cached = copies.shape[1], reading.kv[0][0].shape[2]
        segment = torch.arange(len(copies), device=self.device).repeat_interleave(n)
        sees_cache = torch.ones(len(segment), cached, dtype=torch.bool, device=self.device)
        mask = torch.cat([sees_cache, segment[:, None] == segment[None, :]], dim=1)
        positions = torch.arange(start, end, device=self.device).repeat(len(copies))
        logits = self._over_cache(copies.reshape(1, -1), positions[None], mask[None, None], reading)
        return logits.reshape(len(copies), n, -1)[:, : hi - lo]


class LLaDADiffusionLM(NativeDiffusionLM):
    shift = 0


class DreamDiffusionLM(NativeDiffusionLM):
    shift = 1

    def reference(self, policy: str, cached: bool = False, asked: str = "auto") -> str:
        return "dream"  # Dream's and Fast-dLLM's Dream code both score with `sample_tokens`


ADAPTERS: dict[str, tuple[type[MaskedDiffusionLM], Any]] = {
    "tiny": (TinyDiffusionLM, AutoModel),
    "mdlm": (MDLMDiffusionLM, AutoModel),
    "dream": (DreamDiffusionLM, AutoModel),
    "llada": (LLaDADiffusionLM, AutoModel),
}
