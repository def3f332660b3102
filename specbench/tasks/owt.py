"""OpenWebText: continue the first `prefix_tokens` tokens of a web document (the setting of the
MDLM and SpecDiff papers). Quality is the perplexity of the completion under an oracle LM, by
default the target itself (`task.oracle=gpt2-large` for GPT-2 setups, as those papers use).

The hub source streams the first `documents` documents of `Skylion007/openwebtext`; a local
source is any JSONL of {"text": ...} documents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specbench.errors import ConfigError
from specbench.metrics.quality import OracleLM
from specbench.registry import TaskSpec, register_task
from specbench.runs.summary import Workload
from specbench.tasks.base import Sample, Task, TaskConfig, rows_from

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class OwtConfig(TaskConfig):
    name: str = "owt"
    source: str = "hub"  # or a local JSONL of {"text"} documents
    documents: int = 500  # how many: the first of the hub's stream or of the local file
    prefix_tokens: int = 64  # the document's first tokens, the prompt
    max_new_tokens: int = 128
    oracle: str | None = "${target.name_or_path}"  # the LM scoring perplexity; null skips it

    def check(self) -> None:
        super().check()
        for key in ("documents", "prefix_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"task.{key}", getattr(self, key), "must be an integer >= 1")


class OwtTask(Task):
    name = "owt"
    metrics = {"perplexity": False, "nll": False}

    def samples(self) -> list[Sample]:
        rows = rows_from(
            self.cfg.source,
            "task.source",
            "Skylion007/openwebtext",
            None,
            "train",
            self.cfg.documents,
        )
        return [
            Sample(id=f"owt-{i:05d}", prompt=row["text"])
            for i, row in enumerate(rows)
            if row.get("text")
        ]

    def prompt_ids(
        self,
        tokenizer: PreTrainedTokenizerBase,
        sample: Sample,
        chat_template: bool,
        answers: Sequence[str] = (),
    ) -> list[int]:
        """The document's first tokens, plain text whatever the target: this is continuation,
        not instruction following. The prefix's text is kept for the oracle."""
        ids = tokenizer(sample.prompt)["input_ids"][: self.cfg.prefix_tokens]
        sample.meta["prefix"] = tokenizer.decode(ids)
        return ids

    def workload(self, samples: list[Sample]) -> Workload:
        """Plain text whatever the target: no template, no system message."""
        return Workload()

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        if not self.cfg.oracle:
            return {}
        nll = OracleLM(self.cfg.oracle).nll(sample.meta["prefix"], completion)
        return {} if nll is None else {"nll": nll, "perplexity": math.exp(nll)}


register_task(TaskSpec(name="owt", config=OwtConfig, build=OwtTask))
