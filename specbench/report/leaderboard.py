"""Leaderboards: one table per task, rows = cells, speed and quality columns, the best value of
each column marked, the environment line under the table; Markdown, CSV and LaTeX."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from specbench.report import ReportError
from specbench.report.load import disambiguate, higher_is_better
from specbench.runs.summary import TOGETHER, Workload

SPEED = {
    "speedup": True,
    "speedup_specbench": True,  # Spec-Bench's: mean per-sample speed over the baseline's
    "predicted_speedup": True,  # the cost model's, from acceptance and forward costs
    "ceiling_fraction": True,  # of the same decoder's throughput with a perfect drafter
    "tau": True,
    "acceptance_rate": True,
    "tpf": True,
    "lossless_rate": True,
}
# each further arm's comparison (e.g. PSD and Spiffy against one token per step)
VERSUS = {"speedup": True, "nfe_reduction": True}
# where requests ran together (a serving engine's run.concurrency): `speedup` is then per user
SERVING = {"throughput_speedup": True}


def speed_columns(rows: pd.DataFrame) -> dict[str, bool]:
    """The speed columns these rows have a value in, with direction (True = higher is
    better); the serving columns where some row ran requests together."""
    versus = {
        c: VERSUS[c.rsplit(".", 1)[1]]
        for c in rows.columns
        if c.startswith("vs.") and c.rsplit(".", 1)[1] in VERSUS and rows[c].notna().any()
    }
    together = "in_flight" in rows.columns and (rows["in_flight"] > TOGETHER).any()
    present = {
        c: d
        for c, d in {**SPEED, **(SERVING if together else {}), **versus}.items()
        if c in rows.columns
    }
    return {c: d for c, d in present.items() if rows[c].notna().any()}


def table(runs: pd.DataFrame, task: str) -> tuple[pd.DataFrame, dict[str, bool]]:
    """The task's cells and each column's direction (True = higher is better)."""
    rows = runs[runs["task"] == task]
    rows = rows.assign(cell=disambiguate(rows, "run_id")).set_index("cell")
    quality = [c for c in rows.columns if c.startswith("quality.") and rows[c].notna().any()]
    directions = {
        **speed_columns(rows),
        **{c: higher_is_better(task).get(c[8:], True) for c in quality},
    }
    return rows[list(directions)].astype(float), directions


def check_alike(runs: pd.DataFrame) -> None:
    """Refuse, in one line naming the key, to average a configuration over runs whose
    workloads differ (a chat template applied on one task and not another, thinking on and
    off, another system prompt: acceptance moves with each of them) or whose machine classes
    differ (the machine decides what verifying costs, so the speedup with it)."""
    columns = [f"workload.{k}" for k in Workload.CELL_KEYS if f"workload.{k}" in runs]
    apart = {**dict.fromkeys(columns, "--experiment"), "machine": "--machine"}
    for _, group in runs.groupby("cell_id"):
        for column, option in apart.items():
            seen = group[column].astype(str).unique()
            if len(seen) > 1:
                where = ", ".join(f"{t}: {v}" for t, v in zip(group["task"], group[column]))
                raise ReportError(
                    f"will not average {group['label'].iloc[0]} · {group['target'].iloc[0]} "
                    f"over runs whose {column} differs ({where}); run them alike, or report "
                    f"them apart with {option}"
                )


def overall(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, bool]]:
    """Each configuration's speed averaged over the tasks it ran on: grouped by `cell_id` (the
    config without its task and workload), so distinct configs are never averaged together
    and one run with another workload or machine class is refused; two that display alike
    carry their ids."""
    check_alike(runs)
    speed = speed_columns(runs)
    frame = runs.groupby("cell_id")[list(speed)].mean().astype(float)
    first = runs.drop_duplicates("cell_id").set_index("cell_id")
    names = first["cell"]
    shared = names.groupby(names).transform("size") > 1
    names = names.where(~shared, names + " #" + names.index.to_series())
    frame.index = names.loc[frame.index].to_numpy()
    return frame, speed


def best(frame: pd.DataFrame, directions: dict[str, bool]) -> pd.DataFrame:
    """True where a value is its column's best (no mark where every cell ties)."""
    marks = pd.DataFrame(False, index=frame.index, columns=frame.columns)
    for column in frame.columns:
        values = frame[column]
        if values.nunique() > 1:
            target = values.max() if directions[column] else values.min()
            marks[column] = values == target
    return marks


def _text(frame: pd.DataFrame, marks: pd.DataFrame, bold: tuple[str, str]) -> pd.DataFrame:
    shown = frame.map(lambda v: "-" if pd.isna(v) else f"{v:.3g}")
    return shown.where(~marks, bold[0] + shown + bold[1])


def markdown(frame: pd.DataFrame, marks: pd.DataFrame, title: str, env: str) -> str:
    shown = _text(frame, marks, ("**", "**"))
    header = "| cell | " + " | ".join(shown.columns) + " |"
    rule = "|---|" + "---|" * len(shown.columns)
    lines = [f"| {cell} | " + " | ".join(row) + " |" for cell, row in shown.iterrows()]
    return "\n".join([f"### {title}", "", header, rule, *lines, "", f"_{env}_", ""])


def latex(frame: pd.DataFrame, marks: pd.DataFrame, title: str, env: str) -> str:
    shown = _text(frame, marks, (r"\textbf{", "}"))
    shown.index = [cell.replace("γ", r"$\gamma$") for cell in shown.index]
    body = shown.to_latex(escape=False, caption=title, label=f"tab:{title}")
    return body + f"% {env}\n"


def write(runs: pd.DataFrame, out: Path, name: str = "leaderboard") -> list[Path]:
    """One Markdown, CSV and LaTeX file holding a table per task."""
    out.mkdir(parents=True, exist_ok=True)
    md, tex, csv = [], [], []
    for task in sorted(runs["task"].unique()):
        frame, directions = table(runs, task)
        marks = best(frame, directions)
        env = " / ".join(sorted(runs.loc[runs["task"] == task, "env"].unique()))
        md.append(markdown(frame, marks, task, env))
        tex.append(latex(frame, marks, task, env))
        csv.append(frame.assign(task=task))
    if runs["task"].nunique() > 1:  # cells run on several tasks: their speed, averaged
        frame, speed = overall(runs)
        marks = best(frame, speed)
        env = " / ".join(sorted(runs["env"].unique()))
        md.append(markdown(frame, marks, "overall (mean over tasks)", env))
        tex.append(latex(frame, marks, "overall", env))
        csv.append(frame.assign(task="overall"))
    paths = [out / f"{name}.md", out / f"{name}.tex", out / f"{name}.csv"]
    paths[0].write_text("\n".join(md))
    paths[1].write_text("\n".join(tex))
    pd.concat(csv).to_csv(paths[2])
    return paths
