"""Block-wise semi-autoregressive decoding of a diffusion LLM (LLaDA's `generate`, Fast-dLLM's
policies), and the method `dllm` that runs it.

The canvas is the prompt followed by `max_new_tokens` masks, cut into blocks of `block_length`
(the last one may be shorter). Blocks are decoded left to right; inside one, every step is one
forward and the spatial policy commits some masked positions to their greedy tokens; committed
tokens never change. Decoding stops as soon as every position up to a stop token or string is
committed (what follows cannot change the output, which is the canvas up to and including the
stop). Time to first token is the time to the first finished block. Greedy only: the policies
rank greedy tokens by confidence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from specbench.config import ModelConfig
from specbench.decoding import cost
from specbench.decoding.dllm.policies import (
    BLOCK,
    Frame,
    Policy,
    SpatialConfig,
    check_cache,
    greedy_confidence,
    make_policy,
    one_token_per_step,
)
from specbench.decoding.dllm.vanilla.config import DLLMConfig
from specbench.decoding.generation import Generation, Meter, Stop
from specbench.method import Method
from specbench.models.diffusion import MaskedDiffusionLM, Reading
from specbench.registry import METHODS
from specbench.runs.summary import Summary


@dataclass
class StopScan:
    """Watches the run of committed positions at the start of the generation region for a stop;
    each position is checked once, as it joins the run."""

    stop: Stop
    start: int
    mask_id: int
    seen: int = 0
    end: int | None = None  # index of the stop token in the generation, once found

    def __call__(self, canvas: torch.Tensor) -> bool:
        row = canvas[0, self.start :]
        run = int((row != self.mask_id).long().cumprod(0).sum())
        if self.end is None and run > self.seen:
            self.end = self.stop.first(row[:run].tolist(), self.seen)
            self.seen = run
        return self.end is not None


@dataclass
class Trace:
    """Counters a block decoder fills in: tokens committed after each target forward, and
    (PSD, Spiffy) the steps drafted and accepted per iteration."""

    emitted: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0

    def call(self) -> None:
        """A target forward: the tokens committed from now on are its yield."""
        self.emitted.append(0)

    def commit(self, before: torch.Tensor, after: torch.Tensor) -> None:
        """Counted on the device: read back once, after the clock stops (no sync per step)."""
        self.emitted[-1] = self.emitted[-1] + (before != after).sum()


class BlockDecoder:
    """The vanilla decoder of a diffusion LLM under a spatial policy."""

    def __init__(self, target: MaskedDiffusionLM, cfg: SpatialConfig):
        self.target, self.cfg = target, cfg
        # called after every step with (the block after it, the logits it used, block start);
        # Spiffy's calibration records the decoding through it
        self.observe: Callable[[torch.Tensor, torch.Tensor, int], None] | None = None
        self.span = (0, 0, 0)  # the current block's [lo, hi) and the canvas length
        self.begin()

    def begin(self) -> None:
        """A fresh reading of the target through this decoder's cache: each generation reads
        through its own, so the arms sharing the target never share a cache."""
        self.reading: Reading = self.target.reading(self.cfg.prefix_cache, self.cfg.dual_cache)

    def logits(self, canvas: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """The target's logits of the block of every canvas row, through this reading."""
        return self.target.canvas_logits(canvas, lo, hi, self.reading)

    def tree_logits(
        self, canvas: torch.Tensor, lo: int, hi: int, drafts: torch.Tensor
    ) -> torch.Tensor:
        """The target's logits of the real block and of each draft of it, through this
        reading."""
        return self.target.tree_logits(canvas, lo, hi, drafts, self.reading)

    @property
    def approximate_cache(self) -> bool:
        """Whether this decoder reads the target through a prefix cache that is not exact."""
        return self.cfg.prefix_cache and not self.target.exact_prefix_cache

    def scores(
        self, logits: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each position's greedy token and confidence from the `logits` of the block `state`:
        what a policy ranks. A policy ranks masked positions only, and a committed position
        never becomes masked again, so only `state`'s masked rows are scored (a softmax over
        the vocabulary each); a committed position keeps its token, at confidence -inf."""
        masked = (state == self.target.mask_id).nonzero()[:, 0]
        reference = self.target.reference(
            self.cfg.policy, self.cfg.prefix_cache, self.cfg.reference
        )
        tokens, conf = greedy_confidence(logits[masked], self.cfg.confidence, reference)
        unranked = torch.full(state.shape, -torch.inf, dtype=conf.dtype, device=conf.device)
        return state.index_put((masked,), tokens), unranked.index_put_((masked,), conf)

    def policy_step(
        self, state: torch.Tensor, scores: tuple, policy: Policy, step: int
    ) -> torch.Tensor:
        """The block after the policy's step `step` on `scores`: the vanilla decoder's move."""
        tokens, conf = scores
        commit = policy.select(conf, state == self.target.mask_id, step, self.rank_frame(step))
        return torch.where(commit, tokens, state)

    def rank_frame(self, step: int) -> Frame:
        """The -inf columns around the current block in the row its reference ranks at `step`:
        Dream's `diffusion_generate` and LLaDA's `generate` rank the whole canvas; Fast-dLLM's
        cached decoders (LLaDA's and Dream's) the whole canvas at a block's first step, then the
        block and everything after it (prefix cache) or the block alone (dual cache)."""
        lo, hi, length = self.span
        if not self.cfg.prefix_cache or step == 0:
            return (lo, length - hi)
        return BLOCK if self.cfg.dual_cache else (0, length - hi)

    def verify_call(self, canvas: torch.Tensor, lo: int, hi: int, rows: int) -> torch.Tensor:
        """One forward as this decoder's verification makes it, over `rows` states of the
        block (the cost model times it)."""
        return self.logits(canvas.expand(rows, -1), lo, hi)

    def steps_per_block(self, max_new_tokens: int) -> int:
        if self.cfg.steps is None:
            return self.cfg.block_length
        blocks = -(-max_new_tokens // self.cfg.block_length)
        return max(1, self.cfg.steps // blocks)

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        generator: torch.Generator,
        stop: Stop | None = None,
    ) -> Generation:
        target = self.target
        stop = stop or Stop(frozenset(target.eos_token_ids))
        policy = make_policy(self.cfg, self.steps_per_block(max_new_tokens), generator)
        trace, meter = Trace(), Meter(target)
        self.begin()
        start = len(prompt_ids)
        canvas = torch.tensor(
            [prompt_ids + [target.mask_id] * max_new_tokens], device=target.device
        )
        scan = StopScan(stop, start, target.mask_id)
        for lo in range(start, start + max_new_tokens, self.cfg.block_length):
            hi = min(lo + self.cfg.block_length, start + max_new_tokens)
            self.span = (lo, hi, canvas.shape[1])  # where `rank_frame` places the block
            self.decode_block(canvas, lo, hi, policy, trace, scan)
            meter.first_token()
            if scan.end is not None:
                break
        tokens = canvas[0, start:hi].tolist()
        return meter.generation(
            tokens if scan.end is None else tokens[: scan.end + 1],
            trace.emitted,
            draft_lengths=trace.depths,
            accepted=trace.accepted,
            draft_s=trace.draft_s,
            verify_s=trace.verify_s,
        )

    def decode_block(
        self, canvas: torch.Tensor, lo: int, hi: int, policy: Policy, trace: Trace, scan: StopScan
    ) -> None:
        """One forward per step: a fixed-step policy's steps, or until the block has no mask
        left; sooner once the output is complete."""
        block = canvas[0, lo:hi]  # a view: committing writes into the canvas
        for step in range(policy.steps or hi - lo):
            logits = self.logits(canvas, lo, hi)[0]
            trace.call()
            state = self.policy_step(block, self.scores(logits, block), policy, step)
            trace.commit(block, state)
            block[:] = state
            if self.observe:
                self.observe(block.clone(), logits, lo)
            if not (block == self.target.mask_id).any() or scan(canvas):
                return


def vanilla(cfg: SpatialConfig, target: MaskedDiffusionLM) -> BlockDecoder:
    """One token per step (LLaDA with steps = gen length) under the same block length,
    confidence and cache: the decoding the diffusion-LLM papers measure against."""
    one = DLLMConfig(
        block_length=cfg.block_length,
        confidence=cfg.confidence,
        prefix_cache=cfg.prefix_cache,
        dual_cache=cfg.dual_cache,
        reference=cfg.reference,
    )
    return BlockDecoder(target, one)


ONE_PER_STEP = "one token per step (LLaDA, steps = generation length; same block and cache)"


def spatial_label(cfg: SpatialConfig) -> list[str]:
    """The policy and the knobs it reads, the block, and any cache."""
    steps = f"T{cfg.steps}" if cfg.steps else "T=block"
    knobs = {
        "quota": "1/step" if one_token_per_step(cfg) else steps,
        "threshold": f"τ{cfg.threshold:g}",
        "dynamic": f"f{cfg.factor:g}",
        "localleap": f"τ{cfg.threshold:g}/{cfg.relaxed_threshold:g} w{cfg.window}",
        "origin": steps,
    }
    parts = [cfg.policy, knobs[cfg.policy], f"b{cfg.block_length}"]
    if cfg.policy in ("quota", "origin") and cfg.schedule != "llada":
        parts.append(cfg.schedule)
    if cfg.confidence != "maskgit_plus":
        parts.append(cfg.confidence)
    if cfg.prefix_cache:
        parts.append("dual-cache" if cfg.dual_cache else "prefix-cache")
    return parts


class DiffusionLLMMethod(Method):
    """A decoder of a diffusion-LLM target under a spatial policy (greedy), measured against
    one token per step; PSD and Spiffy extend it."""

    Config = DLLMConfig
    target_kind = "diffusion"

    def check_target(self, target: ModelConfig) -> None:
        check_cache(self.cfg, target)

    def cost_model(self, decoder: BlockDecoder, prompt_ids: list[int], summary: Summary) -> dict:
        return cost.block(decoder, prompt_ids, summary)

    def top2_logits(self, target: MaskedDiffusionLM, prefix: list[int]) -> None:
        return None

    def facts(self, decoder: BlockDecoder) -> dict:
        return {"approximate_cache": decoder.approximate_cache}

    def label(self) -> str:
        return " ".join([self.name, *spatial_label(self.cfg)])


@METHODS.register
class DLLM(DiffusionLLMMethod):
    """The policy's own block decoder; exact only when it is one token per step."""

    name = "dllm"
    baseline_name = ONE_PER_STEP

    def build(self, target: MaskedDiffusionLM, drafter: None, task: object) -> BlockDecoder:
        return BlockDecoder(target, self.cfg)

    def baseline(self, target: MaskedDiffusionLM) -> BlockDecoder:
        return vanilla(self.cfg, target)

    def exact(self) -> bool:
        return one_token_per_step(self.cfg)
