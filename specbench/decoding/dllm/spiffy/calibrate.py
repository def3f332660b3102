"""Spiffy's calibration: the draft graph its decoder speculates along (method.py), built once per
model, policy, D and calibration set and cached, or read from a saved file.

Calibration decodes prompts with the vanilla decoder and, at every step, records the (position
rank, vocabulary rank) pairs, under that step's distribution, of the tokens the next 1..D steps
unmask; `graph.select` keeps the D most useful connected nodes. Its prompts are a task's
held-out split or a file of prompts, never an item the run measures (`check_disjoint`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path

import torch

from specbench import paths
from specbench.decoding.dllm.policies import greedy_confidence
from specbench.decoding.dllm.spiffy.config import SpiffyConfig
from specbench.decoding.dllm.spiffy.graph import DraftGraph, Node, rankings, real_log_probs, select
from specbench.decoding.dllm.vanilla.method import BlockDecoder
from specbench.decoding.generation import Stop
from specbench.errors import ConfigError
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.tasks.base import Sample, Task, read_rows

log = logging.getLogger(__name__)


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
