"""The loop over samples: warm-up, then per sample the baseline and method arms (order
alternating, same seed), scoring, and one record appended the moment the sample is done."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from specbench.decoding.generation import Decoder, Generation, Stop
from specbench.metrics.summary import first_divergence
from specbench.results.store import RunStore
from specbench.results.wandb import WandbMirror
from specbench.tasks.base import Sample, Task


@dataclass
class Arms:
    method: Decoder
    baseline: Decoder | None


def sample_seed(seed: int, sample_id: str) -> int:
    """Stable across processes and machines (Python's hash() is salted per process)."""
    return zlib.crc32(f"{seed}:{sample_id}".encode())


def _arm_fields(gen: Generation, answers: list[str], quality: dict[str, float]) -> dict[str, Any]:
    return {
        "output_ids": gen.tokens,
        "new_tokens": len(gen.tokens),
        "wall_s": gen.wall_s,
        "ttft_s": gen.ttft_s,
        "target_calls": gen.target_calls,
        "target_positions": gen.positions,
        "text": answers[0] if len(answers) == 1 else answers,
        "quality": quality,
    }


def merge(turns: list[Generation]) -> Generation:
    """A multi-turn conversation counted as one generation: tokens of every turn in order,
    times and calls summed (each turn's prefill counts as its time to first token)."""
    if len(turns) == 1:
        return turns[0]
    return Generation(
        tokens=[t for g in turns for t in g.tokens],
        wall_s=sum(g.wall_s for g in turns),
        ttft_s=sum(g.ttft_s for g in turns),
        target_calls=sum(g.target_calls for g in turns),
        drafter_calls=sum(g.drafter_calls for g in turns),
        draft_s=sum(g.draft_s for g in turns),
        verify_s=sum(g.verify_s for g in turns),
        draft_lengths=[n for g in turns for n in g.draft_lengths],
        accepted=[n for g in turns for n in g.accepted],
        rounds=[r for g in turns for r in g.rounds],
        positions=sum(g.positions for g in turns),
    )


def evaluate(
    arms: Arms,
    task: Task,
    samples: list[Sample],
    prompt_ids: dict[str, list[int]],
    tokenizer: PreTrainedTokenizerBase,
    stop: Stop,
    device: torch.device,
    run_cfg: Any,
    store: RunStore,
    mirror: WandbMirror,
    lossless: bool = True,
    flags: dict[str, Any] | None = None,
) -> None:
    """`lossless` is the method's own claim for this config; a lossy one marks every record.
    `flags` are further facts about the method's config that every record carries (a prefix
    cache that makes the target's logits approximate)."""
    todo = [s for s in samples if s.id not in store.done]
    if not todo:
        return
    max_new = run_cfg.max_new_tokens or task.cfg.max_new_tokens

    def run_arm(decoder: Decoder, sample: Sample) -> tuple[Generation, list[str]]:
        """Every turn of the sample; a later turn's prompt holds this arm's earlier answers."""
        generator = torch.Generator(device=device).manual_seed(sample_seed(run_cfg.seed, sample.id))
        turns: list[Generation] = []
        answers: list[str] = []
        for k in range(len(sample.user_turns)):
            ids = (
                prompt_ids[sample.id]
                if k == 0
                else task.prompt_ids(tokenizer, sample, task.chat, answers)
            )
            turns.append(decoder.generate(ids, max_new, generator, stop))
            answers.append(
                task.answer(tokenizer.decode(turns[-1].tokens, skip_special_tokens=True))
            )
        return merge(turns), answers

    for i in range(run_cfg.warmup):
        for decoder in filter(None, (arms.baseline, arms.method)):
            run_arm(decoder, todo[i % len(todo)])

    bar = tqdm(
        todo, desc="samples", unit="sample", disable=not run_cfg.progress, dynamic_ncols=True
    )
    tokens = seconds = calls = 0.0
    for k, sample in enumerate(bar):
        order = ("baseline", "method") if k % 2 == 0 else ("method", "baseline")
        outputs: dict[str, tuple[Generation, list[str]]] = {}
        for arm in order:
            decoder = getattr(arms, arm)
            if decoder is not None:
                outputs[arm] = run_arm(decoder, sample)
        gen, answers = outputs["method"]
        record = {
            "id": sample.id,
            "meta": sample.meta,
            "prompt_tokens": len(prompt_ids[sample.id]),
            **_arm_fields(gen, answers, task.score_answers(sample, answers)),
            "decode_s": gen.wall_s - gen.ttft_s,
            "drafter_calls": gen.drafter_calls,
            "draft_s": gen.draft_s,
            "verify_s": gen.verify_s,
            "draft_tokens": sum(gen.draft_lengths),
            "accepted_tokens": sum(gen.accepted),
            "draft_lengths": gen.draft_lengths,
            "accepted_per_round": gen.accepted,
            "accept_lengths": [a + 1 for a in gen.accepted] or [1] * len(gen.tokens),
            "rounds": gen.rounds,
            "first_divergence": None,
            "lossy": not lossless,
            **(flags or {}),
            "baseline": None,
        }
        if "baseline" in outputs:
            base, base_answers = outputs["baseline"]
            quality = task.score_answers(sample, base_answers)
            record["baseline"] = _arm_fields(base, base_answers, quality)
            record["first_divergence"] = first_divergence(gen.tokens, base.tokens)
        store.append(record)
        mirror.log_sample(record)
        tokens += record["new_tokens"]
        seconds += record["wall_s"]
        calls += record["target_calls"]
        bar.set_postfix(tok_s=f"{tokens / seconds:.1f}", tau=f"{tokens / calls:.2f}")
