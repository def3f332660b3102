"""Backends: the engines a cell's arms run on, one package each, chosen by the `backend` config
group (`backend=vllm`).

A backend's package holds its knobs in a torch-free `config.py` (a `BackendConfig` registered
with `BACKEND_CONFIGS`, which Hydra validates `conf/backend/<name>.yaml` against) and its engine
in `backend.py` (a `Backend` registered with `@BACKENDS.register`). The pipeline asks the cell's
backend, never names one: whether it can run the cell (before any file is read), what it must
check on disk before the store opens, and, once the store is open, the arms it runs (starting
whatever it needs, stopped when the cell's `ExitStack` closes). `specbench` is specbench's own
engine (eager or compiled, `run.engine`); `vllm` serves every arm from `vllm serve` processes
and owns its table from method configs to vLLM's speculative config (docs/architecture.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from specbench.errors import ConfigError
from specbench.registry import BACKENDS

if TYPE_CHECKING:
    from specbench.config import Config
    from specbench.evaluate import Arms
    from specbench.method import Method

# tokens a chat template may add around one later user turn of a multi-turn sample
TEMPLATE_ALLOWANCE = 64


@dataclass
class BackendConfig:
    """A backend's knobs: `name` selects the registered `Backend`; subclasses add their own."""

    name: str = MISSING
    # the knobs that change what a cell measures, so its display name carries them (a GGUF's
    # type does; a python's path or a startup limit does not)
    SHOWN: ClassVar[tuple[str, ...]] = ()

    def check(self) -> None:
        """Raise `ConfigError` on a knob out of range (no file read, no torch)."""
        return None


def runs_only(setting: str, *knobs: tuple[str, Any, Any]) -> None:
    """Refuse in one line a knob (key, value, the one value the engine's `setting` runs) that
    the engine has no equivalent of, the value shown as a user writes it (None as null)."""
    for key, value, only in knobs:
        if value != only:
            shown = "null" if only is None else only
            raise ConfigError(key, value, f"{setting} runs {key}={shown} only")


class Backend(ABC):
    """What the pipeline asks of the engine a cell runs on; the defaults are specbench's own."""

    name: ClassVar[str]
    # runs several requests in flight at once (`run.concurrency` > 1)
    concurrent: ClassVar[bool] = False
    # runs specbench's own further arms beside the method's: references and the ceiling
    own_arms: ClassVar[bool] = True
    # its forwards are specbench's, so the cost model can time them after the run
    predicts: ClassVar[bool] = True
    # the methods its table maps to its engine's own settings, and the engine's name in the
    # refusal of the rest; None: every method (specbench's own engine)
    methods: ClassVar[Collection[str] | None] = None
    engine: ClassVar[str] = ""

    def check(self, config: Config, method: Method) -> None:
        """Raise `ConfigError` on a cell this backend cannot run (no file read)."""
        if config.run.concurrency > 1 and not self.concurrent:
            batching = " or ".join(name for name in BACKENDS if BACKENDS[name].concurrent)
            raise ConfigError(
                "run.concurrency",
                config.run.concurrency,
                f"needs backend={batching} ({self.name} decodes one request at a time)",
            )
        if config.run.oracle and not self.own_arms:
            raise ConfigError("run.oracle", True, "is specbench's own arm; use backend=specbench")
        if self.methods is not None and method.name not in self.methods:
            runs = ", ".join(sorted(self.methods))
            raise ConfigError(
                "backend", self.name, f"{self.engine} runs methods {runs}; not {method.name}"
            )

    def prepare(self, config: Config, method: Method) -> None:
        """Raise `ConfigError` on what only files tell (an engine's install, a drafter's
        config), before the run directory opens."""
        return None

    @abstractmethod
    def arms(self, plan: Any, stack: ExitStack) -> tuple[Any, Arms, dict[str, Any]]:
        """The target (for stop tokens and tie checks), every arm the cell decodes, and what
        env.json says of the engine; whatever it starts is stopped when `stack` closes."""


def longest_sequence(plan: Any) -> int:
    """The longest sequence a cell decodes: the longest sample's prompt and every generated
    token, and in a multi-turn sample each later user turn with a template allowance (a
    static cache's size, a server's maximum length)."""

    def need(sample: Any) -> int:
        later = sample.user_turns[1:]
        turns = sum(len(plan.tokenizer(text)["input_ids"]) + TEMPLATE_ALLOWANCE for text in later)
        return len(plan.prompt_ids[sample.id]) + turns + plan.max_new * (1 + len(later))

    return max(need(s) for s in plan.samples)
