"""Spiffy: lossless auto-speculation over a calibrated draft graph (Agrawal et al., arXiv
2509.18085), on the block decoder of a diffusion LLM.

Each call starts from a real state, its distribution p, and the policy's step on p (certain, so
taken at once). The graph's nodes are then filled from p (`instantiate`), the weakest pruned
(geometric mean of their tokens' probabilities, keeping the graph connected), and ONE forward
reads the real state and every draft state (`tree_logits`: a draft attends to the real context
but not to the block it replaces, at the block's positions; real tokens never attend to drafts).
The policy applied to the real distribution gives the true next state; if a depth-1 node equals
it, that node's distribution (already computed) gives the next one, compared with its children,
and so on. The last accepted state's distribution seeds the next call. Accepted states are
states the vanilla decoder passes through, so the output is the vanilla decoder's.

The graph comes from calibration (calibrate.py), once per model, policy and calibration
set: a saved graph, or prompts decoded with the vanilla decoder.
"""

from __future__ import annotations

import time

import torch

from specbench.decoding.dllm.policies import Policy
from specbench.decoding.dllm.psd.method import SpeculativeDLLMMethod
from specbench.decoding.dllm.spiffy.calibrate import calibration_samples, check_disjoint, graph_for
from specbench.decoding.dllm.spiffy.config import SpiffyConfig
from specbench.decoding.dllm.spiffy.graph import DraftGraph, rankings, real_log_probs
from specbench.decoding.dllm.vanilla.method import BlockDecoder, StopScan, Trace
from specbench.metrics.speed import synchronize
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.registry import METHODS
from specbench.tasks.base import Sample, Task


class SpiffyDecoder(BlockDecoder):
    def __init__(self, target: MaskedDiffusionLM, cfg: SpiffyConfig, graph: DraftGraph):
        super().__init__(target, cfg)
        self.graph, self.keep = graph, min(kept_nodes(cfg), len(graph.nodes))
        self.roots = graph.roots
        self.children = {k: graph.children(k) for k in range(len(graph.nodes))}
        self.parents = {k: graph.parents(k) for k in range(len(graph.nodes))}
        # every node's (position rank, vocabulary rank) pairs as rows, a short row padded by
        # repeating its first pair (filling a position twice with one token changes nothing)
        pairs = [sorted(node.pairs) for node in graph.nodes]
        width = max(map(len, pairs), default=1)
        rows = [p + p[:1] * (width - len(p)) for p in pairs]
        self.pair_count = torch.tensor([len(p) for p in pairs], device=target.device)
        self.real_pair = torch.arange(width, device=target.device) < self.pair_count[:, None]
        self.pair_ranks = torch.tensor(rows, dtype=torch.long, device=target.device).reshape(
            len(pairs), width, 2
        )

    def verify_call(self, canvas: torch.Tensor, lo: int, hi: int, rows: int) -> torch.Tensor:
        return self.tree_logits(canvas, lo, hi, canvas[:1, lo:hi].expand(rows - 1, -1))

    def instantiate(
        self, state: torch.Tensor, logits: torch.Tensor, conf: torch.Tensor
    ) -> tuple[list[int], torch.Tensor]:
        """Every node that fits the block filled in as a concrete state (all at once), pruned to
        the `keep` best by the geometric mean of its tokens' probabilities, each kept node having
        a kept parent: the kept nodes in order and their states [kept, block]."""
        if not self.graph.nodes:
            return [], state.new_empty(0, len(state))
        log_probs = real_log_probs(logits, self.target.mask_id)
        positions, tokens = rankings(log_probs, state == self.target.mask_id, conf)
        rank, vocab = self.pair_ranks[..., 0], self.pair_ranks[..., 1]
        fits = ((rank < len(positions)) & (vocab < tokens.shape[1])).all(1)
        where = positions[rank.clamp(max=len(positions) - 1)]
        what = tokens[where, vocab.clamp(max=tokens.shape[1] - 1)]
        states = state.expand(len(rank), -1).clone().scatter_(1, where, what)
        # the log of the geometric mean
        score = (log_probs[where, what] * self.real_pair).sum(1) / self.pair_count
        fitting = [k for k, ok in enumerate(fits.tolist()) if ok]
        scores = score.tolist()
        kept: list[int] = []
        while len(kept) < self.keep:
            open_ = [
                k
                for k in fitting
                if k not in kept
                and (self.graph.nodes[k].depth == 1 or any(p in kept for p in self.parents[k]))
            ]
            if not open_:
                break
            kept.append(max(open_, key=lambda k: (scores[k], -k)))
        kept.sort()
        return kept, states[kept]

    def decode_block(
        self, canvas: torch.Tensor, lo: int, hi: int, policy: Policy, trace: Trace, scan: StopScan
    ) -> None:
        mask = self.target.mask_id
        logits = self.logits(canvas, lo, hi)[0]
        trace.call()
        scores = self.scores(logits, canvas[0, lo:hi])
        step = 0
        while True:
            real = self.policy_step(canvas[0, lo:hi], scores, policy, step)  # the certain step
            trace.commit(canvas[0, lo:hi], real)
            canvas[0, lo:hi] = real
            if not (real == mask).any() or scan(canvas):
                return
            started = time.perf_counter()
            nodes, states = self.instantiate(real, logits, scores[1])
            open_ = (states == mask).any(1)  # a state with masks left needs a distribution
            rows = [k for k, more in zip(nodes, open_.tolist()) if more]
            drafts = states[open_]
            synchronize(self.target.device)
            drafted = time.perf_counter()
            verified = self.tree_logits(canvas, lo, hi, drafts)
            trace.call()
            synchronize(self.target.device)
            trace.draft_s += drafted - started
            trace.verify_s += time.perf_counter() - drafted
            state, logits, node, accepted = real, verified[0], None, 0
            while (state == mask).any():
                scores = self.scores(logits, state)  # also the next certain step's, if none matches
                true_next = self.policy_step(state, scores, policy, step + accepted + 1)
                options = self.roots if node is None else self.children[node]
                equal = dict(zip(nodes, (states == true_next).all(1).tolist()))
                match = next((k for k in options if equal.get(k)), None)
                if match is None:
                    break
                node, state, accepted = match, true_next, accepted + 1
                if match in rows:
                    logits = verified[1 + rows.index(match)]
            trace.depths.append(max((self.graph.nodes[k].depth for k in nodes), default=0))
            trace.accepted.append(accepted)
            trace.commit(real, state)
            canvas[0, lo:hi] = state
            step += accepted + 1
            if not (state == mask).any() or scan(canvas):
                return


def kept_nodes(cfg: SpiffyConfig) -> int:
    """D*: the paper prunes every call to a budget below D without fixing it; half of D."""
    return cfg.keep if cfg.keep is not None else -(-cfg.nodes // 2)


@METHODS.register
class Spiffy(SpeculativeDLLMMethod):
    name = "spiffy"
    Config = SpiffyConfig

    def check_task(self, task: Task, samples: list[Sample]) -> None:
        if self.cfg.graph is None:
            check_disjoint(calibration_samples(self.cfg, task), samples, "method.calibration")

    def build(self, target: MaskedDiffusionLM, drafter: None, task: Task) -> SpiffyDecoder:
        graph = graph_for(self.cfg, target, task, target.tokenizer)
        return SpiffyDecoder(target, self.cfg, graph)

    def label(self) -> str:
        return f"{super().label()} D{self.cfg.nodes}/{kept_nodes(self.cfg)}"
