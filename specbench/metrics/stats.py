"""Uncertainty from paired samples, in numpy alone (the reports read it without torch).

Every arm of a cell decodes the same samples in the same process, so the unit that varies is
the sample: its length, its difficulty, and the machine's state while it ran hit both arms of
it together. A **paired bootstrap** therefore resamples sample ids, never arms: one draw of ids
serves every column of every arm, and a ratio such as the pooled speedup is recomputed from the
sums over the drawn samples of both arms (`Bootstrap`). Resampling arms apart would add the
sample-to-sample spread that pairing cancels, and give intervals several times too wide.
Intervals are percentile intervals at `Bootstrap.level`, from a fixed seed, so the same records
give the same interval on every machine.

A rate of samples (the share whose tokens equal the baseline's) is a binomial count: its
interval is Wilson's, which stays inside [0, 1] and is not empty at 0 or n. A paired difference
between two cells on the same samples (`paired_difference`) gets a bootstrap interval and a
permutation p-value that swaps the two cells within each sample.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

# a statistic of column sums: named per-sample columns summed over (resampled) samples, in
# arrays of one value per resample, to one value per resample
Statistic = Callable[[dict[str, np.ndarray]], np.ndarray]

POWER = 0.8  # the chance a sample-size estimate resolves the difference it is sized for


def weighted_sums(weights: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """(draws, n) weights times (n, ...) per-sample columns. einsum, not a BLAS matmul: a
    threaded one this small waits on the other threads for tens of ms on a busy machine."""
    return np.einsum("bn,n...->b...", weights, columns)


def z_score(level: float) -> float:
    """The standard normal's two-sided quantile for a `level` interval (1.96 at 0.95)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


@dataclass(frozen=True)
class Bootstrap:
    """A paired bootstrap over samples: `resamples` draws of n sample ids (with replacement)
    from `seed`, percentile intervals at `level`. The settings are stored in every summary."""

    resamples: int = 2000
    seed: int = 0
    level: float = 0.95

    def weights(self, n: int) -> np.ndarray:
        """(resamples, n): how often each sample is drawn in each resample. One matrix serves
        every column, so the arms of a sample are always drawn together."""
        ids = np.random.default_rng(self.seed).integers(0, n, size=(self.resamples, n))
        offsets = n * np.arange(self.resamples)[:, None]
        counts = np.bincount((ids + offsets).ravel(), minlength=self.resamples * n)
        return counts.reshape(self.resamples, n).astype(float)

    def draws(
        self, columns: dict[str, np.ndarray], statistics: dict[Any, Statistic]
    ) -> dict[Any, np.ndarray]:
        """Each statistic over every resample of the samples (axis 0). Columns are indexed by
        sample first; further axes (many data sets at once) carry through."""
        names = list(columns)
        stacked = np.stack([np.asarray(columns[k], dtype=float) for k in names], axis=-1)
        sums = weighted_sums(self.weights(len(stacked)), stacked)
        summed = {k: sums[..., i] for i, k in enumerate(names)}
        with np.errstate(divide="ignore", invalid="ignore"):
            return {
                name: np.asarray(stat(summed), dtype=float) for name, stat in statistics.items()
            }

    def bounds(self, draws: np.ndarray) -> np.ndarray:
        """The percentile interval's ends along axis 0 (resamples), NaN where fewer than half
        the resamples had a value (a ratio whose denominator the resamples left at zero)."""
        tail = 50 * (1 - self.level)
        finite = np.isfinite(draws)
        if finite.all():
            return np.percentile(draws, [tail, 100 - tail], axis=0)
        with warnings.catch_warnings():  # a column with no value at all: NaN, said below
            warnings.simplefilter("ignore", RuntimeWarning)
            ends = np.nanpercentile(np.where(finite, draws, np.nan), [tail, 100 - tail], axis=0)
        return np.where(finite.sum(0) >= self.resamples / 2, ends, np.nan)

    def interval(self, draws: np.ndarray) -> list[float] | None:
        """One statistic's interval; None where it has none (`bounds`)."""
        lo, hi = self.bounds(draws)
        return None if np.isnan(lo) else [float(lo), float(hi)]

    def intervals(
        self, columns: dict[str, np.ndarray], statistics: dict[Any, Statistic]
    ) -> dict[Any, list[float] | None]:
        """Each statistic's interval from one shared draw of sample ids."""
        return {k: self.interval(v) for k, v in self.draws(columns, statistics).items()}


