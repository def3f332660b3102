"""Records: append-only, a cut last line dropped, a different config refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.errors import ConfigError
from specbench.results.store import RunStore, config_hash, read_records


def config(tmp_path: Path, gamma: int = 4, limit: int = 5) -> dict:
    return {
        "method": {"name": "sps", "gamma": gamma},
        "run": {"results_dir": str(tmp_path), "experiment": "adhoc", "limit": limit, "seed": 0},
        "logging": {"wandb": {"mode": "disabled"}},
    }


def test_a_cut_last_line_is_dropped_and_removed_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text('{"id": "1"}\n{"id": "2"}\n{"id": "3", "text": "cut mid-wr')
    assert [r["id"] for r in read_records(path, repair=True)] == ["1", "2"]
    assert path.read_text() == '{"id": "1"}\n{"id": "2"}\n'


def test_a_corrupt_line_before_the_end_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text('{"id": "1"}\n{"id": \n{"id": "3"}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_records(path)


def test_reopening_resumes_and_appends(tmp_path: Path) -> None:
    store = RunStore.open(config(tmp_path), "run")
    store.append({"id": "a"})
    store.close()
    again = RunStore.open(config(tmp_path, limit=50), "run")  # limit is not part of the identity
    assert again.done == {"a"}
    again.append({"id": "b"})
    again.close()
    lines = (tmp_path / "adhoc" / "run" / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b"]


def test_a_run_directory_of_another_config_is_refused(tmp_path: Path) -> None:
    RunStore.open(config(tmp_path, gamma=4), "run").close()
    with pytest.raises(ConfigError) as err:
        RunStore.open(config(tmp_path, gamma=8), "run")
    message = str(err.value)
    assert "method.gamma: 4 -> 8" in message and "delete" in message and "\n" not in message


def test_identity_ignores_limit_and_logging_but_not_knobs(tmp_path: Path) -> None:
    base = config_hash(config(tmp_path))
    assert config_hash(config(tmp_path, limit=99)) == base
    assert config_hash(config(tmp_path, gamma=2)) != base


def test_a_stored_config_names_no_directory_of_this_machine(tmp_path: Path) -> None:
    """Packaged, tiny-world and shared-data paths are stored as the resolvers that make them,
    so the same config has the same identity everywhere and still resolves when reloaded."""
    from omegaconf import OmegaConf

    from conftest import compose_cfg
    from specbench import paths
    from specbench.run import prepare

    plan = prepare(
        compose_cfg(
            "task=spec_bench", "run.limit=3", "run.max_new_tokens=64", f"run.results_dir={tmp_path}"
        )
    )
    text = (plan.store.run_dir / "config.yaml").read_text()
    assert str(paths.REPO_ROOT) not in text and str(paths.data_dir()) not in text
    assert plan.config["task"]["source"] == "${data:spec_bench/question.jsonl}"
    assert plan.config["target"]["name_or_path"] == "specbench:tiny"
    reloaded = OmegaConf.create(plan.config)
    assert reloaded.task.source == str(paths.data_dir() / "spec_bench/question.jsonl")
    tiny = prepare(compose_cfg(f"run.results_dir={tmp_path}"))
    assert tiny.config["task"]["path"] == "${tiny:tiny_code.jsonl}"
