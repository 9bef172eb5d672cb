"""The statistics every report uses: estimates with a confidence interval, the Mann-Whitney U test, quantiles
and a bootstrap interval of a quantile difference, and how a p-value reads in a table.

Pure. Fewer than :data:`MIN_REPS` values in a group: no interval and no p-value (``None``).
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_REPS = 4
CONFIDENCE = 0.95
TOO_FEW = "too few repetitions"
BOOTSTRAP = 2000  # resamples of a bootstrap interval


def present(values: Iterable[float | None]) -> list[float]:
    """The values that are numbers (no None, no NaN)."""
    return [float(v) for v in values if v is not None and not math.isnan(v)]


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Mean of ``n`` values and its 95% confidence interval (``None`` when n < MIN_REPS)."""

    n: int
    mean: float | None
    low: float | None = None
    high: float | None = None

    @property
    def enough(self) -> bool:
        return self.n >= MIN_REPS


def estimate(values: Iterable[float | None]) -> Estimate:
    """Mean and Student-t 95% CI over repetitions (no CI below :data:`MIN_REPS`)."""
    xs = present(values)
    if not xs:
        return Estimate(n=0, mean=None)
    mean = float(np.mean(xs))
    if len(xs) < MIN_REPS:
        return Estimate(n=len(xs), mean=mean)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(xs) - 1) * stats.sem(xs))
    return Estimate(n=len(xs), mean=mean, low=mean - half, high=mean + half)


def mann_whitney(a: Sequence[float], b: Sequence[float], alternative: str = "two-sided", *,
                 minimum: int = MIN_REPS) -> float | None:
    """Mann-Whitney U p-value of ``a`` vs ``b`` (``greater``: a tends higher, ``less``: a tends lower); None
    below ``minimum`` values per side."""
    if len(a) < minimum or len(b) < minimum:
        return None
    if len(set(a) | set(b)) == 1:
        # every value equal: no evidence either way (scipy would divide by zero)
        return 1.0 if alternative == "two-sided" else 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.mannwhitneyu(a, b, alternative=alternative).pvalue)


def mann_whitney_p(a: Iterable[float | None], b: Iterable[float | None]) -> float | None:
    """Two-sided Mann-Whitney U p-value over the values that are numbers; ``None`` when either group has fewer
    than MIN_REPS of them."""
    return mann_whitney(present(a), present(b))


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default)."""
    ys = sorted(xs)
    pos = q * (len(ys) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def quantile_diff_ci(a: Sequence[float], b: Sequence[float], q: float = 0.75, *, seed: int = 1, n: int = BOOTSTRAP,
                     minimum: int = MIN_REPS) -> tuple[float, float] | None:
    """Bootstrap 95% interval of quantile(b) - quantile(a) (each side resampled); None below ``minimum`` values
    per side."""
    if len(a) < minimum or len(b) < minimum:
        return None
    rng = random.Random(seed)
    diffs = sorted(quantile(rng.choices(b, k=len(b)), q) - quantile(rng.choices(a, k=len(a)), q) for _ in range(n))
    return quantile(diffs, 0.025), quantile(diffs, 0.975)


def fmt_p(p: float | None, too_few: str = "too few") -> str:
    """A p-value as a table shows it; ``too_few`` where there is none."""
    if p is None:
        return too_few
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


MIN_CORRELATED = 8  # rank_correlation: fewer pairs give a rho too coarse to compare sessions by


def rank_correlation(x: Sequence[float], y: Sequence[float], *, fewest: int = MIN_CORRELATED) -> float | None:
    """Spearman's rho of the pairs (x_i, y_i) with both finite: a within-session relation (each segment's latency
    against its throughput) as one number per session; None with fewer than ``fewest`` pairs or no spread."""
    pairs = [(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < fewest or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho = float(stats.spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic)
    return rho if math.isfinite(rho) else None
