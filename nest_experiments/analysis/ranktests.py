"""Rank tests of a shift, with the estimate and the CI that invert the same test (pure: numpy and scipy only).

Every test here is a :class:`ShiftTest`: the sorted *elementary estimates* of
the shift (the Walsh averages ``(d_i + d_j) / 2, i <= j`` of paired
differences for the Wilcoxon signed-rank test; the differences ``a_i - b_j``
for the Mann-Whitney U test; those differences within each stratum, weighted
``1 / (N_s + 1)``, for van Elteren's stratified U test) with their weights, and
the null distribution of the statistic ``S(delta)`` = the weight of the
elementary estimates above ``delta``. ``S(delta)`` is the test statistic of
"the shift is ``delta``" (e.g. the signed-rank ``W+`` of ``d - delta``), so

- the estimate is their (weighted) median: the Hodges-Lehmann estimate;
- ``p_above(delta)`` / ``p_below(delta)`` are the one-sided p-values of
  "shift > delta" / "shift < delta";
- ``ci(alpha)`` is the set of ``delta`` the two-sided test at ``alpha``
  (``alpha / 2`` per side) does not reject: the distribution-free CI.

The null is exact (the distribution of ``W+`` or ``U`` under no shift, from
the generating function / recursion) up to ``EXACT_MAX_*``, and normal beyond
and for van Elteren (no continuity correction). Ties with ``delta`` count one
half in ``S``; the exact p-value then rounds the statistic towards the null.

Ties in the data (integer counts: quality switches, stalls) make the untied
null conservative (tied data vary less than it assumes): paired counts of
Poisson(2) vs Poisson(3) agreed in 0.42 of the experiments where a
tie-corrected test rejected in 0.66. So paired differences with ties or zeros
get :class:`TiedSignedRank`: at every shift, the exact sign-flip null given
the tied sizes (Pratt), and the CI by bisection; it agrees as often as the
tie-corrected test (tests/unit/test_sequential.py). Two samples with ties get
:class:`TiedRankSum`, the permutation null of the rank sum given the ties
(exact up to ``TIED_EXACT_MAX_SESSIONS``, normal with its exact variance
beyond). van Elteren's stratified test keeps its untied normal null.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import stats

EXACT_MAX_PAIRS = 400  # signed-rank: exact null up to this many pairs
TIED_MAX_PAIRS = 300  # signed-rank with tied differences: the exact null given the ties up to this many pairs
TIED_EXACT_MAX_SESSIONS = 60  # mann-whitney with ties: the exact null given the ties up to this many sessions,
# normal beyond (with that null's mean and variance)
EXACT_MAX_MN = 10_000  # Mann-Whitney: exact null while m * n is at most this
MAX_ESTIMATES = 5_000_000  # elementary estimates held in memory (2,000 pairs; 2,000 x 2,500 sessions)


@dataclass(frozen=True)
class ExactNull:
    """The null pmf of an integer statistic on 0..M, symmetric about M / 2."""

    pmf: np.ndarray

    def upper(self, t: float) -> float:
        """P(T >= t), with t rounded down (towards the null's centre for an upper tail)."""
        k = max(0, math.floor(t + 1e-9))
        return float(min(1.0, self.pmf[k:].sum())) if k < len(self.pmf) else 0.0

    def lower(self, t: float) -> float:
        """P(T <= t), with t rounded up."""
        k = math.ceil(t - 1e-9)
        return float(min(1.0, self.pmf[: k + 1].sum())) if k >= 0 else 0.0

    def accept(self, alpha: float) -> tuple[float, float]:
        """The range [t_lo, t_hi] of the statistic the two-sided test at ``alpha`` accepts."""
        cdf = np.cumsum(self.pmf)
        c = int(np.searchsorted(cdf, alpha / 2 * (1 + 1e-9), side="right")) - 1  # max c with P(T <= c) <= alpha/2
        top = len(self.pmf) - 1
        return float(c + 1), float(top - c - 1)


@dataclass(frozen=True)
class NormalNull:
    mean: float
    sd: float

    def upper(self, t: float) -> float:
        return float(stats.norm.sf((t - self.mean) / self.sd))

    def lower(self, t: float) -> float:
        return float(stats.norm.cdf((t - self.mean) / self.sd))

    def accept(self, alpha: float) -> tuple[float, float]:
        z = float(stats.norm.isf(alpha / 2))
        return self.mean - z * self.sd, self.mean + z * self.sd


Null = ExactNull | NormalNull


@dataclass(frozen=True)
class ShiftTest:
    """A rank test of every shift ``delta`` at once (see the module docstring)."""

    name: str
    values: np.ndarray  # the elementary estimates, sorted ascending
    weights: np.ndarray  # their weights (all 1 for the exact tests)
    null: Null
    n: int  # pairs, or the smaller arm

    @property
    def estimate(self) -> float:
        """Hodges-Lehmann: the weighted median of the elementary estimates."""
        cum = np.cumsum(self.weights)
        half = cum[-1] / 2
        lo = int(np.searchsorted(cum, half * (1 - 1e-12), side="left"))
        hi = int(np.searchsorted(cum, half * (1 + 1e-12), side="right"))
        return float((self.values[lo] + self.values[min(hi, len(self.values) - 1)]) / 2)

    def statistic(self, delta: float) -> float:
        above = int(np.searchsorted(self.values, delta, side="right"))
        at = int(np.searchsorted(self.values, delta, side="left"))
        return float(self.weights[above:].sum() + 0.5 * self.weights[at:above].sum())

    def p_above(self, delta: float) -> float:
        """One-sided p-value of "the shift is greater than ``delta``"."""
        return self.null.upper(self.statistic(delta))

    def p_below(self, delta: float) -> float:
        """One-sided p-value of "the shift is less than ``delta``"."""
        return self.null.lower(self.statistic(delta))

    def ci(self, alpha: float) -> tuple[float, float]:
        """The ``1 - alpha`` CI: the shifts the two-sided test at ``alpha`` accepts (infinite where no data can
        reject)."""
        t_lo, t_hi = self.null.accept(alpha)
        # S(delta) for delta in [v_k, v_k+1) is the weight above index k: R_k, R_0 = total, R_N = 0
        above = np.concatenate([[self.weights.sum()], self.weights.sum() - np.cumsum(self.weights)])
        tol = 1e-9 * max(1.0, float(above[0]))
        k_lo = int(np.argmax(above <= t_hi + tol))  # the first k with R_k <= t_hi
        ok_hi = np.nonzero(above >= t_lo - tol)[0]
        k_hi = int(ok_hi[-1]) if len(ok_hi) else -1  # the last k with R_k >= t_lo
        lower = -math.inf if k_lo == 0 else float(self.values[k_lo - 1])
        upper = math.inf if k_hi >= len(self.values) else float(self.values[k_hi]) if k_hi >= 0 else -math.inf
        return lower, upper


@dataclass(frozen=True)
class TiedShiftTest(ShiftTest):
    """A rank test for data with ties (counts: quality switches, stalls): at each shift the exact permutation null
    given the tied ranks, instead of the untied null, which is conservative there. The CI is the closure of the
    shifts the two-sided test accepts, found by bisection over the elementary estimates and the midpoints between
    them (the acceptance is taken as monotone in the shift, which it is up to the discreteness of the ties)."""

    data: tuple[np.ndarray, ...] = ()
    _tails: dict[float, tuple[float, float]] = field(default_factory=dict, compare=False, repr=False)

    def null_tails(self, delta: float) -> tuple[float, float]:
        raise NotImplementedError

    def tails(self, delta: float) -> tuple[float, float]:
        """(p_above, p_below) at ``delta``, from one null."""
        if delta not in self._tails:
            self._tails[delta] = self.null_tails(delta)
        return self._tails[delta]

    def p_above(self, delta: float) -> float:
        return self.tails(delta)[0]

    def p_below(self, delta: float) -> float:
        return self.tails(delta)[1]

    def snap(self, x: np.ndarray) -> np.ndarray:
        return _snap(x, np.concatenate(self.data))

    def ci(self, alpha: float) -> tuple[float, float]:
        _, first = np.unique(self.snap(self.values), return_index=True)
        distinct = self.values[first]  # ties the arithmetic broke kept as one
        grid = np.sort(np.concatenate([distinct, (distinct[1:] + distinct[:-1]) / 2]))  # even index: an estimate

        def accepted(i: int) -> bool:
            return min(self.tails(float(grid[i]))) > alpha / 2

        mid = min(int(np.searchsorted(grid, self.estimate)), len(grid) - 1)
        if not accepted(mid):
            return self.estimate, self.estimate
        below_all = self.p_above(float(grid[0]) - 1.0) > alpha / 2  # the most extreme data are not rare enough
        above_all = self.p_below(float(grid[-1]) + 1.0) > alpha / 2
        lo = -math.inf if below_all else _closure(grid, _first_true(accepted, -1, mid), -1)
        hi = math.inf if above_all else _closure(grid, _first_true(accepted, len(grid), mid), +1)
        return lo, hi


@dataclass(frozen=True)
class TiedSignedRank(TiedShiftTest):
    """Signed-rank with ties or zeros: the sign-flip null given the tied |d - delta| (midranks; zeros ranked and
    unsigned: Pratt). ``data`` = (d,)."""

    def null_tails(self, delta: float) -> tuple[float, float]:
        x = self.snap(self.data[0] - delta)
        r2 = doubled_midranks(np.abs(x))
        w, pmf = int(r2[x > 0].sum()), sign_flip_pmf(tuple(sorted(r2[x != 0].tolist())))
        return float(min(1.0, pmf[w:].sum())), float(min(1.0, pmf[: w + 1].sum()))


@dataclass(frozen=True)
class TiedRankSum(TiedShiftTest):
    """Mann-Whitney with ties: the permutation null of a's rank sum given the tied ranks of a - delta and b
    (midranks). ``data`` = (a, b)."""

    def null_tails(self, delta: float) -> tuple[float, float]:
        a, b = self.data
        r2 = doubled_midranks(self.snap(np.concatenate([a - delta, b])))
        w = int(r2[: len(a)].sum())
        if len(r2) > TIED_EXACT_MAX_SESSIONS:  # normal, with the null's exact mean and variance given the ties
            m, n = len(a), len(b)
            sd = math.sqrt(m * n / (m + n) / (m + n - 1) * float(((r2 - r2.mean()) ** 2).sum()))
            z = (w - m * float(r2.mean())) / sd if sd > 0 else 0.0
            return float(stats.norm.sf(z)), float(stats.norm.cdf(z))
        pmf, low = subset_sum_pmf(tuple(sorted(Counter(r2.tolist()).items())), len(a))
        return float(min(1.0, pmf[w - low :].sum())), float(min(1.0, pmf[: w - low + 1].sum()))


def doubled_midranks(x: np.ndarray) -> np.ndarray:
    """2 x the midranks of ``x`` (ties share the mean of their ranks): integers."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    top = np.cumsum(counts)
    return (2 * top - counts + 1)[inverse]


def _snap(x: np.ndarray, scale_of: np.ndarray) -> np.ndarray:
    """Values rounded to 1e-9 of the data's scale, so that ties the arithmetic breaks stay ties."""
    scale = float(np.max(np.abs(scale_of))) if len(scale_of) else 1.0
    step = 1e-9 * (scale or 1.0)
    return np.round(x / step) * step


def _first_true(ok: Callable[[int], bool], outside: int, inside: int) -> int:
    """Bisection between an index known to fail (``outside``, possibly past the ends) and one known to pass
    (``inside``): the passing index nearest to ``outside``."""
    while abs(inside - outside) > 1:
        m = (inside + outside) // 2
        if ok(m):
            inside = m
        else:
            outside = m
    return inside


def _closure(grid: np.ndarray, i: int, side: int) -> float:
    """The bound of the accepted set: a Walsh average (even index), or for a midpoint its neighbour outwards."""
    return float(grid[i] if i % 2 == 0 else grid[i + side])


@lru_cache(maxsize=256)
def sign_flip_pmf(weights: tuple[int, ...]) -> np.ndarray:
    """The pmf of sum w_i B_i, B_i independent fair coins: the signed-rank null given the (doubled) ranks. Equal
    weights (tied ranks) are taken together: k of them add w times a Binomial(k, 1/2)."""
    pmf = np.zeros(sum(weights) + 1)
    pmf[0] = 1.0
    top = 0
    for w, k in Counter(weights).items():
        coef = [math.comb(k, j) / 2.0**k for j in range(k + 1)]
        new = np.zeros_like(pmf)
        for j in range(k + 1):
            new[j * w : j * w + top + 1] += coef[j] * pmf[: top + 1]
        pmf, top = new, top + k * w
    return pmf


@lru_cache(maxsize=256)
def subset_sum_pmf(groups: tuple[tuple[int, int], ...], m: int) -> tuple[np.ndarray, int]:
    """The pmf of the sum of m values drawn without replacement from the multiset ``groups`` ((value, count),
    ...): the rank-sum null given the ties. Returns (pmf, the smallest sum) with pmf[s - smallest]."""
    total = sum(v * g for v, g in groups)
    ways = np.zeros((m + 1, total + 1))  # ways[k, s]: weighted count of choices of k values summing to s
    ways[0, 0] = 1.0
    for v, g in groups:
        new = np.zeros_like(ways)
        for j in range(min(g, m) + 1):
            new[j:, j * v :] += math.comb(g, j) * ways[: m + 1 - j, : total + 1 - j * v]
        ways = new
    row = ways[m] / math.comb(sum(g for _, g in groups), m)
    low = int(np.nonzero(row)[0][0])
    return row[low:], low


@lru_cache(maxsize=64)
def signed_rank_pmf(n: int) -> np.ndarray:
    """The null pmf of the signed-rank statistic W+ for n pairs: the coefficients of prod (1 + q^i) / 2^n."""
    pmf = np.zeros(n * (n + 1) // 2 + 1)
    pmf[0] = 1.0
    for i in range(1, n + 1):
        top = i * (i + 1) // 2
        pmf[i : top + 1] = (pmf[i : top + 1] + pmf[: top + 1 - i]) / 2
        pmf[:i] /= 2
    return pmf


@lru_cache(maxsize=64)
def rank_sum_pmf(m: int, n: int) -> np.ndarray:
    """The null pmf of U = #{a_i > b_j} for arms of m and n, by the recursion on the largest observation:
    P_{i,j}(u) = i/(i+j) P_{i-1,j}(u - j) + j/(i+j) P_{i,j-1}(u)."""
    m, n = min(m, n), max(m, n)
    row = [np.ones(1) for _ in range(n + 1)]  # i = 0: U = 0
    for i in range(1, m + 1):
        new = [np.ones(1)]  # j = 0: U = 0
        for j in range(1, n + 1):
            p = np.zeros(i * j + 1)
            p[j:] += i / (i + j) * row[j]
            p[: len(new[j - 1])] += j / (i + j) * new[j - 1]
            new.append(p)
        row = new
    return row[n]


def _check_size(count: int, what: str) -> None:
    if count > MAX_ESTIMATES:
        raise ValueError(f"{what}: {count} elementary estimates, more than the {MAX_ESTIMATES} these exact rank "
                         "tests hold in memory")


def _tied(x: np.ndarray, *, zeros: bool = False) -> bool:
    """Ties among the values (or, with ``zeros``, a zero among them)."""
    x = _snap(x, x)
    return bool((zeros and (x == 0).any()) or len(np.unique(x)) < len(x))


def walsh_averages(d: np.ndarray) -> np.ndarray:
    _check_size(len(d) * (len(d) + 1) // 2, f"{len(d)} pairs")
    i, j = np.triu_indices(len(d))
    return np.sort((d[i] + d[j]) / 2)


def signed_rank(d: Sequence[float] | np.ndarray) -> ShiftTest:
    """Wilcoxon signed-rank on paired differences ``d`` (a - b)."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    values = walsh_averages(d)
    if n <= TIED_MAX_PAIRS and _tied(np.abs(d), zeros=True):
        return TiedSignedRank("wilcoxon signed-rank (ties: Pratt, exact given the ties)", values,
                              np.ones(len(values)), ExactNull(signed_rank_pmf(n)), n, (d,))
    if n <= EXACT_MAX_PAIRS:
        null: Null = ExactNull(signed_rank_pmf(n))
    else:
        null = NormalNull(n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    return ShiftTest("wilcoxon signed-rank", values, np.ones(len(values)), null, n)


def rank_sum(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> ShiftTest:
    """Mann-Whitney U on two independent samples; the shift is a - b."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    m, n = len(a), len(b)
    _check_size(m * n, f"{m} x {n} sessions")
    values = np.sort(np.subtract.outer(a, b).ravel())
    if _tied(np.concatenate([a, b])):
        return TiedRankSum("mann-whitney U (ties: exact given the ties)", values, np.ones(len(values)),
                           ExactNull(rank_sum_pmf(m, n)), min(m, n), (a, b))
    if m * n <= EXACT_MAX_MN:
        null: Null = ExactNull(rank_sum_pmf(m, n))
    else:
        null = NormalNull(m * n / 2, math.sqrt(m * n * (m + n + 1) / 12))
    return ShiftTest("mann-whitney U", values, np.ones(len(values)), null, min(m, n))


def stratified_rank_sum(groups: Sequence[tuple[np.ndarray, np.ndarray]]) -> ShiftTest:
    """van Elteren's stratified U test: the U statistics of the strata (each a - b pair compared only within its
    stratum), weighted 1 / (N_s + 1), with the normal null. Strata where an arm is empty carry no information."""
    _check_size(sum(len(a) * len(b) for a, b in groups), "the strata's sessions")
    values, weights, mean, var = [], [], 0.0, 0.0
    for a, b in groups:
        m, n = len(a), len(b)
        if m == 0 or n == 0:
            continue
        w = 1.0 / (m + n + 1)
        values.append(np.subtract.outer(np.asarray(a, float), np.asarray(b, float)).ravel())
        weights.append(np.full(m * n, w))
        mean += w * m * n / 2
        var += w * w * m * n * (m + n + 1) / 12
    v, w_ = np.concatenate(values), np.concatenate(weights)
    order = np.argsort(v, kind="stable")
    n_min = min(min(len(a), len(b)) for a, b in groups if len(a) and len(b))
    return ShiftTest("van Elteren (stratified mann-whitney U)", v[order], w_[order], NormalNull(mean, math.sqrt(var)),
                     n_min)


@dataclass(frozen=True)
class ShareTest(ShiftTest):
    """The exact binomial test of a share, as a :class:`ShiftTest` of ``share - reference``: ``k`` of ``n`` pairs
    (or sessions) in the claimed category. ``p_above(delta)`` / ``p_below(delta)`` are the one-sided p-values of
    "the share is above / below ``reference + delta``" (P(X >= k), P(X <= k) under Binomial(n, reference +
    delta)); ``ci(alpha)`` is Clopper-Pearson's, the shares the two-sided test at ``alpha`` accepts, less the
    reference."""

    k: int = 0
    reference: float = 0.0

    @property
    def estimate(self) -> float:
        return self.k / self.n - self.reference

    def _p(self, delta: float) -> float:
        return min(1.0, max(0.0, self.reference + delta))

    def p_above(self, delta: float) -> float:
        return float(stats.binom.sf(self.k - 1, self.n, self._p(delta)))

    def p_below(self, delta: float) -> float:
        return float(stats.binom.cdf(self.k, self.n, self._p(delta)))

    def ci(self, alpha: float) -> tuple[float, float]:
        lo = 0.0 if self.k == 0 else float(stats.beta.ppf(alpha / 2, self.k, self.n - self.k + 1))
        hi = 1.0 if self.k == self.n else float(stats.beta.ppf(1 - alpha / 2, self.k + 1, self.n - self.k))
        return lo - self.reference, hi - self.reference


def share_test(k: int, n: int, reference: float) -> ShareTest:
    """``k`` of ``n`` in the claimed category against the paper's share ``reference``."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"a share needs 0 <= k <= n and n >= 1, got {k} of {n}")
    return ShareTest("exact binomial (Clopper-Pearson CI)", np.array([0.0]), np.array([1.0]), NormalNull(0.0, 1.0), n,
                     k=k, reference=reference)
