"""Leaderboards: one table per task, rows = cells, speed and quality columns, each value with
its 95% interval where the run has one, the best value of each column marked and the values
whose intervals overlap the best's marked as ties, the environment line under the table;
Markdown, CSV (the intervals' ends as columns) and LaTeX."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from specbench.report import ReportError
from specbench.report.load import bounds, disambiguate, higher_is_better
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


def _cells(runs: pd.DataFrame, task: str) -> pd.DataFrame:
    """The task's runs, indexed by their display names (a contended run's marked)."""
    rows = runs[runs["task"] == task]
    return rows.assign(cell=contended_marked(rows, disambiguate(rows, "run_id"))).set_index("cell")


CONTENDED = " (contended)"  # after the name of a run whose timed arms shared the machine


def contended_marked(rows: pd.DataFrame, names: pd.Series) -> pd.Series:
    """`names`, `CONTENDED` after each run marked contended (`runs.load`): its speed is not
    this cell's on an idle machine, and should not be read beside the others unmarked."""
    if "contended" not in rows:
        return names
    return names.where(~rows["contended"].eq(True), names + CONTENDED)


def table(runs: pd.DataFrame, task: str) -> tuple[pd.DataFrame, dict[str, bool]]:
    """The task's cells and each column's direction (True = higher is better)."""
    rows = _cells(runs, task)
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


def intervals(runs: pd.DataFrame, task: str, frame: pd.DataFrame) -> Intervals:
    """The 95% interval of each value of the task's table (NaN where a run has none)."""
    rows = _cells(runs, task)
    ends = [
        rows.reindex(columns=[bounds(c)[end] for c in frame.columns]).astype(float)
        for end in (0, 1)
    ]
    for part in ends:
        part.columns = frame.columns
    return Intervals(*ends)


def boards(runs: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The tables a leaderboard holds, each with its title: one per experiment, task and
    machine class, split where one would set a causal target's quality beside a diffusion
    LLM's (another model's likelihood, not comparable) or lossless cells beside lossy ones.
    Within one, a cell is one run id: no label repeats."""
    keys = ["experiment", "task", "machine", "target.kind", "lossless"]
    runs = runs.assign(**{k: runs[k] if k in runs else None for k in keys})
    several = runs["machine"].nunique() > 1
    found = []
    for (experiment, task, klass, kind, lossless), rows in runs.groupby(keys, dropna=False):
        family = [f"{kind} targets"] if pd.notna(kind) else []
        parts = [experiment or "adhoc", task, *family, LOSSLESS[bool(lossless)]]
        found.append((" · ".join([*parts, *([klass] if several else [])]), rows))
    return found


LOSSLESS = {True: "lossless", False: "lossy"}
# counts beside each cell's metrics: its samples, and the stored copies of its run merged
COUNTS = {"n_samples": "samples", "runs": "runs"}


def with_counts(
    frame: pd.DataFrame, marks: pd.DataFrame, rows: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`frame` and `marks` with the count columns first (never marked best); `runs` only
    where some cell was stored more than once."""
    shown = [c for c in COUNTS if c in rows and (c != "runs" or (rows[c] > 1).any())]
    counts = _cells(rows, rows["task"].iloc[0])[shown]
    counts = counts.rename(columns=COUNTS).astype(float)
    unmarked = pd.DataFrame(False, index=counts.index, columns=counts.columns)
    return pd.concat([counts, frame], axis=1), pd.concat([unmarked, marks], axis=1)


