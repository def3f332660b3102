"""Run-level metrics from per-sample records, each under its explicit name (DESIGN.md §5)."""

from __future__ import annotations

from collections import Counter
from statistics import mean
from typing import Any


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two token lists differ (length included); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def accept_by_position(records: list[dict[str, Any]]) -> list[float]:
    """P(draft token i accepted | drafted, and tokens before it accepted), i = 1, 2, ..."""
    reached: Counter[int] = Counter()
    kept: Counter[int] = Counter()
    for r in records:
        for drafted, accepted in zip(r["draft_lengths"], r["accepted_per_round"]):
            for i in range(min(drafted, accepted + 1)):
                reached[i] += 1
            for i in range(accepted):
                kept[i] += 1
    return [kept[i] / reached[i] for i in range(max(reached, default=-1) + 1)]


def _quality_means(rows: list[dict[str, float]]) -> dict[str, float]:
    names = sorted({k for row in rows for k in row})
    return {k: mean(row[k] for row in rows if k in row) for k in names}


def summarize(
    records: list[dict[str, Any]], greedy: bool, by_category: bool = True
) -> dict[str, Any]:
    """`greedy` says whether token equality with the baseline is the losslessness test (it is
    only at temperature 0; sampled runs are checked for distribution, in the tests). Records
    whose samples carry a category (Spec-Bench, MT-Bench) are also summarised per category."""
    n = len(records)
    if n == 0:
        return {"n_samples": 0}
    new = sum(r["new_tokens"] for r in records)
    wall = sum(r["wall_s"] for r in records)
    target_calls = sum(r["target_calls"] for r in records)
    drafter_calls = sum(r["drafter_calls"] for r in records)
    decode_tokens = sum(max(r["new_tokens"] - 1, 0) for r in records)
    hist = Counter(length for r in records for length in r["accept_lengths"])
    summary: dict[str, Any] = {
        "n_samples": n,
        "new_tokens": new,
        "tok_s": _ratio(new, wall),
        "tau": _ratio(new, target_calls),
        "acceptance_rate": _ratio(
            sum(r["accepted_tokens"] for r in records), sum(r["draft_tokens"] for r in records)
        ),
        "accept_hist": {str(k): hist[k] for k in sorted(hist)},
        "n_rounds": sum(len(r["draft_lengths"]) for r in records),
        "draft_tokens": sum(r["draft_tokens"] for r in records),
        "accept_by_position": accept_by_position(records),
        "nfe_target": target_calls / n,
        "nfe_drafter": drafter_calls / n,
        "tpf": _ratio(new, target_calls + drafter_calls),
        # positions a target forward reads: the cost a batched verification hides in one call
        "tokens_per_call": _ratio(sum(r["target_positions"] for r in records), target_calls)
        if all("target_positions" in r for r in records)
        else None,
        # shares of wall time spent drafting and in separately timed verification forwards
        "draft_share": _ratio(sum(r.get("draft_s", 0.0) for r in records), wall),
        "verify_share": _ratio(sum(r.get("verify_s", 0.0) for r in records), wall),
        "ttft_ms": 1000 * mean(r["ttft_s"] for r in records),
        "tpot_ms": _ratio(1000 * sum(r["decode_s"] for r in records), decode_tokens),
        "quality": _quality_means([r["quality"] for r in records]),
    }
    baselines = [r["baseline"] for r in records if r.get("baseline")]
    if len(baselines) == n:
        base_tok_s = _ratio(
            sum(b["new_tokens"] for b in baselines), sum(b["wall_s"] for b in baselines)
        )
        summary["baseline_tok_s"] = base_tok_s
        summary["speedup"] = _ratio(summary["tok_s"], base_tok_s)
        summary["speedup_mean_ratio"] = mean(
            (r["new_tokens"] / r["wall_s"]) / (b["new_tokens"] / b["wall_s"])
            for r, b in zip(records, baselines)
        )
        summary["baseline_quality"] = _quality_means([b["quality"] for b in baselines])
        base_calls = sum(b["target_calls"] for b in baselines)
        summary["baseline_nfe"] = base_calls / n
        summary["baseline_tpf"] = _ratio(sum(b["new_tokens"] for b in baselines), base_calls)
        summary["baseline_tokens_per_call"] = (
            _ratio(sum(b["target_positions"] for b in baselines), base_calls)
            if all("target_positions" in b for b in baselines)
            else None
        )
        summary["lossless_rate"] = (
            mean(r["first_divergence"] is None for r in records) if greedy else None
        )
    categories = sorted({c for r in records if (c := (r.get("meta") or {}).get("category"))})
    if by_category and categories:
        summary["by_category"] = {
            c: summarize([r for r in records if r["meta"].get("category") == c], greedy, False)
            for c in categories
        }
    return summary
