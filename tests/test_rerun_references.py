"""tools/rerun_references.py: a stored reference config turns back into the `specbench-run`
overrides that compose to it, for one run of every committed experiment, before anything runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from hydra import initialize_config_dir

from specbench import paths
from specbench.registry import discover_schemas
from specbench.runs.store import identity, upgraded

_spec = importlib.util.spec_from_file_location(
    "rerun_references", paths.REPO_ROOT / "tools" / "rerun_references.py"
)
rerun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rerun)

REFERENCE = paths.REPO_ROOT / "results" / "reference"
ONE_PER_EXPERIMENT = sorted(
    next(iter(sorted(d.glob("*/config.yaml"))))
    for d in REFERENCE.iterdir()
    if d.is_dir() and any(d.glob("*/config.yaml"))
)


@pytest.mark.parametrize("stored", ONE_PER_EXPERIMENT, ids=lambda p: p.parent.parent.name)
def test_a_stored_config_recomposes_from_its_overrides(stored: Path) -> None:
    discover_schemas()
    config = upgraded(yaml.safe_load(stored.read_text()))
    with initialize_config_dir(config_dir=str(paths.CONF_DIR), version_base="1.3"):
        overrides = rerun.overrides_for(config)
        again = rerun.composed(overrides)
    want = rerun.flat(identity(config))
    assert {k: v for k, v in rerun.flat(identity(again)).items() if k in want} == want
    assert f"run.results_dir={rerun.literal(config['run']['results_dir'])}" in overrides


def test_values_are_written_in_hydras_override_grammar() -> None:
    assert rerun.literal(None) == "null" and rerun.literal(True) == "true"
    assert rerun.literal([1, 0.5, "a"]) == "[1,0.5,'a']"
    assert rerun.literal({}) == "{}" and rerun.literal("it's") == "'it\\'s'"
    assert rerun.literal("${tiny:tiny_code.jsonl}") == "'${tiny:tiny_code.jsonl}'"
