"""MT-Bench (Zheng et al. 2023): 80 two-turn questions in 8 categories. The second turn is
asked after the model's own first answer, so each arm (method and baseline) holds its own
conversation; a lossless method's two conversations are identical.

Quality by default: answer length in words per turn (MT-Bench has no reference for most
questions) beside the run's lossless_rate. With `judge` set to a local instruct model, each
turn is also graded 1-10 by FastChat's single-answer grading prompts (`judge_score`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from specbench.config import ModelConfig
from specbench.errors import ConfigError
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, TaskConfig, rows_from

INTRO = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an "
    "AI assistant to the user question displayed below. Your evaluation should consider "
    "factors such as the helpfulness, relevance, accuracy, depth, creativity, and level of "
    "detail of the response. "
)
VERDICT = (
    "Begin your evaluation by providing a short explanation. Be as objective as possible. "
    "After providing your explanation, you must rate the response on a scale of 1 to 10 by "
    'strictly following this format: "[[rating]]", for example: "Rating: [[5]]".'
)
JUDGE_SYSTEM = INTRO + VERDICT
JUDGE_SYSTEM_TURN2 = (
    INTRO + "Your evaluation should focus on the assistant's answer to the second user "
    "question. " + VERDICT
)
RATING = re.compile(r"\[\[(\d+\.?\d*)\]\]")


def judge_prompt(turns: list[str], answers: list[str]) -> tuple[str, str]:
    """(system, user) for grading the last answer, in FastChat's single-answer formats."""
    if len(answers) == 1:
        user = (
            f"[Question]\n{turns[0]}\n\n[The Start of Assistant's Answer]\n{answers[0]}\n"
            "[The End of Assistant's Answer]"
        )
        return JUDGE_SYSTEM, user
    conversation = "".join(
        f"### User:\n{q}\n\n### Assistant A:\n{a}\n\n" for q, a in zip(turns, answers)
    )
    user = (
        "<|The Start of Assistant A's Conversation with User|>\n\n"
        f"{conversation}<|The End of Assistant A's Conversation with User|>"
    )
    return JUDGE_SYSTEM_TURN2, user


@dataclass
class MtBenchConfig(TaskConfig):
    name: str = "mt_bench"
    source: str = "hub"  # or FastChat's question.jsonl
    max_new_tokens: int = 512
    judge: str | None = None  # a local instruct model (hub id or directory) grading each turn
    judge_max_new_tokens: int = 512

    def check(self) -> None:
        super().check()
        if self.judge_max_new_tokens < 1:
            raise ConfigError(
                "task.judge_max_new_tokens", self.judge_max_new_tokens, "must be an integer >= 1"
            )


class MtBenchTask(Task):
    name = "mt_bench"
    metrics = {"answer_words": True, "judge_score": True}

    def samples(self) -> list[Sample]:
        rows = rows_from(
            self.cfg.source, "task.source", "HuggingFaceH4/mt_bench_prompts", None, "train"
        )
        return [
            Sample(
                id=f"mt_bench-{row.get('question_id', row.get('prompt_id'))}",
                turns=list(row.get("turns") or row["prompt"]),
                reference=row.get("reference") or None,
                meta={"category": row["category"]},
            )
            for row in rows
        ]

    @cached_property
    def judge(self):
        from specbench.devices import resolve_device
        from specbench.models.kinds.causal import load_causal_lm

        cfg = ModelConfig(name="judge", name_or_path=self.cfg.judge, chat_template=True)
        return load_causal_lm(cfg, "task.judge", resolve_device("auto"), "auto")

    def grade(self, turns: list[str], answers: list[str]) -> float | None:
        """The judge's rating of the last answer, None when it gives none in the format."""
        import torch

        from specbench.decoding.plain import AutoregressiveDecoder
        from specbench.decoding.warp import Warp

        system, user = judge_prompt(turns, answers)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        tokenizer = self.judge.tokenizer
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        verdict = AutoregressiveDecoder(self.judge, Warp()).generate(
            list(ids), self.cfg.judge_max_new_tokens, torch.Generator()
        )
        match = RATING.search(tokenizer.decode(verdict.tokens, skip_special_tokens=True))
        return float(match.group(1)) if match else None

    def score_answers(self, sample: Sample, answers: list[str]) -> dict[str, float]:
        scores = {"answer_words": sum(len(a.split()) for a in answers) / len(answers)}
        if self.cfg.judge:
            grades = [self.grade(sample.turns, answers[: k + 1]) for k in range(len(answers))]
            grades = [g for g in grades if g is not None]
            if grades:
                scores["judge_score"] = sum(grades) / len(grades)
        return scores


register_task(TaskSpec(name="mt_bench", config=MtBenchConfig, build=MtBenchTask))
