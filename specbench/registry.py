"""Name -> builder registries, one per axis (methods, tasks, built-in models).

A method or task registers itself from its own module, together with the structured config that
Hydra validates its YAML against, so adding one is one Python file plus one YAML file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass(frozen=True)
class MethodSpec:
    name: str
    config: type
    build: Callable[..., Any]  # (method_cfg, target, drafter, warp) -> Decoder
    needs_drafter: bool
    drafter_kind: str = "causal"  # the `kind` a drafter's config must have: causal | diffusion
    target_kind: str = "causal"  # the `kind` the target's config must have
    # (method_cfg, target, warp) -> the baseline arm's Decoder; None: plain AR decoding
    baseline: Callable[..., Any] | None = None
    check: Callable[[Any, Any], None] = lambda cfg, warp: None  # raises ConfigError on a bad knob
    # (method_cfg, target_cfg): knobs that depend on the target (before any weight loads)
    check_target: Callable[[Any, Any], None] = lambda cfg, target: None
    # (decoder, prompt ids, summary) -> predicted speedup and the forward costs behind it
    cost_model: Callable[..., dict] | None = None
    # whether the output is distributed exactly as the target's
    lossless: Callable[[Any, Any], bool] = lambda cfg, warp: True


@dataclass(frozen=True)
class TaskSpec:
    name: str
    config: type
    build: Callable[[Any, bool], Any]  # (task_cfg, the target reads chat templates) -> Task


METHODS: dict[str, MethodSpec] = {}
TASKS: dict[str, TaskSpec] = {}
BUILTIN_MODELS: dict[str, Callable[[Path], None]] = {}


def _store_schema(group: str, name: str, node: type) -> None:
    ConfigStore.instance().store(group=group, name=f"schema_{name}", node=node)


def register_method(spec: MethodSpec) -> MethodSpec:
    METHODS[spec.name] = spec
    _store_schema("method", spec.name, spec.config)
    return spec


def register_task(spec: TaskSpec) -> TaskSpec:
    TASKS[spec.name] = spec
    _store_schema("task", spec.name, spec.config)
    return spec


def register_builtin_model(name: str) -> Callable:
    """Decorator for a function that writes a model with `save_pretrained` into a directory."""

    def wrap(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        BUILTIN_MODELS[name] = fn
        return fn

    return wrap


_DISCOVERED = False


def discover() -> None:
    """Import every module under the axes' packages so their registrations run."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    for package in ("specbench.models", "specbench.decoding", "specbench.tasks"):
        pkg = importlib.import_module(package)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}."):
            importlib.import_module(info.name)
    _DISCOVERED = True
