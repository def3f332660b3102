"""FailFast (Pan et al. 2025, arXiv 2512.20573; github.com/ruipeterpan/failfast): a diffusion LM
drafts for an AR target with a speculation length decided inside each round (Algorithm 1).

The rule (`SpeculationLength`) is upstream's `generate_draft_tokens_arbitrary_length`, the
function its README names as Algorithm 1 (in its Fast-dLLM v2 fork's modeling.py, called from
`failfast.py`'s `get_next_tokens_dllm`): every round starts at `spec_len`; each denoising
forward records the confidence (softmax probability of the argmax) of every still-masked
position of the small block it denoises; once the first `spec_len` draft positions are all
unmasked, the draft stops if any recorded confidence is below `lowconf_threshold` ("fail
fast"), stops if `max_spec_len` confidences were recorded, and otherwise grows by `incr_len`
and denoising goes on ("win big"). Nothing carries over between rounds: `failfast.py` passes
`spec_len=args.spec_len` to every round, whatever the last one accepted.

The draft is Fast-dLLM v2's block decoding (`FailFastDrafter`): blocks of `block_size`
positions aligned to absolute positions (the context's last partial block is decoded with the
draft), each denoised `small_block_size` positions at a time, left to right; a forward reveals
every masked position of the small block whose confidence exceeds `threshold` and at least the
most confident one. A draft position that opens a block after a complete one is the argmax of
the forward that writes that block into the cache, and records no confidence (upstream's
prefill and cache-update forwards). At most three blocks are drafted (upstream's
`output_seqlen=3*block_size`); the draft ends at a stop token with nothing masked before it.
Tokens are the denoiser's argmax at every temperature, as upstream drafts (`do_sample=False`).

Verification is the shared loop's: greedy at temperature 0 (token-identical to the target's
greedy decoding), and above it rejection sampling with a one-hot proposal (accept d with
p(d), else resample p without d), exact whatever law chose d. Upstream verifies greedily only.
"""

from __future__ import annotations

import time

import torch

from specbench.decoding.drafters.failfast.config import FailFastConfig
from specbench.decoding.drafters.logits import real_token_logits
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import (
    Drafter,
    DraftVerifyMethod,
    GammaSchedule,
    SpeculativeDecoder,
)
from specbench.decoding.verify import is_lossless, make_rule
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.registry import METHODS

BLOCKS_PER_DRAFT = 3  # upstream drafts into `output_seqlen=3*args.block_size` positions


class SpeculationLength:
    """Algorithm 1's length for one round: `spec_len` grows by `incr_len` while every recorded
    confidence is at least `lowconf_threshold` and fewer than `max_spec_len` were recorded."""

    def __init__(self, cfg: FailFastConfig):
        self.cfg = cfg
        self.spec_len = cfg.spec_len
        self.confidences: list[float] = []

    def observe(self, confidences: list[float]) -> None:
        """A forward's confidences of the masked positions it denoised (upstream's
        `conf_of_unmasked_tokens`, positions revealed or not)."""
        self.confidences += confidences

    def settle(self) -> str | None:
        """Called when the first `spec_len` draft positions are unmasked: why the draft stops
        there, or None after growing it by `incr_len`."""
        cfg = self.cfg
        if any(c < cfg.lowconf_threshold for c in self.confidences):
            return "low_confidence"
        if len(self.confidences) >= cfg.max_spec_len:
            return "max_spec_len"
        self.spec_len += cfg.incr_len
        return None


