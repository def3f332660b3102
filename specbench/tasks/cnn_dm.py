"""CNN/DailyMail 3.0.0 (See et al. 2017): summarise a news article; ROUGE-1/2/L against its
highlights. The prompt is Spec-Bench's, "Summarize: <article>".

Local sources in either upstream format: the hub's rows ({"id", "article", "highlights"}) as
JSONL, or Spec-Bench's question.jsonl, whose `summarization` category is 80 CNN/DM test
articles with their highlights as `reference`.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbench.errors import ConfigError
from specbench.metrics.quality import ROUGE_TYPES, rouge
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, TaskConfig, rows_from

PREFIX = "Summarize: "


@dataclass
class CnnDmConfig(TaskConfig):
    name: str = "cnn_dm"
    source: str = "hub"  # or a local JSONL: hub rows, or Spec-Bench's question.jsonl
    max_new_tokens: int = 128


def _normalised(row: dict, index: int) -> tuple[str, str, str]:
    """(id, article, highlights) from either upstream format."""
    if "article" in row:
        return str(row.get("id", index)), row["article"], row["highlights"]
    return str(row["question_id"]), row["turns"][0].removeprefix(PREFIX), row["reference"][0]


class CnnDmTask(Task):
    name = "cnn_dm"
    metrics = dict.fromkeys(ROUGE_TYPES, True)

    def samples(self) -> list[Sample]:
        rows = rows_from(self.cfg.source, "task.source", "abisee/cnn_dailymail", "3.0.0", "test")
        rows = [r for r in rows if "article" in r or r.get("category") == "summarization"]
        if not rows:
            raise ConfigError(
                "task.source", self.cfg.source, "holds no CNN/DM article or summarization row"
            )
        samples = []
        for i, row in enumerate(rows):
            key, article, highlights = _normalised(row, i)
            samples.append(
                Sample(id=f"cnn_dm-{key}", turns=[PREFIX + article], reference=highlights)
            )
        return samples

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        return rouge(completion, sample.reference)


register_task(TaskSpec(name="cnn_dm", config=CnnDmConfig, build=CnnDmTask))
