"""The task interface: samples in, prompt ids out, a completion scored."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from specbench.errors import ConfigError


@dataclass
class Sample:
    id: str
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    reference: Any = None
    meta: dict[str, Any] = field(default_factory=dict)


class Task:
    """A dataset, its prompt format and its quality metrics. `metrics` maps each metric a task
    reports to whether higher is better, so reports know which way a frontier points."""

    name: str = ""
    metrics: dict[str, bool] = {}

    def samples(self) -> list[Sample]:
        raise NotImplementedError

    def prompt_ids(
        self, tokenizer: PreTrainedTokenizerBase, sample: Sample, chat_template: bool
    ) -> list[int]:
        """Chat-templated for instruct targets, plain text for base targets."""
        messages = sample.messages or [{"role": "user", "content": sample.prompt}]
        if chat_template:
            return list(
                tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=True, return_dict=False
                )
            )
        text = sample.prompt if sample.prompt is not None else messages[-1]["content"]
        return tokenizer(text, add_special_tokens=True)["input_ids"]

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        return {}


def read_jsonl(path: str, key: str, required: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a bad line fails with its line number, before any weight loads."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(key, path, "no such file; give a JSONL file path")
    rows = []
    with file.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ConfigError(key, path, f"line {lineno}: invalid JSON ({err.msg})") from None
            missing = [k for k in required if not isinstance(row, dict) or k not in row]
            if missing:
                raise ConfigError(key, path, f"line {lineno}: missing field(s) {missing}")
            rows.append(row)
    return rows
