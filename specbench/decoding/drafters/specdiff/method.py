"""SpecDiff (Christopher et al., NAACL 2025): a masked-diffusion LM drafts all gamma positions
in parallel in T denoising steps; the AR target verifies them with the shared rules.

Drafting is MDLM's cached ancestral sampler (Sahoo et al. 2024: `Diffusion._sample` with
`ddpm_cache`, i.e. `_ddpm_caching_update`) over the block of gamma masks behind the clamped
prefix, token for token: time grid linspace(1, eps, T + 1) on the drafter's device; at step i,
t = grid[i] and s = t - (1 - eps) / T (float32, as upstream computes them), q = p * (t - s) on
the real tokens and q = s on the mask column, and each position takes argmax(q / g) with
g = 1e-10 - log(u + 1e-10) (upstream's `_sample_categorical`), so a masked position is revealed
with probability (t - s) / t, its token drawn from the denoiser's SUBS distribution p(x0 | x_t)
(warped like the target's; at temperature 0 the argmax of p). By default a step draws that law
compactly (`reveal_winners`: one uniform per block position for the reveal, one categorical
draw per position when sampling). With `upstream_rng` it draws upstream's stream: ONE draw per
step of shape [1, len(prefix) + gamma, W] (W = the drafter's output width, the mask column
included), the prefix rows drawn and unused, exactly as upstream's `torch.rand_like` over the
whole sequence, so with a generator seeded as upstream's global RNG the drafts are upstream's
token for token (the golden tests set it). That stream costs len(prefix) x W uniforms and their
logarithms a step: on the tiny world's default cell it took SpecDiff from 0.55x to 0.31x. The denoiser runs again only once something was revealed (and every
step for a time-conditioned drafter, whose sigma changes; upstream disables its cache then too).
Positions still masked after T steps are filled with the argmax ("noise removal"), reusing the
last denoiser output when nothing changed since (upstream runs one more forward, which gives the
same argmax without time conditioning) and skipping the forward when nothing is masked.

The proposal distribution q_i the acceptance test needs (`q_source`, METHODS.md section 1):
`reveal_step` - the row position i was sampled from (one-hot on the argmax for a position the
sampler left masked: that token was chosen, not drawn);
`final_step` - each position's row from one more forward over the finished draft, without the
SUBS copy-through, at the temperature but untruncated (so every drafted token keeps mass); `onehot` - q is the drafted token itself (accept with probability p(d)).
With T >= 2 a `reveal_step` or `final_step` row is a joint sample's marginal, not the
conditional the proof of exactness needs, so rejection sampling is approximate there; with
T = 1 and `reveal_step` the tokens are independent draws from their rows, and `onehot` is exact
for any draft law (`SpecDiff.exact`); greedy verification is exactly lossless.
"""

from __future__ import annotations

import time

import torch

from specbench.decoding.drafters.logits import real_token_logits
from specbench.decoding.drafters.specdiff.config import SpecDiffConfig
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import (
    Drafter,
    DraftVerifyMethod,
    GammaSchedule,
    SpeculativeDecoder,
)
from specbench.decoding.verify import is_lossless, make_rule, resolve_rule, rule_label
from specbench.decoding.warp import Warp
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.registry import METHODS

EPS = 1e-5


