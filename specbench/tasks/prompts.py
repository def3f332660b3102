"""Any JSONL file of {"id", "prompt"}: the simplest task, with no quality metric."""

from __future__ import annotations

from dataclasses import dataclass

from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, TaskConfig, local_source, read_jsonl


@dataclass
class PromptsConfig(TaskConfig):
    name: str = "prompts"
    source: str = "${pkgdata:demo_prompts.jsonl}"  # a local JSONL file only (no hub dataset)


class PromptsTask(Task):
    name = "prompts"

    def samples(self) -> list[Sample]:
        rows = read_jsonl(
            local_source(self.cfg.source, 'a JSONL of {"id", "prompt"}'),
            "task.source",
            required=("id", "prompt"),
        )
        return [Sample(id=str(row["id"]), prompt=row["prompt"]) for row in rows]


register_task(TaskSpec(name="prompts", config=PromptsConfig, build=PromptsTask))
