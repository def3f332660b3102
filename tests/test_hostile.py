"""Hostile inputs, each a real command (or, where only a patched OS can make the input, an API
call): one line on stderr naming the file or key, the exit code, a time bound, and nothing
created. The bounds are loose (a 2-core machine under load); each is what a refusal takes, far
below what the work it refuses would."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specbench import paths
from specbench.report import ReportError, load
from specbench.runs.summary import Summary

FAST = ["run.warmup=1", "run.progress=false", "target=random-gpt2", "drafter=random-gpt2-draft"]
CELL = [*FAST, "task=prompts", "run.limit=2", "run.max_new_tokens=8"]
RUN_S, REPORT_S = 90, 45  # a refused run imports the pipeline (transformers); a report, pandas


def command(argv: list[str], cwd: Path, env: dict | None = None) -> tuple[int, str, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env=env or os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, proc.stderr, time.monotonic() - started


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results directory holding one finished cell."""
    results = tmp_path_factory.mktemp("finished") / "results"
    rc, err, _ = command(["-m", "specbench", *CELL, f"run.results_dir={results}"], results.parent)
    assert rc == 0, err
    shutil.rmtree(results / "_hydra")
    return results


def copy_of(finished: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the finished cell's results directory, and its run directory."""
    results = tmp_path / "results"
    shutil.copytree(finished, results)
    return results, next(results.glob("*/*/summary.json")).parent


def rerun(results: Path) -> tuple[int, str, float]:
    return command(["-m", "specbench", *CELL, f"run.results_dir={results}"], results.parent)


def reference_run(tmp_path: Path) -> Path:
    """A copy of one committed reference run, alone under tmp_path/results."""
    source = next(paths.REPO_ROOT.glob("results/reference/dflash_tiny/*/summary.json")).parent
    run_dir = tmp_path / "results" / "dflash_tiny" / source.name
    shutil.copytree(source, run_dir)
    return run_dir


def report(tmp_path: Path, *argv: str, env: dict | None = None) -> tuple[int, str, float]:
    results, out = tmp_path / "results", tmp_path / "out"
    return command(
        ["-m", "specbench.report.cli", "--results", str(results), "--out", str(out), *argv],
        tmp_path,
        env,
    )


def test_rerun_of_a_cell_whose_summary_is_corrupt(finished, tmp_path) -> None:
    results, run_dir = copy_of(finished, tmp_path)
    (run_dir / "summary.json").write_text("{")
    before = tree(results)
    rc, err, took = rerun(results)
    assert rc == 2 and took < RUN_S
    assert f"{run_dir / 'summary.json'}: not a readable summary" in one_line(err)
    assert tree(results) == before  # no _hydra/ left


def test_rerun_of_a_cell_whose_records_cannot_be_read(finished, tmp_path) -> None:
    """A directory where the file should be: what a root test process can make unreadable."""
    results, run_dir = copy_of(finished, tmp_path)
    (run_dir / "records.jsonl").unlink()
    (run_dir / "records.jsonl").mkdir()
    before = tree(results)
    rc, err, took = rerun(results)
    assert rc == 2 and took < RUN_S
    assert f"{run_dir / 'records.jsonl'}: cannot be read" in one_line(err)
    assert tree(results) == before


def test_rerun_of_a_cell_with_a_sample_recorded_twice(finished, tmp_path) -> None:
    results, run_dir = copy_of(finished, tmp_path)
    records = run_dir / "records.jsonl"
    first = records.read_text().splitlines()[0]
    records.write_text(records.read_text() + first + "\n")
    kept, before = records.read_bytes(), tree(results)
    rc, err, took = rerun(results)
    assert rc == 2 and took < RUN_S
    assert "line 3 records sample" in one_line(err) and str(records) in err
    assert tree(results) == before and records.read_bytes() == kept


def test_hydra_output_dir_that_cannot_be_made(tmp_path) -> None:
    results = tmp_path / "results"
    argv = ["-m", "specbench", *CELL, f"run.results_dir={results}", "hydra.run.dir=/proc/x"]
    rc, err, took = command(argv, tmp_path)
    assert rc == 2 and took < RUN_S
    assert one_line(err).startswith("specbench: error: hydra.run.dir='/proc/x': must be writable")
    assert not results.exists()


def test_a_run_name_too_long_for_a_directory(tmp_path) -> None:
    results = tmp_path / "results"
    argv = ["-m", "specbench", *CELL, f"run.results_dir={results}", f"run.name={'a' * 300}"]
    rc, err, took = command(argv, tmp_path)
    assert rc == 2 and took < RUN_S
    assert "run.name=" in one_line(err) and "at most 255 bytes" in err
    assert not results.exists()  # no adhoc/


def test_a_drafter_with_another_tokenizer_builds_nothing(tmp_path) -> None:
    """random-gpt2-draft (GPT-2's tokenizer) for tiny: refused before its weights are built
    into the model cache."""
    env = {**os.environ, "SPECBENCH_CACHE": str(tmp_path / "cache")}
    results = tmp_path / "results"
    argv = ["-m", "specbench", "run.limit=2", "drafter=random-gpt2-draft"]
    rc, err, took = command([*argv, f"run.results_dir={results}"], tmp_path, env)
    assert rc == 2 and took < RUN_S
    assert "drafter='random-gpt2-draft': its tokenizer differs" in one_line(err)
    assert not (tmp_path / "cache").exists() and not results.exists()


def test_ctrl_c_during_specbench_tiny_train(tmp_path) -> None:
    """Training is replaced by a wait (a real run's first seconds are the tokenizer's): what
    is tested is the interrupt's path out of `specbench-tiny train`."""
    code = (
        "import time\nimport specbench.models.tiny.build as build\n"
        "build.train = lambda args: (print('training', flush=True), time.sleep(60))\n"
        "from specbench.models.tiny.cli import main\n"
        f"main(['train', '--out', {str(tmp_path / 'tiny')!r}])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline() == "training\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert one_line(err).startswith("specbench-tiny: interrupted; the stages that finished")


def test_acceptance_on_a_corrupt_records_file(tmp_path) -> None:
    run_dir = reference_run(tmp_path)
    records = run_dir / "records.jsonl"
    lines = records.read_text().splitlines()
    records.write_text("\n".join(["{broken", *lines[1:]]) + "\n")
    kept = records.read_bytes()
    rc, err, took = report(tmp_path, "acceptance")
    assert rc == 2 and took < REPORT_S
    line = one_line(err)  # the loader (reading records for intervals) or acceptance refuses
    assert str(records.parent) in line and f"line 1 of {len(lines)} is corrupt" in line
    assert not (tmp_path / "out").exists() and records.read_bytes() == kept


def test_a_report_never_repairs_a_records_file(tmp_path) -> None:
    """A cut last line is a run's to repair when it resumes, not a report's."""
    records = reference_run(tmp_path) / "records.jsonl"
    records.write_bytes(records.read_bytes() + b'{"id": "cut')
    kept = records.read_bytes()
    rc, err, _ = report(tmp_path, "acceptance")
    assert rc == 0, err
    assert records.read_bytes() == kept


def test_acceptance_on_a_sample_recorded_twice(tmp_path) -> None:
    records = reference_run(tmp_path) / "records.jsonl"
    first = records.read_text().splitlines()[0]
    records.write_text(records.read_text() + first + "\n")
    rc, err, took = report(tmp_path, "acceptance")
    assert rc == 2 and took < REPORT_S
    assert "records sample" in one_line(err) and str(records) in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("key", "value"), [("tau", "abc"), ("n_samples", 2.5), ("speedup", [])])
def test_leaderboard_on_a_wrongly_typed_summary(key, value, tmp_path) -> None:
    summary = reference_run(tmp_path) / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), key: value}))
    rc, err, took = report(tmp_path, "leaderboard")
    assert rc == 2 and took < REPORT_S
    line = one_line(err)
    assert str(summary.parent) in line and f"{key} is {value!r}" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_summary_value_reads_as_missing(value, tmp_path) -> None:
    summary = reference_run(tmp_path) / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "tau": float(value)}))
    rc, err, took = report(tmp_path, "leaderboard")
    assert rc == 0 and took < REPORT_S
    assert f"{summary}: tau={float(value)}: not a number, shown as missing" in one_line(err)
    table = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| tau |" not in table and "inf" not in table and "nan" not in table


