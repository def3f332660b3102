"""MBPP (Austin et al. 2021): short Python programs from a description and three asserts;
pass@1 in the sandbox.

`variant: full` is the original 500-problem test split (task ids 11-510) with lm-eval's `mbpp`
prompt: three exemplars (task ids 2-4) in "[BEGIN] code [DONE]" form, then the problem;
decoding stops at "[DONE]". `variant: sanitized` is the hand-checked subset (its test-split ids)
with its cleaner `prompt` text and `test_imports`. Instruct targets get lm-eval's
`mbpp_instruct` wording through the chat template; the first code block of the reply is run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specbench import sandbox
from specbench.errors import ConfigError
from specbench.registry import TaskSpec, register_task
from specbench.tasks.base import Sample, Task, rows_from
from specbench.tasks.code import CodeTaskConfig, code_of, require_sandbox

TEST_IDS = range(11, 511)
EXEMPLAR_IDS = (2, 3, 4)


def describe(row: dict) -> str:
    return row.get("prompt") or row["text"]


def plain_prompt(row: dict) -> str:
    tests = "\n".join(row["test_list"][:3])
    return (
        f"You are an expert Python programmer, and here is your task: {describe(row)} "
        f"Your code should pass these tests:\n\n{tests}\n[BEGIN]"
    )


def heldout_rows(source: str, key: str = "task.source") -> list[dict]:
    """MBPP's problems outside its test split (prompt 1-10, validation 511-600, train 601-974),
    from the hub's splits or a local full mbpp.jsonl."""
    dataset = "google-research-datasets/mbpp"
    if source != "hub":
        return [
            r for r in rows_from(source, key, dataset, "full", "") if r["task_id"] not in TEST_IDS
        ]
    splits = ("prompt", "validation", "train")
    return [row for split in splits for row in rows_from(source, key, dataset, "full", split)]


def heldout_samples(source: str, key: str = "task.source") -> list[Sample]:
    """MBPP's non-test problems in the base-target prompt format: held-out code prompts for
    any code task (MBPP, HumanEval)."""
    return [
        Sample(id=f"mbpp-{row['task_id']}", prompt=f"{plain_prompt(row)}\n", reference=row["code"])
        for row in heldout_rows(source, key)
    ]


@dataclass
class MbppConfig(CodeTaskConfig):
    name: str = "mbpp"
    variant: str = "full"  # full (mbpp.jsonl) or sanitized (sanitized-mbpp.json)
    source: str = "hub"  # or a local mbpp.jsonl (full) / sanitized-mbpp.json (sanitized)
    max_new_tokens: int = 512
    stop: list[str] = field(default_factory=lambda: ["[DONE]"])

    def check(self) -> None:
        super().check()
        if self.variant not in ("full", "sanitized"):
            raise ConfigError("task.variant", self.variant, "allowed: full, sanitized")


CHAT_FORMATS = {
    "specbench": "You are an expert Python programmer, and here is your task:\n{task}\n"
    "Your code should pass these tests:\n{tests}",
    "dflash": "{task}",  # the sanitized set's prompt as it is
}


class MbppTask(Task):
    name = "mbpp"
    metrics = {"pass@1": True}

    def heldout(self) -> list[Sample]:
        return heldout_samples(self.cfg.source)

    def train_texts(self) -> list[str]:
        return [f"{describe(row)}\n{row['code']}" for row in heldout_rows(self.cfg.source)]

    def samples(self) -> list[Sample]:
        rows = {}
        for split in ("test", "prompt"):
            if self.cfg.source != "hub" and split == "prompt":
                break  # a local upstream file holds every split at once
            loaded = rows_from(
                self.cfg.source,
                "task.source",
                "google-research-datasets/mbpp",
                self.cfg.variant,
                split,
            )
            rows.update({row["task_id"]: row for row in loaded})
        missing = [i for i in EXEMPLAR_IDS if i not in rows]
        if missing:
            raise ConfigError("task.source", self.cfg.source, f"lacks the exemplar tasks {missing}")
        shots = "\n\n".join(
            f"{plain_prompt(rows[i])}\n{rows[i]['code']}\n[DONE]" for i in EXEMPLAR_IDS
        )
        return [
            Sample(
                id=f"mbpp-{task_id}",
                prompt=f"{shots}\n\n{plain_prompt(row)}\n",
                turns=[
                    self.chat_turn(
                        CHAT_FORMATS,
                        task=describe(row),
                        tests="\n".join(row["test_list"][:3]),
                    )
                ],
                reference=row["code"],
                meta={
                    "tests": row["test_list"],
                    "setup": row.get("test_setup_code", ""),
                    "imports": row.get("test_imports", []),
                },
            )
            for task_id, row in sorted(rows.items())
            if task_id in TEST_IDS
        ]

    def check(self) -> None:
        require_sandbox(self.name)

    def code_check(self, sample: Sample, completion: str) -> sandbox.Check:
        """The program (with the problem's imports and setup code), judged by its asserts,
        which call the function they name on plain values or on the objects the setup code
        built (MBPP-367's trees, made from the program's own class)."""
        code = code_of(completion) if self.chat else completion
        imports, setup = "\n".join(sample.meta["imports"]), sample.meta["setup"]
        tests = "\n".join(sample.meta["tests"]) + "\n"
        calls, handles = sandbox.remote_names(tests, imports, sample.reference)
        return sandbox.Check(
            program=f"{imports}\n{code}\n{setup}\n",
            tests=tests,
            calls=calls,
            prelude=imports,
            handles=handles,
        )

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        limits = sandbox.Limits(wall_s=self.cfg.timeout_s, cpu_s=int(self.cfg.timeout_s))
        return {"pass@1": float(sandbox.run(self.code_check(sample, completion), limits).passed)}


register_task(TaskSpec(name="mbpp", config=MbppConfig, build=MbppTask))
