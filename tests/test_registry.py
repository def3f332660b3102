"""The method registry: one class per name, and only `Method` classes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from specbench.decoding.autoregressive import AR
from specbench.decoding.warp import Warp
from specbench.method import Method
from specbench.registry import METHODS, Registry, discover


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
        assert cls.target_kind in ("causal", "diffusion")
        assert cls.drafter_kind in (None, "causal", "diffusion", "dflash")
        assert cls.round_unit in (None, "tokens", "steps")
        assert cls(cls.Config(), Warp()).label().startswith(name)


def test_each_method_config_is_the_schema_its_yaml_composes_with() -> None:
    """Method configs live in specbench/decoding/configs.py (no torch); each is stored in
    Hydra's ConfigStore under the name its method's YAML names."""
    discover()
    stored = ConfigStore.instance().repo["method"]
    for name in METHODS:
        assert OmegaConf.get_type(stored[f"schema_{name}.yaml"].node) is METHODS[name].Config
