"""Records: append-only, a cut last line dropped, a different config refused; a run directory
held by one process at a time, and left resumable by a full disk or a corrupt line."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from specbench.errors import ConfigError, user_line
from specbench.runs import store as store_module
from specbench.runs.record import Arm, Record
from specbench.runs.store import RunStore, config_hash, read_records


def config(tmp_path: Path, gamma: int = 4, limit: int = 5, wait_lock: bool = False) -> dict:
    return {
        "method": {"name": "sps", "gamma": gamma},
        "run": {
            "results_dir": str(tmp_path),
            "experiment": "adhoc",
            "limit": limit,
            "seed": 0,
            "wait_lock": wait_lock,
        },
        "logging": {"wandb": {"mode": "disabled"}},
        "backend": {"name": "specbench"},
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


def test_a_corrupt_line_before_the_end_is_refused_in_one_line_and_left_alone(
    tmp_path: Path,
) -> None:
    store = RunStore.open(config(tmp_path), "run")
    for sample_id in "abc":
        store.append(record(sample_id))
    store.close()
    lines = store.records_path.read_bytes().split(b"\n")
    lines[1] = lines[1][:20]  # a line cut short, with records after it
    store.records_path.write_bytes(b"\n".join(lines))
    before = store.records_path.read_bytes()
    with pytest.raises(ConfigError) as err:
        RunStore.open(config(tmp_path), "run")
    message = str(err.value)
    assert "\n" not in message and str(store.records_path) in message
    assert "line 2 of 3 is corrupt" in message and "nothing was changed" in message
    assert store.records_path.read_bytes() == before


def record(sample_id: str) -> Record:
    arm = Arm([7, 8], 0.5, 0.1, 2, 2, [1, 1], "text", {"nll": 1.0})
    return Record(id=sample_id, meta={}, prompt_tokens=3, method=arm, baseline=arm)


def test_reopening_resumes_and_appends(tmp_path: Path) -> None:
    store = RunStore.open(config(tmp_path), "run")
    store.append(record("a"))
    store.close()
    again = RunStore.open(config(tmp_path, limit=50), "run")  # limit is not part of the identity
    assert again.done == {("a", 0)} and again.records == [record("a")]  # read back as written
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


@pytest.mark.parametrize(("backend", "resumes"), [("specbench", True), ("vllm", False)])
def test_a_run_directory_from_before_the_backend_group_resumes_as_its_backend(
    tmp_path: Path, backend: str, resumes: bool
) -> None:
    """A config.yaml with run.backend and the vLLM knobs (before the `backend` group) is the
    same cell as today's config of its backend: specbench's resumes, vLLM's is another cell."""
    now = config(tmp_path)
    RunStore.open(now, "run").close()
    legacy = {"backend": backend, "vllm_python": None, "vllm_startup_s": 900}
    stored = {k: v for k, v in now.items() if k != "backend"}
    stored["run"] = {**now["run"], **legacy}
    (tmp_path / "adhoc" / "run" / "config.yaml").write_text(json.dumps(stored))
    if resumes:
        RunStore.open(now, "run").close()
        return
    with pytest.raises(ConfigError, match=r"backend\.name: 'vllm' -> 'specbench'"):
        RunStore.open(now, "run")


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


def test_a_held_run_directory_is_refused_naming_its_holder(tmp_path: Path) -> None:
    held = RunStore.open(config(tmp_path), "run")
    with pytest.raises(ConfigError) as err:
        RunStore.open(config(tmp_path), "run")
    message = str(err.value)
    assert "\n" not in message and f"in use by pid {os.getpid()} on " in message
    assert "run.wait_lock=true" in message
    held.close()  # let go: the next run resumes
    RunStore.open(config(tmp_path), "run").close()


def test_wait_lock_waits_for_the_holder_and_then_resumes(tmp_path: Path) -> None:
    held = RunStore.open(config(tmp_path), "run")
    opened: list[RunStore] = []
    waiter = threading.Thread(
        target=lambda: opened.append(RunStore.open(config(tmp_path, wait_lock=True), "run"))
    )
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive() and not opened  # waiting, not refused
    held.append(record("a"))
    held.close()
    waiter.join(10)
    assert opened and opened[0].done == {("a", 0)}  # it sees what the holder recorded
    opened[0].close()


