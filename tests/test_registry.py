"""The registries: one entry per name, only entries of their axis' type; methods and model
kinds declare what the harness asks, and the pipeline asks them instead of naming them."""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

import pytest
import torch
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import specbench.decoding
import specbench.pipeline
from conftest import compose_cfg
from specbench import paths, registry
from specbench.backends import BackendConfig
from specbench.backends.specbench.backend import Specbench, load_models
from specbench.decoding.ar.method import AR
from specbench.decoding.drafters.sps.method import SpS
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.method import Method
from specbench.models.causal import CausalLM
from specbench.models.kinds.causal import Causal
from specbench.pipeline import execute, prepare
from specbench.registry import (
    BACKEND_CONFIGS,
    BACKENDS,
    METHOD_CONFIGS,
    METHODS,
    MODEL_KINDS,
    Registry,
    discover,
)
from specbench.report.load import marker


def test_a_taken_name_and_a_non_method_are_refused() -> None:
    discover()
    registry = Registry("method-test", METHODS.accepts, "Method subclass")
    registry.register(AR)

    @dataclass
    class ImpostorConfig:
        name: str = "ar"

    class Impostor(Method):
        name, Config = "ar", ImpostorConfig

        def build(self, target, drafter, task):
            return None

    with pytest.raises(ValueError, match="'ar' is taken"):
        registry.register(Impostor)
    with pytest.raises(TypeError, match="is not a Method subclass"):
        registry.add("plain", object)
    assert list(registry) == ["ar"] and registry["ar"] is AR


def test_every_registered_method_declares_what_the_harness_asks() -> None:
    """Each method's config class, kinds and round unit are declared, and its default config
    builds a label that names the method."""
    discover()
    for name in METHODS:
        cls = METHODS[name]
        assert cls.name == name and cls.Config().name == name
        assert cls.target_kind in MODEL_KINDS
        assert cls.drafter_kind is None or cls.drafter_kind in MODEL_KINDS
        assert cls.round_unit in (None, "tokens", "steps")
        assert cls(cls.Config(), Warp()).label().startswith(name)


def test_each_method_config_is_the_schema_its_yaml_composes_with() -> None:
    """Each method's config registers itself from its package's `config` module (no torch),
    stored in Hydra's ConfigStore under the name its YAML names: the one its `Method` builds."""
    discover()
    stored = ConfigStore.instance().repo["method"]
    for name in METHODS:
        assert OmegaConf.get_type(stored[f"schema_{name}.yaml"].node) is METHODS[name].Config


def test_every_model_yaml_names_a_registered_kind() -> None:
    discover()
    for yaml in sorted((paths.CONF_DIR / "target").glob("*.yaml")):
        assert OmegaConf.load(yaml).get("kind", "causal") in MODEL_KINDS, yaml.name
    for yaml in sorted((paths.CONF_DIR / "drafter").glob("*.yaml")):
        kind = OmegaConf.load(yaml).get("kind", "causal")
        assert kind in MODEL_KINDS or yaml.stem == "none", yaml.name


