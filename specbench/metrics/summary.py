"""Run-level metrics from per-sample records, each under its explicit name (DESIGN.md §5).

Speed is pooled (`speedup` = all tokens over all seconds, method against baseline) and, beside
it, `speedup_specbench` exactly as Spec-Bench's `evaluation/speed.py` computes it: the mean of
per-sample speeds over the baseline's mean of per-sample speeds; and `speedup_dflash` as the
dflash package's benchmark does: the baseline's mean per-sample decode-only time per token
over the method's. Per-round counters are in the
method's `round_unit`; `acceptance_rate`, `accept_by_position` and `accepted_at_position` are
probabilities of accepting a drafted token, so they are null unless the unit is tokens
(docs/measurement.md#acceptance sets them beside vLLM's and the dflash benchmark's). The summary's schema
is `specbench.runs.summary`'s.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from statistics import mean
from typing import Any

import numpy as np

from specbench.runs.record import Arm, Record
from specbench.runs.summary import BASELINE, CEILING, Metrics, Versus


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two token lists differ (length included); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def accept_by_position(records: list[Record]) -> list[float]:
    """P(draft token i accepted | drafted, and tokens before it accepted), i = 1, 2, ..."""
    reached: Counter[int] = Counter()
    kept: Counter[int] = Counter()
    for r in records:
        for drafted, accepted in zip(r.drafted_per_round, r.accepted_per_round):
            for i in range(min(drafted, accepted + 1)):
                reached[i] += 1
            for i in range(accepted):
                kept[i] += 1
    return [kept[i] / reached[i] for i in range(max(reached, default=-1) + 1)]


def accepted_at_position(records: list[Record]) -> list[float]:
    """vLLM's per-position acceptance rate: the share of drafting rounds whose draft token i
    was accepted, i = 1, 2, ... (unconditional, so 1 + their sum is vLLM's mean acceptance
    length over the rounds that drafted)."""
    rounds = [(d, a) for r in records for d, a in zip(r.drafted_per_round, r.accepted_per_round)]
    drafting = [a for d, a in rounds if d > 0]
    longest = max((d for d, _ in rounds), default=0)
    return (
        [sum(a > i for a in drafting) / len(drafting) for i in range(longest)] if drafting else []
    )


def accepted_hist(records: list[Record]) -> dict[str, int]:
    """Rounds by units accepted in them, every count from 0 to the longest draft present (the
    dflash benchmark's histogram over acceptance lengths 1..B+1, shifted down by its bonus)."""
    counts = Counter(a for r in records for a in r.accepted_per_round)
    longest = max((d for r in records for d in r.drafted_per_round), default=-1)
    return {str(k): counts[k] for k in range(max(longest, max(counts, default=-1)) + 1)}


def _quality_means(rows: list[dict[str, float]]) -> dict[str, float]:
    names = sorted({k for row in rows for k in row})
    return {k: mean(row[k] for row in rows if k in row) for k in names}


def busy_seconds(arms: list[Arm]) -> float:
    """The seconds at least one of the arm's requests was in flight: the union of their
    intervals (the sum of their walls where a record has no start time)."""
    if any(a.started_s is None for a in arms):
        return sum(a.wall_s for a in arms)
    busy, end = 0.0, -np.inf
    for start, stop in sorted((a.started_s, a.started_s + a.wall_s) for a in arms):
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return busy


def latency_percentiles(arms: list[Arm]) -> dict[str, float | None]:
    """TTFT and TPOT per request at the 50th, 90th and 99th percentiles, in ms."""
    ttft = [a.ttft_s for a in arms]
    tpot = [a.decode_s / (a.new_tokens - 1) for a in arms if a.new_tokens > 1]
    out: dict[str, float | None] = {}
    for name, values in (("ttft", ttft), ("tpot", tpot)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}_ms"] = 1000 * float(np.percentile(values, q)) if values else None
    return out


def arm_metrics(arms: list[Arm]) -> dict[str, Any]:
    """Speed and cost of one arm over the samples."""
    new = sum(a.new_tokens for a in arms)
    calls = sum(a.target_calls for a in arms)
    return {
        "tok_s": _ratio(new, sum(a.wall_s for a in arms)),
        "throughput_tok_s": _ratio(new, busy_seconds(arms)),
        "nfe": calls / len(arms),
        "tpf": _ratio(new, calls),
        "positions_per_call": _ratio(sum(a.target_positions for a in arms), calls),
        "quality": _quality_means([a.quality for a in arms]),
    }


def tpot_dflash(arm: Arm) -> float:
    """Seconds per output token as the dflash package's benchmark defines it: decoding time
    after the first token over every output token, the first included."""
    return arm.decode_s / arm.new_tokens


def versus(records: list[Record], others: list[Arm], greedy: bool) -> Versus:
    """The method arm against another arm on the same samples."""
    mine, theirs = [r.method for r in records], arm_metrics(others)
    speed = arm_metrics(mine)
    nfe = mean(a.target_calls for a in mine)
    equal = [r.method.output_ids == o.output_ids for r, o in zip(records, others)]
    return Versus(
        **theirs,
        speedup=_ratio(speed["tok_s"], theirs["tok_s"]),
        throughput_speedup=_ratio(speed["throughput_tok_s"], theirs["throughput_tok_s"]),
        speedup_specbench=_ratio(mean(a.tok_s for a in mine), mean(a.tok_s for a in others)),
        speedup_dflash=_ratio(mean(map(tpot_dflash, others)), mean(map(tpot_dflash, mine))),
        nfe_reduction=_ratio(theirs["nfe"], nfe),
        identical_rate=mean(equal) if greedy else None,
    )


def _rounds(records: list[Record], unit: str | None) -> dict[str, Any]:
    drafted = sum(sum(r.drafted_per_round) for r in records)
    accepted = sum(sum(r.accepted_per_round) for r in records)
    rounds = sum(len(r.drafted_per_round) for r in records)
    out: dict[str, Any] = {
        "round_unit": unit,
        "n_rounds": rounds,
        "drafted": drafted,
        "accepted": accepted,
        "accepted_per_round": _ratio(accepted, rounds),
        "accepted_hist": accepted_hist(records),
    }
    if unit == "tokens":
        out["acceptance_rate"] = _ratio(accepted, drafted)
        out["accept_by_position"] = accept_by_position(records)
        out["accepted_at_position"] = accepted_at_position(records)
    tree_rounds = [n for r in records for n in r.nodes_per_round]
    if tree_rounds:
        out["nodes_per_round"] = mean(tree_rounds)
    return out


def tie_flip_rate(records: list[Record]) -> float | None:
    """The share of samples that diverge at a measured tie; None when a divergence was not
    measured (a method with no top-2 logits to read, such as a diffusion LLM's decoder)."""
    if any(r.first_divergence is not None and r.tie_flip is None for r in records):
        return None
    return mean(bool(r.tie_flip) for r in records)


def summarize(
    records: list[Record], greedy: bool, round_unit: str | None = None, by_category: bool = True
) -> Metrics:
    """`greedy` says whether token equality with the baseline is the losslessness test (it is
    only at temperature 0; sampled runs are checked for distribution, in the tests). Records
    whose samples carry a category (Spec-Bench, MT-Bench) are also summarised per category."""
    n = len(records)
    if n == 0:
        return Metrics(n_samples=0)
    arms = [r.method for r in records]
    mine = arm_metrics(arms)
    new = sum(a.new_tokens for a in arms)
    target_calls = sum(a.target_calls for a in arms)
    drafter_calls = sum(r.drafter_calls for r in records)
    decode_tokens = sum(max(a.new_tokens - 1, 0) for a in arms)
    wall = sum(a.wall_s for a in arms)
    hist = Counter(k for a in arms for k in a.emitted_per_call)
    names = sorted({k for r in records for k in r.references})
    categories = sorted({c for r in records if (c := r.meta.get("category"))})
    vs = {
        k: versus(records, [r.references[k] for r in records], greedy)
        for k in names
        if all(k in r.references for r in records)
    }
    if all(r.baseline for r in records):
        base = versus(records, [r.baseline for r in records], greedy)
        vs[BASELINE] = replace(base, tie_flip_rate=tie_flip_rate(records) if greedy else None)
    return Metrics(
        n_samples=n,
        new_tokens=new,
        tok_s=mine["tok_s"],
        tau=_ratio(new, target_calls),
        emitted_hist={str(k): hist[k] for k in sorted(hist)},
        **_rounds(records, round_unit),
        nfe_target=target_calls / n,
        nfe_drafter=drafter_calls / n,
        tpf=_ratio(new, target_calls + drafter_calls),
        positions_per_call=mine["positions_per_call"],
        draft_share=_ratio(sum(r.draft_s for r in records), wall),
        verify_share=_ratio(sum(r.verify_s for r in records), wall),
        ttft_ms=1000 * mean(a.ttft_s for a in arms),
        tpot_ms=_ratio(1000 * sum(a.decode_s for a in arms), decode_tokens),
        throughput_tok_s=mine["throughput_tok_s"],
        in_flight=_ratio(wall, busy_seconds(arms)),
        **latency_percentiles(arms),
        quality=mine["quality"],
        vs=vs,
        ceiling_fraction=vs[CEILING].speedup if CEILING in vs else None,
        by_category={
            c: summarize(
                [r for r in records if r.meta.get("category") == c], greedy, round_unit, False
            )
            for c in (categories if by_category else [])
        },
    )


# the points each trial of a repeated run reports on its own (`by_trial`)
TRIAL_POINTS = ("speedup", "tok_s", "baseline_tok_s")


def by_trial(records: list[Record], greedy: bool, round_unit: str | None) -> dict[str, list]:
    """Each trial's own `TRIAL_POINTS`, trial by trial, where the records hold more than one
    trial (`run.repeats`): the machine's drift between trials shows in their spread, where the
    pooled point and its interval over samples average it away. Empty for one trial."""
    trials = sorted({r.trial for r in records})
    if len(trials) < 2:
        return {}
    parts = [
        summarize([r for r in records if r.trial == t], greedy, round_unit, False).columns()
        for t in trials
    ]
    return {point: [part[point] for part in parts] for point in TRIAL_POINTS}
