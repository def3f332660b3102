"""Reports from stored runs: the Pareto set of a hand-made table, a leaderboard equal to
hand-computed values, every experiments/ spec rebuilt from fixture runs, missing cells named
with the command that makes them, and the analysis notebook executed on committed results."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
import yaml

from specbench import paths
from specbench.decoding.warp import Warp
from specbench.metrics.summary import summarize
from specbench.registry import METHODS, discover
from specbench.report import acceptance, agreement, aup, cli, curves, figures, leaderboard
from specbench.report.load import by_machine, higher_is_better, load_runs
from specbench.report.pareto import pareto_front
from specbench.runs.record import Record
from specbench.runs.store import config_hash
from specbench.runs.summary import Summary


def test_pareto_front_of_a_hand_made_table() -> None:
    points = [(1.0, 1.0), (2.0, 0.5), (1.5, 1.5), (0.5, 2.0), (1.0, 0.4), (2.0, 0.2), (0.5, 0.1)]
    assert pareto_front(points, (True, True)) == [3, 2, 1]
    # lower quality is better (e.g. NLL): the low corner wins instead, ordered by speed
    assert pareto_front(points, (True, False)) == [6, 5]


def record(i: int, tokens: int, wall: float, calls: int, base_wall: float, nll: float) -> dict:
    def arm(wall_s: float, calls: int) -> dict:
        return {
            "output_ids": list(range(tokens)),
            "wall_s": wall_s,
            "ttft_s": 0.01,
            "target_calls": calls,
            "target_positions": calls,
            "emitted_per_call": [1] * calls,
            "text": "",
            "quality": {"nll": nll, "prefix_match": nll / 2},
        }

    return {
        "id": str(i),
        "meta": {},
        "prompt_tokens": 4,
        "method": arm(wall, calls),
        "baseline": arm(base_wall, tokens),
    }


def write_run(root: Path, cell: dict, records: list[dict], task: str = "tiny_code") -> str:
    """A run directory as `specbench-run` writes one: config.yaml from the method's own config
    class, summary.json from the records, the label from the method."""
    discover()
    cls = METHODS[cell["method"]]
    knobs = {k.split(".", 1)[1]: v for k, v in cell.items() if k.startswith("method.")}
    method = cls(cls.Config(**knobs), Warp(cell.get("temperature", 0.0)))
    drafter = cell.get(
        "drafter",
        {
            "causal": "tiny-ar",
            "diffusion": "tiny-dlm",
            "dflash": "tiny-dflash",
            "eagle3": "tiny-eagle3",
            None: "none",
        }[cls.drafter_kind],
    )
    target = cell.get("target", "tiny" if cls.target_kind == "causal" else "tiny-dlm")
    experiment = cell.get("experiment", "adhoc")
    config = {
        "target": {"name": target},
        "drafter": {"name": drafter},
        "method": asdict(method.cfg),
        "task": {"name": task},
        "run": {
            "experiment": experiment,
            "temperature": cell.get("temperature", 0.0),
            **{k.split(".", 1)[1]: v for k, v in cell.items() if k.startswith("run.")},
        },
        "backend": {
            "name": "specbench",
            **{k.split(".", 1)[1]: v for k, v in cell.items() if k.startswith("backend.")},
        },
    }
    run_id = f"{cls.name}-{target}-{drafter}-{task}-{config_hash(config)[:8]}"
    run_dir = root / experiment / run_id
    run_dir.mkdir(parents=True)
    summary = Summary.of(
        summarize([Record.from_json(r) for r in records], True, cls.round_unit),
        run_id=run_id,
        method=cls.name,
        label=method.label(),
        target=target,
        drafter=drafter,
        task=task,
        baseline=method.baseline_name,
        lossless=method.exact(),
        lossless_wrt=method.lossless_wrt(),
        env="fixture machine",
        workload=cell.get("workload", {}),
        machine=cell.get("machine"),
    )
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / "summary.json").write_text(json.dumps(summary.to_json()))
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_id


def test_a_leaderboard_equals_hand_computed_values(tmp_path: Path) -> None:
    fast = [record(i, 10, 1.0, 4, 2.0, 0.5) for i in range(2)]  # 10 tok/s vs 5: 2x, tau 2.5
    slow = [record(i, 10, 2.0, 10, 2.5, 0.4) for i in range(2)]  # 5 vs 4: 1.25x, tau 1.0
    write_run(tmp_path, {"method": "specdiff", "method.gamma": 5, "method.steps": 1}, fast)
    write_run(tmp_path, {"method": "sps", "method.gamma": 4}, slow)
    runs = load_runs(tmp_path)
    frame, directions = leaderboard.table(runs, "tiny_code")
    specdiff, sps = "specdiff γ5 T1 · tiny/tiny-dlm", "sps γ4 · tiny/tiny-ar"
    assert frame.loc[specdiff, "speedup"] == pytest.approx(2.0)
    assert frame.loc[sps, "speedup"] == pytest.approx(1.25)
    assert frame.loc[specdiff, "tau"] == pytest.approx(2.5)
    assert frame.loc[sps, "quality.nll"] == pytest.approx(0.4)
    marks = leaderboard.best(frame, directions)
    assert marks.loc[specdiff, "speedup"]
    assert marks.loc[sps, "quality.nll"]  # NLL: lower is better
    written = leaderboard.write(runs, tmp_path / "out")
    assert [p.suffix for p in written] == [".md", ".tex", ".csv"]
    text = written[0].read_text()
    # one table (experiment, task, losslessness), each row's samples first, never marked
    assert f"| {specdiff} | 2 | **2** |" in text and "_fixture machine (class unrecorded)_" in text
    assert text.startswith("### adhoc · tiny_code · lossless\n")
    tex = r"specdiff $\gamma$5 T1 \textperiodcentered{} tiny/tiny-dlm & 2 & \textbf{2} &"
    assert tex in written[1].read_text()


def test_the_leaderboard_command_prints_its_tables(tmp_path: Path, capsys) -> None:
    write_run(tmp_path, {"method": "sps", "method.gamma": 4}, [record(0, 10, 2.0, 10, 2.5, 0.4)])
    out = tmp_path / "out"
    assert cli.main(["--results", str(tmp_path), "--out", str(out), "leaderboard"]) == 0
    printed = capsys.readouterr().out
    assert (out / "leaderboard.md").read_text() in printed
    assert "| sps γ4 · tiny/tiny-ar |" in printed


def test_the_acceptance_command_tabulates_and_plots_hand_computed_acceptance(
    tmp_path: Path, capsys
) -> None:
    """Two samples in two categories, rounds (drafted, accepted): qa (4,4) (4,1) (4,0);
    code (4,2) (2,2). The whole cell and each category, from the records alone."""
    rounds = {"qa": ([4, 4, 4], [4, 1, 0]), "code": ([4, 2], [2, 2])}
    records = []
    for i, (category, (drafted, accepted)) in enumerate(rounds.items()):
        rec = record(i, 10, 1.0, 4, 2.0, 0.5)
        rec.update(meta={"category": category}, drafted_per_round=drafted)
        rec.update(accepted_per_round=accepted)
        records.append(rec)
    write_run(tmp_path, {"method": "sps", "method.gamma": 4}, records)
    write_run(tmp_path, {"method": "ar"}, [record(0, 10, 2.0, 10, 2.5, 0.4)])  # no rounds
    out = tmp_path / "out"
    assert cli.main(["--results", str(tmp_path), "--out", str(out), "acceptance"]) == 0
    printed = capsys.readouterr().out
    frame = acceptance.table(load_runs(tmp_path)).set_index("category")
    assert list(frame.index) == ["all", "code", "qa"]  # the AR cell has no rounds
    cell = frame.loc["all"]
    assert cell["hist"] == {0: 1 / 5, 1: 1 / 5, 2: 2 / 5, 3: 0.0, 4: 1 / 5}
    # reached / kept per position: 1: 5/4, 2: 4/3, 3: 2/1 (code's second round drafted 2), 4: 1/1
    assert cell["by_position"] == pytest.approx([4 / 5, 3 / 4, 1 / 2, 1.0])
    assert cell["at_position"] == pytest.approx([4 / 5, 3 / 5, 1 / 5, 1 / 5])
    assert cell["acceptance_rate"] == pytest.approx(9 / 18)
    assert cell["per_sample"] == pytest.approx(
        [5 / 3 + 0.1 * (2 - 5 / 3), 11 / 6, 2 - 0.1 * (2 - 5 / 3)]
    )
    assert frame.loc["qa", "hist"] == {0: 1 / 3, 1: 1 / 3, 2: 0.0, 3: 0.0, 4: 1 / 3}
    assert frame.loc["code", "by_position"] == pytest.approx([1.0, 1.0, 0.0])  # 3: reached once
    assert "| sps γ4 · tiny/tiny-ar | all | 5 |" in printed and "0:20 1:20 2:40 3:0 4:20" in printed
    assert (out / "acceptance-tiny_code.png").stat().st_size > 0
    csv = pd.read_csv(out / "acceptance-tiny_code.csv")
    assert json.loads(csv.loc[0, "at_position"]) == pytest.approx([0.8, 0.6, 0.2, 0.2])


def test_a_config_run_with_and_without_its_chat_template_is_not_averaged(
    tmp_path: Path, capsys
) -> None:
    """The same config on two tasks, its chat template applied on one only: each task's table
    shows it with its workload, and the overall mean is refused in one line naming the key."""
    sps = {"method": "sps", "method.gamma": 4}
    write_run(tmp_path, {**sps, "workload": {"chat_template": True}}, [record(0, 10, 1, 4, 2, 0.5)])
    write_run(tmp_path, sps, [record(0, 10, 2.0, 10, 2.5, 0.4)], task="mt_bench")
    runs = load_runs(tmp_path)
    assert sorted(runs["cell"]) == ["sps γ4 · tiny/tiny-ar", "sps γ4 · tiny/tiny-ar (chat)"]
    assert runs["cell_id"].nunique() == 1  # one config; the workload is checked, not hashed
    assert cli.main(["--results", str(tmp_path), "--out", str(tmp_path / "o"), "leaderboard"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "will not average sps γ4 · tiny" in line and "workload.chat_template differs" in line
    same = tmp_path / "same"
    write_run(same, sps, [record(0, 10, 1, 4, 2, 0.5)])
    write_run(same, sps, [record(0, 10, 2.0, 10, 2.5, 0.4)], task="mt_bench")
    frame, _ = leaderboard.overall(load_runs(same))
    assert frame.loc["sps γ4 · tiny/tiny-ar", "speedup"] == pytest.approx((2.0 + 1.25) / 2)


def test_one_cell_on_two_machine_classes_shows_twice_and_is_never_averaged(
    tmp_path: Path, capsys
) -> None:
    """The same cell (one run id) from an AVX2 CPU and an AMX one: two rows in the task's
    table, each named by its class; the overall mean over tasks is refused in one line; with
    --machine the report holds one class."""
    sps = {"method": "sps", "method.gamma": 4}
    avx2, amx = "cpu AMD EPYC avx2 2c", "cpu Intel Xeon amx 2c"
    write_run(tmp_path / "a", {**sps, "machine": avx2}, [record(0, 10, 4, 4, 2, 0.5)])
    write_run(tmp_path / "b", {**sps, "machine": amx}, [record(0, 10, 1, 4, 2, 0.5)])
    write_run(tmp_path / "b", {**sps, "machine": amx}, [record(0, 10, 1, 4, 2, 0.5)], "gsm8k")
    out = tmp_path / "out"
    args = ["--results", str(tmp_path), "--out", str(out)]
    assert cli.main([*args, "leaderboard"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "will not average sps γ4 · tiny over runs whose machine differs" in line
    assert f"tiny_code: {avx2}" in line and "--machine" in line
    runs = load_runs(tmp_path)
    frame, _ = leaderboard.table(by_machine(runs), "tiny_code")
    assert frame.loc[f"sps γ4 · tiny/tiny-ar @ {avx2}", "speedup"] == pytest.approx(0.5)
    assert frame.loc[f"sps γ4 · tiny/tiny-ar @ {amx}", "speedup"] == pytest.approx(2.0)
    assert cli.main([*args, "--machine", amx, "leaderboard"]) == 0
    printed = capsys.readouterr().out
    assert "| sps γ4 · tiny/tiny-ar | 2 |" in printed and avx2 not in printed
    assert f"_{amx}_" in printed  # the table's foot names its machine class


def test_figures_name_each_run_made_by_dirty_code_in_one_line(tmp_path: Path, capsys) -> None:
    """A figure drawn from two runs, one whose env.json says its code differed from its
    commit: one warning line naming that run, and the figure is still written."""
    results, specs = tmp_path / "results", tmp_path / "specs"
    sps, ar = {"method": "sps", "method.gamma": 4}, {"method": "ar"}
    dirty = write_run(results, sps, [record(0, 10, 1, 4, 2, 0.5)])
    clean = write_run(results, ar, [record(0, 10, 2, 10, 2, 0.5)])
    for run_id, flag in ((dirty, True), (clean, False)):
        env = {"git_commit": "0123456789abcdef", "git_dirty": flag}
        (results / "adhoc" / run_id / "env.json").write_text(json.dumps(env))
    specs.mkdir()
    spec = {"name": "both", "kind": "leaderboard", "task": "tiny_code", "speed": "speedup"}
    spec.update(quality="nll", cells=[{"method": ["sps", "ar"]}], commands=[])
    (specs / "both.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    args = ["--results", str(results), "--out", str(out), "figures", "--specs", str(specs)]
    assert cli.main(args) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"specbench-report: warning: {results / 'adhoc' / dirty} ran code that differed from "
        "commit 01234567 (its env.json's git_dirty); rerun it from a clean tree"
    ]
    assert (out / "both.md").exists()


def test_committed_runs_read_as_the_machine_they_recorded() -> None:
    """The reference runs that predate the machine class read as their env.json's CPU and
    cores, the ISA said unrecorded; those since, as their machine block names; the files are
    read, not rewritten."""
    runs = load_runs(paths.REPO_ROOT / "results" / "reference")
    before = {"cpu AMD EPYC (isa unrecorded) 2c", "cpu Intel Xeon (isa unrecorded) 2c"}
    assert set(runs["machine"]) & before  # reruns replace them one experiment at a time
    since = {"cpu AMD EPYC avx512_bf16 2c", "cpu AMD EPYC avx2 2c"}  # avx2: llama.cpp's AVX2 build
    assert set(runs["machine"]) - before <= since
    assert (runs["env"].str.split(" [|] ").str[0] == runs["machine"]).all()


def test_cells_that_differ_only_in_target_stay_apart_and_are_never_averaged(tmp_path: Path) -> None:
    """Two PSD configs on two targets and two AR cells on two targets: four rows named by their
    targets; the overall table averages each config over its tasks, never two configs."""
    psd = {"method": "psd", "method.policy": "quota", "method.depth": 3}
    for task, scale in (("tiny_code", 1.0), ("gsm8k", 2.0)):
        write_run(
            tmp_path,
            {**psd, "target": "random-llada"},
            [record(0, 10, 1.0 * scale, 5, 2.0, 0.5)],
            task,
        )
        write_run(
            tmp_path,
            {**psd, "target": "random-dream"},
            [record(0, 10, 1.0 * scale, 5, 4.0, 0.5)],
            task,
        )
    write_run(tmp_path, {"method": "ar", "target": "tiny"}, [record(0, 10, 1.0, 10, 1.0, 0.5)])
    write_run(
        tmp_path, {"method": "ar", "target": "random-gpt2"}, [record(0, 10, 2.0, 10, 2.0, 0.5)]
    )
    runs = load_runs(tmp_path)
    frame, _ = leaderboard.table(runs, "tiny_code")
    assert frame["speedup"].to_dict() == {
        "ar · random-gpt2": 1.0,
        "ar · tiny": 1.0,
        "psd quota 1/step b32 d3 · random-dream": 4.0,
        "psd quota 1/step b32 d3 · random-llada": 2.0,
    }
    totals, _ = leaderboard.overall(runs)
    assert totals.loc["psd quota 1/step b32 d3 · random-llada", "speedup"] == pytest.approx(1.5)
    assert totals.loc["psd quota 1/step b32 d3 · random-dream", "speedup"] == pytest.approx(3.0)
    assert len(totals) == 4


def test_cells_that_display_alike_carry_their_run_ids(tmp_path: Path) -> None:
    """Two configs whose labels agree (a knob the label leaves out) print as two rows."""
    first = write_run(
        tmp_path, {"method": "sps", "method.gamma": 4}, [record(0, 10, 1.0, 4, 2.0, 0.5)]
    )
    second = write_run(
        tmp_path,
        {"method": "sps", "method.gamma": 4, "method.leniency": 3.0},
        [record(0, 10, 2.0, 4, 2.0, 0.5)],
    )
    frame, _ = leaderboard.table(load_runs(tmp_path), "tiny_code")
    assert sorted(frame.index) == sorted(
        f"sps γ4 · tiny/tiny-ar #{r[-8:]}" for r in (first, second)
    )


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


def read_fronts(path: Path) -> dict[str, set[str]]:
    fronts: dict[str, set[str]] = {}
    for line in path.read_text().splitlines():
        if line.startswith("### "):
            group = fronts.setdefault(line[4:], set())
        elif line.startswith("| ") and not line.startswith("| cell |"):
            group.add(line.split(" | ")[0][2:])
    return fronts


def read_curve(path: Path) -> dict[tuple[str, str], str]:
    """A curve's table as {(x, series): y}."""
    rows = [line.strip("| ").split(" | ") for line in path.read_text().splitlines()[2:]]
    header, body = rows[0], rows[2:]
    return {(r[0], name): value for r in body for name, value in zip(header[1:], r[1:])}


