"""`run.repeats`: every trial of every sample recorded once, resumed without loss or duplicates,
the arm order rotated between trials, intervals that draw a sample with all its trials, and
each trial's speedup beside the pooled interval."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_intervals import records

from conftest import compose_cfg
from specbench.metrics.intervals import intervals
from specbench.metrics.summary import by_trial, summarize
from specbench.pipeline import execute, prepare
from specbench.runs.record import Record


def cell(results: Path, repeats: int = 2) -> list[str]:
    return [
        "run.limit=2",
        "run.max_new_tokens=8",
        f"run.repeats={repeats}",
        f"run.results_dir={results}",
        "run.name=repeats",
    ]


def stored(results: Path) -> list[dict]:
    lines = (results / "adhoc" / "repeats" / "records.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def key(row: dict) -> tuple[str, int]:
    return row["id"], row.get("trial", 0)


@pytest.fixture(scope="module")
def repeated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("repeats")
    execute(prepare(compose_cfg(*cell(results))))
    return results


def test_two_trials_record_every_sample_twice_and_report_each_trials_speedup(
    repeated: Path,
) -> None:
    rows = stored(repeated)
    assert sorted(key(r) for r in rows) == [(f"tiny_code-00{i}", t) for i in (0, 1) for t in (0, 1)]
    summary = json.loads((repeated / "adhoc" / "repeats" / "summary.json").read_text())
    assert summary["n_samples"] == 4 and len(summary["by_trial"]["speedup"]) == 2
    assert "trial" not in rows[0]  # trial 0 is stored as records always were


def test_the_arm_leading_a_sample_changes_between_trials(repeated: Path) -> None:
    first = {
        key(r): min(("method", "baseline"), key=lambda arm: r[arm]["started_s"])
        for r in stored(repeated)
    }
    for sample in ("tiny_code-000", "tiny_code-001"):
        assert first[sample, 0] != first[sample, 1]


def test_a_run_killed_mid_trial_resumes_without_losing_or_repeating_a_record(
    tmp_path: Path,
) -> None:
    execute(prepare(compose_cfg(*cell(tmp_path, repeats=1))))  # trial 0 whole
    run_dir = tmp_path / "adhoc" / "repeats"
    kept = (run_dir / "records.jsonl").read_text()
    first = json.loads(kept.splitlines()[0])
    (run_dir / "summary.json").unlink()
    partial = {**first, "trial": 1}  # trial 1 cut short after its first sample
    (run_dir / "records.jsonl").write_text(kept + json.dumps(partial) + "\n")
    summary = execute(prepare(compose_cfg(*cell(tmp_path))))
    rows = stored(tmp_path)
    assert len(rows) == 4 and len({key(r) for r in rows}) == 4
    assert rows[2] == partial  # what was recorded stays, and is not decoded again
    assert summary.n_samples == 4 and summary.trials == 2


def test_intervals_draw_a_sample_with_all_its_trials() -> None:
    """Two identical trials are one trial's evidence: the same intervals, not narrower ones
    from resampling each trial as if it were another sample."""
    once = records(12)
    twice = once + [replace(r, trial=1) for r in once]
    metrics = summarize(once, greedy=True, round_unit="tokens")
    both = summarize(twice, greedy=True, round_unit="tokens")
    found, expected = intervals(twice, both), intervals(once, metrics)
    assert found.keys() == expected.keys()
    assert all(found[k] == pytest.approx(expected[k]) for k in expected)


def test_each_trial_has_its_own_speedup() -> None:
    fast, slow = records(6), records(6)
    for r in slow:
        r.method.wall_s *= 2
    trials = fast + [replace(r, trial=1) for r in slow]
    speedups = by_trial(trials, greedy=True, round_unit="tokens")["speedup"]
    assert speedups[0] == pytest.approx(2 * speedups[1])
    assert by_trial(fast, greedy=True, round_unit="tokens") == {}


def test_a_record_keeps_its_trial_through_its_json() -> None:
    rec = replace(records(1)[0], trial=3)
    assert Record.from_json(json.loads(json.dumps(rec.to_json()))).key == (rec.id, 3)
