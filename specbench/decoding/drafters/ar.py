"""SpS: a small causal LM drafts gamma tokens one at a time, keeping its own KV cache."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specbench.decoding.generation import Draft
from specbench.decoding.speculative import GammaSchedule, SpeculativeDecoder
from specbench.decoding.verify import RULES, resolve_rule
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.registry import MethodSpec, register_method


def common_prefix_len(a: list[int], b: list[int], known: int = 0) -> int:
    """Length of the longest common prefix, trusting `a[:known] == b[:known]` after a C-speed check."""
    n = min(len(a), len(b))
    known = min(known, n)
    i = known if a[:known] == b[:known] else 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class ARDrafter:
    """Drafts autoregressively. Its cache holds the last context plus all but the last draft
    token; on the next call only what changed (rejected drafts) is rolled back and re-read."""

    def __init__(self, lm: CausalLM, warp: Warp):
        self.lm, self.warp = lm, warp
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
            logits = self.lm.forward_tokens(feed, keep=1)[0]
            if self.warp.greedy:
                token = int(logits.argmax())
            else:
                q = self.warp.probs(logits)
                token = int(torch.multinomial(q, 1, generator=generator))
                q_rows.append(q)
            tokens.append(token)
            feed = [token]
        self.cached = context + tokens[:-1]
        self.context_len = len(context)
        synchronize(self.lm.device)
        q_probs = torch.stack(q_rows) if q_rows else None
        return Draft(tokens, q_probs, n, time.perf_counter() - t0)


@dataclass
class SpSConfig:
    name: str = "sps"
    gamma: int = 4
    schedule: str = "constant"
    rule: str = "auto"


def check(cfg: SpSConfig, warp: Warp) -> None:
    if cfg.gamma < 1:
        raise ConfigError("method.gamma", cfg.gamma, "must be an integer >= 1")
    if cfg.schedule not in ("constant", "heuristic"):
        raise ConfigError("method.schedule", cfg.schedule, "allowed: constant, heuristic")
    if cfg.rule not in ("auto", *RULES):
        raise ConfigError("method.rule", cfg.rule, f"allowed: auto, {', '.join(RULES)}")
    if cfg.rule == "greedy" and not warp.greedy:
        raise ConfigError("method.rule", cfg.rule, "greedy acceptance needs run.temperature=0; use auto or rejection")


def build(cfg: SpSConfig, target: CausalLM, drafter: CausalLM, warp: Warp) -> SpeculativeDecoder:
    rule = RULES[resolve_rule(cfg.rule, warp)]
    return SpeculativeDecoder(
        target, ARDrafter(drafter, warp), rule, warp, GammaSchedule(cfg.gamma, cfg.schedule)
    )


register_method(MethodSpec(name="sps", config=SpSConfig, build=build, needs_drafter=True, check=check))
