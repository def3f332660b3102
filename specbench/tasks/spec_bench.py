"""Spec-Bench (Xia et al. 2024): 480 questions in 13 categories; the first turn is the prompt."""

from __future__ import annotations

from dataclasses import dataclass, field

from specbench.errors import ConfigError
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, read_jsonl


@dataclass
class SpecBenchConfig:
    name: str = "spec_bench"
    path: str = "${data:spec_bench/question.jsonl}"
    categories: list[str] = field(default_factory=list)


class SpecBenchTask(Task):
    name = "spec_bench"

    def __init__(self, cfg: SpecBenchConfig):
        self.path, self.categories = cfg.path, list(cfg.categories)

    def samples(self) -> list[Sample]:
        rows = read_jsonl(self.path, "task.path", required=("question_id", "category", "turns"))
        known = sorted({row["category"] for row in rows})
        unknown = [c for c in self.categories if c not in known]
        if unknown:
            raise ConfigError("task.categories", unknown, f"allowed: {', '.join(known)}")
        return [
            Sample(
                id=str(row["question_id"]),
                prompt=row["turns"][0],
                reference=row.get("reference"),
                meta={"category": row["category"]},
            )
            for row in rows
            if not self.categories or row["category"] in self.categories
        ]


register_task(TaskSpec(name="spec_bench", config=SpecBenchConfig, build=SpecBenchTask))
