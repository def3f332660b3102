"""Records: append-only, a cut last line dropped, a different config refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.errors import ConfigError
from specbench.results.record import Arm, Record
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


def record(sample_id: str) -> Record:
    arm = Arm([7, 8], 0.5, 0.1, 2, 2, [1, 1], "text", {"nll": 1.0})
    return Record(id=sample_id, meta={}, prompt_tokens=3, method=arm, baseline=arm)


def test_reopening_resumes_and_appends(tmp_path: Path) -> None:
    store = RunStore.open(config(tmp_path), "run")
    store.append(record("a"))
    store.close()
    again = RunStore.open(config(tmp_path, limit=50), "run")  # limit is not part of the identity
    assert again.done == {"a"} and again.records == [record("a")]  # read back as written
    again.append(record("b"))
    again.close()
    lines = (tmp_path / "adhoc" / "run" / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b"]


def test_records_of_another_schema_are_refused_in_one_line(tmp_path: Path) -> None:
    store = RunStore.open(config(tmp_path), "run")
    store.close()
    (store.run_dir / "records.jsonl").write_text(json.dumps({"id": "a", "new_tokens": 3}) + "\n")
    with pytest.raises(ConfigError) as err:
        RunStore.open(config(tmp_path), "run")
    assert "not a schema-2 specbench record" in str(err.value) and "\n" not in str(err.value)


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
    from specbench.pipeline import prepare

    plan = prepare(
        compose_cfg(
            "task=spec_bench", "run.limit=3", "run.max_new_tokens=64", f"run.results_dir={tmp_path}"
        )
    )
    text = (plan.store.run_dir / "config.yaml").read_text()
    assert str(paths.REPO_ROOT) not in text and str(paths.data_dir()) not in text
    assert plan.identity["task"]["source"] == "${data:spec_bench/question.jsonl}"
    assert plan.identity["target"]["name_or_path"] == "specbench:tiny"
    reloaded = OmegaConf.create(plan.identity)
    assert reloaded.task.source == str(paths.data_dir() / "spec_bench/question.jsonl")
    tiny = prepare(compose_cfg(f"run.results_dir={tmp_path}"))
    assert tiny.identity["task"]["source"] == "${tiny:tiny_code.jsonl}"
