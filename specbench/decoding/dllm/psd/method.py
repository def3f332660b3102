"""PSD: parallel speculative decoding inside a diffusion LLM (Sun et al., arXiv 2605.15609).

Each iteration starts from a state X of the block and the logits of one forward on it:
1. the spatial policy commits its positions -> D_0 (exactly the vanilla decoder's next state);
2. drafts D_1 .. D_d: the policy replayed on the same confidences, with the positions already
   drafted removed, fills the next positions of the confidence ranking with their greedy tokens
   (with a one-token policy: the next most confident position per depth), no model call;
3. one batched forward on every draft that still has a mask (all share the prefix);
4. hierarchical acceptance: D_m is kept if, for every m' <= m, the policy applied to the
   verifier's logits on D_{m'-1} commits exactly the positions and tokens D_{m'} added; the
   deepest such D_m becomes the state, and its logits from the batch are the next iteration's
   forward (so an iteration costs one call).
Every accepted state is a state the vanilla decoder passes through, so PSD's output equals its
policy's decoder token for token (up to batched-matmul rounding) and only the calls drop.
"""

from __future__ import annotations

import torch

from specbench.decoding.dllm.policies import Policy, one_token_per_step
from specbench.decoding.dllm.psd.config import PSDConfig
from specbench.decoding.dllm.vanilla.method import (
    BlockDecoder,
    DiffusionLLMMethod,
    StopScan,
    Trace,
    vanilla,
)
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.registry import METHODS


class PSDDecoder(BlockDecoder):
    def __init__(self, target: MaskedDiffusionLM, cfg: PSDConfig):
        super().__init__(target, cfg)
        self.depth = cfg.depth

    def drafts(
        self, block: torch.Tensor, scores: tuple, policy: Policy, step: int
    ) -> list[torch.Tensor]:
        """D_0 .. D_d from one forward's scores (no model call); a draft without masks ends the
        chain. D_0 is the policy's own step. Each deeper draft adds what the policy would
        commit at that future step (paper, step 3: n_k tokens), which is known ahead only for a
        fixed-count policy (quota: replayed on the same scores). A confidence-driven policy's
        count depends on the confidences the verifier will return, so `draft_width=last`
        takes n_k = n_0, the count the policy just committed, from the confidence ranking;
        `replay` replays it on the stale scores instead (after D_0 nothing left clears a
        threshold, so every deeper draft adds one token)."""
        chain = [block]
        replay = policy.steps is not None or self.cfg.draft_width == "replay"
        if not replay:
            return self.ranked_chain(block, scores, policy, step)
        for k in range(self.depth + 1):
            if not (chain[-1] == self.target.mask_id).any():
                break
            chain.append(self.policy_step(chain[-1], scores, policy, step + k))
        return chain[1:]

    def ranked_chain(
        self, block: torch.Tensor, scores: tuple, policy: Policy, step: int
    ) -> list[torch.Tensor]:
        """D_0, then D_k = D_{k-1} plus the next n_0 masked positions by confidence, each with
        its greedy token."""
        tokens, conf = scores
        chain = [self.policy_step(block, scores, policy, step)]
        masked = chain[0] == self.target.mask_id
        width = max(1, int((chain[0] != block).sum()))
        order = conf.masked_fill(~masked, float("-inf")).argsort(descending=True, stable=True)
        order = order[: int(masked.sum())]
        for k in range(self.depth):
            where = order[k * width : (k + 1) * width]
            if len(where) == 0:
                break
            draft = chain[-1].clone()
            draft[where] = tokens[where]
            chain.append(draft)
        return chain

    def accepted_depth(
        self, chain: list[torch.Tensor], verified: torch.Tensor, policy: Policy, step: int
    ) -> tuple[int, tuple | None]:
        """The deepest m whose every step is what the policy does on the verifier's output, and
        the scores of D_m's logits (None when D_m is finished), each row scored once."""
        for m in range(1, len(chain)):
            scores = self.scores(verified[m - 1], chain[m - 1])
            if not torch.equal(self.policy_step(chain[m - 1], scores, policy, step + m), chain[m]):
                return m - 1, scores
        m = len(chain) - 1
        return m, self.scores(verified[m], chain[m]) if m < len(verified) else None

    def decode_block(
        self, canvas: torch.Tensor, lo: int, hi: int, policy: Policy, trace: Trace, scan: StopScan
    ) -> None:
        mask = self.target.mask_id
        scores = self.scores(self.logits(canvas, lo, hi)[0], canvas[0, lo:hi])
        trace.call()
        step = 0
        while True:
            chain = self.drafts(canvas[0, lo:hi], scores, policy, step)
            trace.commit(canvas[0, lo:hi], chain[0])
            canvas[0, lo:hi] = chain[0]  # the policy's own step on a verified forward: taken
            if not (chain[0] == mask).any() or scan(canvas):
                return
            still_masked = [d for d in chain if (d == mask).any()]  # all but a finished last one
            batch = canvas.expand(len(still_masked), -1).clone()
            batch[:, lo:hi] = torch.stack(still_masked)
            verified = self.logits(batch, lo, hi)
            trace.call()
            m, scores = self.accepted_depth(chain, verified, policy, step)
            trace.depths.append(len(chain) - 1)
            trace.accepted.append(m)
            trace.commit(chain[0], chain[m])
            canvas[0, lo:hi] = chain[m]
            step += m + 1
            if m == len(still_masked) or scan(canvas):  # the block, or the output, is finished
                return


OWN_POLICY = "its policy's own decoder, one step per forward (same knobs)"


class SpeculativeDLLMMethod(DiffusionLLMMethod):
    """Speculation inside a diffusion LLM: exact with respect to its policy's own decoder (the
    baseline arm: what speculation buys at a fixed policy), and also measured, as the papers
    report it, against one token per step (`vs.one_token_per_step`)."""

    baseline_name = OWN_POLICY
    round_unit = "steps"

    def baseline(self, target: MaskedDiffusionLM) -> BlockDecoder:
        return BlockDecoder(target, self.cfg)

    def references(
        self, target: MaskedDiffusionLM, drafter: None
    ) -> dict[str, BlockDecoder | None]:
        one = None if one_token_per_step(self.cfg) else vanilla(self.cfg, target)
        return {"one_token_per_step": one}


@METHODS.register
class PSD(SpeculativeDLLMMethod):
    name = "psd"
    Config = PSDConfig

    def build(self, target: MaskedDiffusionLM, drafter: None, task: object) -> PSDDecoder:
        return PSDDecoder(target, self.cfg)

    def label(self) -> str:
        width = " replay" if self.cfg.draft_width == "replay" and self.cfg.policy != "quota" else ""
        return f"{super().label()} d{self.cfg.depth}{width}"
