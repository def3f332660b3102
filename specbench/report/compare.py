"""`specbench-report compare A B`: two cells on the same samples, compared sample by sample.

Each cell's speedup is against its own baseline arm, timed beside it, so machine drift between
the two runs stays out of the difference. The difference of each statistic (speedup, tau, each
quality metric both report) gets a paired bootstrap interval (the same sample ids drawn for
both cells) and a paired permutation p-value (A and B swapped within each sample). Cells whose
samples differ are refused: an unpaired difference would carry the samples' own spread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specbench.metrics import intervals
from specbench.metrics.stats import Difference, paired_difference, per_sample_sd, samples_needed
from specbench.report import ReportError
from specbench.report.load import current_records
from specbench.report.power import DELTA
from specbench.runs.record import Record
from specbench.runs.summary import Summary

# the statistics compared, by their path in a summary's columns, and how each is printed
COMPARED = {("speedup",): ".2f", ("tau",): ".2f"}


@dataclass
class Cell:
    """One side of a comparison: its summary and its records by sample id."""

    name: str
    summary: Summary
    records: dict[str, Record]

    @classmethod
    def read(cls, run_dir: Path) -> Cell:
        summary = Summary.from_json(json.loads((run_dir / "summary.json").read_text()))
        records = {r.id: r for r in current_records(run_dir, summary)}
        return cls(f"{summary.label} · {summary.target}/{summary.drafter}", summary, records)


def locate(name: str, results: Path) -> Path:
    """A run directory: `name` itself, or the one run id `name` names under `results`."""
    if (Path(name) / "summary.json").exists():
        return Path(name)
    found = sorted(p.parent for p in results.glob(f"**/{name}/summary.json"))
    if not found:
        raise ReportError(f"compare: {name}: no run directory of that name under {results}")
    if len(found) > 1:
        listed = ", ".join(str(p) for p in found)
        raise ReportError(f"compare: {name}: several run directories, name one of {listed}")
    return found[0]


def _paired(a: Cell, b: Cell) -> list[str]:
    """The sample ids both cells decoded, in order; a one-line refusal where they differ."""
    if a.summary.task != b.summary.task or a.records.keys() != b.records.keys():
        shared = len(a.records.keys() & b.records.keys())
        raise ReportError(
            f"compare: the cells decoded different samples ({a.summary.task}: "
            f"{len(a.records)}, {b.summary.task}: {len(b.records)}, {shared} shared); "
            "compare cells run on the same samples"
        )
    if a.summary.base is None or b.summary.base is None:
        raise ReportError("compare: a cell without a baseline arm has no speedup to compare")
    return sorted(a.records)


def differences(a: Cell, b: Cell) -> dict[tuple[str, ...], Difference]:
    """A minus B of every compared statistic both cells have, on their shared samples."""
    ids = _paired(a, b)
    ca, cb = (intervals.columns([c.records[i] for i in ids], c.summary) for c in (a, b))
    ca, cb = ({k: c[k] for k in ca.keys() & cb.keys()} for c in (ca, cb))
    shared = a.summary.quality.keys() & b.summary.quality.keys()
    paths = [*COMPARED, *(("quality", m) for m in sorted(shared))]
    both = [
        p for p in paths if all(intervals.at(c.summary.columns(), p) is not None for c in (a, b))
    ]
    stats = intervals.statistics(a.summary)
    return {path: paired_difference(ca, cb, stats[path]) for path in both}


def verdict(a: Cell, b: Cell, speed: Difference) -> str:
    """One line: which cell is faster, with the difference's interval, or that these samples
    do not tell them apart."""
    shown = f"{speed.value:+.2f}x {_bracket(speed.interval, '.2f')} (p = {speed.p_value:.3g})"
    if not speed.resolved:
        return f"not distinguishable on these {speed.n} samples: A - B {shown}"
    faster, slower = ("A", "B") if speed.value > 0 else ("B", "A")
    return f"{faster} faster than {slower} on these {speed.n} samples: A - B {shown}"


def _bracket(interval: list[float] | None, spec: str) -> str:
    return "[-]" if interval is None else f"[{interval[0]:{spec}}, {interval[1]:{spec}}]"


def report(a: Cell, b: Cell) -> str:
    """Both cells, each compared statistic's values, difference, interval and p-value, and
    the verdict on speed."""
    found = differences(a, b)
    lines = [
        f"A: {a.name} ({a.summary.run_id})",
        f"B: {b.name} ({b.summary.run_id})",
        "",
        "| statistic | A | B | A - B | 95% interval | p (paired permutation) |",
        "|---|---|---|---|---|---|",
    ]
    for path, diff in found.items():
        spec = COMPARED.get(path, ".4g")
        va, vb = (intervals.at(c.summary.columns(), path) for c in (a, b))
        lines.append(
            f"| {intervals.key(path)} | {va:{spec}} | {vb:{spec}} | {diff.value:+{spec}} | "
            f"{_bracket(diff.interval, spec)} | {diff.p_value:.3g} |"
        )
    speed = found[("speedup",)]
    lines += ["", verdict(a, b, speed)]
    if speed.interval is not None:
        sd = per_sample_sd(speed.interval, speed.n)
        lines.append(
            f"samples this pair needs to resolve a {DELTA:g}x speedup difference: "
            f"{samples_needed(sd, DELTA, paired=True)}"
        )
    return "\n".join(lines)
