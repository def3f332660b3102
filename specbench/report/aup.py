"""AUP, accuracy under parallelism (d3LLM: Qian et al. 2026, arXiv 2601.07568): one number for a
decoder's accuracy-parallelism curve, computed as d3LLM's `aup_utils.py` does
(tests/goldens/aup holds its outputs).

The curve's points are (tokens per forward, accuracy in %), sorted by TPF. Points more than
`OFFSET` accuracy points below the lowest-TPF point's are dropped (d3LLM refuses the curve
outright when its highest-TPF point is one of them: no AUP then). AUP is the first point's
TPF x accuracy plus the trapezoids between neighbours of accuracy x W(accuracy), where
W(y) = min(exp(-ALPHA (1 - y / y_max)), 1) penalises accuracy below the best of every method
compared (`y_max`): only useful parallelism counts.
"""

from __future__ import annotations

import math

import pandas as pd

from specbench.report import ReportError

ALPHA = 3.0  # d3LLM's penalty for accuracy below y_max
OFFSET = 5.0  # accuracy points a curve may lose before a point is dropped


def weight(y: float, y_max: float, alpha: float = ALPHA) -> float:
    return min(math.exp(-alpha * (1 - y / y_max)), 1.0)


def aup(points: list[tuple[float, float]], y_max: float, alpha: float = ALPHA) -> float | None:
    """AUP of (TPF, accuracy %) points; None where d3LLM refuses the curve."""
    ordered = sorted(points, key=lambda p: p[0])
    first = ordered[0][1]
    if first - ordered[-1][1] > OFFSET:
        return None
    kept = [(tpf, y) for tpf, y in ordered if y >= first - OFFSET]
    total = kept[0][0] * kept[0][1]
    for (tpf0, y0), (tpf1, y1) in zip(kept, kept[1:]):
        total += (
            0.5 * (tpf1 - tpf0) * (y1 * weight(y1, y_max, alpha) + y0 * weight(y0, y_max, alpha))
        )
    return total


def curves(groups: dict[str, pd.DataFrame], metric: str) -> pd.DataFrame:
    """Each group's AUP over its cells' (tpf, `metric`) points, the metric in % (a share in
    [0, 1] is scaled), y_max the best accuracy of every group and baseline shown."""
    column, base = f"quality.{metric}", f"baseline.{metric}"
    lacking = [name for name, g in groups.items() if column not in g or g[column].isna().any()]
    if lacking:
        raise ReportError(f"aup: {metric}: no such quality in the runs of {', '.join(lacking)}")
    scale = 100.0 if all(g[column].max() <= 1.0 for g in groups.values()) else 1.0
    best = max(
        max(g[column].max(), g[base].max() if base in g else -math.inf) for g in groups.values()
    )
    rows = []
    for name, cells in groups.items():
        points = [(r["tpf"], scale * r[column]) for _, r in cells.iterrows()]
        rows.append(
            {
                "group": name,
                "points": len(points),
                "tpf": f"{min(p[0] for p in points):.2f}-{max(p[0] for p in points):.2f}",
                "aup": aup(points, scale * best),
            }
        )
    return pd.DataFrame(rows).set_index("group")


def markdown(frame: pd.DataFrame, title: str, metric: str) -> str:
    lines = [
        f"### {title}: AUP ({metric}, %, under tokens per forward; d3LLM's definition)",
        "",
        "| group | points | TPF range | AUP |",
        "|---|---|---|---|",
    ]
    for name, r in frame.iterrows():
        shown = "– (refused: accuracy falls > 5 points)" if r["aup"] is None else f"{r['aup']:.1f}"
        lines.append(f"| {name} | {r['points']} | {r['tpf']} | {shown} |")
    return "\n".join(lines) + "\n"
