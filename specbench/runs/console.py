"""A cell's summary on the terminal: one table row for the run and one per category, quality
beside the baseline's, what losslessness is with respect to, and the other arms."""

from __future__ import annotations

import shutil
import statistics
from typing import Any

from rich.console import Console
from rich.table import Table

from specbench.runs.acceptance import Acceptance
from specbench.runs.load import busiest
from specbench.runs.summary import BASELINE, GAP, TOGETHER, Metrics, Summary

COLUMNS = {  # header: (metric, format)
    "n": ("n_samples", "d"),
    "speedup": ("speedup", ".2f"),
    "tok/s": ("tok_s", ".1f"),
    "base tok/s": ("baseline_tok_s", ".1f"),
    "tau": ("tau", ".2f"),
    "accept": ("acceptance_rate", ".2f"),
    "tpf": ("tpf", ".2f"),
    "pos/call": ("positions_per_call", ".1f"),
    "ttft ms": ("ttft_ms", ".1f"),
    "lossless": ("lossless_rate", ".2f"),
}


def _fmt(value: Any, spec: str, interval: list[float] | None = None) -> str:
    """The value, and its 95% interval in brackets where it has one: `1.40 [1.31, 1.49]`."""
    if value is None:
        return "-"
    bounds = "" if interval is None else f" [{interval[0]:{spec}}, {interval[1]:{spec}}]"
    return format(value, spec) + bounds


def _row(name: str, metrics: Metrics) -> list[str]:
    columns = metrics.columns()
    return [
        name,
        *(_fmt(columns[key], spec, metrics.intervals.get(key)) for key, spec in COLUMNS.values()),
    ]


def _acceptance_line(summary: Summary) -> str:
    """The histogram of units accepted per round (% of rounds, bins past the last reached
    cut) and, for drafted tokens, the conditional per-position rates."""
    view = Acceptance.of(summary)
    hist = " ".join(f"{k}:{100 * share:.0f}%" for k, share in view.reached.items())
    line = f"accepted per round: {hist}"
    if view.by_position:
        line += " | P(i accepted | reached): " + " ".join(f"{p:.2f}" for p in view.by_position[:8])
    return line


def _serving_line(summary: Summary) -> str:
    """Requests in flight together: throughput beside the baseline's, and latency percentiles."""
    base = summary.base
    versus = (
        ""
        if base is None
        else f" (baseline {base.throughput_tok_s:.1f}, {base.throughput_speedup:.2f}x)"
    )
    ttft = "/".join(_fmt(getattr(summary, f"ttft_p{q}_ms"), ".0f") for q in (50, 90, 99))
    tpot = "/".join(_fmt(getattr(summary, f"tpot_p{q}_ms"), ".1f") for q in (50, 90, 99))
    return (
        f"serving: {summary.throughput_tok_s:.1f} tok/s in all{versus}, "
        f"{summary.in_flight:.1f} requests in flight on average; ms p50/p90/p99: "
        f"TTFT {ttft}, TPOT {tpot}"
    )


def _drawn(summary: Summary) -> str:
    """What the bootstrap drew: samples, and with them each sample's trials."""
    if summary.trials == 1:
        return f"{summary.n_samples} samples"
    samples = summary.n_samples // summary.trials
    return f"{samples} samples, each with its {summary.trials} trials"


def _trials_line(summary: Summary) -> str:
    """Each trial's speedup and tok/s, and their range and SD beside the pooled interval: drift
    between trials that the interval over samples does not hold."""
    speedups = [v for v in summary.by_trial["speedup"] if v is not None]
    tok_s = " ".join(f"{v:.1f}" for v in summary.by_trial["tok_s"])
    if not speedups:
        return f"trials: tok/s {tok_s}"
    pooled = _fmt(summary.base.speedup, ".2f", summary.intervals.get("speedup"))
    return (
        f"trials: speedup {' '.join(f'{v:.2f}' for v in speedups)} (range "
        f"{min(speedups):.2f}-{max(speedups):.2f}, SD {statistics.stdev(speedups):.2f}; pooled "
        f"{pooled}), tok/s {tok_s}"
    )


