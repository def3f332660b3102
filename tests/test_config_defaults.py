"""One source for each default: the dataclass. A group's YAML names its structured config
(`defaults: [schema_<x>, _self_]`) and holds only the values that differ from it; a repeated
default would silently stop following the dataclass when the dataclass changes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from conftest import compose_cfg
from specbench import paths
from specbench.registry import discover

GROUPS = ("method", "task", "run", "logging", "target", "drafter")
FILES = [f for group in GROUPS for f in sorted((paths.CONF_DIR / group).glob("*.yaml"))]
IDENTITY = {"name"}  # a config's own name may repeat its schema's default


def label(file: Path) -> str:
    return str(file.relative_to(paths.CONF_DIR))


def schema_of(file: Path) -> DictConfig:
    """The structured config a group YAML's defaults list names, from Hydra's ConfigStore."""
    discover()  # method and task schemas are stored when their modules import
    group = file.parent.name
    defaults = OmegaConf.load(file).get("defaults")
    assert defaults is not None, f"{label(file)}: no defaults list naming its schema_<x>"
    schemas = [d for d in defaults if isinstance(d, str) and d.startswith("schema_")]
    assert len(schemas) == 1, f"{label(file)}: defaults must name one schema_<x>, not {schemas}"
    assert list(defaults) == [schemas[0], "_self_"], (
        f"{label(file)}: defaults {list(defaults)}; expected [{schemas[0]}, _self_]"
    )
    stored = ConfigStore.instance().repo.get(group, {})
    assert f"{schemas[0]}.yaml" in stored, (
        f"{label(file)}: no {schemas[0]} stored in group {group!r} of the ConfigStore"
    )
    return stored[f"{schemas[0]}.yaml"].node


def same(a: Any, b: Any) -> bool:
    """Equal as config values; a bool equals only a bool (True == 1 in Python)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def is_structured(node: DictConfig, key: str) -> bool:
    """A nested dataclass (its keys are fields), not a free-form dict field such as max_memory."""
    return dataclasses.is_dataclass(OmegaConf.get_type(node, key))


def problems(values: DictConfig, schema: DictConfig, prefix: str = "") -> list[str]:
    """Keys that are no field of the schema, and values that repeat the schema's default."""
    found = []
    for key in values:
        name = f"{prefix}{key}"
        if key not in schema.keys():  # `in` alone says False for a MISSING field
            found.append(f"{name}: not a field of {OmegaConf.get_type(schema).__name__}")
        elif is_structured(schema, key) and OmegaConf.is_dict(values._get_node(key)):
            found += problems(values[key], schema[key], f"{name}.")
        elif not prefix and key in IDENTITY:
            continue
        else:
            mine = OmegaConf.to_container(values, resolve=False)[key]
            default = OmegaConf.to_container(schema, resolve=False)[key]
            if same(mine, default):
                found.append(f"{name}: {mine!r} repeats the dataclass default")
    return found


def yaml_values(file: Path) -> DictConfig:
    cfg = OmegaConf.load(file)
    return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "defaults"])


@pytest.mark.parametrize("file", FILES, ids=label)
def test_a_group_yaml_holds_only_what_differs_from_its_dataclass(file: Path) -> None:
    found = problems(yaml_values(file), schema_of(file))
    assert not found, f"{label(file)}: " + "; ".join(found)


@pytest.mark.parametrize("file", FILES, ids=label)
def test_a_group_yaml_composes_with_its_schema(file: Path) -> None:
    group = file.parent.name
    cfg = compose_cfg(f"{group}={file.stem}")
    schema = schema_of(file)
    if group in ("method", "task"):
        assert cfg[group].name == file.stem
    # every schema field is present after composition: the YAML merged onto its dataclass
    assert set(schema.keys()) <= set(cfg[group].keys())


def test_the_check_catches_a_repeat_and_an_unknown_key() -> None:
    """The checker itself: a repeated default and a stray key are both reported by name."""
    discover()
    schema = ConfigStore.instance().repo["method"]["schema_psd.yaml"].node
    found = problems(OmegaConf.create({"name": "psd", "depth": 3, "dpeth": 2}), schema)
    assert found == [
        "depth: 3 repeats the dataclass default",
        "dpeth: not a field of PSDConfig",
    ]
    logging = ConfigStore.instance().repo["logging"]["schema_logging.yaml"].node
    assert problems(OmegaConf.create({"wandb": {"mode": "offline"}}), logging) == [
        "wandb.mode: 'offline' repeats the dataclass default"
    ]
