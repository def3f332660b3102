"""SpecDiff (Christopher et al., NAACL 2025): a masked-diffusion LM drafts all gamma positions
in parallel in T denoising steps; the AR target verifies them with the shared rules.

Drafting is MDLM's cached ancestral sampler (Sahoo et al. 2024, `ddpm_cache`) over the block of
gamma masks behind the clamped prefix: time grid linspace(1, eps, T + 1); at each step t -> s a
masked position is revealed with probability (t - s) / t, its token drawn from the denoiser's
SUBS distribution p(x0 | x_t) (warped like the target's; the argmax at temperature 0); the
denoiser runs again only once something was revealed. Positions still masked after T steps
are filled with the argmax ("noise removal").

The proposal distribution q_i the acceptance test needs (`q_source`, METHODS.md section 1):
`reveal_step` - the row position i was sampled from (the final row for noise-removed ones);
`final_step` - each position's row from one more forward over the finished draft, without the
SUBS copy-through, at the temperature but untruncated (so every drafted token keeps mass); `onehot` - q is the drafted token itself (accept with probability p(d)).
Every q is a joint sample's marginal, not the conditional the proof of exactness needs, so
SpecDiff with rejection sampling is approximate; greedy verification is exactly lossless.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specbench.decoding.drafters.ar import fit_vocab
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import GammaSchedule, SpeculativeDecoder
from specbench.decoding.verify import check_rule, make_rule, resolve_rule
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.metrics import cost
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.registry import MethodSpec, register_method

EPS = 1e-5
Q_SOURCES = ("reveal_step", "final_step", "onehot")


def real_token_logits(dlm: MaskedDiffusionLM, block: list[int], vocab_size: int, subs: bool = True):
    """A draft block's logits over the target's vocabulary, the mask token at -inf (it may sit
    inside that vocabulary, as the tiny world's does, or past it, as MDLM's and Dream's do)."""
    logits = fit_vocab(dlm.block_logits(block, subs), vocab_size)
    if dlm.mask_id < vocab_size:
        mask = torch.tensor([dlm.mask_id], device=logits.device)
        logits = logits.index_fill(-1, mask, float("-inf"))
    return logits


class SpecDiffDrafter:
    def __init__(
        self, dlm: MaskedDiffusionLM, warp: Warp, steps: int, q_source: str, vocab_size: int
    ):
        self.dlm, self.warp, self.steps, self.q_source = dlm, warp, steps, q_source
        self.vocab_size = vocab_size  # the target's: q rows live on its vocabulary

    @property
    def calls(self) -> int:
        return self.dlm.calls

    def reset(self) -> None:
        self.dlm.reset()

    def _probs(self, block: list[int], subs: bool = True, truncate: bool = True) -> torch.Tensor:
        """Proposal rows for the block, warped as the target is. `truncate=False` applies the
        temperature only: a row the token was not sampled from must still give it mass."""
        logits = real_token_logits(self.dlm, block, self.vocab_size, subs)
        if self.warp.greedy:
            return logits.softmax(-1)
        if not truncate:
            return (logits / self.warp.temperature).softmax(-1)
        return self.warp.probs(logits)

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        if n == 0:
            return Draft([], None, 0, 0.0)
        dlm, mask = self.dlm, self.dlm.mask_id
        synchronize(dlm.device)
        started, calls = time.perf_counter(), dlm.calls
        dlm.set_prefix(context, room=n)
        block = [mask] * n
        q_rows: list[torch.Tensor | None] = [None] * n
        probs = None
        grid = torch.linspace(1.0, EPS, self.steps + 1).tolist()
        for t, s in zip(grid[:-1], grid[1:]):
            if probs is None:
                probs = self._probs(block)
            masked = [i for i, tok in enumerate(block) if tok == mask]
            u = torch.rand(len(masked), generator=generator, device=probs.device)
            revealed = [i for i, ui in zip(masked, u.tolist()) if ui < (t - s) / t]
            for i in revealed:
                block[i] = self._choose(probs[i], generator)
                q_rows[i] = probs[i]
            if revealed:
                probs = None  # x changed: the cached denoiser output is stale
        still = [i for i, tok in enumerate(block) if tok == mask]
        if still:
            if probs is None:
                probs = self._probs(block)
            for i in still:
                block[i] = int(probs[i].argmax())
                q_rows[i] = probs[i]
        q_probs = self._proposal(block, q_rows)
        synchronize(dlm.device)
        return Draft(block, q_probs, dlm.calls - calls, time.perf_counter() - started)

    def _choose(self, row: torch.Tensor, generator: torch.Generator) -> int:
        if self.warp.greedy:
            return int(row.argmax())
        return int(torch.multinomial(row, 1, generator=generator))

    def _proposal(self, block: list[int], q_rows: list[torch.Tensor]) -> torch.Tensor | None:
        if self.warp.greedy or self.q_source == "onehot":
            return None  # the verification rule reads None as one-hot on the drafted tokens
        if self.q_source == "final_step":
            return self._probs(block, subs=False, truncate=False)
        return torch.stack(q_rows)


@dataclass
class SpecDiffConfig:
    name: str = "specdiff"
    gamma: int = 10
    steps: int = 4
    q_source: str = "reveal_step"
    rule: str = "auto"
    leniency: float = (
        1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical epsilon
    )


def check(cfg: SpecDiffConfig, warp: Warp) -> None:
    if cfg.gamma < 1:
        raise ConfigError("method.gamma", cfg.gamma, "must be an integer >= 1")
    if cfg.steps < 1:
        raise ConfigError("method.steps", cfg.steps, "must be an integer >= 1 (T, denoising steps)")
    if cfg.q_source not in Q_SOURCES:
        raise ConfigError("method.q_source", cfg.q_source, f"allowed: {', '.join(Q_SOURCES)}")
    check_rule(cfg.rule, cfg.leniency, warp)


def lossless(cfg: SpecDiffConfig, warp: Warp) -> bool:
    """Greedy verification is exact; rejection sampling over a joint draft is approximate."""
    return resolve_rule(cfg.rule, warp) == "greedy"


def build(
    cfg: SpecDiffConfig, target: CausalLM, drafter: MaskedDiffusionLM, warp: Warp
) -> SpeculativeDecoder:
    return SpeculativeDecoder(
        target,
        SpecDiffDrafter(drafter, warp, cfg.steps, cfg.q_source, target.vocab_size),
        make_rule(cfg.rule, cfg.leniency, warp),
        warp,
        GammaSchedule(cfg.gamma, "constant"),
    )


register_method(
    MethodSpec(
        name="specdiff",
        config=SpecDiffConfig,
        build=build,
        cost_model=cost.speculative,
        needs_drafter=True,
        drafter_kind="diffusion",
        check=check,
        lossless=lossless,
    )
)