def print_summary(summary: Summary, run_dir: Any) -> None:
    table = Table(title=f"{summary.run_id}  ({summary.label})")
    for col in ("", *COLUMNS):
        table.add_column(col, justify="right")
    table.add_row(*_row("all", summary))
    for category, part in summary.by_category.items():
        table.add_row(*_row(category, part))
    console = Console(width=max(120, shutil.get_terminal_size().columns))
    console.print(table)
    base = summary.base
    baseline = base.quality if base else {}
    ci = summary.intervals
    for metric, value in summary.quality.items():
        beside = (
            f"  (baseline {_fmt(baseline[metric], '.4g', ci.get(f'baseline_quality.{metric}'))})"
            if metric in baseline
            else ""
        )
        console.print(
            f"{summary.task} {metric}: {_fmt(value, '.4g', ci.get(f'quality.{metric}'))}{beside}"
        )
    if summary.baseline:
        claim = "lossless" if summary.lossless else "lossy"
        console.print(f"baseline: {summary.baseline} ({claim} with respect to it)")
    if base and base.tie_flip_rate:
        console.print(
            f"tie flips: {base.tie_flip_rate:.0%} of samples diverge where the baseline's "
            "top-2 logits are within rounding"
        )
    if summary.round_unit and summary.accepted_per_round is not None:
        nodes = summary.nodes_per_round
        console.print(
            f"rounds: {summary.n_rounds}, {summary.accepted_per_round:.2f} "
            f"{summary.round_unit} accepted per round"
            + ("" if nodes is None else f" from trees of {nodes:.1f} nodes")
        )
        console.print(_acceptance_line(summary))
    if summary.ceiling_fraction is not None:
        console.print(
            f"ceiling: {summary.ceiling_fraction:.0%} of the throughput of this decoder with a "
            "perfect drafter (vs oracle)"
        )
    for name, other in summary.vs.items():
        if name == BASELINE:  # the table's row
            continue
        console.print(
            f"vs {name.replace('_', ' ')}: speedup "
            f"{_fmt(other.speedup, '.2f', ci.get(f'vs.{name}.speedup'))}, NFE reduction "
            f"{_fmt(other.nfe_reduction, '.2f', ci.get(f'vs.{name}.nfe_reduction'))}, "
            f"its TPF {_fmt(other.tpf, '.2f')}"
        )
    if summary.in_flight is not None and summary.in_flight > TOGETHER:
        console.print(_serving_line(summary))
    if summary.predicted_speedup is not None:
        flag = (
            f"  [bold red]gap above {GAP:.0%}, prediction outside the interval[/bold red]"
            if summary.prediction_flag
            else ""
        )
        measured = _fmt(base.speedup, ".2f", ci.get("speedup"))
        console.print(
            f"predicted speedup {summary.predicted_speedup:.2f} from acceptance and forward "
            f"costs (measured {measured}, gap {summary.prediction_gap:+.0%}){flag}"
        )
    if summary.prediction_refused:
        console.print(f"[yellow]no predicted speedup[/yellow]: {summary.prediction_refused}")
    if summary.by_trial:
        console.print(_trials_line(summary))
    if summary.intervals:
        settings = summary.bootstrap
        console.print(
            f"[dim]intervals: {settings['level']:.0%}, paired bootstrap over the "
            f"{_drawn(summary)} ({settings['resamples']} resamples, seed "
            f"{settings['seed']}); shares of samples: Wilson[/dim]"
        )
    if summary.contended:
        worst = busiest(summary.load)
        console.print(
            f"[bold red]contended[/bold red]: other processes used {worst['others']:.0%} of "
            f"the CPU beside the timed arms (load average {worst['load_1m']:.1f})"
        )
    console.print(f"[dim]{summary.env}[/dim]")
    console.print(f"records: {run_dir}")
