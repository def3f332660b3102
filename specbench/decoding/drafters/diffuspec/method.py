"""DiffuSpec (Li et al. 2025): a diffusion LM drafts a k-token block in one forward; Causal-
Consistency Path Search (CPS) picks a left-to-right path through its per-position candidates,
scored by the drafter's log-probs mixed with a causal n-gram's; Adaptive Draft Length (ADL)
sets the next k from how long the raw draft runs before EOS and how much of it was accepted.

Verification is greedy (the paper's main setting, exactly the target's greedy output). The
stochastic variant (acceptance with a left-to-right proxy q) is not implemented: the method
refuses run.temperature > 0 rather than run an unlabelled approximation.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict

import numba
import numpy as np
import torch

from specbench.decoding.drafters.diffuspec.config import DiffuSpecConfig
from specbench.decoding.drafters.diffuspec.ngram_lm import NgramLM, cached_ngram, logprob
from specbench.decoding.drafters.logits import real_token_logits
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import Drafter, DraftVerifyMethod, SpeculativeDecoder
from specbench.decoding.verify import greedy
from specbench.errors import ConfigError
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.registry import METHODS
from specbench.tasks.base import Task, read_rows


def candidates(logprobs: torch.Tensor, tau: float, m_max: int, eos: set[int]) -> list[list[int]]:
    """Per position: the most likely tokens until their mass reaches tau, at most m_max of them;
    an EOS inside that mass is kept even past the cap. The lattice ends at the first position
    whose candidates hold an EOS (METHODS.md section 2; the reading of "EOS always kept" is ours)."""
    probs = logprobs.exp()
    top_probs, top_ids = probs.topk(min(m_max, probs.shape[-1]), dim=-1)
    sizes = ((top_probs.cumsum(-1) < tau).sum(-1) + 1).clamp(max=top_ids.shape[-1]).tolist()
    inside = {}  # EOS ids whose rank puts them inside the tau mass, per row
    for e in eos:
        if e < probs.shape[-1]:
            above = (probs * (probs > probs[:, e : e + 1])).sum(-1)
            inside[e] = (above < tau).tolist()
    lattice = []
    for i, size in enumerate(sizes):
        column = top_ids[i, :size].tolist()
        column += [e for e, rows in inside.items() if rows[i] and e not in column]
        lattice.append(column)
        if eos.intersection(column):
            break
    return lattice


def path_search(
    lattice: list[list[int]],
    logprobs: torch.Tensor,
    ngram: NgramLM | None,
    context: list[int],
    beam: int,
    lam: float,
    eos: set[int],
) -> tuple[list[int], float]:
    """Left-to-right beam search; a path's score sums lam * drafter log-prob + (1 - lam) *
    n-gram log-prob per token; a path that emitted EOS is finished and carried unchanged.
    Compiled (`beam_search`): a few hundred scalar steps per draft, where Python's per-step
    cost, or an array library's per-call cost, would exceed the arithmetic."""
    width = max(map(len, lattice), default=0)
    candidate = np.full((len(lattice), width), -1, dtype=np.int64)
    for i, column in enumerate(lattice):
        candidate[i, : len(column)] = column
    mixes = ngram is not None and lam < 1
    drafter = logprobs.gather(1, torch.from_numpy(candidate).clamp(min=0))  # [K, M], not [K, V]
    path, score = beam_search(
        candidate,
        drafter.double().numpy(),
        lam,
        beam,
        np.array(sorted(eos), dtype=np.int64),
        ngram.tables if mixes else NO_NGRAM,
        ngram.vocab_size if mixes else 1,
        ngram.history(context) if mixes else np.empty(0, dtype=np.int64),
    )
    return path.tolist(), score


NO_NGRAM = (np.empty(0, dtype=np.int64), np.empty(0), np.empty(0, dtype=np.int64), np.empty(0))


