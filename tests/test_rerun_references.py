"""tools/rerun_references.py: a stored reference config turns back into the `specbench-run`
overrides that compose to it, for one run of every committed experiment, before anything runs."""

from __future__ import annotations

import importlib.util
import json
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


def test_dirty_runs_are_chosen_and_here_adds_clean_runs_from_another_machine(
    tmp_path: Path,
) -> None:
    """Dirty and clean runs from two machine classes in one experiment, a dirty one in another:
    by default the dirty ones; `--only` keeps its experiment's; `--here` adds the clean run
    the other class measured, never the clean one measured here."""
    epyc = {"cpu": "AMD EPYC", "isa": "avx512_bf16", "cpus": 2, "threads": 2}
    xeon = {**epyc, "cpu": "Intel(R) Xeon(R) Processor", "isa": "amx"}
    runs = {"grid/a": (True, xeon), "grid/b": (False, xeon), "grid/c": (False, epyc)}
    for name, (dirty, where) in {**runs, "other/d": (True, epyc)}.items():
        (tmp_path / name).mkdir(parents=True)
        env = {"git_dirty": dirty, "machine": where}
        (tmp_path / name / "env.json").write_text(json.dumps(env))

    def names(runs: list[Path]) -> list[str]:
        return [str(run_dir.relative_to(tmp_path)) for run_dir in runs]

    assert names(rerun.selected(tmp_path, None, None)) == ["grid/a", "other/d"]
    assert names(rerun.selected(tmp_path, ["grid"], None)) == ["grid/a"]
    here = "cpu AMD EPYC avx512_bf16 2c"
    assert names(rerun.selected(tmp_path, ["grid"], here)) == ["grid/a", "grid/b"]
