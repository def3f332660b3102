"""Spatial policies: which masked positions of the current block a diffusion LLM commits at a step.

A policy sees only the confidence of each position's greedy token and which positions are still
masked, so PSD can replay it on the verifier's outputs (and on stale confidences, to draft).

* `quota` — LLaDA's low-confidence remasking: a fixed number of the most confident positions per
  step. `schedule=llada` splits the block evenly over its steps (remainder to the earliest);
  `schedule=dream` reveals `int(n_masked * (1 - s/t))` on Dream's linear time grid (float32, as
  Dream computes it), which can be 0: such a step spends its forward and commits nothing, as in
  Dream. Either way a block takes exactly its `steps` forwards, the last one committing the rest.
* `threshold` — Fast-dLLM: every position with confidence >= `threshold`, and always the single
  most confident one.
* `dynamic` — Fast-dLLM's factor rule: sort confidences c(1) >= c(2) >= ...; commit the longest
  run with c(i) >= 1 - factor / (i + 1) for every i in it (at least one).
* `origin` — Dream's default `alg`: at step s of its time grid every masked position is revealed
  with probability 1 - s/t (all of them at the last step), one uniform draw per masked position
  in canvas order from the run's generator, as Dream draws from torch's global one; the
  confidence plays no part. Random, so never a draft policy (PSD, Spiffy).
* `localleap` — our reading of LocalLeap's local determinism propagation (no public code, and the
  paper's text was not available here): positions with confidence >= `threshold` are anchors; a
  masked position within `window` positions of an anchor is committed as well when its
  confidence is >= `relaxed_threshold`; with no anchor, the single most confident position.

Confidence (Dream's `alg`): `maskgit_plus` = top-1 probability (LLaDA's `low_confidence`),
`topk_margin` = top-1 minus top-2, `entropy` = negative entropy of the position's distribution.
Each is computed as the reference code of the decoded model's family computes it
(`MaskedDiffusionLM.reference`), because on bf16 checkpoints the softmax's dtype and the source
of the greedy token decide near-ties:
* `llada` (LLaDA's `generate`, the quota policy on LLaDA and the tiny world): token = argmax of
  the logits, softmax in the logits' dtype over the whole vocabulary (mask token included);
* `fast_dllm` (Fast-dLLM's `get_transfer_index`: every other policy on LLaDA): token = argmax
  of the logits, softmax in float64;
* `dream` (Dream's `sample_tokens`, every policy on Dream): softmax in the logits' dtype, token
  and top-1 from `probs.max`, entropy as sum p * log(p + 1e-10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specbench.config import ModelConfig
from specbench.decoding.knobs import SpatialConfig
from specbench.errors import ConfigError
from specbench.models.diffusion import ADAPTERS


def check_cache(cfg: SpatialConfig, target: ModelConfig) -> None:
    """A prefix cache only where the adapter has one (MDLM's has none); the dual cache extends
    the prefix cache."""
    if cfg.dual_cache and not cfg.prefix_cache:
        raise ConfigError(
            "method.dual_cache",
            cfg.dual_cache,
            "keeps the prefix cache too; set method.prefix_cache=true",
        )
    wrapper = ADAPTERS[target.adapter][0]
    if cfg.reference != "auto" and target.adapter == "dream":
        raise ConfigError(
            "method.reference",
            cfg.reference,
            "Dream's and Fast-dLLM's Dream code score alike (Dream's `sample_tokens`); allowed: auto",
        )
    if cfg.prefix_cache and not wrapper.supports_prefix_cache:
        raise ConfigError(
            "method.prefix_cache",
            cfg.prefix_cache,
            f"adapter {target.adapter} has no prefix cache; allowed: false",
        )
    if cfg.dual_cache and not wrapper.supports_dual_cache:
        raise ConfigError(
            "method.dual_cache",
            cfg.dual_cache,
            f"adapter {target.adapter} reads no suffix to cache; allowed: false",
        )


def one_token_per_step(cfg: SpatialConfig) -> bool:
    """The vanilla decoder: LLaDA's quota with steps = gen length. Every other policy can commit
    several tokens at a step, and Dream's grid with as many steps as masks commits none at a
    block's first step and two at its last (int(32 x 0.031) = 0 for a 32-block)."""
    return cfg.policy == "quota" and cfg.steps is None and cfg.schedule == "llada"


def greedy_confidence(
    logits: torch.Tensor, kind: str, reference: str = "llada"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each position's greedy token and its confidence from logits [n, V] in the model's dtype,
    as `reference`'s code computes them."""
    if reference == "dream":
        probs = logits.softmax(-1)
        top1, tokens = probs.max(-1)
    else:
        tokens = logits.argmax(-1)
        probs = (logits.double() if reference == "fast_dllm" else logits).softmax(-1)
        top1 = probs.gather(-1, tokens[:, None])[:, 0]
    if kind == "maskgit_plus":
        return tokens, top1
    if kind == "topk_margin":
        top2 = probs.topk(2, dim=-1).values
        return tokens, top2[:, 0] - top2[:, 1]
    return tokens, (probs * (probs + 1e-10).log()).sum(-1)


# (columns before, columns after) the block in the row a reference ranks over, all -inf
Frame = tuple[int, int]
BLOCK: Frame = (0, 0)


class Policy(Protocol):
    # forwards per block when fixed (quota); None: until the block has no mask
    steps: int | None

    def select(
        self, conf: torch.Tensor, masked: torch.Tensor, step: int, frame: Frame = BLOCK
    ) -> torch.Tensor:
        """Boolean [n]: the masked positions to commit at `step` (0-based within the block),
        ranked as the reference ranks: over the block inside `frame`."""
        ...


def _top(conf: torch.Tensor, masked: torch.Tensor, n: int, frame: Frame = BLOCK) -> torch.Tensor:
    """The `n` most confident masked positions (none when n is 0), chosen by `topk` over the
    row the reference ranks: the block's confidences, -inf where committed, inside `frame`'s
    -inf columns (Dream and LLaDA rank a row as long as the canvas). The -inf columns are never
    chosen, but equal confidences, common in bf16, fall by the row's layout."""
    n = min(n, int(masked.sum()))
    row = torch.nn.functional.pad(conf.masked_fill(~masked, float("-inf")), frame, value=-torch.inf)
    chosen = row.topk(n).indices - frame[0]
    return torch.zeros_like(masked).index_fill_(0, chosen, True)


DREAM_EPS = 1e-3


def dream_grid(steps: int) -> torch.Tensor:
    """Dream's time grid, float32 as `diffusion_generate` builds it."""
    return torch.linspace(1, DREAM_EPS, steps + 1)


@dataclass
class Quota:
    steps: int  # per block
    schedule: str

    def __post_init__(self) -> None:
        self.grid = dream_grid(self.steps) if self.schedule == "dream" else None

    def count(self, block: int, n_masked: int, step: int) -> int:
        """LLaDA: the block's masks split evenly over the steps, the remainder to the earliest
        (`get_num_transfer_tokens`); Dream: int(n_masked * (1 - s / t)) in float32 tensors."""
        if step >= self.steps - 1:
            return n_masked
        if self.grid is None:
            return block // self.steps + (step < block % self.steps)
        t, s = self.grid[step], self.grid[step + 1]
        return int(torch.tensor(n_masked, dtype=torch.float32) * (1 - s / t))

    def select(
        self, conf: torch.Tensor, masked: torch.Tensor, step: int, frame: Frame = BLOCK
    ) -> torch.Tensor:
        return _top(conf, masked, self.count(len(conf), int(masked.sum()), step), frame)


@dataclass
class Threshold:
    threshold: float
    steps = None

    def select(
        self, conf: torch.Tensor, masked: torch.Tensor, step: int, frame: Frame = BLOCK
    ) -> torch.Tensor:
        return (masked & (conf >= self.threshold)) | _top(conf, masked, 1, frame)


@dataclass
class Dynamic:
    factor: float
    steps = None

    def select(
        self, conf: torch.Tensor, masked: torch.Tensor, step: int, frame: Frame = BLOCK
    ) -> torch.Tensor:
        ranked = conf[masked].sort(descending=True).values
        ranks = torch.arange(1, len(ranked) + 1, device=conf.device, dtype=ranked.dtype)
        ok = (ranked >= 1 - self.factor / (ranks + 1)).long().cumprod(0)
        return _top(conf, masked, max(1, int(ok.sum())), frame)


@dataclass
class LocalLeap:
    threshold: float
    relaxed: float
    window: int
    steps = None

    def select(
        self, conf: torch.Tensor, masked: torch.Tensor, step: int, frame: Frame = BLOCK
    ) -> torch.Tensor:
        anchors = masked & (conf >= self.threshold)
        if not anchors.any():
            return _top(conf, masked, 1, frame)
        where = anchors.nonzero()[:, 0]
        index = torch.arange(len(conf), device=conf.device)
        near = ((index[:, None] - where[None, :]).abs() <= self.window).any(1)
        return anchors | (masked & near & (conf >= self.relaxed))


@dataclass
class Origin:
    steps: int  # per block
    generator: torch.Generator

    def __post_init__(self) -> None:
        self.grid = dream_grid(self.steps)

    def select(
        self, conf: torch.Tensor, masked: torch.Tensor, step: int, frame: Frame = BLOCK
    ) -> torch.Tensor:
        draws = torch.rand(int(masked.sum()), generator=self.generator).to(masked.device)
        if step < self.steps - 1:
            revealed = draws < 1 - self.grid[step + 1] / self.grid[step]
        else:
            revealed = draws < 1
        return masked.masked_scatter(masked, revealed)


def make_policy(cfg: SpatialConfig, steps_per_block: int, generator: torch.Generator) -> Policy:
    if cfg.policy == "origin":
        return Origin(steps_per_block, generator)
    if cfg.policy == "quota":
        return Quota(steps_per_block, cfg.schedule)
    if cfg.policy == "threshold":
        return Threshold(cfg.threshold)
    if cfg.policy == "dynamic":
        return Dynamic(cfg.factor)
    return LocalLeap(cfg.threshold, cfg.relaxed_threshold, cfg.window)