def undominated(cells: pd.DataFrame, speed: str, quality: str, higher: bool) -> set[str]:
    """The front by its definition, pair by pair."""
    sign = 1 if higher else -1
    rows = [(r["cell"], r[speed], sign * r[quality]) for _, r in cells.iterrows()]
    return {
        c
        for c, x, y in rows
        if not any(ox >= x and oy >= y and (ox > x or oy > y) for _, ox, oy in rows)
    }


def test_every_experiment_spec_rebuilds_from_fixture_runs(tmp_path: Path) -> None:
    """Tables hold the runs' own values, fronts are the undominated cells, figures are drawn,
    and the headline table replaces only the README's headline block."""
    fixture_runs(tmp_path / "results")
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- headline:start -->\nSTALE TABLE\n<!-- headline:end -->\nrest\n")
    written = figures.build_all(tmp_path / "results", tmp_path / "figures", readme=readme)
    assert all(p.exists() for p in written)
    runs = load_runs(tmp_path / "results")
    for spec in figures.specs():
        cells = pd.concat(
            [figures.select(runs, c) for e in spec["cells"] for c in figures.expand(e)]
        ).drop_duplicates("run_id")  # one config asked for by two experiments
        out = tmp_path / "figures" / spec["name"]
        if spec["kind"] == "headline":
            table = out.with_suffix(".md").read_text()
            for _, row in cells.iterrows():
                assert f"| {row['cell']} | {row['speedup']:.2f} |" in table
            text = readme.read_text()
            assert text.startswith("intro\n") and text.endswith("<!-- headline:end -->\nrest\n")
            assert table in text and "STALE TABLE" not in text
            continue
        if spec["kind"] == "acceptance":  # a row per cell from its records, and the figure
            per_task = out.with_name(f"{spec['name']}-{spec['task']}")
            table = per_task.with_suffix(".md").read_text()
            assert all(f"| {row['cell']} | all |" in table for _, row in cells.iterrows())
            assert per_task.with_suffix(".png").stat().st_size > 10_000
            continue
        assert out.with_suffix(".png").stat().st_size > 10_000 and out.with_suffix(".pdf").exists()
        if spec["kind"] == "curve":  # each cell's y at its x, in the table beside the figure
            shown = read_curve(out.with_suffix(".md"))
            for _, row in cells.iterrows():
                want = f"{row[spec['y']]:.3g}"
                series = " ".join(str(row[key]) for key in curves.series_keys(cells, spec))
                assert shown[(f"{row[spec['x']]:g}", series)] == want
            continue
        if spec["kind"] != "pareto":
            csv = pd.read_csv(out.with_suffix(".csv"), index_col=0)
            for _, row in cells.iterrows():
                assert csv.loc[row["cell"], spec["speed"]] == pytest.approx(row[spec["speed"]])
        groups = spec.get("groups") or {"cells": {}}
        if "y" in spec:  # a column of the runs table, in the direction the spec states
            y, higher = spec["y"], spec["higher"]
        else:
            y = f"quality.{spec['quality']}"
            higher = higher_is_better(spec["task"])[spec["quality"]]
        if "aup" in spec:  # a row per group, in the listing beside the figure
            listing = out.with_name(f"{spec['name']}-aup.md").read_text()
            assert all(f"| {name} | " in listing for name in groups)
        for name, found in read_fronts(out.with_name(f"{spec['name']}-front.md")).items():
            group = figures.select(cells, groups[name])
            assert found == undominated(group, spec["speed"], y, higher)


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


