"""Sweeps through Hydra launchers on the tiny world, in subprocesses: joblib and submitit_local
write every cell's records; a failing cell leaves the others complete and is reported in the
sweep summary; a sweep killed mid-cell is finished by rerunning it, each sample recorded once."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from test_cli import finish, specbench

TINY = [
    "run.warmup=0",
    "run.progress=false",
    "logging.wandb.mode=disabled",
    "run.max_new_tokens=12",
]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


def sweep_summary(results: Path) -> dict:
    (found,) = results.glob("_hydra/multirun-*/sweep_summary.json")
    return json.loads(found.read_text())


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_a_launcher_runs_every_cell(tmp_path: Path, launcher: str) -> None:
    results = tmp_path / "results"
    code, out, err = finish(
        specbench(
            [
                "-m",
                f"hydra/launcher={launcher}",
                "method=ar,sps",
                "run.limit=2",
                f"run.results_dir={results}",
                *TINY,
            ],
            tmp_path,
        )
    )
    assert code == 0, err
    dirs = sorted(p.parent for p in results.glob("adhoc/*/records.jsonl"))
    assert [d.name.split("-")[0] for d in dirs] == ["ar", "sps"]
    assert all(len(records(d)) == 2 for d in dirs)
    summary = sweep_summary(results)
    assert summary["cells"] == 2 and summary["failed"] == []


def test_a_failing_cell_leaves_the_others_complete_and_is_reported(tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = ["-m", "method=ar,specdiff,sps", "run.limit=2", f"run.results_dir={results}", *TINY]
    code, out, err = finish(specbench(args, tmp_path))
    assert code == 1, err  # the sweep finished, and says a cell failed
    dirs = sorted(p.parent for p in results.glob("adhoc/*/records.jsonl"))
    assert [d.name.split("-")[0] for d in dirs] == ["ar", "sps"]
    assert all(len(records(d)) == 2 for d in dirs)
    (failed,) = sweep_summary(results)["failed"]
    assert "method=specdiff" in failed["overrides"]
    assert failed["error"].startswith("ConfigError: drafter.kind='causal'")
    assert "1 failed" in out


@pytest.mark.slow
def test_a_sweep_killed_midway_is_finished_by_rerunning_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = [
        "-m",
        "method=ar,sps",
        "run.limit=6",
        f"run.results_dir={results}",
        *TINY,
        "run.max_new_tokens=64",
    ]
    proc = specbench(args, tmp_path)
    deadline, first = time.time() + 240, None
    while time.time() < deadline and proc.poll() is None:
        found = list(results.glob("adhoc/ar-*/records.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 2:
            first = found[0].parent
            break
        time.sleep(0.05)
    assert first is not None and proc.poll() is None, "sweep ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = records(first)
    assert 2 <= len(kept) < 6 and not list(results.glob("adhoc/sps-*/summary.json"))
    code, out, err = finish(specbench(args, tmp_path))
    assert code == 0, err
    for run_dir in sorted(p.parent for p in results.glob("adhoc/*/records.jsonl")):
        ids = [r["id"] for r in records(run_dir)]
        assert len(ids) == len(set(ids)) == 6
    assert records(first)[: len(kept)] == kept  # finished samples were not redone
