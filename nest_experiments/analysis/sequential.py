"""The decision rule of a claim at repeated looks, and how many more sessions an undecided claim needs (pure).

Sessions are added block after block and every claim is re-evaluated after
each block (a *look*). Deciding at each look with the same alpha would spend
it again and again: with no effect, 5 looks at 0.05 wrongly decide far more
often than 5 % of the time. We spend alpha over the looks instead:

    alpha_k = alpha * 6 / (pi^2 * k^2)        at look k = 1, 2, 3, ...

Because sum_k 6 / (pi^2 k^2) = 1, the chance of *any* false decision over any
number of looks is at most sum_k alpha_k = alpha, by the union bound, whatever
the correlation between the looks, whatever test each look uses, and however
the sizes of the blocks vary (even when a block's size depends on the data
seen so far). Why this rule and not the usual group-sequential ones: a
Lan-DeMets spending function (O'Brien-Fleming, Pocock) needs the maximum
information planned in advance and the joint normal law of the looks' z
statistics, while here the number of looks is open (``--until-decided`` stops
on a budget), the tests are rank tests with exact small-sample nulls, and
cells gain sessions unevenly; a confidence sequence would do, but it is wider
than a rank test at the sample sizes we reach. The price is conservatism:
alpha_1 = 0.0304, alpha_2 = 0.0076, alpha_3 = 0.0034 ... for alpha = 0.05, so
early looks decide only clear effects, and the union bound is loose: 5 looks
spend 0.0445 of 0.05, and 1000 simulated experiments of 5 looks with no effect
decided falsely 3.6-3.9 % of the time (paired, unpaired, stratified,
equivalence at its margin; 0.8 % for integer counts with many ties;
tests/unit/test_sequential.py), against 13-17 % with 0.05 at every look.

At look k, with alpha_k (the verdict records it):

- ``a > b`` / ``a < b``: two one-sided tests, each at alpha_k / 2 (one for the
  claimed direction, one for the opposite), i.e. the two-sided test at alpha_k
  and its 1 - alpha_k CI. *agrees* when the test in the claimed direction
  rejects and the CI lies on that side of 0; *contradicts* when the test in
  the opposite direction rejects and the CI lies on the other side. The p
  shown is two-sided (2 x the smaller one-sided p), to compare with alpha_k.
- ``a > b`` / ``a < b`` with a ``margin`` (the smallest effect the statement
  means, e.g. "significantly better" taken as better by at least 10 %): the
  same, and also *contradicts* when the test that the effect is below the
  margin in the claimed direction rejects at alpha_k / 2 and the CI lies below
  it: there is no effect of the claimed size (a futility boundary). Without
  it, a claim whose true effect is 0 stays undecided for ever. For a given
  true effect only one of the two errors is possible (a false *agrees* needs
  an effect <= 0, a false *contradicts* one >= the margin or < 0), so each
  look still errs with at most alpha_k.
- ``|a - b| < margin``: TOST at alpha_k, i.e. the 1 - 2 alpha_k CI. *agrees*
  only when both one-sided tests against the margins reject at alpha_k (the p
  shown is the larger of the two) and that CI lies inside the margin;
  *contradicts* when the test that the effect is beyond one margin rejects at
  alpha_k and the CI lies entirely outside the margin; never because a
  difference test failed to reject.

The tests decide; the CI check keeps the CI shown consistent with them (with
tied data the CI is the closure of the accepted shifts, so a bound may touch
the 0 or the margin the test rejects: "inside" and "on that side" include it).
Whatever the truth, each look's chance of a false decision is then at most
alpha_k (a directional claim with no effect: alpha_k / 2 each way; an
equivalence claim: alpha_k, as only one of its two errors is possible for a
given true effect); exactly so for the exact nulls, approximately for the
normal ones (van Elteren, large samples).

Sessions still needed (power ``power`` at the next look's alpha, from the
pilot's spread): with ``sd`` the standard deviation of the paired differences
(or the pooled within-arm SD, unpaired), ``delta`` the distance from the
measured effect to the boundary the decision needs (0 for a directional
claim; with a margin, the farther of 0 and the margin, as either boundary
decides; the nearer margin for an equivalence claim), ``alpha_side`` the
one-sided level (alpha_k+1 / 2 directional, alpha_k+1 for TOST):

    n = ceil( c * (z_{1-alpha_side} + z_power)^2 * sd^2 / delta^2 / (3 / pi) )

pairs (c = 1) when paired, sessions per arm (c = 2) when not; 3/pi is the
Wilcoxon tests' efficiency relative to the t test at the normal law. n is also
at least the fewest sessions with which the exact test can reject at
alpha_side at all. The sessions still needed are n minus those there are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

from nest_experiments.analysis.ranktests import ShiftTest

GREATER, LESS, EQUIVALENT = "a > b", "a < b", "|a - b| < margin"
EXPECTATIONS = (GREATER, LESS, EQUIVALENT)
AGREES, CONTRADICTS, UNDECIDED, TOO_FEW, NO_DATA = "agrees", "contradicts", "undecided", "too few", "no data"
UNINFORMATIVE = "uninformative"  # the metric has no spread in the data (claims.uninformative): never decided
DECIDED = (AGREES, CONTRADICTS)
NOT_SPENDING = (TOO_FEW, NO_DATA, UNINFORMATIVE)  # verdicts at a look that could not decide: it spends no alpha
ARE_WILCOXON = 3 / math.pi  # asymptotic relative efficiency of the rank tests to the t test, normal law


def look_alpha(look: int, alpha: float = 0.05) -> float:
    """The alpha spent at look ``look`` (1, 2, ...): ``alpha * 6 / (pi^2 look^2)``; the looks sum to ``alpha``."""
    if look < 1:
        raise ValueError(f"look is counted from 1, got {look}")
    return alpha * 6 / (math.pi**2 * look**2)


@dataclass(frozen=True)
class Decision:
    """A claim's decision at one look, on the analysis scale (log of the ratio for ratio claims)."""

    verdict: str
    effect: float
    ci: tuple[float, float]
    ci_level: float
    p: float
    alpha: float
    test: str
    futile: bool = False  # contradicted by the futility boundary: no effect of the margin's size


