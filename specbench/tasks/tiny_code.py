"""tiny_code: continue held-out standard-library source, the tiny world's own task.

Quality: `nll`, the oracle LM's mean negative log-likelihood per completion token given the
prompt (lower is better; the oracle defaults to the tiny target), and `exact_match` /
`prefix_match`, how much of the held-out continuation the completion reproduces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from specbench.metrics.quality import OracleLM
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, TaskConfig, read_jsonl

HELDOUT_PROMPT_CHARS = 512  # about the 128 tokens a tiny_code prompt holds


@dataclass
class TinyCodeConfig(TaskConfig):
    name: str = "tiny_code"
    source: str = "${tiny:tiny_code.jsonl}"  # a local JSONL of {"id", "prompt", "reference"}
    oracle: str | None = "specbench:tiny"  # the LM scoring NLL; null skips NLL


class TinyCodeTask(Task):
    name = "tiny_code"
    metrics = {"nll": False, "exact_match": True, "prefix_match": True}

    def heldout(self) -> list[Sample]:
        """The opening of each validation module (the measured prompts come from the held-out
        split, the checkpoints were trained on the train split)."""
        from specbench.models.tiny import corpus

        return [
            Sample(id=f"tiny-validation-{i:03d}", prompt=text[:HELDOUT_PROMPT_CHARS])
            for i, text in enumerate(t for t in corpus.texts("validation") if t.strip())
        ]

    def train_texts(self) -> list[str]:
        from specbench.models.tiny import corpus

        return corpus.texts("train")

    def samples(self) -> list[Sample]:
        rows = read_jsonl(self.cfg.source, "task.source", required=("id", "prompt", "reference"))
        return [
            Sample(
                id=r["id"],
                prompt=r["prompt"],
                reference=r["reference"],
                meta={"module": r.get("module")},
            )
            for r in rows
        ]

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        reference = sample.reference
        matched = len(os.path.commonprefix([completion, reference]))
        scores = {
            "exact_match": float(completion.startswith(reference)),
            "prefix_match": matched / len(reference),
        }
        nll = OracleLM(self.cfg.oracle).nll(sample.prompt, completion) if self.cfg.oracle else None
        if nll is not None:
            scores["nll"] = nll
        return scores


register_task(TaskSpec(name="tiny_code", config=TinyCodeConfig, build=TinyCodeTask))