def test_aup_equals_d3llms_on_its_own_curves() -> None:
    """Golden outputs of d3LLM's get_aup (tests/goldens/aup: its source named there), the
    curves it refuses included."""
    goldens = json.loads((paths.REPO_ROOT / "tests/goldens/aup/d3llm_aup.json").read_text())
    for case in goldens["cases"]:
        points = list(zip(case["rho"], case["y"]))
        got = aup.aup(points, case["y_max"], case.get("alpha", aup.ALPHA))
        assert got == (None if case["aup"] is None else pytest.approx(case["aup"], rel=1e-12))


def test_a_groups_aup_reads_shares_as_percent_against_the_best_accuracy_shown() -> None:
    """Two points at shares 0.50 and 0.48, a baseline at 0.50: y_max 50 %, and the second
    point's trapezoid weighted by exp(-3 (1 - 48/50))."""
    group = pd.DataFrame(
        {"tpf": [1.0, 2.0], "quality.prefix_match": [0.50, 0.48], "baseline.prefix_match": 0.5}
    )
    frame = aup.curves({"policy": group}, "prefix_match")
    expected = 1.0 * 50 + 0.5 * (2.0 - 1.0) * (48 * math.exp(-3 * (1 - 48 / 50)) + 50)
    assert frame.loc["policy", "aup"] == pytest.approx(expected)
    assert "| policy | 2 | 1.00-2.00 | " in aup.markdown(frame, "t", "prefix_match")


