"""Backends side by side: every cell run both on specbench's engine and on another (vLLM),
paired by the rest of its config, compared sample by sample on the same prompts: how often
the method's tokens and the baseline's are the same on both, where the first difference is,
and tokens accepted per round and speedup on each backend.

Where two outputs part, the target's two best logits there were either a tie (within
`TIE_ULPS` units in the last place, as specbench's engine measured them on the common prefix:
two engines' kernels round differently and either may pick either token) or not; a difference
that is not a tie is not rounding, and is the method's or an engine's
(docs/measurement.md#backends-vllm).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from specbench.metrics.summary import first_divergence
from specbench.report import ReportError
from specbench.report.load import backend, flatten
from specbench.runs.record import TIE_ULPS, Arm
from specbench.runs.store import load_records, upgraded

OWN = "specbench"  # the engine the other backends are set beside


def pair_key(config: dict) -> str:
    """The cell without its backend (the `backend` group): a pair differs in that only."""
    return json.dumps(
        {k: v for k, v in flatten(config).items() if not k.startswith("backend.")},
        sort_keys=True,
        default=str,
    )


def pairs(runs: pd.DataFrame, configs: dict[str, dict]) -> list[tuple[pd.Series, pd.Series]]:
    """(specbench's run, another backend's run) for every config run on both."""
    # a pair ran on one machine class: across two, the speeds compare the machines
    runs = runs.assign(
        pair=[pair_key(configs[r]) + m for r, m in zip(runs["run_dir"], runs["machine"])]
    )
    runs = runs.assign(backend=[backend(row) for _, row in runs.iterrows()])
    found = []
    for _, group in runs.groupby("pair", sort=False):
        own = group[group["backend"] == OWN]
        for _, other in group[group["backend"] != OWN].iterrows():
            if len(own):
                found.append((own.iloc[0], other))
    return found


def compare(own: pd.Series, other: pd.Series) -> dict:
    """The pair's row: samples both recorded, token agreement (with the target's top-2 gap,
    in ulps, where each difference starts), acceptance and speed."""
    mine = {
        r.id: r
        for r in load_records(Path(own["run_dir"]) / "records.jsonl", own["run_id"], repair=False)
    }
    theirs = load_records(Path(other["run_dir"]) / "records.jsonl", other["run_id"], repair=False)
    both = [(mine[r.id], r) for r in theirs if r.id in mine]
    method = divergences([(a.method, b.method) for a, b in both])
    bases = [(a.baseline, b.baseline) for a, b in both if a.baseline and b.baseline]
    baseline = divergences(bases)
    mine_apr, theirs_apr = own.get("accepted_per_round"), other.get("accepted_per_round")
    return {
        "cell": own["cell"],
        "backend": other["backend"],
        "n": len(both),
        "identical_rate": 1 - len(method) / len(both) if both else None,
        "first_divergences": [index for index, _ in method],
        "divergence_ulps": [gap for _, gap in method],
        "ties": ties(method),
        "baseline_identical_rate": 1 - len(baseline) / len(bases) if bases else None,
        "baseline_divergence_ulps": [gap for _, gap in baseline],
        "baseline_ties": ties(baseline),
        "accepted_per_round": mine_apr,
        "accepted_per_round_other": theirs_apr,
        "accepted_gap": theirs_apr / mine_apr - 1 if mine_apr and theirs_apr else None,
        "speedup": own.get("speedup"),
        "speedup_other": other.get("speedup"),
    }


def divergences(arms: list[tuple[Arm, Arm]]) -> list[tuple[int, float | None]]:
    """Where each pair of outputs that differ first parts, and the target's top-2 gap there
    in ulps as the other backend's cell measured it (None where it measured none)."""
    found = []
    for mine, theirs in arms:
        index = first_divergence(mine.output_ids, theirs.output_ids)
        if index is not None:
            gaps = theirs.top2_ulps or []
            found.append((index, gaps[index] if index < len(gaps) else None))
    return found


def ties(found: list[tuple[int, float | None]]) -> int | None:
    """How many divergences start at a tie (None: no gap was measured)."""
    gaps = [gap for _, gap in found if gap is not None]
    if len(gaps) < len(found):
        return None
    return sum(gap <= TIE_ULPS for gap in gaps)


def table(runs: pd.DataFrame) -> pd.DataFrame:
    configs = {d: _config(Path(d)) for d in runs["run_dir"]}
    found = pairs(runs, configs)
    if not found:
        raise ReportError(
            "no cell was run on two backends (the same config with backend=specbench and "
            "backend=vllm)"
        )
    return pd.DataFrame([compare(own, other) for own, other in found])


def _config(run_dir: Path) -> dict:
    return upgraded(yaml.safe_load((run_dir / "config.yaml").read_text()))


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or pd.isna(value) else format(value, spec)


def markdown(frame: pd.DataFrame) -> str:
    header = (
        "| cell | backend | n | identical | at a tie | baseline identical | at a tie "
        "| accepted/round (specbench) | accepted/round (backend) | gap | speedup (specbench) "
        "| speedup (backend) |"
    )
    lines = [header, "|" + "---|" * 12]
    for _, r in frame.iterrows():
        lines.append(
            f"| {r['cell']} | {r['backend']} | {r['n']} | {_fmt(r['identical_rate'], '.2f')} "
            f"| {_at_tie(r['ties'], r['first_divergences'])} "
            f"| {_fmt(r['baseline_identical_rate'], '.2f')} "
            f"| {_at_tie(r['baseline_ties'], r['baseline_divergence_ulps'])} "
            f"| {_fmt(r['accepted_per_round'], '.3f')} "
            f"| {_fmt(r['accepted_per_round_other'], '.3f')} | {_fmt(r['accepted_gap'], '+.1%')} "
            f"| {_fmt(r['speedup'], '.2f')} | {_fmt(r['speedup_other'], '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def _at_tie(count: int | None, found: list) -> str:
    """'k/m' of the m divergences that start at a tie; '-' where none or unmeasured."""
    return "-" if not found or count is None or pd.isna(count) else f"{int(count)}/{len(found)}"


def write(runs: pd.DataFrame, out: Path, name: str = "agreement") -> list[Path]:
    frame = table(runs)
    out.mkdir(parents=True, exist_ok=True)
    md, csv = out / f"{name}.md", out / f"{name}.csv"
    md.write_text(markdown(frame))
    frame.to_csv(csv, index=False)
    return [md, csv]
