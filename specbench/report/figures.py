"""Every figure and table in experiments/ rebuilt from stored runs, without running a model.

A spec (experiments/<name>.yaml) names its kind (`leaderboard`, `pareto`, `frontier`,
`acceptance`: histograms and per-position rates, `curve`: a column `y` against a column `x`, a
line per `series`, with the leaderboard beside it, or `headline`: the README's table, written
between its `<!-- headline:start/end -->` markers), its task and axes (`speed`; `quality`, a
metric of the task, or `y` and `higher`, any column of the runs table; `aup`: an accuracy
metric whose AUP, d3LLM's, each group's curve gets), the cells it needs (each entry a filter;
list values expand into a grid) and the commands that produce them. A missing cell fails the
whole command with the cells and those commands, so a figure is never drawn from part of its
data.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pandas as pd
import yaml

from specbench import paths
from specbench.report import acceptance, aup, curves, leaderboard, pareto
from specbench.report.load import bounds, by_machine, higher_is_better, load_runs


class MissingCells(Exception):
    pass


def expand(entry: dict) -> list[dict]:
    """A filter with list values -> one filter per combination."""
    keys = list(entry)
    values = [v if isinstance(v, list) else [v] for v in entry.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def matches(value: object, want: object) -> bool:
    """A runs-table value against a spec's: null matches a missing value (NaN) too."""
    if want is None:
        return value is None or (isinstance(value, float) and math.isnan(value))
    return value == want or str(value) == str(want)


def select(runs: pd.DataFrame, cell: dict) -> pd.DataFrame:
    mask = pd.Series(True, index=runs.index)
    for key, value in cell.items():
        column = runs[key] if key in runs else pd.Series(None, index=runs.index)
        mask &= column.astype(object).map(lambda v, want=value: matches(v, want))
    return runs[mask]


def missing_cells(runs: pd.DataFrame, spec: dict) -> list[dict]:
    return [cell for entry in spec["cells"] for cell in expand(entry) if select(runs, cell).empty]


def missing_report(runs: pd.DataFrame, spec: dict) -> str | None:
    """What a spec lacks and how to produce it, or None when every cell is there."""
    missing = missing_cells(runs, spec)
    if not missing:
        return None
    shown = "\n  ".join(str(c) for c in missing[:12])
    more = f"\n  ... and {len(missing) - 12} more" if len(missing) > 12 else ""
    commands = "\n  ".join(spec["commands"])
    return (
        f"{spec['name']}: {len(missing)} cell(s) missing from the results:\n  {shown}{more}\n"
        f"produce them with:\n  {commands}"
    )


def build(spec: dict, runs: pd.DataFrame, out: Path) -> list[Path]:
    message = missing_report(runs, spec)
    if message:
        raise MissingCells(message)
    cells = pd.concat([select(runs, c) for e in spec["cells"] for c in expand(e)])
    cells = by_machine(cells.drop_duplicates(["run_id", "machine"]))
    if spec["kind"] == "acceptance":
        return acceptance.write(cells, out, spec["name"])
    if spec["kind"] == "curve":
        return leaderboard.write(cells, out, spec["name"]) + curves.plot(cells, spec, out)
    quality, higher = second_axis(spec)
    target = out / spec["name"]
    if spec["kind"] == "headline":
        return [headline(spec, cells, out)]
    if spec["kind"] == "leaderboard":
        written = leaderboard.write(cells, out, spec["name"])
        groups = {"cells": cells}
    elif spec["kind"] == "frontier":
        written = leaderboard.write(cells, out, spec["name"])
        groups = {name: select(cells, f) for name, f in spec["groups"].items()}
    else:
        written, groups = [], {"cells": cells}
    notes = None
    if "aup" in spec:  # each group's accuracy-parallelism curve in one number (report/aup.py)
        aup_curves = aup.curves(groups, spec["aup"])
        listing = out / f"{spec['name']}-aup.md"
        listing.write_text(aup.markdown(aup_curves, spec["name"], spec["aup"]))
        written.append(listing)
        notes = {g: f" (AUP {v:.0f})" for g, v in aup_curves["aup"].items() if v is not None}
    return written + pareto.plot(
        groups, spec["speed"], quality, higher, spec["name"], target, notes
    )


def second_axis(spec: dict) -> tuple[str, bool]:
    """The figure's y axis and whether higher is better there: the task's quality metric, or
    any column of the runs table the spec names as `y` with its `higher` (a knob a sweep varies,
    such as a tree's node budget, against which speedup then shows its front)."""
    if "y" in spec:
        return spec["y"], spec["higher"]
    return f"quality.{spec['quality']}", higher_is_better(spec["task"]).get(spec["quality"], True)


def headline(spec: dict, cells: pd.DataFrame, out: Path) -> Path:
    """One row per cell in the spec's order: its display name, each column, and its quality
    with what it is lossless with respect to (or lossy)."""
    quality = f"quality.{spec['quality']}"
    header = ["cell", *spec["columns"].values(), f"{spec['quality']} (baseline)", "lossless"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in spec["cells"]:
        row = select(cells, entry).iloc[0]
        values = [with_interval(row, c, ".2f") for c in spec["columns"]]
        base = row.get(f"baseline.{spec['quality']}")
        claim = (
            f"yes, w.r.t. {row.get('lossless_wrt') or 'its baseline'}" if row["lossless"] else "no"
        )
        lines.append(
            f"| {row['cell']} | "
            + " | ".join(values)
            + f" | {with_interval(row, quality, '.3f')} ({base:.3f}) | {claim} |"
        )
    path = out / f"{spec['name']}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def with_interval(row: pd.Series, column: str, spec: str) -> str:
    """A value and, where its run has one, its 95% interval: `2.37 [2.09, 2.67]`."""
    lo, hi = bounds(column)
    if pd.isna(row.get(column)):
        return "-"
    text = format(row[column], spec)
    return text if pd.isna(row.get(lo)) else f"{text} [{row[lo]:{spec}}, {row[hi]:{spec}}]"


def update_readme(readme: Path, table: Path) -> None:
    """Replace the README's headline block with the table (nothing else in the README moves)."""
    text = readme.read_text()
    start, end = "<!-- headline:start -->\n", "<!-- headline:end -->"
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    readme.write_text(head + start + table.read_text() + end + tail)


def specs(directory: Path = paths.EXPERIMENTS_DIR) -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted(directory.glob("*.yaml"))]


def build_all(
    results: Path, out: Path, directory: Path = paths.EXPERIMENTS_DIR, readme: Path | None = None
) -> list[Path]:
    """Every spec; all missing cells are reported together before anything is drawn. With
    `readme`, a headline spec's table also replaces the README's headline block."""
    runs, all_specs = load_runs(results), specs(directory)
    problems = [message for spec in all_specs if (message := missing_report(runs, spec))]
    if problems:
        raise MissingCells("\n".join(problems))
    written = [path for spec in all_specs for path in build(spec, runs, out)]
    if readme is not None:
        for spec in all_specs:
            if spec["kind"] == "headline":
                update_readme(readme, out / f"{spec['name']}.md")
    return written