def gumbel_winners(
    probs: torch.Tensor,
    t: torch.Tensor,
    dt: float,
    mask_id: int,
    width: int,
    prefix: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """Upstream's `_ddpm_caching_update` draw for the block rows: argmax over `width` columns of
    q / g, q = probs * (t - s) with the mask column at s = t - dt; the uniforms cover the prefix
    rows too (drawn, then dropped), so the stream lines up with upstream's whole-sequence draw."""
    rows = probs.shape[0]
    move_t, move_s = t, t - dt
    scaled = probs * (move_t - move_s)
    q = scaled.new_zeros(rows, max(width, mask_id + 1))
    cut = min(q.shape[-1], scaled.shape[-1])
    q[:, :cut] = scaled[:, :cut]
    q[:, mask_id] = move_s[0, 0]
    shape = (1, prefix + rows, q.shape[-1])
    u = torch.rand(shape, generator=generator, device=probs.device)[0, prefix:]
    gumbel_norm = 1e-10 - (u + 1e-10).log()
    return (q / gumbel_norm).argmax(dim=-1)


def reveal_winners(
    probs: torch.Tensor,
    t: torch.Tensor,
    dt: float,
    mask_id: int,
    greedy: bool,
    generator: torch.Generator,
) -> torch.Tensor:
    """The same law as `gumbel_winners`, drawn compactly: each row is revealed with probability
    (t - s) / t (the mask column's share of q is s / t), its token the argmax of its row at
    temperature 0, else a draw from it; `len(rows)` uniforms, plus one draw per row to sample."""
    u = torch.rand(probs.shape[0], generator=generator, device=probs.device)
    move_t, move_s = t[0, 0], t[0, 0] - dt
    revealed = u < (move_t - move_s) / move_t
    if greedy:
        tokens = probs.argmax(-1)
    else:
        tokens = torch.multinomial(probs, 1, generator=generator)[:, 0]
    return torch.where(revealed, tokens, mask_id)


class SpecDiffDrafter(Drafter):
    def __init__(
        self,
        dlm: MaskedDiffusionLM,
        warp: Warp,
        steps: int,
        q_source: str,
        vocab_size: int,
        eps: float = EPS,
        upstream_rng: bool = False,
    ):
        self.dlm, self.warp, self.steps, self.q_source = dlm, warp, steps, q_source
        self.vocab_size = vocab_size  # the target's: q rows live on its vocabulary
        self.eps = eps  # the time grid's end (upstream's `_sample(eps=1e-5)`)
        self.upstream_rng = upstream_rng  # draw uniforms for the prefix rows too

    @property
    def calls(self) -> int:
        return self.dlm.calls

    def reset(self) -> None:
        self.dlm.reset()

    def _probs(
        self,
        block: list[int],
        subs: bool = True,
        truncate: bool = True,
        t: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Proposal rows for the block, warped as the target is. `truncate=False` applies the
        temperature only: a row the token was not sampled from must still give it mass."""
        logits = real_token_logits(self.dlm, block, self.vocab_size, subs, t)
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
        prefix = len(dlm.set_prefix(context, room=n))
        block = torch.full((n,), mask, device=dlm.device)
        q_rows = None  # the rows revealed positions were drawn from (`reveal_step`)
        probs, timed = None, dlm.time_conditioned
        grid = torch.linspace(1, self.eps, self.steps + 1, device=dlm.device)
        dt = (1 - self.eps) / self.steps
        for step in range(self.steps):
            t = grid[step] * torch.ones(1, 1, device=dlm.device)
            if probs is None or timed:
                probs = self._probs(block.tolist(), t=t)
            if self.upstream_rng:
                winners = gumbel_winners(probs, t, dt, mask, dlm.vocab_size, prefix, generator)
            else:
                winners = reveal_winners(probs, t, dt, mask, self.warp.greedy, generator)
            revealed = (block == mask) & (winners != mask)
            if revealed.any():
                block = torch.where(
                    revealed, probs.argmax(-1) if self.warp.greedy else winners, block
                )
                q_rows = self._keep_rows(q_rows, revealed, probs)
                probs = None  # x changed: the cached denoiser output is stale
        still = block == mask
        final_t = grid[-1] * torch.ones(1, 1, device=dlm.device)
        if still.any():
            if probs is None or timed:
                probs = self._probs(block.tolist(), t=final_t)
            block = torch.where(still, probs.argmax(-1), block)
            onehot = torch.zeros_like(probs).scatter_(1, probs.argmax(-1, keepdim=True), 1.0)
            q_rows = self._keep_rows(q_rows, still, onehot)
        tokens = block.tolist()
        q_probs = self._proposal(tokens, q_rows, final_t)
        synchronize(dlm.device)
        return Draft(tokens, q_probs, dlm.calls - calls, time.perf_counter() - started)

    def _keep_rows(
        self, q_rows: torch.Tensor | None, chosen: torch.Tensor, rows: torch.Tensor
    ) -> torch.Tensor | None:
        """`rows` at the `chosen` positions into the proposal, where one is needed."""
        if self.warp.greedy or self.q_source != "reveal_step":
            return None
        q_rows = torch.zeros_like(rows) if q_rows is None else q_rows
        return torch.where(chosen[:, None], rows, q_rows)

    def _proposal(
        self, block: list[int], q_rows: torch.Tensor | None, t: torch.Tensor
    ) -> torch.Tensor | None:
        if self.warp.greedy or self.q_source == "onehot":
            return None  # the verification rule reads None as one-hot on the drafted tokens
        if self.q_source == "final_step":
            return self._probs(block, subs=False, truncate=False, t=t)
        return q_rows


@METHODS.register
class SpecDiff(DraftVerifyMethod):
    """SpecDiff (Christopher et al., NAACL 2025): an MDLM drafts gamma tokens in T steps.

    Exact: greedy verification always. Under rejection sampling, a position's test is exact
    when its proposal row is the law its token was drawn from given the drafted tokens before
    it. That holds for T = 1 with `reveal_step` (one denoiser output, independent draws; a
    position the sampler leaves masked is filled by its argmax and proposed one-hot), and
    for `onehot` at any T (accept d with p(d), else resample p without d: the output law is
    p whatever law drew d). For T >= 2 with `reveal_step` or `final_step` a token revealed
    at a later step was drawn given tokens to its right, so its row is not that conditional:
    labelled lossy."""

    name = "specdiff"
    Config = SpecDiffConfig
    drafter_kind = "diffusion"

    def build(
        self, target: CausalLM, drafter: MaskedDiffusionLM, task: object
    ) -> SpeculativeDecoder:
        cfg, warp = self.cfg, self.warp
        return SpeculativeDecoder(
            target,
            SpecDiffDrafter(
                drafter,
                warp,
                cfg.steps,
                cfg.q_source,
                target.vocab_size,
                upstream_rng=cfg.upstream_rng,
            ),
            make_rule(cfg.rule, cfg.leniency, warp),
            warp,
            GammaSchedule(cfg.gamma, "constant"),
        )

    def exact(self) -> bool:
        rule = resolve_rule(self.cfg.rule, self.warp)
        if rule == "greedy":
            return True
        q = self.cfg.q_source
        exact_q = q == "onehot" or (q == "reveal_step" and self.cfg.steps == 1)
        return is_lossless(self.cfg.rule, self.warp) and exact_q

    def label(self) -> str:
        cfg = self.cfg
        q = [] if self.warp.greedy else [cfg.q_source]
        rule = rule_label(cfg.rule, cfg.leniency, self.warp)
        return " ".join(["specdiff", f"γ{cfg.gamma}", f"T{cfg.steps}", *q, *rule])
