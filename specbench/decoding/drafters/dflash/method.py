"""DFlash (Chen, Liang, Liu 2026, arXiv 2602.06036) and DFlash 2: a block-diffusion drafter that
reads the target. The model classes and checkpoints are the authors' `dflash` package's; the
loop is specbench's draft-verify loop, drafting as the package's `dflash_generate` does:

- the target's outputs at the checkpoint's `target_layer_ids`, at every position it has
  committed, are projected by the drafter's `fc` and become extra keys and values in every
  drafter layer (cached: each round adds only the newly committed positions);
- a round's block is [last committed token, mask x (block_size - 1)] at its own positions, read
  in both directions in one forward; block position i drafts the token at position i (no
  shift), through the target's own embeddings and LM head;
- DFlash 2 chooses each draft among the top-k candidates of its position, left to right, with
  a low-rank bigram score conditioned on the drafter's state (`CandidateSelector`).

Verification is the loop's: greedy at temperature 0 (the target's greedy output, token for
token) and exact speculative sampling above it, the package's acceptance rule.

Round for round this makes the reference's drafter and target forwards (tests/test_dflash.py),
with one difference: when a single position is left, the reference still drafts and verifies
a token for the position after it, which it cannot keep; here that round is the target's alone.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache, StaticCache

from specbench.decoding import cost
from specbench.decoding.drafters.dflash.config import DFlashConfig
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import (
    Drafter,
    DraftVerifyMethod,
    GammaSchedule,
    SpeculativeDecoder,
)
from specbench.decoding.verify import is_lossless, make_rule, rule_label
from specbench.decoding.warp import Warp
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.compiled import HOT_TOKENS, CompiledCausalLM, StaticEngine
from specbench.registry import METHODS
from specbench.runs.summary import Summary


def draft_value(config: Any, name: str, default: Any = None) -> Any:
    """A DFlash setting: the checkpoint's `dflash_config` entry, else its top-level one."""
    return getattr(config, "dflash_config", {}).get(name, getattr(config, name, default))


