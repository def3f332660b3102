"""`specbench-report acceptance`: how each cell's drafts were accepted, per cell and per category.

Computed from each run's records.jsonl with the summary's own functions
(`specbench.metrics.summary`), so runs summarised before a field existed report it too. Per
row: rounds, tau (tokens per target forward), units accepted per round, acceptance rate, the
histogram of units accepted per round (share of rounds, bins 0..B), per-position acceptance
both ways (specbench's conditional `accept_by_position`, vLLM's unconditional
`accepted_at_position`), and the spread over samples of each sample's accepted per round
(p10 / median / p90). Cells without draft-verify rounds (AR, `dllm`) have nothing to show and
are left out. Definitions: docs/measurement.md#acceptance.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import quantiles

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from specbench.metrics.summary import summarize  # noqa: E402
from specbench.report import ReportError  # noqa: E402
from specbench.report.load import disambiguate  # noqa: E402
from specbench.runs.acceptance import Acceptance  # noqa: E402
from specbench.runs.record import Record  # noqa: E402
from specbench.runs.store import load_records  # noqa: E402

SHOWN_POSITIONS = 8  # per-position columns of the Markdown table (the CSV has all)


def spread(values: list[float]) -> list[float]:
    """p10, median and p90 of per-sample values (a single sample: itself three times)."""
    if len(values) < 2:
        return values * 3
    deciles = quantiles(values, n=10, method="inclusive")
    return [deciles[0], deciles[4], deciles[8]]


def row(cell: str, task: str, category: str, records: list[Record], unit: str) -> dict:
    metrics = summarize(records, greedy=False, round_unit=unit, by_category=False)
    per_sample = [
        sum(r.accepted_per_round) / len(r.accepted_per_round)
        for r in records
        if r.accepted_per_round
    ]
    view = Acceptance.of(metrics)
    return {
        "cell": cell,
        "task": task,
        "category": category,
        "unit": unit,
        "samples": metrics.n_samples,
        "rounds": metrics.n_rounds,
        "tau": metrics.tau,
        "accepted_per_round": metrics.accepted_per_round,
        "acceptance_rate": metrics.acceptance_rate,
        "hist": view.shares,
        "by_position": view.by_position,
        "at_position": view.at_position,
        "per_sample": spread(per_sample),
    }


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell with rounds, then one per category of its samples."""
    cells = runs[runs["round_unit"].notna()] if "round_unit" in runs else runs.iloc[:0]
    if cells.empty:
        raise ReportError("no runs with draft-verify rounds (AR and dllm cells have none)")
    cells = cells.assign(cell=disambiguate(cells, "run_id"))
    rows = []
    for _, run in cells.iterrows():
        records = load_records(Path(run["run_dir"]) / "records.jsonl", run["run_id"], repair=False)
        if not records:
            continue
        unit = run["round_unit"]
        rows.append(row(run["cell"], run["task"], "all", records, unit))
        categories = sorted({c for r in records if (c := r.meta.get("category"))})
        for category in categories:
            part = [r for r in records if r.meta.get("category") == category]
            rows.append(row(run["cell"], run["task"], category, part, unit))
    return pd.DataFrame(rows)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None or pd.isna(value) else format(value, spec)


def markdown(frame: pd.DataFrame, task: str) -> str:
    """The task's rows: histogram bins and the first positions as percentages."""
    lines = [
        f"### {task}: acceptance",
        "",
        "| cell | category | rounds | tau | accepted/round | rate | accepted per round "
        "(% of rounds; bins past the last reached cut) | P(i accepted | reached) | P(i accepted) (vLLM) | per sample "
        "p10/median/p90 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in frame.iterrows():
        last = max((k for k, v in r["hist"].items() if v), default=0)
        hist = " ".join(f"{k}:{100 * v:.0f}" for k, v in r["hist"].items() if k <= last)
        cond = " ".join(f"{p:.2f}" for p in r["by_position"][:SHOWN_POSITIONS])
        vllm = " ".join(f"{p:.2f}" for p in r["at_position"][:SHOWN_POSITIONS])
        sample = "/".join(_fmt(v) for v in r["per_sample"])
        lines.append(
            f"| {r['cell']} | {r['category']} | {r['rounds']} | {_fmt(r['tau'])} "
            f"| {_fmt(r['accepted_per_round'])} {r['unit']} | {_fmt(r['acceptance_rate'])} "
            f"| {hist} | {cond or '–'} | {vllm or '–'} | {sample} |"
        )
    return "\n".join(lines) + "\n"


def plot(frame: pd.DataFrame, task: str, out: Path) -> Path:
    """Two panels per task, one line per cell (its whole-task row): the histogram of units
    accepted per round, and the conditional per-position acceptance."""
    cells = frame[frame["category"] == "all"]
    fig, (hist_ax, pos_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (_, r) in enumerate(cells.iterrows()):
        colour = colours[i % len(colours)]
        last = max((k for k, v in r["hist"].items() if v), default=0)
        bins = [b for b in sorted(r["hist"]) if b <= last]
        hist_ax.plot(bins, [r["hist"][b] for b in bins], "o-", color=colour, label=r["cell"])
        positions = range(1, len(r["by_position"]) + 1)
        pos_ax.plot(positions, r["by_position"], "o-", color=colour)
    hist_ax.set_xlabel(f"{cells['unit'].iloc[0]} accepted in a round")
    hist_ax.set_ylabel("share of rounds")
    pos_ax.set_xlabel("draft position i")
    pos_ax.set_ylabel("P(i accepted | 1..i-1 accepted)")
    pos_ax.set_ylim(0, 1.02)
    handles, labels = hist_ax.get_legend_handles_labels()  # every cell has a histogram
    pos_ax.legend(handles, labels, fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"{task}: acceptance")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out


def write(runs: pd.DataFrame, out: Path, name: str = "acceptance") -> list[Path]:
    """Per task: <name>-<task>.md (also what the command prints), .csv (every position) and
    .png."""
    frame = table(runs)
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for task, part in frame.groupby("task", sort=True):
        md = out / f"{name}-{task}.md"
        md.write_text(markdown(part, task))
        csv = out / f"{name}-{task}.csv"
        lists = ["hist", "by_position", "at_position", "per_sample"]
        part.assign(**{c: part[c].map(json.dumps) for c in lists}).to_csv(csv, index=False)
        written += [md, csv, plot(part, task, out / f"{name}-{task}.png")]
    return written