def decide(test: ShiftTest, expect: str, alpha: float, bounds: tuple[float, float] | None = None) -> Decision:
    """The verdict of ``expect`` at level ``alpha`` (this look's). ``bounds`` is the margin (lower, upper) on the
    analysis scale: for ``|a - b| < margin`` (required), or a directional claim's smallest meant effect."""
    if expect == EQUIVALENT:
        if bounds is None:
            raise ValueError("an equivalence claim needs its margin bounds")
        return _decide_equivalent(test, alpha, bounds)
    return _decide_direction(test, expect, alpha, bounds)


def minimal_effect(expect: str, bounds: tuple[float, float]) -> float:
    """The smallest effect a directional claim means, signed in its direction (on the analysis scale)."""
    return bounds[1] if expect == GREATER else bounds[0]


def _decide_direction(test: ShiftTest, expect: str, alpha: float,
                      bounds: tuple[float, float] | None = None) -> Decision:
    lo, hi = test.ci(alpha)
    p_up, p_down = test.p_above(0.0), test.p_below(0.0)
    up = p_up <= alpha / 2 and lo >= 0  # with ties the CI is a closure: its bound may be the 0 the test rejects
    down = p_down <= alpha / 2 and hi <= 0
    claimed, opposite = (up, down) if expect == GREATER else (down, up)
    futile = False
    if not claimed and not opposite and bounds is not None:  # futility: no effect of the claimed size
        m = minimal_effect(expect, bounds)
        futile = (test.p_below(m) <= alpha / 2 and hi <= m) if expect == GREATER else \
            (test.p_above(m) <= alpha / 2 and lo >= m)
    verdict = AGREES if claimed else CONTRADICTS if opposite or futile else _open(lo, hi)
    return Decision(verdict, test.estimate, (lo, hi), 1 - alpha, min(1.0, 2 * min(p_up, p_down)), alpha, test.name,
                    futile)


def _decide_equivalent(test: ShiftTest, alpha: float, bounds: tuple[float, float]) -> Decision:
    lo, hi = test.ci(2 * alpha)
    p = max(test.p_above(bounds[0]), test.p_below(bounds[1]))
    inside = bounds[0] <= lo and hi <= bounds[1] and p <= alpha
    outside = (lo >= bounds[1] and test.p_above(bounds[1]) <= alpha) or \
        (hi <= bounds[0] and test.p_below(bounds[0]) <= alpha)
    verdict = AGREES if inside else CONTRADICTS if outside else _open(lo, hi)
    return Decision(verdict, test.estimate, (lo, hi), 1 - 2 * alpha, p, alpha, f"TOST ({test.name}), CI inside margin")


def _open(lo: float, hi: float) -> str:
    """Undecided, or too few when the test cannot reject anything at this n and alpha (an infinite CI)."""
    return UNDECIDED if math.isfinite(lo) and math.isfinite(hi) else TOO_FEW


def decision_distance(effect: float, expect: str, bounds: tuple[float, float] | None = None) -> float:
    """How far the measured effect is from the boundary a decision needs it to be clear of (a directional claim
    with a margin: the farther of 0 and the margin in the claimed direction, either decides)."""
    if expect != EQUIVALENT:
        if bounds is None:
            return abs(effect)
        return max(abs(effect), abs(minimal_effect(expect, bounds) - effect))
    assert bounds is not None
    if bounds[0] < effect < bounds[1]:
        return min(effect - bounds[0], bounds[1] - effect)
    return max(bounds[0] - effect, effect - bounds[1])


def fewest_decisive(alpha_side: float, *, paired: bool) -> int:
    """The fewest pairs (or sessions per arm) with which the exact test can reject at ``alpha_side`` at all."""
    n = 1
    while (0.5**n if paired else 1 / math.comb(2 * n, n)) > alpha_side:
        n += 1
    return n


def sessions_for_power(*, distance: float, sd: float, alpha_side: float, power: float = 0.8,
                       paired: bool) -> int | None:
    """The pairs (paired) or sessions per arm (unpaired) that decide at ``alpha_side`` with ``power`` (formula in
    the module docstring); None when the measured effect sits on the boundary (no n decides it) or the spread is
    unknown (one pair). With no spread at all (every difference the same) the formula's n is 0: the fewest with
    which the exact test can reject."""
    if distance <= 0 or not math.isfinite(distance) or not math.isfinite(sd) or sd < 0:
        return None
    if sd == 0:
        return fewest_decisive(alpha_side, paired=paired)
    z = -_z(alpha_side) + _z(power)
    n = (1 if paired else 2) * (z * sd / distance) ** 2 / ARE_WILCOXON
    return max(math.ceil(n), fewest_decisive(alpha_side, paired=paired))


def side_alpha(expect: str, alpha: float) -> float:
    """The one-sided level each test of ``expect`` uses at a look with ``alpha``."""
    return alpha if expect == EQUIVALENT else alpha / 2


@lru_cache(maxsize=4096)
def _z(p: float) -> float:
    """The standard normal quantile of ``p`` (``statistics.NormalDist``: the same algorithm as scipy's, without
    its per-call overhead, which dominated the sessions-still-needed search)."""
    return NormalDist().inv_cdf(p)
