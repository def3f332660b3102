"""Reports from stored runs: the Pareto set of a hand-made table, a leaderboard equal to
hand-computed values, every experiments/ spec rebuilt from fixture runs, missing cells named
with the command that makes them, and the analysis notebook executed on committed results."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from specbench import paths
from specbench.metrics.summary import summarize
from specbench.report import figures, leaderboard
from specbench.report.load import KNOBS, load_runs
from specbench.report.pareto import pareto_front


def test_pareto_front_of_a_hand_made_table() -> None:
    points = [(1.0, 1.0), (2.0, 0.5), (1.5, 1.5), (0.5, 2.0), (1.0, 0.4), (2.0, 0.2), (0.5, 0.1)]
    assert pareto_front(points, (True, True)) == [3, 2, 1]
    # lower quality is better (e.g. NLL): the low corner wins instead, ordered by speed
    assert pareto_front(points, (True, False)) == [6, 5]


def record(i: int, tokens: int, wall: float, calls: int, base_wall: float, nll: float) -> dict:
    arm = {"new_tokens": tokens, "wall_s": wall, "target_calls": tokens, "quality": {"nll": nll}}
    return {
        "id": str(i),
        "meta": {},
        "new_tokens": tokens,
        "wall_s": wall,
        "ttft_s": 0.01,
        "decode_s": wall - 0.01,
        "target_calls": calls,
        "drafter_calls": 0,
        "draft_tokens": 0,
        "accepted_tokens": 0,
        "accept_lengths": [1],
        "draft_lengths": [],
        "accepted_per_round": [],
        "quality": {"nll": nll},
        "first_divergence": None,
        "baseline": {**arm, "wall_s": base_wall},
    }


def write_run(root: Path, cell: dict, records: list[dict], task: str = "tiny_code") -> None:
    method = {k: cell[k] for k in KNOBS if k in cell}
    run_id = "-".join(f"{k}{v}" for k, v in sorted(cell.items()))
    run_dir = root / cell.get("experiment", "adhoc") / run_id
    run_dir.mkdir(parents=True)
    config = {
        "run": {"experiment": cell.get("experiment", "adhoc"), "temperature": 0.0},
        "method": {"name": cell["method"], **method},
    }
    summary = {
        "run_id": run_id,
        "method": cell["method"],
        "target": "tiny",
        "drafter": cell.get("drafter", "tiny-dlm"),
        "task": task,
        "lossless": cell.get("rule", "auto") == "auto",
        "env": "fixture machine",
        **summarize(records, greedy=True),
    }
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / "summary.json").write_text(json.dumps(summary))


def test_a_leaderboard_equals_hand_computed_values(tmp_path: Path) -> None:
    fast = [record(i, 10, 1.0, 4, 2.0, 0.5) for i in range(2)]  # 10 tok/s vs 5: 2x, tau 2.5
    slow = [record(i, 10, 2.0, 10, 2.5, 0.4) for i in range(2)]  # 5 vs 4: 1.25x, tau 1.0
    write_run(tmp_path, {"method": "specdiff", "gamma": 5, "steps": 1}, fast)
    write_run(tmp_path, {"method": "sps", "gamma": 4, "drafter": "tiny-ar"}, slow)
    runs = load_runs(tmp_path)
    frame, directions = leaderboard.table(runs, "tiny_code")
    assert frame.loc["specdiff tiny-dlm γ5 T1", "speedup"] == pytest.approx(2.0)
    assert frame.loc["sps tiny-ar γ4", "speedup"] == pytest.approx(1.25)
    assert frame.loc["specdiff tiny-dlm γ5 T1", "tau"] == pytest.approx(2.5)
    assert frame.loc["sps tiny-ar γ4", "quality.nll"] == pytest.approx(0.4)
    marks = leaderboard.best(frame, directions)
    assert marks.loc["specdiff tiny-dlm γ5 T1", "speedup"]
    assert marks.loc["sps tiny-ar γ4", "quality.nll"]  # NLL: lower is better
    written = leaderboard.write(runs, tmp_path / "out")
    assert [p.suffix for p in written] == [".md", ".tex", ".csv"]
    text = written[0].read_text()
    assert "| specdiff tiny-dlm γ5 T1 | **2** |" in text and "_fixture machine_" in text
    assert "\\textbf{2}" in written[1].read_text()


def fixture_runs(root: Path) -> None:
    """One fake run for every cell every experiments/ spec asks for."""
    rng = random.Random(0)
    for spec in figures.specs():
        for entry in spec["cells"]:
            for cell in figures.expand(entry):
                if (root / cell.get("experiment", "adhoc")).exists() and figures.select(
                    load_runs(root), cell
                ).shape[0]:
                    continue
                tokens = rng.randint(50, 120)
                recs = [record(0, tokens, rng.uniform(0.2, 1.0), tokens // 2, 1.0, rng.random())]
                write_run(root, cell, recs, spec["task"])


def test_every_experiment_spec_rebuilds_from_fixture_runs(tmp_path: Path) -> None:
    fixture_runs(tmp_path / "results")
    written = figures.build_all(tmp_path / "results", tmp_path / "figures")
    for spec in figures.specs():
        assert (tmp_path / "figures" / f"{spec['name']}.png").stat().st_size > 10_000
        assert (tmp_path / "figures" / f"{spec['name']}.pdf").exists()
    assert all(p.exists() for p in written)


def test_missing_cells_are_named_with_the_command_that_makes_them(tmp_path: Path) -> None:
    fixture_runs(tmp_path / "results")
    victim = next((tmp_path / "results" / "frontier_tiny").iterdir())
    (victim / "summary.json").unlink()
    with pytest.raises(figures.MissingCells) as err:
        figures.build_all(tmp_path / "results", tmp_path / "figures")
    message = str(err.value)
    assert message.startswith("frontier_tiny: 1 cell(s) missing")
    assert "specbench-run -m experiment=frontier_tiny" in message


def test_the_analysis_notebook_runs_on_the_committed_results(tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(paths.REPO_ROOT / "notebooks" / "analysis.ipynb", as_version=4)
    NotebookClient(
        notebook, timeout=300, resources={"metadata": {"path": str(paths.REPO_ROOT / "notebooks")}}
    ).execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert any(
        o.get("output_type") == "display_data" and "image/png" in o.get("data", {}) for o in outputs
    )