class DFlashDrafter(Drafter):
    """One drafter forward per round over a block; its cache holds the projected target
    features of every committed position but the newest, which anchors the next block."""

    def __init__(self, model: torch.nn.Module, target: CausalLM, block_size: int, warp: Warp):
        self.model, self.warp, self.block_size = model, warp, block_size
        self.hidden_layers = tuple(model.target_layer_ids)
        self.embedding = target.model.get_input_embeddings().weight
        head = getattr(target.model, "lm_head", None)
        self.head = head if head is not None else target.model.get_output_embeddings()
        self.mask_id = int(model.mask_token_id)
        self.scale = float(draft_value(model.config, "input_embedding_scale", 1.0))
        self.selector = getattr(model, "candidate_selector", None)  # DFlash 2
        self.calls = 0
        # the compiled engine when the target runs on it, so both sides of a round run alike
        self.engine = self.static_engine(target) if isinstance(target, CompiledCausalLM) else None
        self.reset()
        if self.engine is not None:
            self.warm_up()

    def static_engine(self, target: CompiledCausalLM) -> StaticEngine:
        """The drafter's forward compiled over a static cache as long as the target's plus a
        block (a block may reach one position past the generation budget, see `draft`)."""
        config, embedding = self.model.config, self.embedding
        max_length = target.max_length + self.block_size
        cache = StaticCache(config=config, max_cache_len=max_length)
        cache.early_initialization(
            1, config.num_key_value_heads, config.head_dim, embedding.dtype, embedding.device
        )
        return StaticEngine(self._forward, cache, max_length, embedding.device)

    def reset(self) -> None:
        if self.engine is not None:
            self.cache = self.engine.cache
            self.engine.seek(0)
        else:
            self.cache = DynamicCache(config=self.model.config)
            self.cache.activate_past_recording()  # sliding-window layers can then be cropped
        self.cached = 0  # context positions in the cache
        self.unseen: torch.Tensor | None = None  # features of committed positions after those

    def _forward(
        self, features: torch.Tensor, noise: torch.Tensor, start: torch.Tensor
    ) -> torch.Tensor:
        """The drafter over a block, the new context's features from position `start` on; on a
        static cache every slot past the block is masked (DFlash's layers read the whole
        cache in both directions)."""
        positions = start + torch.arange(features.shape[1] + noise.shape[1], device=start.device)
        visible = None
        if self.engine is not None:
            slots = torch.arange(self.engine.max_length, device=start.device)
            visible = (slots <= positions[-1])[None, None, None, :]
        state = self.model(
            target_hidden=features,
            noise_embedding=noise,
            position_ids=positions[None],
            attention_mask=visible,
            past_key_values=self.cache,
            use_cache=True,
        )
        return (state,)

    def warm_up(self) -> None:
        """Compile the drafter's graphs (one new context position; several) before any timer."""
        width = len(self.hidden_layers) * self.model.config.hidden_size
        with self.engine.warming():
            for n_context in (1, 2, 3):
                self.reset()
                self.observe(self.embedding.new_zeros(n_context, width))
                context = [0] * (n_context + 1)
                self.draft(context, self.block_size - 1, torch.Generator(self.embedding.device))
        self.reset()
        self.calls = 0

    def observe(self, hidden: torch.Tensor) -> None:
        self.unseen = hidden if self.unseen is None else torch.cat([self.unseen, hidden])

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        # the compiled engine's graphs run under no_grad (see specbench/models/compiled.py)
        with torch.no_grad() if self.engine is not None else torch.inference_mode():
            return self._draft(context, n, generator)

    def _draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        if n == 0 or self.unseen is None:  # the first round is the target's prefill alone
            return Draft([], None, 0, 0.0)
        synchronize(self.embedding.device)
        t0 = time.perf_counter()
        state = self.block_state(context, n)
        logits = self.model.compute_logits(state[None], self.head)[0]
        draft = self.choose(state, logits, context[-1], generator)
        synchronize(self.embedding.device)
        draft.seconds = time.perf_counter() - t0
        return draft

    def block_state(self, context: list[int], n: int) -> torch.Tensor:
        """The drafter's output states [n, hidden] at the `n` positions after `context`, from
        one forward over [anchor, mask x ...]; its cache keeps the context's features only."""
        device = self.embedding.device
        anchor = len(context) - 1
        assert self.cached + len(self.unseen) == anchor, "observe() missed committed positions"
        # near a generation's end the reference's block still covers every remaining position
        # and one more: the same block length gives the same drafts
        width = min(self.block_size, n + 2)
        block = torch.full((1, width), self.mask_id, dtype=torch.long, device=device)
        block[0, 0] = context[-1]
        if self.engine is not None and anchor + width > self.engine.max_length:
            raise ValueError(
                f"DFlash drafter: a block to position {anchor + width} exceeds the static cache "
                f"of {self.engine.max_length}"
            )
        features = self.unseen[None]
        noise = F.embedding(block, self.embedding) * self.scale
        start = torch.tensor(self.cached, device=device)
        if self.engine is not None and len(self.unseen) <= HOT_TOKENS:
            lengths = ((features, 1), (noise, 1))
            (state,) = self.engine.call(features, noise, start, lengths=lengths)
        else:
            (state,) = self._forward(features, noise, start)
        # the context's keys and values stay, the block's go
        if self.engine is not None:
            self.engine.seek(anchor)
        else:
            self.cache.crop(-width)
        self.cached, self.unseen = anchor, None
        self.calls += 1
        return state[0, 1 : n + 1]

    def choose(
        self, state: torch.Tensor, logits: torch.Tensor, anchor: int, generator: torch.Generator
    ) -> Draft:
        """The round's draft from the block's states [n, hidden] and logits [n, V]."""
        if self.selector is None:
            tokens, q_probs = self.independent(logits.float(), generator)
        else:
            tokens, q_probs = self.chained(state, logits, anchor, generator)
        return Draft(tokens, q_probs, 1, 0.0)

    def independent(
        self, logits: torch.Tensor, generator: torch.Generator
    ) -> tuple[list[int], torch.Tensor | None]:
        """DFlash: every position drafted on its own, by argmax or from the warped logits."""
        if self.warp.greedy:
            return logits.argmax(-1).tolist(), None
        q_probs = self.warp.probs(logits)
        return torch.multinomial(q_probs, 1, generator=generator)[:, 0].tolist(), q_probs

    def chained(
        self, state: torch.Tensor, logits: torch.Tensor, anchor: int, generator: torch.Generator
    ) -> tuple[list[int], torch.Tensor | None]:
        """DFlash 2: position i picks among its top-k candidates c by
        logit(c) + <P[previous] * W h_i, S[c]>, the previous token starting at the anchor; the
        proposal q is the softmax of those scores at the temperature, over the candidates."""
        selector = self.selector
        unary, candidates = logits.topk(selector.top_k, dim=-1, sorted=False)
        projected = selector.hidden_projection(state)
        previous = torch.tensor(anchor, device=logits.device)
        tokens, q_rows = [], []
        for i in range(len(candidates)):
            pair = selector.predecessor_codebook(previous) * projected[i]
            scores = unary[i] + selector.successor_codebook(candidates[i]) @ pair
            if self.warp.greedy:
                index = scores.argmax()
            else:
                q = (scores.float() / self.warp.temperature).softmax(-1)
                index = torch.multinomial(q, 1, generator=generator)[0]
                q_rows.append(
                    torch.zeros_like(logits[i], dtype=q.dtype).scatter(0, candidates[i], q)
                )
            previous = candidates[i, index]
            tokens.append(int(previous))
        return tokens, torch.stack(q_rows) if q_rows else None


