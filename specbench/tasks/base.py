"""The task interface: samples in, prompt ids out, a completion scored."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from specbench.errors import ConfigError
from specbench.runs.summary import Workload

if TYPE_CHECKING:  # tasks compose with a config, before transformers is imported
    from transformers import PreTrainedTokenizerBase


CHAT_FORMATS = ("specbench", "dflash")
NAMED_SOURCES = ("hub", "package")  # a `*source` knob names a dataset's home, or a local file


@dataclass
class TaskConfig:
    """Keys every task has: its default length and stop strings (`run.max_new_tokens`, when
    set, overrides the length for every task of a sweep)."""

    name: str = MISSING
    max_new_tokens: int = 128
    stop: list[str] = field(default_factory=list)
    # a chat target's user message (CHAT_FORMATS): specbench's, or the one the dflash package's
    # benchmark sends; where a task sends its data's own text, the two are the same
    chat_format: str = "specbench"

    def check(self) -> None:
        """Raise `ConfigError` on a knob out of range or a source file that is not there (no
        file's contents read); a task with knobs of its own extends this."""
        if self.max_new_tokens < 1:
            raise ConfigError("task.max_new_tokens", self.max_new_tokens, "must be an integer >= 1")
        if self.chat_format not in CHAT_FORMATS:
            raise ConfigError(
                "task.chat_format", self.chat_format, f"allowed: {', '.join(CHAT_FORMATS)}"
            )
        for f in fields(self):
            where = getattr(self, f.name)
            if (
                f.name.endswith("source")
                and where not in NAMED_SOURCES
                and not Path(where).is_file()
            ):
                raise ConfigError(
                    f"task.{f.name}", where, "no such file; give 'hub' or a local data file"
                )


@dataclass
class Sample:
    """`turns` are the user messages (a chat target sees them through its chat template); a
    base target sees `prompt`, the task's plain-text format of the first turn (few-shot
    exemplars included), or the first turn itself when there is none."""

    id: str
    prompt: str | None = None
    turns: list[str] = field(default_factory=list)
    reference: Any = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def user_turns(self) -> list[str]:
        return self.turns or [self.prompt]


class Task:
    """A dataset, its prompt format and its quality metrics. `metrics` maps each metric a task
    reports to whether higher is better, so reports know which way a frontier points."""

    name: str = ""
    metrics: dict[str, bool] = {}

    def __init__(
        self,
        cfg: TaskConfig,
        chat: bool = False,
        chat_kwargs: dict[str, Any] | None = None,
        system_prompt: str | None = None,
    ):
        self.cfg = cfg
        self.chat = chat  # the target reads chat-templated prompts (its config's chat_template)
        self.chat_kwargs = dict(chat_kwargs or {})  # and passes these to its template
        self.system_prompt = system_prompt  # a system message before the turns (chat only)

    def workload(self, samples: list[Sample]) -> Workload:
        """What its prompts showed the target beyond the samples' text."""
        system = self.system_prompt if self.chat else None
        return Workload(
            chat_template=self.chat,
            thinking=self.chat_kwargs.get("enable_thinking") if self.chat else None,
            system_prompt=hashlib.sha256(system.encode()).hexdigest()[:8] if system else None,
            languages=tuple(sorted({s.meta["language"] for s in samples if "language" in s.meta})),
        )

    def samples(self) -> list[Sample]:
        raise NotImplementedError

    def chat_turn(self, formats: dict[str, str], **fields: str) -> str:
        """A chat target's user message in the config's `chat_format`: the task's template of
        that name (str.format over `fields`)."""
        return formats[self.cfg.chat_format].format(**fields)

    def check(self) -> None:
        """Refuse, in one line and before any model loads, a machine that cannot score this
        task (the code tasks need their sandbox)."""

    def prompt_ids(
        self,
        tokenizer: PreTrainedTokenizerBase,
        sample: Sample,
        chat_template: bool,
        answers: Sequence[str] = (),
    ) -> list[int]:
        """The prompt of turn `len(answers)`, the earlier turns answered with `answers`:
        chat-templated for instruct targets, plain text for base targets."""
        turns = sample.user_turns[: len(answers) + 1]
        if chat_template:
            system = [{"role": "system", "content": self.system_prompt}]
            messages = system if self.system_prompt else []
            for i, turn in enumerate(turns):
                messages.append({"role": "user", "content": turn})
                if i < len(answers):
                    messages.append({"role": "assistant", "content": answers[i]})
            return list(
                tokenizer.apply_chat_template(
                    messages,
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=False,
                    **self.chat_kwargs,
                )
            )
        parts = [sample.prompt if sample.prompt is not None else turns[0]]
        for answer, turn in zip(answers, turns[1:]):
            parts += [answer, turn]
        return tokenizer("\n\n".join(parts), add_special_tokens=True)["input_ids"]

    def heldout(self) -> list[Sample]:
        """Samples in this task's format from data it never measures (a training, validation
        or prompt split), for methods that calibrate on the task (Spiffy); empty where the
        task has none."""
        return []

    def train_texts(self) -> list[str]:
        """Text of the task's training split, for methods that fit a model to the task
        (DiffuSpec's n-gram); empty where the task has none."""
        return []

    def answer(self, text: str) -> str:
        """The decoded completion cut at the first stop string (its token ends decoding)."""
        for stop in self.cfg.stop:
            text = text.split(stop, 1)[0]
        return text

    def score(self, sample: Sample, completion: str) -> dict[str, float]:
        return {}

    def score_answers(self, sample: Sample, answers: list[str]) -> dict[str, float]:
        """Multi-turn tasks override this; a single-turn task scores its one answer."""
        return self.score(sample, answers[0])


def numbered_lines(fh: Any, key: str, path: str) -> Iterator[tuple[int, str]]:
    """The lines of a file opened in binary, numbered from 1; a line that is not UTF-8 fails
    naming its number, before any weight loads."""
    for lineno, raw in enumerate(fh, start=1):
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(
                key,
                path,
                f"line {lineno}: not UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start + 1} "
                "of the line); save the file as UTF-8",
            ) from None


def read_jsonl(
    path: str, key: str, required: tuple[str, ...], opener: Callable[..., Any] = open
) -> list[dict[str, Any]]:
    """Rows of a JSONL file (`opener`: gzip.open for a .gz one); a bad line fails with its line
    number, before any weight loads."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(key, path, "no such file; give a JSONL file path")
    rows = []
    with opener(file, "rb") as fh:
        for lineno, line in numbered_lines(fh, key, path):
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


def local_source(source: str, what: str) -> str:
    """`task.source` of a task that reads a local file only: `hub` names no dataset there."""
    if source == "hub":
        raise ConfigError("task.source", source, f"this task reads a local file only: give {what}")
    return source


def read_rows(path: str, key: str) -> list[dict[str, Any]]:
    """A local data file in its upstream format: JSONL (optionally gzipped), a JSON array, or
    a parquet file as the hub stores a split."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            key, path, "no such file; give 'hub' or a local .jsonl/.jsonl.gz/.json/.parquet file"
        )
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(file).to_pylist()
        except (OSError, ValueError) as err:  # pyarrow's errors derive from both
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ConfigError(key, path, f"not a readable parquet file: {first}") from None
    if file.suffix == ".json":
        try:
            rows = json.loads(file.read_bytes())
        except ValueError as err:  # invalid JSON, or not UTF-8
            raise ConfigError(key, path, f"not a JSON file in UTF-8: {err}") from None
        if not isinstance(rows, list):
            raise ConfigError(key, path, "a .json file must hold one array of records")
        return rows
    return read_jsonl(path, key, required=(), opener=gzip.open if file.suffix == ".gz" else open)


def hub_rows(
    key: str, dataset: str, name: str | None, split: str, first: int | None = None
) -> list[dict[str, Any]]:
    """A split from the Hugging Face hub (cached by `datasets`), or its `first` rows streamed;
    a failure names the config key that selects a local file instead."""
    from specbench.models.hub import settle

    settle()  # a hub that does not answer: datasets reads its cache, with no retries
    import datasets

    try:
        if first is not None:
            stream = datasets.load_dataset(dataset, name, split=split, streaming=True)
            return list(itertools.islice(stream, first))
        return list(datasets.load_dataset(dataset, name, split=split))
    except Exception as err:  # noqa: BLE001 - any hub failure becomes one readable line
        raise ConfigError(
            key,
            "hub",
            f"loading {dataset} ({name or 'default'}, {split}) failed: "
            f"{type(err).__name__}: {str(err).splitlines()[0][:200]}; give a local file path",
        ) from None


def rows_from(
    source: str, key: str, dataset: str, name: str | None, split: str, first: int | None = None
) -> list[dict[str, Any]]:
    """`source` is "hub" or a local file path; `first` keeps only the first rows."""
    if source == "hub":
        return hub_rows(key, dataset, name, split, first)
    return read_rows(source, key)[:first]
