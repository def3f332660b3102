"""What a run's numbers are not trusted for: forward costs out of order are re-timed, then
refused; a contended run is marked in the leaderboard and says why it has no prediction; a
Pareto front claims to beat only the cells its intervals are apart from."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from test_report import record, write_run

from specbench.decoding import cost
from specbench.report import leaderboard
from specbench.report.load import bounds, load_runs
from specbench.report.pareto import tied
from specbench.runs import load
from specbench.runs.console import print_summary
from specbench.runs.summary import Summary


def test_a_one_token_step_timed_slower_than_a_verify_is_timed_again() -> None:
    timings = iter([{"target_1": 40.0, "target_5": 10.0}, {"target_1": 9.0, "target_5": 10.0}])
    assert cost.consistent(lambda: next(timings)) == ({"target_1": 9.0, "target_5": 10.0}, None)


def test_forward_costs_that_stay_out_of_order_are_refused_with_the_reason() -> None:
    taken = []

    def timings() -> dict[str, float]:
        taken.append(1)
        return {"target_1": 40.0, "target_5": 10.0, "drafter_call": 50.0}

    forward_ms, wrong = cost.consistent(timings)
    assert len(taken) == 1 + cost.RETIMES and "target_1 timed 40.00 ms, 4.0x target_5" in wrong
    out = cost.refused(forward_ms, wrong)
    assert "predicted_speedup" not in out and "inconsistent" in out["prediction_refused"]


def test_costs_in_order_or_within_the_tolerance_are_used() -> None:
    assert cost.inconsistent({"target_1": 10.5, "target_5": 10.0, "drafter_call": 99.0}) is None
    assert cost.inconsistent({"call_1_row": 5.0, "call_4_rows": 3.0}) is not None


def test_a_contended_run_is_marked_in_the_leaderboard(tmp_path: Path) -> None:
    rows = [record(i, 10, 1.0, 4, 2.0, 0.5) for i in range(2)]
    busy = write_run(tmp_path, {"method": "sps", "method.gamma": 4}, rows)
    write_run(tmp_path, {"method": "sps", "method.gamma": 2}, rows)
    path = tmp_path / "adhoc" / busy / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "contended": True}))
    text = leaderboard.write(load_runs(tmp_path), tmp_path / "out")[0].read_text()
    assert "| sps γ4 · tiny/tiny-ar (contended) |" in text
    assert "| sps γ2 · tiny/tiny-ar |" in text


def test_a_contended_summary_says_why_it_has_no_prediction(tmp_path: Path, capsys) -> None:
    rows = [record(i, 10, 1.0, 4, 2.0, 0.5) for i in range(2)]
    run_id = write_run(tmp_path, {"method": "sps", "method.gamma": 4}, rows)
    stored = json.loads((tmp_path / "adhoc" / run_id / "summary.json").read_text())
    summary = Summary.from_json({**stored, "prediction_refused": load.REFUSED})
    print_summary(summary, tmp_path)
    assert "no predicted speedup: contended" in capsys.readouterr().out


def points(rows: list[tuple[str, float, float, float, float, float, float]]) -> pd.DataFrame:
    (slo, shi), (qlo, qhi) = bounds("speedup"), bounds("quality.nll")
    columns = ["cell", "speedup", slo, shi, "quality.nll", qlo, qhi]
    return pd.DataFrame(rows, columns=columns)


def test_the_front_beats_only_the_cells_its_intervals_are_apart_from() -> None:
    frame = points(
        [
            ("front", 2.0, 1.9, 2.1, 0.50, 0.48, 0.52),
            ("overlapping", 1.95, 1.8, 2.05, 0.51, 0.49, 0.53),  # dominated, within both intervals
            ("beaten", 1.0, 0.9, 1.1, 0.80, 0.75, 0.85),  # dominated, apart on both axes
            ("slower only", 1.5, 1.4, 1.6, 0.505, 0.48, 0.53),  # apart on speed alone
        ]
    )
    assert list(tied(frame, "speedup", "quality.nll", False)["cell"]) == ["overlapping"]