def test_a_cell_names_its_backend_its_measured_knobs_and_requests_in_flight(
    tmp_path: Path,
) -> None:
    """The same SpS config on three backends, at two concurrencies and two GGUF types: five
    rows, never one."""
    sps = {"method": "sps", "method.gamma": 4}
    vllm = {"backend.name": "vllm", "backend.python": None, "backend.startup_s": 900}
    llamacpp = {"backend.name": "llamacpp", "backend.startup_s": 120}
    for extra in (
        {},
        vllm,
        {**vllm, "run.concurrency": 4},
        {**llamacpp, "backend.quant": "q8_0"},
        {**llamacpp, "backend.quant": "q4_0", "backend.startup_s": 60},
    ):
        write_run(tmp_path, {**sps, **extra}, [record(0, 10, 1.0, 4, 2.0, 0.5)])
    frame, _ = leaderboard.table(load_runs(tmp_path), "tiny_code")
    assert sorted(frame.index) == [
        "sps γ4 · tiny/tiny-ar",
        "sps γ4 · tiny/tiny-ar [llamacpp q4_0]",  # a GGUF's type is shown, a startup limit not
        "sps γ4 · tiny/tiny-ar [llamacpp q8_0]",
        "sps γ4 · tiny/tiny-ar [vllm c4]",
        "sps γ4 · tiny/tiny-ar [vllm]",
    ]


