"""Spatial policies: which masked positions of the current block a diffusion LLM commits at a step.

A policy sees only the confidence of each position's greedy token and which positions are still
masked, so PSD can replay it on the verifier's outputs (and on stale confidences, to draft).

* `quota` — LLaDA's low-confidence remasking: a fixed number of the most confident positions per
  step. `schedule=llada` splits the block evenly over its steps (remainder to the earliest);
  `schedule=dream` reveals `int(n_masked * (1 - s/t))` on Dream's linear time grid. Both commit at
  least one token per step: a step that commits nothing would only spend a forward.
* `threshold` — Fast-dLLM: every position with confidence >= `threshold`, and always the single
  most confident one.
* `dynamic` — Fast-dLLM's factor rule: sort confidences c(1) >= c(2) >= ...; commit the longest
  run with c(i) >= 1 - factor / (i + 1) for every i in it (at least one).
* `localleap` — our reading of LocalLeap's local determinism propagation (no public code, and the
  paper's text was not available here): positions with confidence >= `threshold` are anchors; a
  masked position within `window` positions of an anchor is committed as well when its
  confidence is >= `relaxed_threshold`; with no anchor, the single most confident position.

Confidence (Dream's `alg`): `maskgit_plus` = top-1 probability, `topk_margin` = top-1 minus top-2,
`entropy` = negative entropy of the position's distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specbench.config import ModelConfig
from specbench.errors import ConfigError
from specbench.models.diffusion import ADAPTERS

POLICIES = ("quota", "threshold", "dynamic", "localleap")
CONFIDENCES = ("maskgit_plus", "topk_margin", "entropy")


@dataclass
class SpatialConfig:
    """The knobs every diffusion-LLM decoder shares (the method configs extend it)."""

    block_length: int = 32
    steps: int | None = (
        None  # quota: denoising steps over the whole generation; null = one per token
    )
    policy: str = "quota"
    confidence: str = "maskgit_plus"
    schedule: str = "llada"  # quota only: llada | dream
    threshold: float = 0.9  # threshold; localleap's anchor threshold
    factor: float = 1.0  # dynamic
    relaxed_threshold: float = 0.7  # localleap
    window: int = 2  # localleap
    prefix_cache: bool = False


def check_spatial(cfg: SpatialConfig) -> None:
    if cfg.block_length < 1:
        raise ConfigError("method.block_length", cfg.block_length, "must be >= 1")
    if cfg.steps is not None and cfg.steps < 1:
        raise ConfigError("method.steps", cfg.steps, "must be null (one token per step) or >= 1")
    if cfg.policy not in POLICIES:
        raise ConfigError("method.policy", cfg.policy, f"allowed: {', '.join(POLICIES)}")
    if cfg.confidence not in CONFIDENCES:
        raise ConfigError("method.confidence", cfg.confidence, f"allowed: {', '.join(CONFIDENCES)}")
    if cfg.policy != "quota" and cfg.confidence == "entropy":
        raise ConfigError(
            "method.confidence",
            cfg.confidence,
            f"policy {cfg.policy} compares confidences with thresholds in [0, 1]; "
            "allowed: maskgit_plus, topk_margin",
        )
    if cfg.schedule not in ("llada", "dream"):
        raise ConfigError("method.schedule", cfg.schedule, "allowed: llada, dream")
    for key in ("threshold", "relaxed_threshold"):
        if not 0 <= getattr(cfg, key) <= 1:
            raise ConfigError(f"method.{key}", getattr(cfg, key), "must be in [0, 1]")
    if cfg.factor <= 0:
        raise ConfigError("method.factor", cfg.factor, "must be > 0")
    if cfg.window < 0:
        raise ConfigError("method.window", cfg.window, "must be >= 0")


def check_cache(cfg: SpatialConfig, target: ModelConfig) -> None:
    """A prefix cache only where the adapter has one (Dream's and MDLM's have none)."""
    wrapper = ADAPTERS[target.adapter][0]
    if cfg.prefix_cache and not wrapper.supports_prefix_cache:
        raise ConfigError(
            "method.prefix_cache",
            cfg.prefix_cache,
            f"adapter {target.adapter} has no prefix cache; allowed: false",
        )


def one_token_per_step(cfg: SpatialConfig) -> bool:
    """The vanilla decoder: LLaDA with steps = gen length (every other policy can differ)."""
    return cfg.policy == "quota" and cfg.steps is None


def greedy_confidence(logits: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Each position's greedy token and its confidence, from float32 logits [n, V]."""
    probs = logits.double().softmax(-1)
    top = probs.topk(2, dim=-1)
    tokens = top.indices[:, 0]
    if kind == "maskgit_plus":
        return tokens, top.values[:, 0]
    if kind == "topk_margin":
        return tokens, top.values[:, 0] - top.values[:, 1]
    return tokens, (probs * probs.clamp_min(1e-300).log()).sum(-1)