def wilson(k: int, n: int, level: float = Bootstrap.level) -> list[float]:
    """Wilson's score interval for k successes in n trials: inside [0, 1], and not a point at
    k = 0 or k = n, where the normal approximation's would be."""
    z = z_score(level)
    share, spread = k / n, z * z / n
    centre = (share + spread / 2) / (1 + spread)
    half = z * math.sqrt(share * (1 - share) / n + spread / (4 * n)) / (1 + spread)
    return [max(0.0, centre - half), min(1.0, centre + half)]


@dataclass(frozen=True)
class Difference:
    """A statistic of cell A minus the same of cell B on the same samples."""

    value: float
    interval: list[float] | None
    p_value: float
    n: int

    level: float = Bootstrap.level

    @property
    def resolved(self) -> bool:
        """Whether the two cells are told apart: the interval excludes zero and the
        permutation test rejects exchangeability at the same level (with few samples and a
        difference made by a handful of them, a percentile interval can exclude zero alone)."""
        outside = self.interval is not None and (self.interval[0] > 0 or self.interval[1] < 0)
        return outside and self.p_value < 1 - self.level


def paired_difference(
    a: dict[str, np.ndarray],
    b: dict[str, np.ndarray],
    statistic: Statistic,
    bootstrap: Bootstrap = Bootstrap(),
    permutations: int = 2000,
) -> Difference:
    """statistic(A) - statistic(B), row i of both the same sample: its paired bootstrap
    interval, and the two-sided p-value of a permutation test that swaps A and B within each
    sample (the null: the cells are exchangeable on every sample)."""
    names = list(a)
    ma = np.column_stack([a[k] for k in names])
    mb = np.column_stack([b[k] for k in names])

    def diff(sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return statistic(dict(zip(names, sa.T))) - statistic(dict(zip(names, sb.T)))

    weights = bootstrap.weights(len(ma))
    observed = float(diff(ma.sum(0)[None], mb.sum(0)[None])[0])
    rng = np.random.default_rng(bootstrap.seed + 1)
    swaps = rng.integers(0, 2, size=(permutations, len(ma))).astype(float)
    moved = weighted_sums(swaps, mb - ma)
    null = diff(ma.sum(0) + moved, mb.sum(0) - moved)
    extreme = np.sum(np.abs(null) >= abs(observed) - 1e-12 * max(1.0, abs(observed)))
    return Difference(
        value=observed,
        interval=bootstrap.interval(diff(weighted_sums(weights, ma), weighted_sums(weights, mb))),
        p_value=float((1 + extreme) / (1 + permutations)),
        n=len(ma),
        level=bootstrap.level,
    )


def per_sample_sd(interval: list[float], n: int, level: float = Bootstrap.level) -> float:
    """The spread of one sample's contribution that an interval over n samples implies: its
    half-width is z * sd / sqrt(n)."""
    return (interval[1] - interval[0]) / 2 / z_score(level) * math.sqrt(n)


def samples_needed(
    sd: float, delta: float, paired: bool = False, level: float = Bootstrap.level
) -> int:
    """Samples for a difference of `delta` between two cells to be resolved (a `level`
    interval of the difference excluding zero) with probability `POWER`. `sd` is one cell's
    per-sample spread, the two cells taken as independent; with `paired`, it is the spread of
    the two cells' per-sample difference on shared samples (`paired_difference`), which their
    shared sample-to-sample spread does not enter."""
    cells = 1 if paired else 2
    return math.ceil(cells * ((z_score(level) + NormalDist().inv_cdf(POWER)) * sd / delta) ** 2)


def resolvable(sd: float, n: int, level: float = Bootstrap.level) -> float:
    """The smallest difference two independent cells of n samples each resolve with
    probability `POWER`."""
    return (z_score(level) + NormalDist().inv_cdf(POWER)) * sd * math.sqrt(2 / n)
