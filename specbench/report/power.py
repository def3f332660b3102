"""`specbench-report power`: how many samples a speedup claim needs, from each run's own spread.

A run's speedup interval over n samples implies how much one sample moves the pooled speedup
(`stats.per_sample_sd`); from it, the smallest speedup difference two such cells of n samples
resolve (a 95% interval of the difference excluding zero, 80% of the time) and the samples
each cell needs to resolve `--delta`. The two cells are taken as independent; two cells paired
on the same samples (`specbench-report compare`) can only do better.
"""

from __future__ import annotations

import pandas as pd

from specbench.metrics.stats import POWER, per_sample_sd, resolvable, samples_needed
from specbench.report.load import bounds

DELTA = 0.05  # the speedup difference sized for unless `--delta` names another


def table(runs: pd.DataFrame, delta: float = DELTA) -> str:
    """A Markdown row per cell with a speedup interval: samples, speedup and interval, the
    per-sample spread, the difference its samples resolve, and the samples `delta` needs."""
    lo, hi = bounds("speedup")
    head = (
        f"| task | cell | n | speedup [95%] | per-sample sd | resolves | samples for {delta:g}x |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    rows = runs.dropna(subset=[lo, hi]) if lo in runs else runs.iloc[:0]
    for _, row in rows.sort_values(["task", "cell"]).iterrows():
        n = int(row["n_samples"])
        sd = per_sample_sd([row[lo], row[hi]], n)
        lines.append(
            f"| {row['task']} | {row['cell']} | {n} | {row['speedup']:.2f} "
            f"[{row[lo]:.2f}, {row[hi]:.2f}] | {sd:.2f} | {resolvable(sd, n):.2f}x | "
            f"{samples_needed(sd, delta)} |"
        )
    note = (
        f"_resolves: the smallest speedup difference two cells of n samples each tell apart "
        f"{POWER:.0%} of the time (95% interval of the difference excluding zero), taking the "
        "cells as independent; pairing on shared samples only narrows it._"
    )
    return "\n".join([*lines, "", note, ""])
