"""Spec-Bench (Xia et al. 2024): 480 questions from six sources, reported per category as the
paper does: multi-turn conversation (MT-Bench's 80, both turns, each arm answering the second
after its own first answer), translation, summarization, question answering, mathematical
reasoning and retrieval-augmented generation."""

from __future__ import annotations

from dataclasses import dataclass, field

from specbench.errors import ConfigError
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, TaskConfig, local_source, read_jsonl

MT_BENCH = {
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
}
CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


def category_of(raw: str) -> str:
    return "mt_bench" if raw in MT_BENCH else raw


@dataclass
class SpecBenchConfig(TaskConfig):
    name: str = "spec_bench"
    source: str = "${data:spec_bench/question.jsonl}"  # a local question.jsonl only (no hub)
    categories: list[str] = field(default_factory=list)  # keep only these; empty: all six
    multi_turn: bool = True  # MT-Bench questions: both turns (Spec-Bench's protocol), or the first
    max_new_tokens: int = 1024

    def check(self) -> None:
        super().check()
        unknown = [c for c in self.categories if c not in CATEGORIES]
        if unknown:
            raise ConfigError("task.categories", unknown, f"allowed: {', '.join(CATEGORIES)}")


class SpecBenchTask(Task):
    name = "spec_bench"

    def samples(self) -> list[Sample]:
        rows = read_jsonl(
            local_source(self.cfg.source, "Spec-Bench's question.jsonl"),
            "task.source",
            required=("question_id", "category", "turns"),
        )
        samples = []
        for row in rows:
            category = category_of(row["category"])
            if self.cfg.categories and category not in self.cfg.categories:
                continue
            turns = row["turns"] if self.cfg.multi_turn else row["turns"][:1]
            samples.append(
                Sample(
                    id=str(row["question_id"]),
                    turns=list(turns),
                    reference=row.get("reference"),
                    meta={"category": category, "subcategory": row["category"]},
                )
            )
        return samples


register_task(TaskSpec(name="spec_bench", config=SpecBenchConfig, build=SpecBenchTask))