def test_a_config_stored_before_the_backend_group_reads_as_the_current_one(
    tmp_path: Path,
) -> None:
    """Run directories whose config.yaml still has run.backend and the vLLM knobs (every
    reference run before the `backend` group) read back with those knobs under `backend`: a
    vLLM cell keeps them and its label, specbench's own is the same cell as one written now."""
    cell = {"method": "sps", "method.gamma": 4}
    write_run(tmp_path / "now", cell, [record(0, 10, 1.0, 4, 2.0, 0.5)])
    write_run(tmp_path / "old", cell, [record(0, 10, 1.0, 4, 2.0, 0.5)])
    stored = next((tmp_path / "old").glob("*/*/config.yaml"))
    config = yaml.safe_load(stored.read_text())
    del config["backend"]

    def store_old(backend: str) -> pd.Series:
        legacy = {"backend": backend, "vllm_python": None, "vllm_startup_s": 900}
        stored.write_text(yaml.safe_dump({**config, "run": {**config["run"], **legacy}}))
        return load_runs(tmp_path / "old").iloc[0]

    vllm = store_old("vllm")
    assert (vllm["backend.name"], vllm["backend.startup_s"]) == ("vllm", 900)
    assert "run.backend" not in vllm and vllm["cell"].endswith("[vllm]")
    own = store_old("specbench")
    assert "backend.startup_s" not in own
    assert own["cell_id"] == load_runs(tmp_path / "now").iloc[0]["cell_id"]