class FailFastDrafter(Drafter):
    def __init__(self, dlm: MaskedDiffusionLM, cfg: FailFastConfig, eos: set[int], vocab: int):
        self.dlm, self.cfg, self.eos = dlm, cfg, eos
        self.vocab_size = vocab  # the target's: draft tokens live on its vocabulary

    @property
    def calls(self) -> int:
        return self.dlm.calls

    def reset(self) -> None:
        self.dlm.reset()

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        if n == 0:
            return Draft([], None, 0, 0.0, {"spec_len": 0, "stop": "budget", "passes": 0})
        synchronize(self.dlm.device)
        started, calls = time.perf_counter(), self.dlm.calls
        tokens, info = self._denoise(list(context), n)
        synchronize(self.dlm.device)
        return Draft(tokens, None, self.dlm.calls - calls, time.perf_counter() - started, info)

    def _denoise(self, sequence: list[int], n: int) -> tuple[list[int], dict]:
        """Block after block until the length rule, a stop token, the budget `n` or the last
        block ends the draft; `sequence` (context, then drafted tokens) grows in place."""
        cfg, start = self.cfg, len(sequence)
        length, passes = SpeculationLength(cfg), 0
        if len(sequence) > cfg.block_size and len(sequence) % cfg.block_size == 0:
            sequence.append(self._next_token(sequence))  # upstream's prefill predicts it
        for _ in range(BLOCKS_PER_DRAFT):
            if self._ends_at_stop(sequence[start:]):
                return self._finish(sequence[start:], length, "eos", passes, n)
            lo = len(sequence) // cfg.block_size * cfg.block_size
            self.dlm.set_prefix(sequence[:lo], room=cfg.block_size)
            block = torch.full((cfg.block_size,), self.dlm.mask_id, device=self.dlm.device)
            block[: len(sequence) - lo] = torch.tensor(sequence[lo:], dtype=torch.long)
            for small in range(0, cfg.block_size, cfg.small_block_size):
                while bool((block[small : small + cfg.small_block_size] == self.dlm.mask_id).any()):
                    self._step(block, small, length)
                    passes += 1
                    draft = sequence[start:] + block[len(sequence) - lo :].tolist()
                    stop = self._stop(draft, length, n)
                    if stop is not None:
                        return self._finish(draft, length, stop, passes, n)
            sequence += block[len(sequence) - lo :].tolist()
            sequence.append(self._next_token(sequence))  # the forward caching the block
        return self._finish(sequence[start:], length, "blocks", passes, n)

    def _step(self, block: torch.Tensor, small: int, length: SpeculationLength) -> None:
        """One denoising forward on the small block at `small`: record the masked positions'
        confidences, reveal those above `threshold` and the most confident one."""
        window = slice(small, small + self.cfg.small_block_size)
        logits = real_token_logits(self.dlm, block.tolist(), self.vocab_size)[window]
        confidence, token = logits.softmax(-1).max(-1)
        masked = block[window] == self.dlm.mask_id
        length.observe(confidence[masked].tolist())
        candidates = confidence.masked_fill(~masked, -torch.inf)
        reveal = candidates > self.cfg.threshold
        reveal[candidates.argmax()] = True
        block[window] = torch.where(reveal & masked, token, block[window])

    def _next_token(self, sequence: list[int]) -> int:
        """The argmax after complete blocks, recording no confidence: upstream's forward that
        caches them predicts it (a one-position block reads only the prefix's last state)."""
        self.dlm.set_prefix(sequence, room=1)
        logits = real_token_logits(self.dlm, [self.dlm.mask_id], self.vocab_size)
        return int(logits[0].argmax())

    def _stop(self, draft: list[int], length: SpeculationLength, n: int) -> str | None:
        """After a forward: the rule once the window (`spec_len`, at most `n` tokens) is
        unmasked, then a stop token with nothing masked before it."""
        window = min(length.spec_len, n)
        if len(draft) >= window and self.dlm.mask_id not in draft[:window]:
            if length.spec_len >= n:
                return "budget"
            stop = length.settle()
            if stop is not None:
                return stop
        return "eos" if self._ends_at_stop(draft) else None

    def _ends_at_stop(self, draft: list[int]) -> bool:
        """A stop token is drafted and every position before it is unmasked."""
        for token in draft:
            if token == self.dlm.mask_id:
                return False
            if token in self.eos:
                return True
        return False

    def _finish(
        self, draft: list[int], length: SpeculationLength, stop: str, passes: int, n: int
    ) -> tuple[list[int], dict]:
        """The first `spec_len` draft tokens (at most `n`), cut after the first stop token."""
        tokens = draft[: min(length.spec_len, n)]
        end = next((i + 1 for i, t in enumerate(tokens) if t in self.eos), len(tokens))
        info = {"spec_len": length.spec_len, "stop": stop, "passes": passes}
        return tokens[:end], info


@METHODS.register
class FailFast(DraftVerifyMethod):
    """FailFast (Pan et al. 2025): a diffusion drafter whose draft grows while it is confident.
    Exact: greedy verification, or rejection sampling of a one-hot proposal."""

    name = "failfast"
    Config = FailFastConfig
    drafter_kind = "diffusion"

    def build(
        self, target: CausalLM, drafter: MaskedDiffusionLM, task: object
    ) -> SpeculativeDecoder:
        """The drafter decides each round's length; the schedule only caps it at the three
        blocks a draft may fill."""
        cfg, warp = self.cfg, self.warp
        drafter_ = FailFastDrafter(drafter, cfg, set(target.eos_token_ids), target.vocab_size)
        cap = GammaSchedule(BLOCKS_PER_DRAFT * cfg.block_size, "constant")
        return SpeculativeDecoder(target, drafter_, make_rule(cfg.rule, 1.0, warp), warp, cap)

    def exact(self) -> bool:
        return is_lossless(self.cfg.rule, self.warp)

    def label(self) -> str:
        cfg = self.cfg
        return (
            f"failfast N{cfg.spec_len}+{cfg.incr_len}<={cfg.max_spec_len} "
            f"τ{cfg.lowconf_threshold:g} th{cfg.threshold:g}"
        )
