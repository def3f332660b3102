"""tiny_code: continue held-out standard-library source, the tiny world's own task.

Quality: `nll`, the oracle LM's mean negative log-likelihood per completion token given the
prompt (lower is better; the oracle defaults to the tiny target), and `exact_match` /
`prefix_match`, how much of the held-out continuation the completion reproduces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

import torch

from specbench.config import ModelConfig
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, read_jsonl


@dataclass
class TinyCodeConfig:
    name: str = "tiny_code"
    path: str = "${tiny:tiny_code.jsonl}"
    oracle: str | None = "specbench:tiny"


class TinyCodeTask(Task):
    name = "tiny_code"
    metrics = {"nll": False, "exact_match": True, "prefix_match": True}

    def __init__(self, cfg: TinyCodeConfig):
        self.path, self.oracle_ref = cfg.path, cfg.oracle

    def samples(self) -> list[Sample]:
        rows = read_jsonl(self.path, "task.path", required=("id", "prompt", "reference"))
        return [
            Sample(
                id=r["id"],
                prompt=r["prompt"],
                reference=r["reference"],
                meta={"module": r.get("module")},
            )
            for r in rows
        ]

    @cached_property
    def oracle(self):
        from specbench.models.loading import load_causal_lm

        cfg = ModelConfig(name="oracle", name_or_path=self.oracle_ref)
        return load_causal_lm(cfg, "task.oracle", torch.device("cpu"), "float32")

    def nll(self, prompt: str, completion: str) -> float:
        tokenizer = self.oracle.tokenizer
        prompt_ids = tokenizer(prompt)["input_ids"]
        completion_ids = tokenizer(completion)["input_ids"]
        self.oracle.reset()
        logits = self.oracle.forward_tokens(prompt_ids + completion_ids)[len(prompt_ids) - 1 : -1]
        return torch.nn.functional.cross_entropy(logits, torch.tensor(completion_ids)).item()

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        reference = sample.reference
        matched = len(os.path.commonprefix([completion, reference]))
        scores = {
            "exact_match": float(completion.startswith(reference)),
            "prefix_match": matched / len(reference),
        }
        if self.oracle_ref and completion:
            scores["nll"] = self.nll(sample.prompt, completion)
        return scores


register_task(TaskSpec(name="tiny_code", config=TinyCodeConfig, build=TinyCodeTask))