def test_a_non_finite_value_is_refused_when_written() -> None:
    summary = next(paths.REPO_ROOT.glob("results/reference/dflash_tiny/*/summary.json"))
    read = Summary.from_json(json.loads(summary.read_text()))
    read.tau = float("inf")
    with pytest.raises(ValueError, match="not a finite number: tau=inf"):
        read.to_json()


def test_an_unreadable_results_directory_fails_the_report(tmp_path, monkeypatch) -> None:
    """A directory the report may not list (root can list any: the refusal is patched in)."""
    reference_run(tmp_path)
    hidden = tmp_path / "results" / "private"
    hidden.mkdir()
    scandir = os.scandir

    def refuse(path="."):
        if Path(path) == hidden:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    with pytest.raises(ReportError, match=f"{hidden}: cannot be read \\(Permission denied\\)"):
        load.load_runs(tmp_path / "results")


def test_pareto_online_without_a_wandb_login(tmp_path) -> None:
    reference_run(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path / "home"), WANDB_MODE="online")
    argv = ["pareto", "--task", "tiny_code", "--quality", "nll", "--wandb", "online"]
    rc, err, took = report(tmp_path, *argv, env=env)
    assert rc == 2 and took < REPORT_S
    assert one_line(err).startswith("specbench-report: error: --wandb online: no W&B login")
    assert not (tmp_path / "out").exists() and not (tmp_path / "results" / "wandb").exists()


def test_an_unknown_machine_class_lists_the_classes(tmp_path) -> None:
    reference_run(tmp_path)
    rc, err, took = report(tmp_path, "--machine", "cpu none", "leaderboard")
    assert rc == 2 and took < REPORT_S
    assert "--machine cpu none: no runs of it; there are: cpu AMD EPYC" in one_line(err)
    assert not (tmp_path / "out").exists()
