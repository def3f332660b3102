"""Speed against quality per task: the non-dominated cells joined by a line, one marker per
method (its config's `marker`), each point's 95% intervals as error bars on both axes, and the
cells the front does not beat outside their intervals ringed as tied with it; PNG and PDF."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from specbench.report.load import bounds, marker  # noqa: E402


def pareto_front(
    points: Sequence[tuple[float, float]], maximise: tuple[bool, bool] = (True, True)
) -> list[int]:
    """Indices of the points no other point dominates (at least as good on both axes and
    better on one), ordered along the first axis."""
    signs = [1 if m else -1 for m in maximise]
    scored = [(signs[0] * x, signs[1] * y) for x, y in points]
    front = [
        i
        for i, (x, y) in enumerate(scored)
        if not any(
            (ox >= x and oy >= y) and (ox > x or oy > y)
            for j, (ox, oy) in enumerate(scored)
            if j != i
        )
    ]
    return sorted(front, key=lambda i: points[i][0])


def front(frame: pd.DataFrame, speed: str, quality: str, quality_higher: bool) -> pd.DataFrame:
    """The group's non-dominated cells, by speed."""
    frame = frame.dropna(subset=[speed, quality])
    points = list(zip(frame[speed], frame[quality]))
    return frame.iloc[pareto_front(points, (True, quality_higher))]


def _ends(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Each point's interval on `column`; the point itself where its run has none."""
    values = frame[column].to_numpy(float)
    lo, hi = bounds(column)
    ends = [frame[c].to_numpy(float) if c in frame else values for c in (lo, hi)]
    return np.where(np.isnan(ends[0]), values, ends[0]), np.where(
        np.isnan(ends[1]), values, ends[1]
    )


def tied(frame: pd.DataFrame, speed: str, quality: str, quality_higher: bool) -> pd.DataFrame:
    """The cells off the front that no front cell dominates distinguishably (with intervals
    apart on at least one axis): on these samples they are not told apart from the front, so
    they are drawn beside it and listed as tied with it, not as beaten."""
    frame = frame.dropna(subset=[speed, quality])
    sign = 1 if quality_higher else -1
    speeds, qualities = frame[speed].to_numpy(float), sign * frame[quality].to_numpy(float)
    (s_lo, s_hi), (q_lo, q_hi) = _ends(frame, speed), _ends(frame, quality)
    if not quality_higher:  # intervals of the negated quality
        q_lo, q_hi = -q_hi, -q_lo
    on = pareto_front(list(zip(frame[speed], frame[quality])), (True, quality_higher))
    beaten = np.zeros(len(frame), dtype=bool)
    for b in on:
        dominates = (speeds[b] >= speeds) & (qualities[b] >= qualities)
        dominates &= (speeds[b] > speeds) | (qualities[b] > qualities)
        beaten |= dominates & ((s_lo[b] > s_hi) | (q_lo[b] > q_hi))
    off = np.ones(len(frame), dtype=bool)
    off[on] = False
    return frame[off & ~beaten]


def errors(frame: pd.DataFrame, column: str) -> np.ndarray | None:
    """Error bars from each point to its 95% interval's ends (none where no run has one)."""
    lo, hi = bounds(column)
    if lo not in frame or frame[lo].isna().all():
        return None
    values = frame[column].to_numpy(float)
    below = values - frame[lo].to_numpy(float)
    above = frame[hi].to_numpy(float) - values
    return np.nan_to_num(np.vstack([below, above]))


def fronts_markdown(
    fronts: dict[str, pd.DataFrame],
    speed: str,
    quality: str,
    ties: dict[str, pd.DataFrame] | None = None,
) -> str:
    """Each group's front as a list a reader (and a test) can check against the figure, then
    the cells `tied` with it, marked ≈."""
    lines = []
    for name, cells in fronts.items():
        lines += [f"### {name}", "", f"| cell | {speed} | {quality} |", "|---|---|---|"]
        lines += [
            f"| {r['cell']} | {r[speed]:.4g} | {r[quality]:.4g} |" for _, r in cells.iterrows()
        ]
        lines += [
            f"| ≈ {r['cell']} | {r[speed]:.4g} | {r[quality]:.4g} |"
            for _, r in (ties or {}).get(name, cells.iloc[:0]).iterrows()
        ]
        lines.append("")
    return "\n".join(lines)


def plot(
    groups: dict[str, pd.DataFrame],
    speed: str,
    quality: str,
    quality_higher: bool,
    title: str,
    out: Path,
    notes: dict[str, str] | None = None,
) -> list[Path]:
    """Each group (e.g. "joint", "single-step exact") is drawn with its own front; markers
    are each method's own; `notes` add to a group's front label (its AUP). The fronts are also
    written as `<out>-front.md`."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    fronts: dict[str, pd.DataFrame] = {}
    ties: dict[str, pd.DataFrame] = {}
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for colour, (name, frame) in zip(colours, groups.items()):
        frame = frame.dropna(subset=[speed, quality])
        for method, part in frame.groupby("method"):
            ax.errorbar(
                part[speed],
                part[quality],
                xerr=errors(part, speed),
                yerr=errors(part, quality),
                fmt="none",
                ecolor=colour,
                alpha=0.35,
                linewidth=1,
            )
            ax.scatter(
                part[speed],
                part[quality],
                marker=marker(method),
                color=colour,
                alpha=0.55,
                label=f"{name}: {method}",
            )
        best = fronts[name] = front(frame, speed, quality, quality_higher)
        ax.plot(
            best[speed],
            best[quality],
            color=colour,
            linewidth=2,
            marker="o",
            markersize=8,
            markerfacecolor="none",
            label=f"{name}: front{(notes or {}).get(name, '')}",
        )
        for _, row in best.iterrows():
            ax.annotate(row["cell"], (row[speed], row[quality]), fontsize=6, alpha=0.8)
        close = ties[name] = tied(frame, speed, quality, quality_higher)
        if len(close):
            ax.scatter(
                close[speed],
                close[quality],
                s=64,
                facecolors="none",
                edgecolors=colour,
                linestyles="--",
                label=f"{name}: tied with the front",
            )
    ax.set_xlabel(speed)
    ax.set_ylabel(f"{quality} ({'higher' if quality_higher else 'lower'} is better)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    out.parent.mkdir(parents=True, exist_ok=True)
    listing = out.with_name(f"{out.name}-front.md")
    listing.write_text(fronts_markdown(fronts, speed, quality, ties))
    return [*save(fig, out), listing]


def save(fig: plt.Figure, out: Path) -> list[Path]:
    """The figure as `out`.png and .pdf, then closed. No creation date: a figure rebuilt
    from the same runs is the same file."""
    paths = [out.with_suffix(".png"), out.with_suffix(".pdf")]
    for path in paths:
        metadata = {"CreationDate": None} if path.suffix == ".pdf" else {}
        fig.savefig(path, dpi=150, bbox_inches="tight", metadata=metadata)
    plt.close(fig)
    return paths