class Policy(Protocol):
    def select(self, conf: torch.Tensor, masked: torch.Tensor, step: int) -> torch.Tensor:
        """Boolean [n]: the masked positions to commit at `step` (0-based within the block)."""
        ...


def _top(conf: torch.Tensor, masked: torch.Tensor, n: int) -> torch.Tensor:
    n = max(1, min(n, int(masked.sum())))
    chosen = conf.masked_fill(~masked, float("-inf")).topk(n).indices
    return torch.zeros_like(masked).index_fill_(0, chosen, True)


@dataclass
class Quota:
    steps: int  # per block
    schedule: str

    def count(self, block: int, n_masked: int, step: int) -> int:
        if step >= self.steps - 1:
            return n_masked
        if self.schedule == "llada":
            return block // self.steps + (step < block % self.steps)
        t, s = (1 - (1 - 1e-3) * i / self.steps for i in (step, step + 1))
        return int(n_masked * (1 - s / t))

    def select(self, conf: torch.Tensor, masked: torch.Tensor, step: int) -> torch.Tensor:
        return _top(conf, masked, self.count(len(conf), int(masked.sum()), step))


@dataclass
class Threshold:
    threshold: float

    def select(self, conf: torch.Tensor, masked: torch.Tensor, step: int) -> torch.Tensor:
        return (masked & (conf >= self.threshold)) | _top(conf, masked, 1)


@dataclass
class Dynamic:
    factor: float

    def select(self, conf: torch.Tensor, masked: torch.Tensor, step: int) -> torch.Tensor:
        ranked = conf[masked].sort(descending=True).values
        ranks = torch.arange(1, len(ranked) + 1, device=conf.device, dtype=ranked.dtype)
        ok = (ranked >= 1 - self.factor / (ranks + 1)).long().cumprod(0)
        return _top(conf, masked, int(ok.sum()))


@dataclass
class LocalLeap:
    threshold: float
    relaxed: float
    window: int

    def select(self, conf: torch.Tensor, masked: torch.Tensor, step: int) -> torch.Tensor:
        anchors = masked & (conf >= self.threshold)
        if not anchors.any():
            return _top(conf, masked, 1)
        where = anchors.nonzero()[:, 0]
        index = torch.arange(len(conf), device=conf.device)
        near = ((index[:, None] - where[None, :]).abs() <= self.window).any(1)
        return anchors | (masked & near & (conf >= self.relaxed))


def make_policy(cfg: SpatialConfig, steps_per_block: int) -> Policy:
    if cfg.policy == "quota":
        return Quota(steps_per_block, cfg.schedule)
    if cfg.policy == "threshold":
        return Threshold(cfg.threshold)
    if cfg.policy == "dynamic":
        return Dynamic(cfg.factor)
    return LocalLeap(cfg.threshold, cfg.relaxed_threshold, cfg.window)