def running_out_of_space(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """`after` writes succeed; the next writes half its bytes and fails as a full disk does."""
    real, calls = store_module._write_all, []

    def full(fd: int, data: bytes) -> None:
        calls.append(data)
        if len(calls) <= after:
            return real(fd, data)
        real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store_module, "_write_all", full)


def test_a_full_disk_mid_record_is_one_line_and_the_rerun_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RunStore.open(config(tmp_path), "run")
    store.append(record("a"))
    running_out_of_space(monkeypatch, after=0)
    with pytest.raises(OSError) as err:
        store.append(record("b"))
    store.close()
    line = user_line(err.value)
    assert line is not None and "\n" not in line and "no space left" in line
    assert str(store.records_path) in line and "rerun" in line
    monkeypatch.undo()  # space freed
    again = RunStore.open(config(tmp_path), "run")
    assert again.done == {("a", 0)}  # the half-written line is dropped
    again.append(record("b"))
    again.close()
    ids = [json.loads(x)["id"] for x in store.records_path.read_text().splitlines()]
    assert ids == ["a", "b"]


def test_a_full_disk_rewriting_a_file_leaves_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RunStore.open(config(tmp_path), "run")
    store.write_json("summary.json", {"n_samples": 1})
    saved = (store.run_dir / "config.yaml").read_bytes()
    running_out_of_space(monkeypatch, after=0)
    with pytest.raises(OSError) as err:
        store.write_json("summary.json", {"n_samples": 2})
    assert str(store.run_dir / "summary.json") in user_line(err.value)
    store.close()
    with pytest.raises(OSError) as err:
        RunStore.open(config(tmp_path, limit=9), "run")  # rewrites config.yaml
    assert str(store.run_dir / "config.yaml") in user_line(err.value)
    monkeypatch.undo()  # space freed
    assert (store.run_dir / "config.yaml").read_bytes() == saved
    assert json.loads((store.run_dir / "summary.json").read_text()) == {"n_samples": 1}
    assert not [p for p in store.run_dir.iterdir() if p.name.endswith(".tmp")]
    RunStore.open(config(tmp_path), "run").close()  # resumable


def test_an_empty_config_yaml_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    """A config.yaml left at 0 bytes by an older specbench on a full disk."""
    store = RunStore.open(config(tmp_path), "run")
    store.close()
    (store.run_dir / "config.yaml").write_text("")
    with pytest.raises(ConfigError) as err:
        RunStore.open(config(tmp_path), "run")
    message = str(err.value)
    assert "\n" not in message and "empty or not YAML" in message and "delete it" in message


def test_a_run_directory_keeps_its_wandb_run_id(tmp_path: Path) -> None:
    store = RunStore.open(config(tmp_path), "run")
    first = store.wandb_id()
    store.close()
    again = RunStore.open(config(tmp_path), "run")
    assert again.wandb_id() == first and len(first) == 16
    again.close()


FILL_THEN_LOCK = """
import contextlib, errno, os, sys
from pathlib import Path
from specbench.runs.store import lock
root = Path(sys.argv[1])
run_dir = root / "adhoc" / "cell"
run_dir.mkdir(parents=True)
filler = open(root / "filler", "wb")
with contextlib.suppress(OSError):
    while True:
        filler.write(bytes(4096))
        filler.flush()
try:
    lock(run_dir, "cell", False)
except OSError as err:
    print(err.errno == errno.ENOSPC, err.filename, os.listdir(root / "adhoc"))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a small filesystem needs root's mount namespace")
def test_a_disk_too_full_for_the_lock_names_it_and_leaves_nothing(tmp_path: Path) -> None:
    """A 64 KiB filesystem filled to its last byte: the lock's holder line cannot be written."""
    shell = f'mount -t tmpfs -o size=64k none {tmp_path} && {sys.executable} -c "$0" {tmp_path}'
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", shell, FILL_THEN_LOCK],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["True", f"{tmp_path}/adhoc/cell/lock", "[]"], done.stderr
