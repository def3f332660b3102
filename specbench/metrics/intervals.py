"""95% intervals for a summary's numbers, from the per-sample records every run stores.

Each interval is keyed by the summary's own flat name for its point (`speedup`, `tok_s`,
`baseline_tok_s`, `quality.nll`, `baseline_quality.nll`, `vs.<arm>.speedup`, ...), and exists
where the summary has that point. Ratios of sums (pooled speedup, tokens per second, tau, TPF,
accepted per round, acceptance rate, NFE reduction) and means of per-sample values (Spec-Bench's
and dflash's speedups, quality) get a paired bootstrap over samples (`stats.Bootstrap`): the
acceptance rate too, since a sample's drafted tokens are not independent trials. Shares of
samples (lossless, identical to a reference arm, tie flips) get Wilson's interval. A
statistic's full-sample value is the summary's point (tests/test_intervals.py checks each), so
an interval is always around the number it is printed beside.

Runs summarised before intervals existed get theirs here from their records.jsonl
(`with_intervals`), so the reports show them without running a model.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import numpy as np

from specbench.metrics.stats import Bootstrap, Statistic, wilson
from specbench.runs.record import Arm, Record
from specbench.runs.summary import BASELINE, BASELINE_COLUMNS, CEILING, Metrics

MIN_SAMPLES = 2  # one sample has no spread to resample: its bootstrap interval would be a point
BOOTSTRAP = Bootstrap()


def _arm_columns(arms: list[Arm], prefix: str, metrics: list[str]) -> dict[str, np.ndarray]:
    """One arm's per-sample columns: tokens, seconds, target calls, speed, dflash's time per
    token, and each quality metric (0 where a sample lacks it) beside whether it has it."""
    out = {
        f"{prefix}new": [a.new_tokens for a in arms],
        f"{prefix}wall": [a.wall_s for a in arms],
        f"{prefix}calls": [a.target_calls for a in arms],
        f"{prefix}tok_s": [a.tok_s for a in arms],
        f"{prefix}tpot": [a.decode_s / a.new_tokens if a.new_tokens else np.nan for a in arms],
    }
    for m in metrics:
        out[f"{prefix}q:{m}"] = [a.quality.get(m, 0.0) for a in arms]
        out[f"{prefix}has:{m}"] = [float(m in a.quality) for a in arms]
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


def _ratio(num: str, den: str) -> Statistic:
    return lambda s: s[num] / s[den]


def _method_statistics(metrics: list[str]) -> dict[tuple[str, ...], Statistic]:
    """The method arm's own statistics, by their path in the summary's columns."""
    stats: dict[tuple[str, ...], Statistic] = {
        ("tok_s",): _ratio("new", "wall"),
        ("tau",): _ratio("new", "calls"),
        ("tpf",): lambda s: s["new"] / (s["calls"] + s["drafter_calls"]),
        ("accepted_per_round",): _ratio("accepted", "rounds"),
        ("acceptance_rate",): _ratio("accepted", "drafted"),
    }
    stats.update({("quality", m): _ratio(f"q:{m}", f"has:{m}") for m in metrics})
    return stats


def _versus_statistics(p: str, metrics: list[str]) -> dict[tuple[str, ...], Statistic]:
    """The method against the arm of column prefix `p`, by `Versus` field (and quality metric)."""
    stats: dict[tuple[str, ...], Statistic] = {
        ("tok_s",): _ratio(f"{p}new", f"{p}wall"),
        ("speedup",): lambda s: (s["new"] / s["wall"]) / (s[f"{p}new"] / s[f"{p}wall"]),
        ("speedup_specbench",): _ratio("tok_s", f"{p}tok_s"),
        ("speedup_dflash",): _ratio(f"{p}tpot", "tpot"),
        ("nfe_reduction",): _ratio(f"{p}calls", "calls"),
    }
    stats.update({("quality", m): _ratio(f"{p}q:{m}", f"{p}has:{m}") for m in metrics})
    return stats


def _flat(arm: str, path: tuple[str, ...]) -> tuple[str, ...]:
    """A `Versus` field's path in the summary's columns: the baseline's flat names
    (`BASELINE_COLUMNS`), another arm's under `vs`."""
    if arm == BASELINE:
        return (BASELINE_COLUMNS[path[0]], *path[1:])
    return ("vs", arm, *path)