@METHODS.register
class DFlash(DraftVerifyMethod):
    """DFlash: a block-diffusion drafter conditioned on the target's hidden states drafts
    block_size - 1 tokens in one forward; the target verifies them in one forward."""

    name = "dflash"
    Config = DFlashConfig
    drafter_kind = "dflash"

    def build(self, target: CausalLM, drafter: torch.nn.Module, task: object) -> SpeculativeDecoder:
        cfg, warp = self.cfg, self.warp
        block_size = cfg.block_size or drafter.block_size
        return SpeculativeDecoder(
            target,
            DFlashDrafter(drafter, target, block_size, warp),
            make_rule(cfg.rule, cfg.leniency, warp),
            warp,
            GammaSchedule(block_size - 1, "constant"),
        )

    def exact(self) -> bool:
        return is_lossless(self.cfg.rule, self.warp)

    def label(self) -> str:
        block = [] if self.cfg.block_size is None else [f"b{self.cfg.block_size}"]
        return " ".join(
            ["dflash", *block, *rule_label(self.cfg.rule, self.cfg.leniency, self.warp)]
        )

    def cost_model(
        self, decoder: SpeculativeDecoder, prompt_ids: list[int], summary: Summary
    ) -> dict:
        """Leviathan et al.'s model with one drafter call on a block per round; each timed call
        first sees features for the positions its context added (their values do not change
        the cost)."""
        drafter = decoder.drafter
        width = len(drafter.hidden_layers) * drafter.model.config.hidden_size

        def show_features(context: list[int]) -> None:
            seen = drafter.cached + (0 if drafter.unseen is None else len(drafter.unseen))
            if len(context) - 1 <= seen:  # the timed contexts started again: so does the drafter
                drafter.reset()
                seen = 0
            drafter.observe(drafter.embedding.new_zeros(len(context) - 1 - seen, width))

        drafter.reset()
        return cost.speculative(decoder, prompt_ids, summary, before_draft=show_features)
