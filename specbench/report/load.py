"""Run directories -> one pandas row per cell: its identity (from config.yaml), its summary
metrics, and quality beside the baseline's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from specbench.registry import TASKS, discover

KNOBS = (
    "gamma",
    "steps",
    "rule",
    "leniency",
    "q_source",
    "schedule",
    "cps",
    "adl",
    "k",
    "policy",
    "depth",
    "block_length",
    "threshold",
    "nodes",
    "keep",
)


def read_run(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    row = {
        "run_id": summary["run_id"],
        "run_dir": str(run_dir),
        "experiment": config["run"]["experiment"],
        "task": summary["task"],
        "method": summary["method"],
        "target": summary["target"],
        "drafter": summary["drafter"],
        "temperature": config["run"]["temperature"],
        "lossless": summary["lossless"],
        "env": summary["env"].split(" | config ")[0],  # the machine, not the cell
    }
    row.update({k: config["method"].get(k) for k in KNOBS})
    for key in (
        "n_samples",
        "speedup",
        "tau",
        "acceptance_rate",
        "tpf",
        "tokens_per_call",
        "predicted_speedup",
        "prediction_gap",
        "tok_s",
        "lossless_rate",
    ):
        row[key] = summary.get(key)
    row.update({f"quality.{k}": v for k, v in summary.get("quality", {}).items()})
    row.update({f"baseline.{k}": v for k, v in summary.get("baseline_quality", {}).items()})
    row["cell"] = cell_label(row)
    return row


def cell_label(row: dict) -> str:
    """A short human name: method, drafter, and the knobs that are set."""
    parts = [row["method"]]
    if row["drafter"] and row["drafter"] != "none":
        parts.append(row["drafter"])
    names = {"gamma": "γ", "steps": "T"}
    for knob in ("gamma", "steps"):
        if row.get(knob) is not None:
            parts.append(f"{names[knob]}{row[knob]}")
    if row.get("rule") not in (None, "auto", "greedy", "rejection"):
        parts.append(f"{row['rule']}{row['leniency']:g}")
    if row.get("policy") is not None:  # diffusion-LLM decoders
        parts.append(f"{row['policy']} b{row['block_length']}")
        if row.get("depth") is not None:
            parts.append(f"d{row['depth']}")
        if row.get("nodes") is not None:
            parts.append(f"D{row['nodes']}" + (f"/{row['keep']}" if row.get("keep") else ""))
    if row.get("cps") is not None:  # DiffuSpec
        parts.append("+".join(n for n in ("cps", "adl") if row[n]) or "one-pass")
        if not row["adl"]:
            parts.append(f"k{row['k']}")
    return " ".join(parts)


def load_runs(root: str | Path) -> pd.DataFrame:
    """Every run directory under `root`; a cell stored twice in one experiment (the same run
    id, e.g. a reference copy and a rerun) keeps the copy with more samples."""
    rows = [read_run(p.parent) for p in sorted(Path(root).glob("**/summary.json"))]
    if not rows:
        return pd.DataFrame(columns=["run_id", "experiment", "task", "method", "cell"])
    frame = pd.DataFrame(rows).sort_values("n_samples", ascending=False)
    return (
        frame.drop_duplicates(["experiment", "run_id"])
        .sort_values(["task", "method", "cell"])
        .reset_index(drop=True)
    )


def higher_is_better(task: str) -> dict[str, bool]:
    """Each quality metric's direction, as the task declares it."""
    discover()
    spec = TASKS.get(task)
    return dict(getattr(spec.build, "metrics", {})) if spec else {}