@numba.njit(cache=True)
def beam_search(candidate, drafter, lam, beam, eos_ids, tables, vocab_size, history):
    """`candidate` [K, M] (-1 pads a column), `drafter` [K, M] their log-probs, `history` the
    context's marked n-gram histories (empty: no n-gram). Each column scores every open
    hypothesis times every candidate and keeps the `beam` best by a stable sort, so ties go
    to finished paths, then to earlier hypotheses and candidates."""
    columns, width, order = candidate.shape[0], candidate.shape[1], len(history)
    scores, finished = np.zeros(1), np.zeros(1, dtype=np.bool_)
    paths = np.full((1, columns), -1, dtype=np.int64)  # -1 from where a path finished
    histories = history.reshape(1, order).copy()
    for i in range(columns):
        room = len(scores) * (width + 1)
        grown, parent, token = np.empty(room), np.empty(room, np.int64), np.empty(room, np.int64)
        n = 0
        for h in range(len(scores)):  # finished paths first, carried unchanged
            if finished[h]:
                grown[n], parent[n], token[n] = scores[h], h, -1
                n += 1
        for h in range(len(scores)):
            if finished[h]:
                continue
            for c in range(width):
                t = candidate[i, c]
                if t < 0:
                    break
                step = lam * drafter[i, c]
                if order:
                    step += (1 - lam) * logprob(tables, vocab_size, histories[h], t)
                grown[n], parent[n], token[n] = scores[h] + step, h, t
                n += 1
        best = np.argsort(-grown[:n], kind="mergesort")[:beam]
        scores, paths = grown[best], paths[parent[best]].copy()
        kept = histories[parent[best]].copy()
        finished = np.zeros(len(best), dtype=np.bool_)
        for r in range(len(best)):
            t = token[best[r]]
            finished[r] = t < 0 or (eos_ids == t).any()
            if t < 0:
                continue
            paths[r, i] = t
            for k in range(order - 1, 0, -1):  # order k's history: order k - 1's, then t
                above = kept[r, k - 1]
                kept[r, k] = above * vocab_size + t if above >= 0 else -1
        histories = kept
    path = paths[0]
    return path[path >= 0], scores[0]


class AdaptiveDraftLength:
    """ADL's EMA controller: G and A track the raw draft's EOS-aware length and the accepted
    length; k = clip(floor(G) + delta * [A >= G], k_min, k_max); the first round drafts k_max."""

    def __init__(self, k_min: int, k_max: int, delta: int, rho: float):
        self.k_min, self.k_max, self.delta, self.rho = k_min, k_max, delta, rho
        self.start = k_max
        self.reset()

    def reset(self) -> None:
        self.generated = self.accepted = 0.0

    def next(self, k: int, n_accepted: int, draft: Draft) -> int:
        rho = self.rho
        # a drafter that reports no raw length (the oracle) generated exactly its draft
        generated = draft.info.get("L_gen", len(draft.tokens))
        self.generated = (1 - rho) * self.generated + rho * generated
        self.accepted = (1 - rho) * self.accepted + rho * n_accepted
        grow = self.delta if self.accepted >= self.generated else 0
        return min(max(math.floor(self.generated) + grow, self.k_min), self.k_max)


class FixedDraftLength:
    def __init__(self, k: int):
        self.start = k

    def reset(self) -> None:
        pass

    def next(self, k: int, n_accepted: int, draft: Draft) -> int:
        return k


