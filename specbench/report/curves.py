"""One metric against one knob, a line per series (e.g. throughput speedup against requests in
flight, a line per method): PNG and PDF, and the same numbers as a markdown table."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from specbench.report.load import marker  # noqa: E402
from specbench.report.pareto import save  # noqa: E402


def series_of(cells: pd.DataFrame, keys: list[str]) -> dict[str, pd.DataFrame]:
    """The cells grouped by the series keys, each group's name its values joined."""
    return {
        " ".join(str(v) for v in (name if isinstance(name, tuple) else (name,))): part
        for name, part in cells.groupby(keys, sort=True)
    }


def series_keys(cells: pd.DataFrame, spec: dict) -> list[str]:
    """The spec's `series` columns (default the method) that the cells set: a knob only some
    backends have (llama.cpp's GGUF type) names no line where no cell has it."""
    keys = spec.get("series", ["method"])
    return [k for k in keys if k in cells and cells[k].notna().any()]


def table(lines: dict[str, pd.DataFrame], x: str, y: str) -> str:
    """x down, one column per series: the y each series measured there."""
    xs = sorted({v for part in lines.values() for v in part[x]})
    header = [x, *lines]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for value in xs:
        cells = []
        for part in lines.values():
            hit = part[part[x] == value][y]
            cells.append(f"{hit.iloc[0]:.3g}" if len(hit) and pd.notna(hit.iloc[0]) else "-")
        rows.append(f"| {value:g} | " + " | ".join(cells) + " |")
    return f"{y} against {x}\n\n" + "\n".join(rows) + "\n"


def plot(cells: pd.DataFrame, spec: dict, out: Path) -> list[Path]:
    """`spec`'s `x` and `y` columns, a line per value of its `series` columns (default the
    method; and the machine class, where the cells come from several), and a dashed line at
    its `reference` y (e.g. 1: where a speedup stops paying)."""
    x, y = spec["x"], spec["y"]
    keys = series_keys(cells, spec)
    if cells["machine"].nunique() > 1:  # a line never joins two machine classes' points
        keys = [*keys, "machine"]
    lines = series_of(cells.dropna(subset=[x, y]), keys)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name, part in lines.items():
        part = part.sort_values(x)
        ax.plot(part[x], part[y], marker=marker(part["method"].iloc[0]), label=name)
    if "reference" in spec:
        ax.axhline(spec["reference"], color="grey", linestyle="--", linewidth=1)
    if spec.get("log_x"):
        ax.set_xscale("log", base=2)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(spec["name"])
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    target = out / spec["name"]
    target.parent.mkdir(parents=True, exist_ok=True)
    listing = target.with_suffix(".md")
    listing.write_text(table(lines, x, y))
    return [*save(fig, target), listing]