def test_the_pipeline_names_no_kind_no_method_and_no_backend() -> None:
    """Every string literal and name in pipeline.py: none is a registered kind's, method's or
    backend's name (the pipeline asks `ModelKind`, `Method` and `Backend` objects instead)."""
    discover()
    tree = ast.parse(open(specbench.pipeline.__file__).read())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert not strings & (set(MODEL_KINDS) | set(METHODS) | set(BACKENDS))
    names = {n.id.lower() for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr.lower() for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {name for name in BACKENDS if name != "specbench"}


def test_a_backend_is_one_class_the_pipeline_asks(monkeypatch, tmp_path) -> None:
    """A toy engine registered outside specbench (specbench's own arms under another name,
    refusing one method), its config the group option `backend/toy`: `backend=toy` runs a
    cell through it, its refusal is one line before anything loads, and no cost model predicts
    a backend that says it cannot."""

    @dataclass
    class ToyConfig(BackendConfig):
        name: str = "toy"

    class Toy(Specbench):
        name = "toy"
        predicts = False

        def check(self, config, method):
            super().check(config, method)
            if method.name == "pld":
                raise ConfigError("backend", self.name, "toy runs no pld")

    discover()
    monkeypatch.setitem(BACKENDS._entries, "toy", Toy)
    monkeypatch.setitem(BACKEND_CONFIGS._entries, "toy", ToyConfig)
    ConfigStore.instance().store(group="backend", name="toy", node=ToyConfig)
    cell = [
        "backend=toy",
        "run.limit=1",
        "run.max_new_tokens=16",
        f"run.results_dir={tmp_path}",
    ]
    summary = execute(prepare(compose_cfg(*cell)))
    assert summary.n_samples == 1 and summary.base.identical_rate == 1.0
    assert summary.predicted_speedup is None
    with pytest.raises(ConfigError, match="toy runs no pld"):
        prepare(compose_cfg(*cell, "method=pld", "drafter=none"))


def test_the_pipeline_asks_a_new_kind_for_every_fact(monkeypatch, tmp_path) -> None:
    """A kind registered outside specbench (a causal LM in a new dress) is checked, asked for
    its drafter rule (its context of 99 truncates the prompt) and dtype, and loaded by its own
    hooks, for target and drafter alike."""
    asked: list[tuple[str, str]] = []

    class Logged(Causal):
        name = "logged"

        def check(self, cfg, key):
            asked.append(("check", key))

        def check_checkpoint(self, cfg, key, config):
            asked.append(("check_checkpoint", key))

        def check_drafter(self, cfg, tokenizer):
            asked.append(("check_drafter", cfg.name))
            return 99

        def dtype(self, cfg, config):
            asked.append(("dtype", cfg.name))
            return "float64"

        def load(self, cfg, key, device, dtype):
            asked.append(("load", f"{key} {dtype}"))
            return super().load(cfg, key, device, dtype)

    discover()
    monkeypatch.setitem(MODEL_KINDS._entries, "logged", Logged)
    monkeypatch.setattr(SpS, "target_kind", "logged")
    monkeypatch.setattr(SpS, "drafter_kind", "logged")
    cell = ["method=sps", "target=tiny", "drafter=tiny-ar", "task=tiny_code", "run.limit=1"]
    cfg = compose_cfg(
        *cell,
        "target.kind=logged",
        "drafter.kind=logged",
        "run.max_new_tokens=8",
        "run.fit_context=truncate_left",
        f"run.results_dir={tmp_path}",
    )
    plan = prepare(cfg)
    assert [len(ids) for ids in plan.prompt_ids.values()] == [99 - 8]  # the kind's context
    target, drafter = load_models(plan)
    plan.store.close()
    assert isinstance(target, CausalLM) and isinstance(drafter, CausalLM)
    assert target.model.dtype == drafter.model.dtype == torch.float64
    assert asked == [
        ("check", "target"),
        ("check", "drafter"),
        ("check_checkpoint", "target"),
        ("check_checkpoint", "drafter"),
        ("check_drafter", "tiny-ar"),
        ("dtype", "tiny"),
        ("dtype", "tiny-ar"),
        ("load", "target float64"),
        ("load", "drafter float64"),
    ]


TOY_CONFIG = """
from dataclasses import dataclass
from typing import ClassVar

from specbench.registry import METHOD_CONFIGS


@METHOD_CONFIGS.register
@dataclass
class ToyConfig:
    marker: ClassVar[str] = "h"
    name: str = "toy"
    steps: int = 1

    def check(self, temperature, max_new):
        if self.steps < 1:
            from specbench.errors import ConfigError

            raise ConfigError("method.steps", self.steps, "must be >= 1")
"""

TOY_METHOD = """
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.toy.config import ToyConfig
from specbench.method import Method
from specbench.registry import METHODS


@METHODS.register
class Toy(Method):
    name, Config = "toy", ToyConfig

    def build(self, target, drafter, task):
        return AutoregressiveDecoder(target, self.warp)
"""


def test_a_method_is_one_package_and_one_yaml(monkeypatch, tmp_path) -> None:
    """A toy method written as docs/architecture.md says, and nothing else: a package under
    `specbench.decoding` (its config and its torch code) and `conf/method/toy.yaml`. Discovery
    finds both halves, `method=toy` composes (a bad knob refused in one line) and runs a cell,
    and the report reads its marker."""
    package = tmp_path / "decoding" / "toy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "config.py").write_text(TOY_CONFIG)
    (package / "method.py").write_text(TOY_METHOD)
    (tmp_path / "conf" / "method").mkdir(parents=True)
    (tmp_path / "conf" / "method" / "toy.yaml").write_text("defaults:\n  - schema_toy\n")
    store = ConfigStore.instance()
    monkeypatch.setattr(store, "repo", copy.deepcopy(store.repo))
    monkeypatch.setattr(METHODS, "_entries", dict(METHODS._entries))
    monkeypatch.setattr(METHOD_CONFIGS, "_entries", dict(METHOD_CONFIGS._entries))
    monkeypatch.setattr(
        specbench.decoding, "__path__", [*specbench.decoding.__path__, str(package.parent)]
    )
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    cell = [
        "method=toy",
        "drafter=none",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "run.limit=1",
        "run.max_new_tokens=8",
        f"run.results_dir={tmp_path / 'results'}",
    ]
    summary = execute(prepare(compose_cfg(*cell)))
    assert summary.n_samples == 1 and METHODS["toy"].Config is METHOD_CONFIGS["toy"]
    assert marker("toy") == "h"
    with pytest.raises(ConfigError, match="method.steps"):
        prepare(compose_cfg(*cell, "method.steps=0"))