class DiffuSpecDrafter(Drafter):
    def __init__(
        self,
        dlm: MaskedDiffusionLM,
        ngram: NgramLM | None,
        cfg: DiffuSpecConfig,
        eos: set[int],
        vocab_size: int,
    ):
        self.dlm, self.ngram, self.cfg, self.eos, self.vocab_size = dlm, ngram, cfg, eos, vocab_size

    @property
    def calls(self) -> int:
        return self.dlm.calls

    def reset(self) -> None:
        self.dlm.reset()

    def _logprobs(self, block: list[int]) -> torch.Tensor:
        return real_token_logits(self.dlm, block, self.vocab_size).log_softmax(-1)

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        if n == 0:
            return Draft([], None, 0, 0.0, {"L_gen": 0, "k": 0})
        dlm, cfg = self.dlm, self.cfg
        synchronize(dlm.device)
        started, calls = time.perf_counter(), dlm.calls
        context = dlm.set_prefix(context, room=n)
        block = torch.full((n,), dlm.mask_id, device=dlm.device)
        for step in range(cfg.refine_steps - 1):  # S > 1: reveal the most confident share
            best, tokens = self._logprobs(block.tolist()).max(-1)
            masked = block == dlm.mask_id
            share = int(masked.sum()) // (cfg.refine_steps - step)
            reveal = best.masked_fill(~masked, -torch.inf).argsort(descending=True, stable=True)
            block[reveal[:share]] = tokens[reveal[:share]]
        logprobs = self._logprobs(block.tolist())
        raw = torch.where(block == dlm.mask_id, logprobs.argmax(-1), block).tolist()
        l_gen = next((i for i, t in enumerate(raw) if t in self.eos), n)
        searched = time.perf_counter()
        if cfg.cps:
            on_host = logprobs.cpu()
            lattice = candidates(on_host, cfg.tau, cfg.m_max, self.eos)
            path, score = path_search(
                lattice, on_host, self.ngram, context, cfg.beam, cfg.lam, self.eos
            )
        else:
            path = raw[: l_gen + 1]
            score = float(logprobs[torch.arange(len(path)), path].double().sum())
        cps_s = time.perf_counter() - searched
        synchronize(dlm.device)
        info = {"L_gen": l_gen, "k": n, "path_score": score, "cps_s": cps_s}
        return Draft(path, None, dlm.calls - calls, time.perf_counter() - started, info)


def corpus_texts(cfg: DiffuSpecConfig, task: Task) -> list[str]:
    """The n-gram's training text: the task's own training split, or the file's text."""
    if cfg.ngram_corpus == "task":
        return task.train_texts()
    if cfg.ngram_corpus.endswith((".jsonl", ".json", ".gz")):
        rows = read_rows(cfg.ngram_corpus, "method.ngram_corpus")
        return [" ".join(str(v) for v in row.values()) for row in rows]
    with open(cfg.ngram_corpus, encoding="utf-8") as fh:
        return [fh.read()]


@METHODS.register
class DiffuSpec(DraftVerifyMethod):
    """DiffuSpec (Li et al. 2025): one-pass diffusion drafts, CPS and ADL; greedy verification,
    so exactly the target's greedy output."""

    name = "diffuspec"
    Config = DiffuSpecConfig
    drafter_kind = "diffusion"

    def check_task(self, task: Task, samples: list) -> None:
        """The n-gram is fitted on the task's training text: a task without one needs a file
        (or no n-gram)."""
        if self.cfg.uses_ngram() and self.cfg.ngram_corpus == "task" and not task.train_texts():
            raise ConfigError(
                "method.ngram_corpus",
                "task",
                f"task {task.name} has no training text to fit the n-gram on; "
                "give a text/JSONL file, or method.lam=1 (drafter scores only)",
            )

    def build(
        self, target: CausalLM, drafter: MaskedDiffusionLM, task: object
    ) -> SpeculativeDecoder:
        cfg = self.cfg
        ngram = None
        if self.cfg.uses_ngram():
            task_data = json.dumps(asdict(task.cfg), sort_keys=True, default=str)
            corpus = f"task:{task_data}" if cfg.ngram_corpus == "task" else cfg.ngram_corpus
            key = f"{corpus}|{target.tokenizer.name_or_path}"
            sequences = (target.tokenizer(t)["input_ids"] for t in corpus_texts(cfg, task))
            ngram = cached_ngram(key, cfg.ngram_order, target.vocab_size, sequences)
        schedule = (
            AdaptiveDraftLength(cfg.k_min, cfg.k_max, cfg.delta, cfg.rho)
            if cfg.adl
            else FixedDraftLength(cfg.k)
        )
        eos = set(target.eos_token_ids)
        drafter_ = DiffuSpecDrafter(drafter, ngram, cfg, eos, target.vocab_size)
        return SpeculativeDecoder(target, drafter_, greedy, self.warp, schedule)

    def label(self) -> str:
        cfg = self.cfg
        parts = ["diffuspec", "+".join(n for n in ("cps", "adl") if getattr(cfg, n)) or "one-pass"]
        return " ".join(parts if cfg.adl else [*parts, f"k{cfg.k}"])
