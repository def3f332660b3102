"""Intervals from paired samples: they cover a known ratio 95% of the time, are the same under
one seed, are narrowed by pairing, stay inside [0, 1] for rates, sit around the summary's own
points, and reach runs summarised before they existed."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from specbench import paths
from specbench.decoding.cost import verdict
from specbench.metrics import intervals, stats
from specbench.metrics.intervals import with_intervals
from specbench.metrics.stats import Bootstrap, wilson
from specbench.metrics.summary import summarize
from specbench.runs.record import Arm, Record
from specbench.runs.summary import SCHEMA, Summary


def speedup(s: dict[str, np.ndarray]) -> np.ndarray:
    """The pooled speedup of sums: the method's tokens per second over the baseline's."""
    return (s["new"] / s["wall"]) / (s["base_new"] / s["base_wall"])


def paired_samples(rng: np.random.Generator, shape: tuple, ratio: float, arm_sd: float) -> dict:
    """Samples of 32-128 tokens whose seconds share a per-sample factor (its difficulty and the
    machine's state, both arms alike) and carry each arm's own mean-one noise: the population's
    pooled speedup is `ratio` exactly."""
    new = rng.integers(32, 129, shape).astype(float)
    shared = np.exp(rng.normal(0, 0.3, shape))

    def noise() -> np.ndarray:
        return np.exp(rng.normal(0, arm_sd, shape) - arm_sd**2 / 2)

    base_wall = 0.02 * new * shared * noise()
    return {
        "new": new,
        "wall": base_wall / ratio * noise(),
        "base_new": new,
        "base_wall": base_wall,
    }


def test_the_interval_covers_a_known_speedup_95_times_in_100() -> None:
    """1000 seeded data sets of 100 paired samples, all resampled at once with the summary's
    own bootstrap."""
    data = paired_samples(np.random.default_rng(0), (100, 1000), 1.5, 0.1)
    boot = Bootstrap()
    lo, hi = boot.bounds(boot.draws(data, {"speedup": speedup})["speedup"])
    assert 0.93 <= np.mean((lo <= 1.5) & (1.5 <= hi)) <= 0.97


def test_one_seed_gives_one_interval() -> None:
    data = paired_samples(np.random.default_rng(1), (40,), 1.5, 0.1)
    first = Bootstrap().intervals(data, {"s": speedup})
    assert Bootstrap().intervals(data, {"s": speedup}) == first
    assert Bootstrap(seed=1).intervals(data, {"s": speedup}) != first
    assert Bootstrap().resamples >= 2000


def test_pairing_narrows_the_interval_of_strongly_correlated_arms() -> None:
    """Both arms of a sample move together (sample lengths and difficulty spread far wider
    than each arm's own noise): resampling samples keeps that out of the ratio, resampling
    the arms apart puts it in."""
    data = paired_samples(np.random.default_rng(2), (50,), 1.5, 0.02)
    boot = Bootstrap()
    paired = boot.intervals(data, {"s": speedup})["s"]
    tok_s = {"m": lambda s: s["new"] / s["wall"], "b": lambda s: s["base_new"] / s["base_wall"]}
    method = boot.draws(data, tok_s)["m"]
    base = Bootstrap(seed=1).draws(data, tok_s)["b"]  # the baseline's samples drawn apart
    unpaired = boot.interval(method / base)
    assert paired[0] < 1.5 < paired[1]
    assert (paired[1] - paired[0]) * 5 < unpaired[1] - unpaired[0]


def test_wilson_is_inside_zero_one_and_not_a_point_at_the_ends() -> None:
    lo, hi = wilson(0, 20)
    assert lo == pytest.approx(0, abs=1e-12) and 0.1 < hi < 0.2  # 0 of 20: up to 16%, not 0
    lo, hi = wilson(20, 20)
    assert 0.8 < lo < 0.9 and hi == pytest.approx(1)
    lo, hi = wilson(10, 20)
    assert lo == pytest.approx(1 - hi) and lo == pytest.approx(0.2993, abs=1e-4)


def arm(rng: random.Random, tokens: int, seconds: float, calls: int, nll: float) -> Arm:
    return Arm(
        output_ids=list(range(tokens)),
        wall_s=seconds,
        ttft_s=seconds / 10,
        target_calls=calls,
        target_positions=calls,
        emitted_per_call=[1] * calls,
        text="",
        quality={"nll": nll + rng.random() / 10},
    )


def records(n: int, seed: int = 0) -> list[Record]:
    """n samples decoded by a method, its baseline and a reference arm, some diverging."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tokens = rng.randint(20, 60)
        base = arm(rng, tokens, tokens * rng.uniform(0.02, 0.03), tokens, 0.6)
        method = arm(rng, tokens, base.wall_s / rng.uniform(1.2, 1.8), tokens // 2, 0.6)
        if i % 4 == 0:
            method.output_ids = [*method.output_ids[:-1], -1]
        rounds = rng.randint(3, 8)
        out.append(
            Record(
                id=f"s{i}",
                meta={"category": "a" if i % 2 else "b"},
                prompt_tokens=5,
                method=method,
                drafter_calls=4 * rounds,
                drafted_per_round=[4] * rounds,
                accepted_per_round=[rng.randint(0, 4) for _ in range(rounds)],
                baseline=base,
                references={"one_token_per_step": arm(rng, tokens, 2 * base.wall_s, tokens, 0.7)},
                first_divergence=tokens - 1 if i % 4 == 0 else None,
                tie_flip=(i % 8 == 0) if i % 4 == 0 else None,
            )
        )
    return out


def point(columns: dict[str, np.ndarray], statistic: stats.Statistic) -> float:
    """The statistic over all samples once (every weight 1)."""
    return float(statistic({k: np.asarray([v.sum()]) for k, v in columns.items()})[0])


def test_every_interval_is_around_the_summarys_own_point() -> None:
    """Each bootstrapped statistic over all samples once is the summary's number; every point
    of these records has an interval, each category too."""
    recs = records(30)
    metrics = with_intervals(summarize(recs, True, "tokens"), recs)
    columns = metrics.columns()
    stats_of = intervals.statistics(metrics)
    data = intervals.columns(recs, metrics)
    for path, statistic in stats_of.items():
        shown = intervals.at(columns, path)
        assert point(data, statistic) == pytest.approx(shown), path
        lo, hi = metrics.intervals[intervals.key(path)]
        assert lo <= shown <= hi, path
    for rate in ("lossless_rate", "tie_flip_rate", "vs.one_token_per_step.identical_rate"):
        assert metrics.intervals[rate] == wilson(
            round(intervals.at(columns, tuple(rate.split("."))) * 30), 30
        )
    assert {"speedup", "quality.nll", "baseline_quality.nll", "nfe_reduction"} <= set(
        metrics.intervals
    )
    assert set(metrics.by_category["a"].intervals) == set(metrics.intervals)


def test_one_sample_has_rates_but_no_bootstrap_interval() -> None:
    recs = records(1)
    assert with_intervals(summarize(recs, True, "tokens"), recs).intervals == {}


def test_a_hundred_samples_cost_well_under_a_second() -> None:
    import time

    recs = records(100)
    metrics = summarize(recs, True, "tokens")
    start = time.perf_counter()
    with_intervals(metrics, recs)
    assert time.perf_counter() - start < 1.0


def test_the_cost_model_flags_only_a_prediction_outside_the_interval() -> None:
    assert verdict(1.5, 1.2)["prediction_flag"] is True  # no interval: the gap alone
    assert verdict(1.5, 1.2, [1.0, 1.6])["prediction_flag"] is False  # within the spread
    assert verdict(1.5, 1.2, [1.1, 1.3])["prediction_flag"] is True
    assert verdict(1.25, 1.2, [1.1, 1.3])["prediction_flag"] is False  # within 10%


def test_a_summary_written_before_intervals_reads_as_schema_1() -> None:
    path = next(paths.REPO_ROOT.glob("results/reference/sps_xl/*/summary.json"))
    row = json.loads(path.read_text())
    assert "schema" not in row and "intervals" not in row
    old = Summary.from_json(row)
    assert (old.schema, old.intervals, old.bootstrap) == (1, {}, {})
    new = json.loads(json.dumps(old.to_json()))
    assert Summary.from_json({**new, "schema": SCHEMA}).schema == SCHEMA
