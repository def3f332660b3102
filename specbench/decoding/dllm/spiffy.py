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

Calibration (`calibrate`) decodes prompts with the vanilla decoder and, at every step, records
the (position rank, vocabulary rank) pairs, under that step's distribution, of the tokens the
next 1..D steps unmask; `graph.select` keeps the D most useful connected nodes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path

import torch

from specbench import paths
from specbench.decoding.configs import SpiffyConfig
from specbench.decoding.dllm.graph import DraftGraph, Node, select
from specbench.decoding.dllm.policies import Policy, greedy_confidence
from specbench.decoding.dllm.psd import SpeculativeDLLMMethod
from specbench.decoding.dllm.vanilla import BlockDecoder, StopScan, Trace
from specbench.decoding.generation import Stop
from specbench.errors import ConfigError
from specbench.metrics.speed import synchronize
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.registry import METHODS
from specbench.tasks.base import Sample, Task, read_rows

log = logging.getLogger(__name__)


VOCAB_RANKS = 32  # a node naming a token ranked lower than this at its position is never kept


def real_log_probs(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Log-probabilities over real tokens: a draft never proposes the mask token."""
    mask = torch.tensor([mask_id], device=logits.device)
    return logits.float().index_fill(-1, mask, float("-inf")).log_softmax(-1)


def rankings(log_probs: torch.Tensor, masked: torch.Tensor, conf: torch.Tensor) -> tuple:
    """The masked positions by descending confidence, and each position's `VOCAB_RANKS` most
    likely real tokens in order (the same function ranks for calibration and for decoding)."""
    positions = conf.masked_fill(~masked, float("-inf")).argsort(descending=True, stable=True)
    tokens = log_probs.topk(min(VOCAB_RANKS, log_probs.shape[-1]), dim=-1).indices
    return positions[: int(masked.sum())], tokens


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
        return self.target.tree_logits(canvas, lo, hi, canvas[:1, lo:hi].expand(rows - 1, -1))

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
        logits = self.target.canvas_logits(canvas, lo, hi)[0]
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
            verified = self.target.tree_logits(canvas, lo, hi, drafts)
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


def calibration_samples(cfg: SpiffyConfig, task: Task) -> list[Sample]:
    """The samples calibration decodes: the task's held-out ones, or the file's prompts."""
    if cfg.calibration == "task":
        held = task.heldout()
        if not held:
            raise ConfigError(
                "method.calibration",
                "task",
                f"task {task.name} has no held-out split to calibrate on; "
                'give a JSONL file of {"prompt"} rows from other data',
            )
        return held[: cfg.calibration_samples]
    rows = read_rows(cfg.calibration, "method.calibration")[: cfg.calibration_samples]
    return [Sample(id=f"calibration-{i}", prompt=row["prompt"]) for i, row in enumerate(rows)]


def _text(sample: Sample) -> str:
    return " ".join(sample.user_turns[0].split())


def check_disjoint(calibration: list[Sample], measured: list[Sample], key: str) -> None:
    """One line when a calibration prompt is one of the measured items (either text holding
    the other: an MBPP description inside its measured prompt counts)."""
    texts = [_text(s) for s in measured]
    for sample in calibration:
        mine = _text(sample)
        hit = next((m for m in texts if mine and (mine in m or m in mine)), None)
        if hit is not None:
            raise ConfigError(
                key,
                sample.id,
                f"calibration prompt {mine[:60]!r}... is a measured item; "
                "calibrate on data the run does not measure",
            )


def calibration_prompts(cfg: SpiffyConfig, task: Task, tokenizer: object) -> list[list[int]]:
    """Calibration prompts tokenised as the task prompts its own samples."""
    chat = getattr(task, "chat", False)
    return [task.prompt_ids(tokenizer, s, chat) for s in calibration_samples(cfg, task)]


def rank_pairs(
    ranked: tuple[torch.Tensor, torch.Tensor],
    state: torch.Tensor,
    future: torch.Tensor,
    mask_id: int,
) -> frozenset[tuple[int, int]] | None:
    """The (position rank, vocabulary rank) pairs, under the `rankings` of the step that left
    `state`, of the tokens that `future` has where `state` has masks; None if one of them is
    not among its position's `VOCAB_RANKS` most likely tokens."""
    positions, tokens = ranked
    rank_of = {int(p): i for i, p in enumerate(positions)}
    pairs = []
    for p in ((state == mask_id) & (future != mask_id)).nonzero()[:, 0].tolist():
        where = (tokens[p] == future[p]).nonzero()
        if len(where) == 0:
            return None
        pairs.append((rank_of[p], int(where[0, 0])))
    return frozenset(pairs)


def calibrate(target: MaskedDiffusionLM, cfg: SpiffyConfig, prompts: list[list[int]]) -> DraftGraph:
    """Decode the prompts with the vanilla decoder; at every step count the node each depth
    1..D of the following steps forms; select the graph."""
    decoder = BlockDecoder(target, cfg)
    steps: list[tuple[torch.Tensor, tuple, int]] = []  # (block after the step, rankings, start)

    def observe(state: torch.Tensor, logits: torch.Tensor, block: int) -> None:
        reference = target.reference(cfg.policy, cfg.prefix_cache, cfg.reference)
        _, conf = greedy_confidence(logits, cfg.confidence, reference)
        log_probs = real_log_probs(logits, target.mask_id)
        steps.append((state, rankings(log_probs, state == target.mask_id, conf), block))

    decoder.observe = observe
    counts: Counter[Node] = Counter()
    for prompt in prompts:
        steps.clear()
        decoder.generate(prompt, cfg.calibration_new_tokens, torch.Generator(), Stop(frozenset()))
        counts.update(count_nodes(steps, cfg.nodes, target.mask_id))
    return DraftGraph(select(counts, cfg.nodes), {"prompts": len(prompts), "steps": len(counts)})


def count_nodes(steps: list[tuple], depth_max: int, mask_id: int) -> Counter[Node]:
    """From one decoding's steps (block after the step, the rankings that step read, block
    start): for each step s and depth d, the node the state d steps later forms under step s's
    rankings, within one block; a token outside the ranked vocabulary ends the deeper ones."""
    counts: Counter[Node] = Counter()
    for s, (state, ranked, block) in enumerate(steps):
        for depth in range(1, depth_max + 1):
            if s + depth >= len(steps) or steps[s + depth][2] != block:
                break
            pairs = rank_pairs(ranked, state, steps[s + depth][0], mask_id)
            if pairs is None:  # so is every deeper node from this step
                break
            counts[Node(depth, pairs)] += 1
    return counts


def graph_for(
    cfg: SpiffyConfig, target: MaskedDiffusionLM, task: Task, tokenizer: object
) -> DraftGraph:
    """A saved graph, or one calibrated for this model, policy, D and calibration set (cached)."""
    if cfg.graph is not None:
        return DraftGraph.load(Path(cfg.graph))
    knobs = [f.name for f in fields(SpiffyConfig) if f.name not in ("name", "keep", "graph")]
    policy = {k: getattr(cfg, k) for k in knobs}
    data = asdict(task.cfg) if cfg.calibration == "task" else cfg.calibration  # its files too
    key = json.dumps({"model": target.name, "policy": policy, "data": data}, sort_keys=True)
    path = paths.cache_dir() / "spiffy" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.exists():
        return DraftGraph.load(path)
    graph = calibrate(target, cfg, calibration_prompts(cfg, task, tokenizer))
    graph.meta.update({"model": target.name, "policy": policy, "data": data})
    graph.save(path)
    log.info("spiffy: calibrated a %d-node graph -> %s", len(graph.nodes), path)
    return graph


@METHODS.register
class Spiffy(SpeculativeDLLMMethod):
    name = "spiffy"
    Config = SpiffyConfig
    marker = "P"

    def check_task(self, task: Task, samples: list[Sample]) -> None:
        if self.cfg.graph is None:
            check_disjoint(calibration_samples(self.cfg, task), samples, "method.calibration")

    def build(self, target: MaskedDiffusionLM, drafter: None, task: Task) -> SpiffyDecoder:
        graph = graph_for(self.cfg, target, task, target.tokenizer)
        return SpiffyDecoder(target, self.cfg, graph)

    def label(self) -> str:
        return f"{super().label()} D{self.cfg.nodes}/{kept_nodes(self.cfg)}"
