"""Any JSONL file of {"id", "prompt"}: the simplest task, with no quality metric."""

from __future__ import annotations

from dataclasses import dataclass

from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, read_jsonl


@dataclass
class PromptsConfig:
    name: str = "prompts"
    path: str = "${pkgdata:demo_prompts.jsonl}"


class PromptsTask(Task):
    name = "prompts"

    def __init__(self, cfg: PromptsConfig):
        self.path = cfg.path

    def samples(self) -> list[Sample]:
        rows = read_jsonl(self.path, "task.path", required=("id", "prompt"))
        return [Sample(id=str(row["id"]), prompt=row["prompt"]) for row in rows]


register_task(TaskSpec(name="prompts", config=PromptsConfig, build=PromptsTask))
