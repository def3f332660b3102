"""SpS: a small causal LM drafts gamma tokens one at a time, keeping its own KV cache."""

from __future__ import annotations

import time

import torch

from specbench.decoding.configs import SpSConfig
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import (
    Drafter,
    DraftVerifyMethod,
    GammaSchedule,
    SpeculativeDecoder,
)
from specbench.decoding.verify import is_lossless, make_rule, resolve_rule
from specbench.decoding.warp import Warp
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.registry import METHODS


def common_prefix_len(a: list[int], b: list[int], known: int = 0) -> int:
    """Length of the longest common prefix, trusting `a[:known] == b[:known]` after a C-speed check."""
    n = min(len(a), len(b))
    known = min(known, n)
    i = known if a[:known] == b[:known] else 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def fit_vocab(logits: torch.Tensor, size: int) -> torch.Tensor:
    """Logits over exactly `size` ids: extra rows dropped, missing ones at -inf."""
    if logits.shape[-1] >= size:
        return logits[..., :size]
    pad = logits.new_full((*logits.shape[:-1], size - logits.shape[-1]), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


class ARDrafter(Drafter):
    """Drafts autoregressively, stopping early at a stop token. Its cache holds the last context
    plus all but the last draft token; on the next call only what changed (rejected drafts) is
    rolled back and re-read. Its logits are cut or padded to the target's vocabulary size
    (checkpoints of one tokenizer may pad their embedding matrices differently)."""

    def __init__(self, lm: CausalLM, warp: Warp, stop_ids: set[int], vocab_size: int):
        self.lm, self.warp, self.stop_ids, self.vocab_size = lm, warp, stop_ids, vocab_size
        self.cached: list[int] = []
        self.context_len = 0

    @property
    def calls(self) -> int:
        return self.lm.calls

    def reset(self) -> None:
        self.lm.reset()
        self.cached, self.context_len = [], 0

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        if n == 0:
            return Draft([], None, 0, 0.0)
        synchronize(self.lm.device)
        t0 = time.perf_counter()
        keep = min(common_prefix_len(self.cached, context, self.context_len), len(context) - 1)
        self.lm.rollback(keep)
        feed = context[keep:]
        tokens: list[int] = []
        q_rows: list[torch.Tensor] = []
        for _ in range(n):
            logits = fit_vocab(self.lm.forward_tokens(feed, keep=1)[0], self.vocab_size)
            if self.warp.greedy:
                token = int(logits.argmax())
            else:
                q = self.warp.probs(logits)
                token = int(torch.multinomial(q, 1, generator=generator))
                q_rows.append(q)
            tokens.append(token)
            if token in self.stop_ids:
                break
            feed = [token]
        self.cached = context + tokens[:-1]
        self.context_len = len(context)
        synchronize(self.lm.device)
        q_probs = torch.stack(q_rows) if q_rows else None
        return Draft(tokens, q_probs, len(tokens), time.perf_counter() - t0)


def rule_label(rule: str, leniency: float, warp: Warp) -> list[str]:
    """A lenient rule and its knob for a label; nothing for the exact rules."""
    return [] if is_lossless(rule, warp) else [f"{resolve_rule(rule, warp)}{leniency:g}"]


@METHODS.register
class SpS(DraftVerifyMethod):
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a small causal LM drafts
    gamma tokens, the target verifies them in one forward."""

    name = "sps"
    Config = SpSConfig
    drafter_kind = "causal"
    marker = "o"

    def build(self, target: CausalLM, drafter: CausalLM, task: object) -> SpeculativeDecoder:
        cfg, warp = self.cfg, self.warp
        return SpeculativeDecoder(
            target,
            ARDrafter(drafter, warp, target.eos_token_ids, target.vocab_size),
            make_rule(cfg.rule, cfg.leniency, warp),
            warp,
            GammaSchedule(cfg.gamma, cfg.schedule),
        )

    def exact(self) -> bool:
        return is_lossless(self.cfg.rule, self.warp)

    def label(self) -> str:
        schedule = [] if self.cfg.schedule == "constant" else [self.cfg.schedule]
        rule = rule_label(self.cfg.rule, self.cfg.leniency, self.warp)
        return " ".join(["sps", f"γ{self.cfg.gamma}", *schedule, *rule])
