"""Any JSONL file of {"id", "prompt"}: the simplest task, with no quality metric."""

from __future__ import annotations

from dataclasses import dataclass

from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, TaskConfig, read_jsonl


@dataclass
class PromptsConfig(TaskConfig):
    name: str = "prompts"
    path: str = "${pkgdata:demo_prompts.jsonl}"


class PromptsTask(Task):
    name = "prompts"

    def samples(self) -> list[Sample]:
        rows = read_jsonl(self.cfg.path, "task.path", required=("id", "prompt"))
        return [Sample(id=str(row["id"]), prompt=row["prompt"]) for row in rows]


register_task(TaskSpec(name="prompts", config=PromptsConfig, build=PromptsTask))
