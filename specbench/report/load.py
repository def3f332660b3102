"""Run directories -> one pandas row per cell: its identity (the run id, and every key of its
`config.yaml` flattened as `method.gamma`, `run.temperature`, ...), its summary metrics, and
quality beside the baseline's. No method is known by name here: a cell is its run id, its
display name is the method's own label plus target and drafter."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from specbench.metrics import intervals
from specbench.registry import BACKEND_CONFIGS, METHOD_CONFIGS, TASKS, discover_schemas
from specbench.report import ReportError, warn
from specbench.runs import machine
from specbench.runs.record import Record
from specbench.runs.store import read_records, upgraded
from specbench.runs.summary import SCHEMA, Summary, Workload, finite

# config keys that do not change what a cell is across tasks (the overall table's grouping):
# the task's, and the workload's, which the overall table checks instead (leaderboard.overall)
PER_TASK = ("task", "run.experiment", "run.max_new_tokens", "run.limit", "run.name")
WORKLOAD_KEYS = ("target.chat_template", "target.chat_template_kwargs", "target.system_prompt")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        flat.update(flatten(v, key + ".") if isinstance(v, dict) else {key: v})
    return flat


def cell_id(config: dict[str, Any]) -> str:
    """A hash of the config without its task: one id for one configuration across tasks."""
    kept = {
        k: v
        for k, v in flatten(config).items()
        if not any(k == p or k.startswith(p + ".") for p in PER_TASK + WORKLOAD_KEYS)
    }
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:8]


def read_run(run_dir: Path) -> dict:
    """One cell's row; a NaN or infinite value reads as missing, with a warning naming it."""
    try:
        raw, bad = finite(json.loads((run_dir / "summary.json").read_text()))
        if bad:
            warn(f"{run_dir / 'summary.json'}: {', '.join(bad)}: not a number, shown as missing")
        summary = current(run_dir, Summary.from_json(raw))
        config = upgraded(yaml.safe_load((run_dir / "config.yaml").read_text()))
        return _row(run_dir, summary, config)
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError, AttributeError) as err:
        why = " ".join(str(err).split()) or type(err).__name__
        raise ReportError(
            f"{run_dir}: not a readable specbench run directory (summary.json and config.yaml "
            f"as specbench-run writes them): {type(err).__name__}: {why}"
        ) from None


def current_records(run_dir: Path, summary: Summary) -> list[Record]:
    """The records a summary was made from: the first `n_samples` distinct samples of its
    records.jsonl (a run resumed with a smaller `run.limit` summarises fewer than it holds)."""
    first: dict[str, dict] = {}
    for row in read_records(run_dir / "records.jsonl"):
        first.setdefault(row["id"], row)
    return [Record.from_json(row) for row in list(first.values())[: summary.n_samples]]


def current(run_dir: Path, summary: Summary) -> Summary:
    """A summary written before intervals existed (schema 1) with them, from its records; no
    model runs."""
    if summary.schema >= SCHEMA or not (run_dir / "records.jsonl").exists():
        return summary
    records = current_records(run_dir, summary)
    return replace(intervals.with_intervals(summary, records), bootstrap=intervals.settings())


def bounds(column: str) -> tuple[str, str]:
    """The runs-table columns holding the ends of `column`'s 95% interval."""
    return f"ci_lo:{column}", f"ci_hi:{column}"


def _interval_columns(summary: Summary) -> dict[str, float]:
    """Each interval's ends under `bounds` of its point's runs-table column (the baseline's
    quality is `baseline.<metric>` there)."""
    out = {}
    for name, (lo, hi) in summary.intervals.items():
        column = name.replace("baseline_quality.", "baseline.", 1)
        out.update(zip(bounds(column), (lo, hi)))
    return out


def machine_class(run_dir: Path, summary: Summary) -> str:
    """The summary's machine class; a summary written before it had one gets the class of what
    its run's env.json recorded (or, without one, its fingerprint's device name)."""
    if summary.machine:
        return summary.machine
    env = run_dir / "env.json"
    if env.exists():
        return machine.of_env(json.loads(env.read_text())).label()
    return machine.of_fingerprint(summary.env)


def _row(run_dir: Path, summary: Summary, config: dict) -> dict:
    row = flatten(config)
    klass = machine_class(run_dir, summary)
    columns = summary.columns()
    row.update(summary.scalars())
    for name, other in columns["vs"].items():
        row.update({f"vs.{name}.{k}": v for k, v in other.items() if k != "quality"})
    row.update({f"quality.{k}": v for k, v in summary.quality.items()})
    row.update({f"baseline.{k}": v for k, v in (columns["baseline_quality"] or {}).items()})
    row.update(_interval_columns(summary))
    workload = Workload(**{k: v for k, v in summary.workload.items() if k != "languages"})
    row.update({f"workload.{k}": getattr(workload, k) for k in Workload.CELL_KEYS})
    row["workload"] = workload.label()
    row.update(
        run_dir=str(run_dir),
        experiment=config["run"]["experiment"],
        temperature=config["run"]["temperature"],
        env=software(summary.env, klass),  # the machine, not the cell
        machine=klass,
        cell_id=cell_id(config),
    )
    row["cell"] = display(row)
    return row