def at(columns: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The value at `path` in a summary's columns; None where there is none."""
    for key in path:
        if not isinstance(columns, dict) or key not in columns:
            return None
        columns = columns[key]
    return columns


def _rates(records: list[Record], metrics: Metrics) -> dict[tuple[str, ...], list[float]]:
    """Wilson intervals of the summary's shares of samples. A repeated run's trials of one
    sample are not independent trials: the count is scaled to its distinct samples."""
    n = len({r.id for r in records})
    per_sample = n / len(records)
    shares = {_flat(BASELINE, ("tie_flip_rate",)): sum(bool(r.tie_flip) for r in records)}
    for arm in metrics.vs:
        others = [r.baseline if arm == BASELINE else r.references[arm] for r in records]
        equal = sum(r.method.output_ids == o.output_ids for r, o in zip(records, others))
        shares[_flat(arm, ("identical_rate",))] = equal
    return {path: wilson(k * per_sample, n, BOOTSTRAP.level) for path, k in shares.items()}


def columns(records: list[Record], metrics: Metrics) -> dict[str, np.ndarray]:
    """The per-sample columns `statistics` read: the method arm's unprefixed, with its
    drafter calls and rounds, and each other arm of `metrics` under its name (`baseline:new`)."""
    out = _arm_columns([r.method for r in records], "", sorted(metrics.quality))
    out.update(
        {
            "drafter_calls": np.asarray([r.drafter_calls for r in records], dtype=float),
            "rounds": np.asarray([len(r.drafted_per_round) for r in records], dtype=float),
            "drafted": np.asarray([sum(r.drafted_per_round) for r in records], dtype=float),
            "accepted": np.asarray([sum(r.accepted_per_round) for r in records], dtype=float),
        }
    )
    for arm, versus in metrics.vs.items():
        arms = [r.baseline if arm == BASELINE else r.references[arm] for r in records]
        out.update(_arm_columns(arms, f"{arm}:", sorted(versus.quality)))
    return out


def by_sample(columns: dict[str, np.ndarray], ids: list[str]) -> dict[str, np.ndarray]:
    """Per-record columns summed per sample id, in the order the ids first appear: a repeated
    run's trials of one sample (`run.repeats`) are drawn together, since they share its length
    and difficulty. Every statistic is a ratio of column sums, so its point is unchanged."""
    rows = {i: n for n, i in enumerate(dict.fromkeys(ids))}
    where = np.asarray([rows[i] for i in ids])
    out = {}
    for name, column in columns.items():
        out[name] = np.zeros(len(rows))
        np.add.at(out[name], where, column)
    return out


def statistics(metrics: Metrics) -> dict[tuple[str, ...], Statistic]:
    """Every bootstrapped statistic of a summary with these arms, by its path in the
    summary's columns."""
    stats = _method_statistics(sorted(metrics.quality))
    for arm, versus in metrics.vs.items():
        for path, stat in _versus_statistics(f"{arm}:", sorted(versus.quality)).items():
            stats[_flat(arm, path)] = stat
    if CEILING in metrics.vs:
        stats[("ceiling_fraction",)] = stats[("vs", CEILING, "speedup")]
    return stats


def key(path: tuple[str, ...]) -> str:
    """An interval's name: its point's path in the summary's columns, dotted."""
    return ".".join(path)


def intervals(records: list[Record], metrics: Metrics) -> dict[str, list[float]]:
    """The interval of every point `metrics` holds (computed from these records, every trial
    of each sample) that has one; none from fewer than `MIN_SAMPLES` samples."""
    ids = [r.id for r in records]
    if len(set(ids)) < MIN_SAMPLES:
        return {}
    shown = metrics.columns()
    wanted = {p: s for p, s in statistics(metrics).items() if at(shown, p) is not None}
    found = BOOTSTRAP.intervals(by_sample(columns(records, metrics), ids), wanted)
    found.update({p: ci for p, ci in _rates(records, metrics).items() if at(shown, p) is not None})
    return {key(p): ci for p, ci in found.items() if ci is not None}


def with_intervals(metrics: Metrics, records: list[Record]) -> Metrics:
    """`metrics` (of these records) with their intervals, and each category's with its own."""
    parts = {
        c: with_intervals(part, [r for r in records if r.meta.get("category") == c])
        for c, part in metrics.by_category.items()
    }
    return replace(metrics, intervals=intervals(records, metrics), by_category=parts)


def settings() -> dict[str, Any]:
    """How the intervals were made, as a summary states it."""
    return {**asdict(BOOTSTRAP), "over": "samples, paired", "rates": "wilson"}
