"""Name -> entry registries, one per axis (methods, tasks, model kinds, built-in models,
backends).

A method or task registers itself from its own module. A task registers the structured config
that Hydra validates its YAML against with it; a method's config registers itself from its
package's `config` module, apart from its torch code (`method.py`), so that composing a config
imports no torch. A registry refuses a second entry under a taken name and an entry of the
wrong kind: a silent overwrite would make a run measure a different method than its name says.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from hydra.core.config_store import ConfigStore

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of one axis by name. `accepts` says whether an object may be an entry;
    `schema` gives the dataclass stored in Hydra's ConfigStore as `<axis>/schema_<name>`."""

    def __init__(
        self,
        axis: str,
        accepts: Callable[[Any], bool],
        kind: str,
        schema: Callable[[T], type] | None = None,
    ):
        self.axis, self.accepts, self.kind, self.schema = axis, accepts, kind, schema
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        if not self.accepts(entry):
            raise TypeError(f"{self.axis} registry: {entry!r} is not a {self.kind}")
        if name in self._entries:
            raise ValueError(
                f"{self.axis} registry: {name!r} is taken by {self._entries[name]!r}; "
                "choose another name"
            )
        self._entries[name] = entry
        if self.schema is not None:
            node = self.schema(entry)
            ConfigStore.instance().store(group=self.axis, name=f"schema_{name}", node=node)
        return entry

    def register(self, entry: T) -> T:
        """Add an entry that knows its own name (a class decorator for methods)."""
        return self.add(entry.name, entry)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True)
class TaskSpec:
    name: str
    config: type
    # (task_cfg, the target reads chat templates, its template's extra arguments, its system
    # prompt) -> Task
    build: Callable[[Any, bool, dict, str | None], Any]


def _is_method(entry: Any) -> bool:
    from specbench.method import Method

    return isinstance(entry, type) and issubclass(entry, Method) and entry is not Method


def _is_method_config(entry: Any) -> bool:
    """A dataclass with the class facts the harness reads without torch: its `marker` in plots
    and its `check` of the knobs."""
    return (
        isinstance(entry, type)
        and is_dataclass(entry)
        and isinstance(getattr(entry, "marker", None), str)
        and callable(getattr(entry, "check", None))
    )


def _is_model_kind(entry: Any) -> bool:
    from specbench.models.kinds import ModelKind

    return isinstance(entry, type) and issubclass(entry, ModelKind) and entry is not ModelKind


def _is_backend(entry: Any) -> bool:
    from specbench.backends import Backend

    return isinstance(entry, type) and issubclass(entry, Backend) and entry is not Backend


def _is_backend_config(entry: Any) -> bool:
    from specbench.backends import BackendConfig

    return isinstance(entry, type) and issubclass(entry, BackendConfig)


METHODS: Registry = Registry("method", _is_method, "Method subclass")
# each method's knobs (`conf/method/<name>.yaml`), from its package's torch-free `config` module;
# the report reads a stored cell's plot marker here
METHOD_CONFIGS: Registry[type] = Registry(
    "method", _is_method_config, "method config dataclass", lambda config: config
)
BACKENDS: Registry = Registry("backend", _is_backend, "Backend subclass")
# each backend's knobs (`conf/backend/<name>.yaml`), from its torch-free `config` module
BACKEND_CONFIGS: Registry[type] = Registry(
    "backend", _is_backend_config, "BackendConfig subclass", lambda config: config
)
MODEL_KINDS: Registry = Registry("kind", _is_model_kind, "ModelKind subclass")
TASKS: Registry[TaskSpec] = Registry(
    "task", lambda e: isinstance(e, TaskSpec), "TaskSpec", lambda spec: spec.config
)
BUILTIN_MODELS: Registry[Callable[[Path], None]] = Registry("model", callable, "function")


def register_task(spec: TaskSpec) -> TaskSpec:
    return TASKS.register(spec)


def register_builtin_model(
    name: str, sources: tuple[Path, ...] = (), tokenizer: Callable | None = None
) -> Callable:
    """Decorator for a function that writes a model with `save_pretrained` into a directory;
    `sources` are the checkpoint directories it reads (their files key its cache entry);
    `tokenizer`, the tokenizer it saves, made alone: a cell refused for its tokenizer then
    builds no weights into the cache."""

    def wrap(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        fn.sources = sources
        fn.tokenizer = tokenizer
        return BUILTIN_MODELS.add(name, fn)

    return wrap


def _import_all(package: str, leaf: str | None = None) -> None:
    """Import every module under `package`, or with `leaf` only the modules of that name (and
    the packages above them, which must then import no torch)."""
    pkg = importlib.import_module(package)
    for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}."):
        if leaf is None or info.name.rsplit(".", 1)[-1] == leaf:
            importlib.import_module(info.name)


def discover_schemas() -> None:
    """Store every method and task schema in Hydra's ConfigStore, importing neither torch nor
    transformers (task modules import them where they use them): what composing a config needs,
    so a misspelt key is reported in a second."""
    _import_all("specbench.decoding", leaf="config")
    _import_all("specbench.tasks")
    _import_all("specbench.backends", leaf="config")


_DISCOVERED = False


def discover() -> None:
    """Import every module under the axes' packages so their registrations run."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    for package in (
        "specbench.models",
        "specbench.decoding",
        "specbench.tasks",
        "specbench.backends",
    ):
        _import_all(package)
    _DISCOVERED = True