def software(fingerprint: str, klass: str) -> str:
    """A table's foot: the machine class, then the fingerprint's software and commit (its
    device name replaced, its config hash dropped: that is the cell's, not the machine's)."""
    return " | ".join([klass, *fingerprint.split(" | config ")[0].split(" | ")[1:]])


def display(row: dict) -> str:
    """The method's label, then target and drafter (and a sampling temperature, the engine
    when it is not the default eager one or the backend when not specbench's, with its
    requests in flight above one, and the workload's tags: chat, think, sys)."""
    models = (
        row["target"] if row["drafter"] in (None, "none") else f"{row['target']}/{row['drafter']}"
    )
    temperature = f" t{row['temperature']:g}" if row["temperature"] else ""
    engine = f" [{row['run.engine']}]" if row.get("run.engine", "eager") != "eager" else ""
    if row["backend.name"] != "specbench":  # another engine runs every arm
        concurrency = row.get("run.concurrency", 1)
        engine = f" [{backend(row)}{f' c{concurrency}' if concurrency > 1 else ''}]"
    workload = f" ({row['workload']})" if row.get("workload") else ""
    return f"{row['label']} · {models}{temperature}{engine}{workload}"


def backend(row: dict) -> str:
    """The backend's name and the knobs of it that change what a cell measures (its config's
    `SHOWN`: llama.cpp's GGUF type), e.g. `llamacpp q8_0`."""
    name = row["backend.name"]
    shown = BACKEND_CONFIGS[name].SHOWN if name in BACKEND_CONFIGS else ()
    return " ".join([name, *(str(row[f"backend.{k}"]) for k in shown if f"backend.{k}" in row)])


def disambiguate(frame: pd.DataFrame, by: str) -> pd.Series:
    """Display names, with the id appended where two distinct cells would print alike."""
    shared = frame.groupby("cell")[by].transform("nunique") > 1
    return frame["cell"].where(~shared, frame["cell"] + " #" + frame[by].str[-8:])


def by_machine(frame: pd.DataFrame) -> pd.DataFrame:
    """The cells, each display name naming its machine class where they come from several."""
    if frame["machine"].nunique() < 2:
        return frame
    return frame.assign(cell=frame["cell"] + " @ " + frame["machine"])


def load_runs(root: str | Path) -> pd.DataFrame:
    """Every run directory under `root`; a cell stored twice in one experiment on one machine
    class (the same run id, e.g. a reference copy and a rerun) keeps the copy with more
    samples, and counts its copies in `runs`."""
    discover_schemas()  # the backends' configs name their cells (`backend`)
    rows = [read_run(run_dir) for run_dir in run_dirs(Path(root))]
    if not rows:
        return pd.DataFrame(
            columns=["run_id", "experiment", "task", "method", "cell", "cell_id", "machine"]
        )
    frame = pd.DataFrame(rows).sort_values("n_samples", ascending=False)
    stored = ["experiment", "run_id", "machine"]
    frame["runs"] = frame.groupby(stored, dropna=False)["run_id"].transform("size")
    frame = frame.drop_duplicates(stored)
    return frame.sort_values(["task", "method", "cell"]).reset_index(drop=True)


def run_dirs(root: Path) -> list[Path]:
    """Every directory under `root` holding a summary.json; a directory that cannot be listed
    fails the report with its path (skipped, its cells would silently leave the tables)."""

    def refuse(err: OSError) -> None:
        raise ReportError(f"{err.filename}: cannot be read ({err.strerror}); fix or move it")

    found = []
    if not root.is_dir():
        return found
    for here, _, files in os.walk(root, onerror=refuse):
        if "summary.json" in files:
            found.append(Path(here))
    return sorted(found)


def dirty_runs(root: str | Path) -> list[tuple[Path, str]]:
    """The run directories under `root`, with their commits, whose env.json says the code that
    made them differed from that commit (`git_dirty`): no one can name the code behind them."""
    found = []
    for path in sorted(Path(root).glob("**/env.json")):
        try:
            env = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ReportError(f"{path}: not a readable env.json ({err})") from None
        if env.get("git_dirty"):
            found.append((path.parent, (env.get("git_commit") or "unknown")[:8]))
    return found


def marker(method: str) -> str:
    """The method's own plot marker, from its config class (no torch imported)."""
    discover_schemas()
    return METHOD_CONFIGS[method].marker if method in METHOD_CONFIGS else "x"


def higher_is_better(task: str) -> dict[str, bool]:
    """Each quality metric's direction, as the task declares it."""
    discover_schemas()
    spec = TASKS[task] if task in TASKS else None
    return dict(getattr(spec.build, "metrics", {})) if spec else {}