def test_agreement_pairs_a_cell_across_backends_sample_by_sample(tmp_path: Path) -> None:
    """SpS on both backends over 4 samples, vLLM's method tokens differing on one at index 3
    (where the target's top-2 gap is 2 ulps: a tie) and its baseline's on another at index 5
    (40 ulps: not one), its rounds accepting 1.1 per round against 1.0: identical 0.75, gap
    +10%; a third config run on one backend only is not paired."""

    def rounds(accepted: list[int], **changes) -> dict:
        rec = {**record(0, 10, 1.0, 4, 2.0, 0.5), **changes}
        return {**rec, "drafted_per_round": [4] * len(accepted), "accepted_per_round": accepted}

    ours = [{**rounds([1] * 10), "id": str(i)} for i in range(4)]
    theirs = [{**rounds([1] * 9 + [2]), "id": str(i)} for i in range(4)]
    gaps = [100.0, 50.0, 9.0, 2.0, 30.0, 40.0, 7.0, 8.0, 9.0, 10.0]
    theirs[2]["method"] = {
        **theirs[2]["method"],
        "output_ids": [0, 1, 2, 9, 4, 5, 6, 7, 8, 9],
        "top2_ulps": gaps,
    }
    theirs[1]["baseline"] = {
        **theirs[1]["baseline"],
        "output_ids": [0, 1, 2, 3, 4, 0, 6, 7, 8, 9],
        "top2_ulps": gaps,
    }
    sps = {"method": "sps", "method.gamma": 4}
    write_run(tmp_path, {**sps, "backend.name": "specbench"}, ours)
    write_run(tmp_path, {**sps, "backend.name": "vllm", "backend.python": "/opt/py"}, theirs)
    write_run(tmp_path, {**sps, "method.gamma": 2, "backend.name": "vllm"}, theirs)
    frame = agreement.table(load_runs(tmp_path))
    assert len(frame) == 1
    row = frame.iloc[0]
    assert (row["backend"], row["n"], row["identical_rate"]) == ("vllm", 4, 0.75)
    assert row["first_divergences"] == [3] and row["divergence_ulps"] == [2.0]
    assert row["baseline_identical_rate"] == 0.75 and row["baseline_divergence_ulps"] == [40.0]
    assert (row["ties"], row["baseline_ties"]) == (1, 0)
    assert row["accepted_gap"] == pytest.approx(0.1)
    assert "| vllm | 4 | 0.75 | 1/1 | 0.75 | 0/1 | 1.000 | 1.100 | +10.0% |" in (
        agreement.markdown(frame)
    )


def test_committed_latex_tables_compile(tmp_path: Path) -> None:
    """Every committed table, as a paper includes it, through a real TeX engine (`make tex`)."""
    pdflatex = shutil.which("pdflatex")
    assert pdflatex, "no pdflatex: `make tex` installs Debian's texlive-latex-recommended"
    tables = sorted((paths.REPO_ROOT / "results" / "figures").glob("*.tex"))
    assert tables
    inputs = "".join(f"\\input{{{t}}}\\clearpage\n" for t in tables)
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\\usepackage[T1]{fontenc}\\usepackage{booktabs}\n"
        f"\\begin{{document}}\n{inputs}\\end{{document}}\n"
    )
    done = subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, [line for line in done.stdout.splitlines() if line.startswith("!")]


def test_the_default_leaderboard_repeats_no_label_within_a_table() -> None:
    runs = by_machine(load_runs(paths.REPO_ROOT / "results"))
    tables = leaderboard.boards(runs)
    assert len(tables) > 1
    for title, rows in tables:
        frame, _ = leaderboard.table(rows, rows["task"].iloc[0])
        assert frame.index.is_unique, title
