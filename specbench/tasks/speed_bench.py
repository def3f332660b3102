"""SPEED-Bench (NVIDIA 2026, arXiv 2604.09557; `nvidia/SPEED-Bench`): its qualitative split,
880 prompts in 11 semantic domains (80 each), summarised per category as Spec-Bench is, and
through its chat turns (both turns of its multi-turn rows, as Spec-Bench's MT-Bench ones).

Read from a local copy of the split in the dataset's own fields (question_id, category,
sub_category, turns, source, src_id, difficulty, multiturn; parquet as the hub stores it, JSON
or JSONL), or from the hub when online. The dataset is under the NVIDIA Evaluation Dataset
License Agreement and is not copied here. Its public copy masks part of its prompts with a
placeholder (the full text is fetched from each prompt's source by NVIDIA's `specdec_bench`);
a copy with masked rows is refused in one line, since a short repeated placeholder would
inflate acceptance. The throughput split is not offered: its records are not self-contained
(their long prompts are rebuilt from `src_id`, and a whole entropy tier is masked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specbench.errors import ConfigError
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, TaskConfig, rows_from

CATEGORIES = (
    "coding",
    "humanities",
    "math",
    "multilingual",
    "qa",
    "rag",
    "reasoning",
    "roleplay",
    "stem",
    "summarization",
    "writing",
)
PLACEHOLDER = "full benchmark data should be fetched from the source"  # the masked rows' text
FIELDS = ("question_id", "category", "turns")


@dataclass
class SpeedBenchConfig(TaskConfig):
    name: str = "speed_bench"
    # the qualitative split: a local parquet/JSON/JSONL copy, or hub
    source: str = "${data:speed_bench/qualitative.parquet}"
    categories: list[str] = field(default_factory=list)  # keep only these; empty: all 11
    multi_turn: bool = True  # multi-turn rows: every turn, or the first
    max_new_tokens: int = 4096  # SPEED-Bench's output cap for non-reasoning models

    def check(self) -> None:
        super().check()
        unknown = [c for c in self.categories if c not in CATEGORIES]
        if unknown:
            raise ConfigError("task.categories", unknown, f"allowed: {', '.join(CATEGORIES)}")


class SpeedBenchTask(Task):
    name = "speed_bench"

    def samples(self) -> list[Sample]:
        rows = self.rows()
        samples = []
        for row in rows:
            if self.cfg.categories and row["category"] not in self.cfg.categories:
                continue
            turns = list(row["turns"]) if self.cfg.multi_turn else list(row["turns"])[:1]
            meta = {
                "category": row["category"],
                "subcategory": row.get("sub_category"),
                "difficulty": row.get("difficulty"),
                "source": row.get("source"),
            }
            if row.get("language"):
                meta["language"] = row["language"]
            samples.append(Sample(id=str(row["question_id"]), turns=turns, meta=meta))
        return samples

    def rows(self) -> list[dict]:
        """The split's rows, every one whole: a missing copy, a row without the dataset's
        fields and a masked row are each one line."""
        source = self.cfg.source
        if source != "hub" and not Path(source).is_file():
            raise ConfigError(
                "task.source",
                source,
                "no local copy of SPEED-Bench's qualitative split there; save the split with "
                "its full prompts (NVIDIA's specdec_bench fetches them; parquet, JSON or JSONL) "
                "at that path (under SPECBENCH_DATA_DIR/speed_bench/ by default), or give "
                "task.source=hub online",
            )
        rows = rows_from(source, "task.source", "nvidia/SPEED-Bench", "qualitative", "test")
        for i, row in enumerate(rows, start=1):
            missing = [k for k in FIELDS if k not in row]
            if missing:
                raise ConfigError("task.source", source, f"row {i}: missing field(s) {missing}")
        masked = [r for r in rows if any(PLACEHOLDER in str(t).lower() for t in r["turns"])]
        if masked:
            raise ConfigError(
                "task.source",
                source,
                f"{len(masked)} of {len(rows)} rows are SPEED-Bench's placeholder, not prompts "
                f"(e.g. {masked[0]['question_id']}); fetch the full prompts with NVIDIA's "
                "specdec_bench (Model-Optimizer, examples/specdec_bench) and save that split",
            )
        return rows


register_task(TaskSpec(name="speed_bench", config=SpeedBenchConfig, build=SpeedBenchTask))
