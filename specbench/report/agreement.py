"""Backends side by side: every cell run both on specbench's engine and on another (vLLM),
paired by the rest of its config, compared sample by sample on the same prompts: how often
the method's tokens and the baseline's are the same on both, where the first difference is,
and tokens accepted per round and speedup on each backend.

A pair whose baselines already differ shows the target itself decoding differently in the two
engines (a numerical tie, docs/measurement.md#backends-vllm); a method that differs where the
baselines agree is the method.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from specbench.metrics.summary import first_divergence
from specbench.report import ReportError
from specbench.report.load import flatten
from specbench.results.store import load_records

# what a backend is, not what the cell is: a pair differs in these keys only
BACKEND_KEYS = ("run.backend", "run.vllm_python", "run.vllm_startup_s")
OWN = "specbench"  # the engine the other backends are set beside


def pair_key(config: dict) -> str:
    return json.dumps(
        {k: v for k, v in flatten(config).items() if k not in BACKEND_KEYS},
        sort_keys=True,
        default=str,
    )


def pairs(runs: pd.DataFrame, configs: dict[str, dict]) -> list[tuple[pd.Series, pd.Series]]:
    """(specbench's run, another backend's run) for every config run on both."""
    runs = runs.assign(pair=[pair_key(configs[r]) for r in runs["run_dir"]])
    backend = runs["run.backend"].fillna(OWN) if "run.backend" in runs else OWN
    runs = runs.assign(backend=backend)
    found = []
    for _, group in runs.groupby("pair", sort=False):
        own = group[group["backend"] == OWN]
        for _, other in group[group["backend"] != OWN].iterrows():
            if len(own):
                found.append((own.iloc[0], other))
    return found


def compare(own: pd.Series, other: pd.Series) -> dict:
    """The pair's row: samples both recorded, token agreement, acceptance and speed."""
    mine = {r.id: r for r in load_records(Path(own["run_dir"]) / "records.jsonl", own["run_id"])}
    theirs = load_records(Path(other["run_dir"]) / "records.jsonl", other["run_id"])
    both = [(mine[r.id], r) for r in theirs if r.id in mine]
    differ = [
        first_divergence(a.method.output_ids, b.method.output_ids)
        for a, b in both
        if a.method.output_ids != b.method.output_ids
    ]
    bases = [(a.baseline, b.baseline) for a, b in both if a.baseline and b.baseline]
    mine_apr, theirs_apr = own.get("accepted_per_round"), other.get("accepted_per_round")
    return {
        "cell": own["cell"],
        "backend": other["backend"],
        "n": len(both),
        "identical_rate": (len(both) - len(differ)) / len(both) if both else None,
        "first_divergences": differ,
        "baseline_identical_rate": (
            sum(a.output_ids == b.output_ids for a, b in bases) / len(bases) if bases else None
        ),
        "accepted_per_round": mine_apr,
        "accepted_per_round_other": theirs_apr,
        "accepted_gap": theirs_apr / mine_apr - 1 if mine_apr and theirs_apr else None,
        "speedup": own.get("speedup"),
        "speedup_other": other.get("speedup"),
    }


def table(runs: pd.DataFrame) -> pd.DataFrame:
    configs = {d: _config(Path(d)) for d in runs["run_dir"]}
    found = pairs(runs, configs)
    if not found:
        raise ReportError(
            "no cell was run on two backends (the same config with run.backend=specbench and "
            "run.backend=vllm)"
        )
    return pd.DataFrame([compare(own, other) for own, other in found])


def _config(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / "config.yaml").read_text())


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or pd.isna(value) else format(value, spec)


def markdown(frame: pd.DataFrame) -> str:
    header = (
        "| cell | backend | n | identical | baseline identical | accepted/round (specbench) "
        "| accepted/round (backend) | gap | speedup (specbench) | speedup (backend) |"
    )
    lines = [header, "|" + "---|" * 10]
    for _, r in frame.iterrows():
        lines.append(
            f"| {r['cell']} | {r['backend']} | {r['n']} | {_fmt(r['identical_rate'], '.2f')} "
            f"| {_fmt(r['baseline_identical_rate'], '.2f')} "
            f"| {_fmt(r['accepted_per_round'], '.3f')} "
            f"| {_fmt(r['accepted_per_round_other'], '.3f')} | {_fmt(r['accepted_gap'], '+.1%')} "
            f"| {_fmt(r['speedup'], '.2f')} | {_fmt(r['speedup_other'], '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def write(runs: pd.DataFrame, out: Path, name: str = "agreement") -> list[Path]:
    frame = table(runs)
    out.mkdir(parents=True, exist_ok=True)
    md, csv = out / f"{name}.md", out / f"{name}.csv"
    md.write_text(markdown(frame))
    frame.to_csv(csv, index=False)
    return [md, csv]
