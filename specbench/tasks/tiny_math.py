"""tiny_math: the math world's GSM8K-style word problems (specbench/models/tiny/math_corpus.py),
held-out wording, solved in GSM8K's answer format.

Quality: `exact_match_strict` / `exact_match_flexible`, answer accuracy through `task=gsm8k`'s
own extractor (strict reads the `#### N` line), and `nll`, the oracle LM's mean negative
log-likelihood per completion token (the oracle defaults to the math target, `tiny-math`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specbench.metrics.answer import score_answer
from specbench.metrics.quality import OracleLM
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, TaskConfig, read_jsonl

HELDOUT = 200  # validation problems a calibrating method sees
TRAIN_TEXTS = 20_000  # training problems a method fitted to the task reads


@dataclass
class TinyMathConfig(TaskConfig):
    name: str = "tiny_math"
    source: str = "${tiny:tiny_math.jsonl}"  # a local JSONL of {"id", "question", "reference"}
    max_new_tokens: int = 192  # a six-step solution is about 150 tokens
    stop: list[str] = field(default_factory=lambda: ["Q:"])
    oracle: str | None = "specbench:tiny-math"  # the LM scoring NLL; null skips NLL


class TinyMathTask(Task):
    name = "tiny_math"
    metrics = {"exact_match_strict": True, "exact_match_flexible": True, "nll": False}

    def samples(self) -> list[Sample]:
        from specbench.models.tiny.math_corpus import prompt

        rows = read_jsonl(self.cfg.source, "task.source", required=("id", "question", "reference"))
        return [
            Sample(id=r["id"], prompt=prompt(r["question"]), reference=r["reference"]) for r in rows
        ]

    def heldout(self) -> list[Sample]:
        """Validation problems (the measured ones are held out, the models trained on train)."""
        from specbench.models.tiny import math_corpus

        return [
            Sample(
                id=f"tiny_math-validation-{i:03d}",
                prompt=math_corpus.prompt(p.question),
                reference=str(p.answer),
            )
            for i, p in enumerate(math_corpus.problems("validation", HELDOUT))
        ]

    def train_texts(self) -> list[str]:
        from specbench.models.tiny import math_corpus

        return [p.text() for p in math_corpus.problems("train", TRAIN_TEXTS)]

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        scores = score_answer(sample.reference, completion)
        nll = OracleLM(self.cfg.oracle).nll(sample.prompt, completion) if self.cfg.oracle else None
        if nll is not None:
            scores["nll"] = nll
        return scores


register_task(TaskSpec(name="tiny_math", config=TinyMathConfig, build=TinyMathTask))
