"""The cell's task and samples, read from the config alone (no torch, no model), so that a
missing or malformed data file is refused as soon as the config composes."""

from __future__ import annotations

from specbench.config import Config, max_new_tokens
from specbench.errors import ConfigError
from specbench.registry import TASKS
from specbench.tasks.base import Sample, Task

TaskSamples = tuple[Task, list[Sample], int]  # the task, its samples, the generation length


def load_samples(config: Config) -> TaskSamples:
    """The task (refused first where this machine cannot score it), its first `run.limit`
    samples, each a non-empty text prompt with a unique id (resume is keyed by id), and the
    generation length."""
    if config.task.name not in TASKS:
        raise ConfigError("task", config.task.name, f"allowed: {', '.join(TASKS)}")
    target = config.target
    task = TASKS[config.task.name].build(
        config.task, target.chat_template, dict(target.chat_template_kwargs), target.system_prompt
    )
    task.check()
    samples = task.samples()[: config.run.limit]
    if not samples:
        raise ConfigError("task", config.task.name, "has no samples with these settings")
    seen: set[str] = set()
    for sample in samples:
        bad = [t for t in sample.user_turns if not isinstance(t, str) or not t.strip()]
        if bad:
            raise ConfigError(
                "task",
                config.task.name,
                f"sample {sample.id!r} has a prompt {bad[0]!r}; every prompt must be non-empty text",
            )
        if sample.id in seen:
            raise ConfigError(
                "task",
                config.task.name,
                f"sample id {sample.id!r} appears twice; ids must be unique",
            )
        seen.add(sample.id)
    return task, samples, max_new_tokens(config)