@dataclass
class Intervals:
    """The low and high ends of a table's values' intervals, shaped as the table."""

    lo: pd.DataFrame
    hi: pd.DataFrame

    @classmethod
    def none(cls, frame: pd.DataFrame) -> Intervals:
        """A table without intervals (the overall table's means over tasks)."""
        empty = pd.DataFrame(float("nan"), index=frame.index, columns=frame.columns)
        return cls(empty, empty)

    def ties(self, marks: pd.DataFrame) -> pd.DataFrame:
        """True where a value is not its column's best but its interval overlaps the best's:
        on these samples the two are not told apart."""
        tied = pd.DataFrame(False, index=marks.index, columns=marks.columns)
        for column in marks.columns:
            best = marks[column]
            if best.any():
                lo, hi = self.lo.loc[best, column].min(), self.hi.loc[best, column].max()
                overlaps = (self.lo[column] <= hi) & (self.hi[column] >= lo)
                tied[column] = overlaps & ~best
        return tied

    def csv(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The table with each interval's ends as columns `<column> lo` and `<column> hi`."""
        present = [c for c in frame.columns if self.lo[c].notna().any()]
        ends = [self.lo[present].add_suffix(" lo"), self.hi[present].add_suffix(" hi")]
        return pd.concat([frame, *ends], axis=1)


# how each format marks the best value, a value tied with it, and a note saying so
MARKDOWN = {"best": ("**", "**"), "tie": " ≈"}
LATEX = {"best": (r"\textbf{", "}"), "tie": r" $\approx$"}
NOTE = (
    "[lo, hi]: 95% interval (paired bootstrap over samples; shares of samples: Wilson); "
    "bold: the column's best; ≈: its interval overlaps the best's"
)


def _text(
    frame: pd.DataFrame, marks: pd.DataFrame, style: dict, ci: Intervals | None = None
) -> pd.DataFrame:
    """Each value (with its interval in brackets where it has one), the best in bold and the
    values tied with it marked."""
    ci = ci or Intervals.none(frame)

    def shown(v: float, lo: float, hi: float) -> str:
        if pd.isna(v):
            return "-"
        return f"{v:.3g}" if pd.isna(lo) else f"{v:.3g} [{lo:.3g}, {hi:.3g}]"

    text = pd.DataFrame(
        [[shown(*t) for t in zip(*rows)] for rows in zip(frame.values, ci.lo.values, ci.hi.values)],
        index=frame.index,
        columns=frame.columns,
    )
    bold = style["best"]
    text = text.where(~marks, bold[0] + text + bold[1])
    return text.where(~ci.ties(marks), text + style["tie"])


def markdown(
    frame: pd.DataFrame, marks: pd.DataFrame, title: str, env: str, ci: Intervals | None = None
) -> str:
    shown = _text(frame, marks, MARKDOWN, ci)
    header = "| cell | " + " | ".join(shown.columns) + " |"
    rule = "|---|" + "---|" * len(shown.columns)
    lines = [f"| {cell} | " + " | ".join(row) + " |" for cell, row in shown.iterrows()]
    note = [f"_{NOTE}_", ""] if ci is not None and ci.lo.notna().any().any() else []
    return "\n".join([f"### {title}", "", header, rule, *lines, "", *note, f"_{env}_", ""])


# LaTeX's specials, escaped (backslash first: the others' escapes hold one), and the
# non-ASCII the labels use, as math or text commands pdflatex knows without extra packages
TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "γ": r"$\gamma$",
    "τ": r"$\tau$",
    "·": r"\textperiodcentered{}",
    "×": r"$\times$",
    "≤": r"$\leq$",
}


def tex(text: str) -> str:
    """`text` as LaTeX prints it: specials escaped, the labels' Greek letters as math."""
    return "".join(TEX.get(ch, ch) for ch in str(text))


def latex(
    frame: pd.DataFrame, marks: pd.DataFrame, title: str, env: str, ci: Intervals | None = None
) -> str:
    """A booktabs table (needs `\\usepackage{booktabs}`) that compiles as it is: every cell
    name, column name and the caption escaped; the notes under it as comments."""
    shown = _text(frame, marks, LATEX, ci)
    shown.index = [tex(cell) for cell in shown.index]
    shown.columns = [tex(column) for column in shown.columns]
    label = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")
    body = shown.to_latex(
        escape=False,
        caption=tex(title),
        label=f"tab:{label}",
        column_format="l" + "r" * len(shown.columns),
    )
    note = f"% {NOTE}\n" if ci is not None and ci.lo.notna().any().any() else ""
    return body + note + f"% {env}\n"


def write(runs: pd.DataFrame, out: Path, name: str = "leaderboard") -> list[Path]:
    """One Markdown, CSV and LaTeX file holding a table per task."""
    out.mkdir(parents=True, exist_ok=True)
    md, tex, csv = [], [], []
    for title, rows in boards(runs):
        task = rows["task"].iloc[0]
        frame, directions = table(rows, task)
        ci = intervals(rows, task, frame)
        frame, marks = with_counts(frame, best(frame, directions), rows)
        ci = Intervals(ci.lo.reindex(columns=frame.columns), ci.hi.reindex(columns=frame.columns))
        env = " / ".join(sorted(rows["env"].unique()))
        md.append(markdown(frame, marks, title, env, ci))
        tex.append(latex(frame, marks, title, env, ci))
        csv.append(ci.csv(frame).assign(task=task, table=title))
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
