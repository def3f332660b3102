"""Intervals in the reports: runs summarised before them get theirs from their records, the
leaderboards bracket values and mark ties, `compare` tells two cells on the same samples apart
(or refuses cells on different samples in one line), and `power` sizes a claim."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
from test_report import record, write_run

from specbench.report import cli, leaderboard, pareto
from specbench.report.load import bounds, load_runs

SPS, SPECDIFF = {"method": "sps", "method.gamma": 4}, {"method": "specdiff", "method.gamma": 5}


def samples(speedup: float, n: int = 12, seed: int = 0, ids: range | None = None) -> list[dict]:
    """n samples whose method runs about `speedup` times its baseline's speed, both arms
    sharing each sample's length and difficulty."""
    rng = random.Random(seed)
    out = []
    for i in ids or range(n):
        tokens, base = rng.randint(20, 80), rng.uniform(1.0, 3.0)
        wall = base / speedup * rng.uniform(0.9, 1.1)
        out.append(record(i, tokens, wall, tokens // 2, base, rng.uniform(0.4, 0.6)))
    return out


def as_schema_1(run_dir: Path) -> None:
    """The summary as specbench wrote it before intervals: no schema, intervals or settings."""
    path = run_dir / "summary.json"
    row = json.loads(path.read_text())
    for key in ("schema", "intervals", "bootstrap"):
        row.pop(key, None)
    path.write_text(json.dumps(row))


def run(root: Path, cell: dict, records: list[dict]) -> Path:
    run_id = write_run(root, cell, records)
    as_schema_1(root / "adhoc" / run_id)
    return root / "adhoc" / run_id


def test_a_summary_without_intervals_gets_them_from_its_records(tmp_path: Path) -> None:
    run(tmp_path, SPS, samples(1.5))
    row = load_runs(tmp_path).iloc[0]
    lo, hi = bounds("speedup")
    assert row[lo] < row["speedup"] < row[hi] and 1.3 < row[lo] and row[hi] < 1.7
    assert row[bounds("quality.nll")[0]] < row["quality.nll"]
    assert row[bounds("baseline.nll")[0]] < row["baseline.nll"]  # the baseline's quality
    assert row[bounds("lossless_rate")[0]] < 1.0 == row["lossless_rate"]  # Wilson at n of n


def test_the_leaderboard_brackets_values_and_marks_ties_with_the_best(tmp_path: Path) -> None:
    """A value whose interval overlaps the best's is marked (≈); one clear of it is not."""
    for steps, (speedup, seed) in enumerate([(1.5, 1), (2.9, 2), (3.0, 3)], start=1):
        run(tmp_path, {**SPECDIFF, "method.steps": steps}, samples(speedup, seed=seed))
    runs = load_runs(tmp_path)
    md, _, csv = leaderboard.write(runs, tmp_path / "out")
    text = md.read_text()
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| ") and "speedup" in line)
    column = [c.strip() for c in header.split(" | ")].index("speedup")
    shown = {
        line.split(" | ")[0][2:]: line.split(" | ")[column]
        for line in lines
        if line.startswith("| specdiff")
    }
    lo, hi = bounds("speedup")
    best = runs.loc[runs["speedup"].idxmax()]
    for _, row in runs.iterrows():
        value = shown[row["cell"]]
        assert value.strip("*").startswith(f"{row['speedup']:.3g} [{row[lo]:.3g}, {row[hi]:.3g}]")
        overlaps = row[lo] <= best[hi] and row[hi] >= best[lo]
        assert value.endswith("≈") == (overlaps and row["cell"] != best["cell"])
    assert sum(v.endswith("≈") for v in shown.values()) == 1  # the 2.9x cell, not the 1.5x
    assert leaderboard.NOTE in text
    assert {"speedup lo", "speedup hi"} <= set(pd.read_csv(csv, index_col=0).columns)


def test_pareto_error_bars_reach_each_intervals_ends(tmp_path: Path) -> None:
    run(tmp_path, SPS, samples(1.5))
    runs = load_runs(tmp_path)
    lo, hi = bounds("speedup")
    below, above = pareto.errors(runs, "speedup")
    assert below[0] == runs["speedup"][0] - runs[lo][0]
    assert above[0] == runs[hi][0] - runs["speedup"][0]


def compare(tmp_path: Path, capsys, a: Path, b: Path) -> tuple[int, str, str]:
    code = cli.main(["--results", str(tmp_path), "compare", str(a), str(b)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compare_names_the_faster_cell_with_the_difference_and_its_interval(
    tmp_path: Path, capsys
) -> None:
    fast = run(tmp_path, SPECDIFF, samples(2.0, seed=5))
    slow = run(tmp_path, SPS, samples(1.5, seed=6))
    code, out, _ = compare(tmp_path, capsys, fast, slow)
    assert code == 0
    verdict = out.splitlines()[-2]
    assert verdict.startswith("A faster than B on these 12 samples: A - B +0.")
    code, out, _ = compare(tmp_path, capsys, slow, slow)
    assert out.splitlines()[-2].startswith("not distinguishable on these 12 samples: A - B +0.00x")


def test_compare_refuses_cells_whose_samples_differ_in_one_line(tmp_path: Path, capsys) -> None:
    a = run(tmp_path, SPECDIFF, samples(2.0))
    b = run(tmp_path, SPS, samples(1.5, ids=range(6, 18)))
    code, out, err = compare(tmp_path, capsys, a, b)
    assert code == 2 and out == ""
    assert err == (
        "specbench-report: error: compare: the cells decoded different samples (tiny_code: 12, "
        "tiny_code: 12, 6 shared); compare cells run on the same samples\n"
    )


def test_power_sizes_a_speedup_difference_from_the_runs_spread(tmp_path: Path, capsys) -> None:
    """From the interval's half-width: sd = half-width x sqrt(n) / 1.96; two independent cells
    need 2 ((1.96 + 0.84) sd / delta)^2 samples each, and n of them resolve
    (1.96 + 0.84) sd sqrt(2 / n)."""
    run(tmp_path, SPS, samples(1.5))
    row = load_runs(tmp_path).iloc[0]
    lo, hi = (row[c] for c in bounds("speedup"))
    sd = (hi - lo) / 2 / 1.959964 * math.sqrt(12)
    assert cli.main(["--results", str(tmp_path), "--out", str(tmp_path / "o"), "power"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "sps γ4" in x)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert int(cells[2]) == 12
    assert float(cells[5].rstrip("x")) == pytest.approx(
        2.801585 * sd * math.sqrt(2 / 12), abs=0.006
    )
    assert int(cells[6]) == math.ceil(2 * (2.801585 * sd / 0.05) ** 2)
