"""sequential + ranktests: the rank tests against scipy, alpha spending, and the decision rule on simulated experiments
with known truth (seeded): power as stated, false decisions over repeated looks within alpha."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import Claim, Sample, judge
from nest_experiments.analysis.ranktests import (
    ShiftTest,
    TiedRankSum,
    TiedSignedRank,
    doubled_midranks,
    rank_sum,
    rank_sum_pmf,
    signed_rank,
    signed_rank_pmf,
    stratified_rank_sum,
)

ALPHA = 0.05
POWER = 0.8


def claim(expect: str = seq.GREATER, *, paired: bool = True, strata: tuple[str, ...] = (),
          margin: float | None = None) -> Claim:
    return Claim(id="c", statement="s", figure="Fig. 1", metric="m", a={"arm": "a"}, b={"arm": "b"}, expect=expect,
                 pair_by=("pair",) if paired else (), strata=strata, margin=margin)


# --- the rank tests --------------------------------------------------------------------------------------------


def test_signed_rank_pmf_is_the_exact_null() -> None:
    pmf = signed_rank_pmf(10)
    assert pmf.sum() == pytest.approx(1.0)
    assert pmf == pytest.approx(pmf[::-1])  # symmetric about n(n+1)/4
    assert pmf[0] == pytest.approx(2.0**-10)
    assert pmf[3] == pytest.approx(2 / 1024)  # W+ = 3: {3} or {1, 2}


def test_rank_sum_pmf_is_the_exact_null() -> None:
    pmf = rank_sum_pmf(3, 4)
    assert (pmf * math.comb(7, 3)) == pytest.approx([1, 1, 2, 3, 4, 4, 5, 4, 4, 3, 2, 1, 1])
    assert rank_sum_pmf(6, 2) == pytest.approx(rank_sum_pmf(2, 6))


@pytest.mark.parametrize("seed", range(5))
def test_p_values_are_scipys_exact_ones(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d, a, b = rng.normal(0.3, 1, 15), rng.normal(0.5, 1, 9), rng.normal(0, 1, 7)
    w = signed_rank(d)
    assert w.p_above(0) == pytest.approx(stats.wilcoxon(d, alternative="greater", method="exact").pvalue)
    assert w.p_below(0.2) == pytest.approx(stats.wilcoxon(d - 0.2, alternative="less", method="exact").pvalue)
    u = rank_sum(a, b)
    assert u.p_above(0) == pytest.approx(stats.mannwhitneyu(a, b, alternative="greater", method="exact").pvalue)
    assert u.p_below(-0.1) == pytest.approx(
        stats.mannwhitneyu(a + 0.1, b, alternative="less", method="exact").pvalue)
    one_stratum = stratified_rank_sum([(a, b)])  # van Elteren with one stratum: the normal U test
    assert one_stratum.p_above(0) == pytest.approx(
        stats.mannwhitneyu(a, b, alternative="greater", method="asymptotic", use_continuity=False).pvalue)


@pytest.mark.parametrize("make", [lambda r: signed_rank(r.normal(1, 1, 12)),
                                  lambda r: rank_sum(r.normal(1, 1, 8), r.normal(0, 1, 11)),
                                  lambda r: stratified_rank_sum([(r.normal(1, 1, 5), r.normal(0, 1, 6)),
                                                                 (r.normal(9, 1, 4), r.normal(8, 1, 7))]),
                                  lambda r: signed_rank((r.poisson(3, 25) - r.poisson(2, 25)).astype(float)),
                                  lambda r: rank_sum(r.poisson(3, 14).astype(float), r.poisson(1, 12).astype(float)),
                                  lambda r: rank_sum(r.poisson(3, 40).astype(float), r.poisson(2, 35).astype(float))])
def test_ci_is_the_inverted_test(make: Callable[[np.random.Generator], ShiftTest]) -> None:
    """Just inside the CI the two-sided test accepts the shift, just outside it rejects it."""
    t = make(np.random.default_rng(3))
    lo, hi = t.ci(0.05)
    assert lo <= t.estimate <= hi and lo < hi  # with ties the estimate may sit on a closed bound
    eps = 1e-7  # beyond the 1e-9 (of the data's scale) that ties are recognised within
    assert min(t.p_above(lo + eps), t.p_below(lo + eps)) > 0.025
    assert min(t.p_above(hi - eps), t.p_below(hi - eps)) > 0.025
    assert t.p_above(lo - eps) <= 0.025 + 1e-12 and t.p_below(hi + eps) <= 0.025 + 1e-12


def test_tied_differences_get_the_exact_null_given_the_ties() -> None:
    """Counts (ties, zeros): the p-values are those of flipping the signs of the non-zero differences in all 2^n
    ways (Pratt: zeros ranked, unsigned), at 0 and at a shift that makes other ties."""
    d = np.array([0.0, 1.0, -1.0, 2.0, 2.0, 3.0, 1.0, 0.0, 4.0, -2.0, 1.0])
    t = signed_rank(d)
    assert isinstance(t, TiedSignedRank)
    for delta in (0.0, 1.0, -0.5):
        x = d - delta
        ranks = stats.rankdata(np.abs(x))
        signs = np.array(np.meshgrid(*[[0, 1]] * len(x))).reshape(len(x), -1).T  # every sign pattern
        w = (signs * (ranks * (x != 0))).sum(axis=1)
        observed = ranks[x > 0].sum()
        assert t.p_above(delta) == pytest.approx(np.mean(w >= observed - 1e-9))
        assert t.p_below(delta) == pytest.approx(np.mean(w <= observed + 1e-9))
    assert not isinstance(signed_rank(np.array([0.5, 1.25, -2.0])), TiedSignedRank)


def test_tied_samples_get_the_exact_rank_sum_null_given_the_ties() -> None:
    """Two samples of counts: the p-values are those of all C(13, 7) ways to split the tied ranks; beyond
    TIED_EXACT_MAX_SESSIONS sessions, scipy's tie-corrected normal U test."""
    a, b = np.array([0.0, 1, 1, 2, 3, 3, 5]), np.array([1.0, 1, 2, 2, 4, 0])
    t = rank_sum(a, b)
    assert isinstance(t, TiedRankSum)
    for delta in (0.0, 1.0, -0.5):
        ranks = stats.rankdata(np.concatenate([a - delta, b]))
        sums = np.array([ranks[list(c)].sum() for c in itertools.combinations(range(13), 7)])
        observed = ranks[:7].sum()
        assert t.p_above(delta) == pytest.approx(np.mean(sums >= observed - 1e-9))
        assert t.p_below(delta) == pytest.approx(np.mean(sums <= observed + 1e-9))
    rng = np.random.default_rng(0)
    a, b = rng.poisson(2, 35).astype(float), rng.poisson(3, 30).astype(float)
    assert rank_sum(a, b).p_below(0) == pytest.approx(
        stats.mannwhitneyu(a, b, alternative="less", use_continuity=False).pvalue)


def test_doubled_midranks() -> None:
    x = np.array([3.0, 1.0, 3.0, 0.0, 7.0, 3.0])
    assert doubled_midranks(x).tolist() == (2 * stats.rankdata(x)).astype(int).tolist() == [8, 4, 8, 2, 12, 8]


def test_ci_is_infinite_when_no_data_could_reject() -> None:
    assert signed_rank([1.0, 2.0, 3.0]).ci(0.05) == (-math.inf, math.inf)  # min one-sided p 1/8 > 0.025
    assert signed_rank([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).ci(0.05) == (1.0, 6.0)  # 1/64 <= 0.025: the extremes


def test_hodges_lehmann() -> None:
    assert signed_rank([1.0, 2.0, 6.0]).estimate == pytest.approx(2.75)  # Walsh: 1 1.5 2 3.5 4 6 -> (2+3.5)/2
    assert rank_sum([3.0, 5.0], [1.0]).estimate == pytest.approx(3.0)


# --- alpha spending and sample size ---------------------------------------------------------------------------


def test_look_alpha_spends_at_most_alpha_over_any_number_of_looks() -> None:
    assert seq.look_alpha(1) == pytest.approx(0.05 * 6 / math.pi**2)
    assert seq.look_alpha(2) == pytest.approx(seq.look_alpha(1) / 4)
    spent = sum(seq.look_alpha(k) for k in range(1, 100_000))
    assert 0.04999 < spent <= 0.05
    with pytest.raises(ValueError):
        seq.look_alpha(0)


def test_sessions_for_power_is_the_stated_formula() -> None:
    # (z_0.975 + z_0.8)^2 / 0.5^2 / (3/pi) = 7.849 / 0.25 / 0.9549 = 32.9
    assert seq.sessions_for_power(distance=0.5, sd=1.0, alpha_side=0.025, paired=True) == 33
    assert seq.sessions_for_power(distance=0.5, sd=1.0, alpha_side=0.025, paired=False) == 66  # per arm
    assert seq.sessions_for_power(distance=0.0, sd=1.0, alpha_side=0.025, paired=True) is None
    assert seq.sessions_for_power(distance=1.0, sd=math.nan, alpha_side=0.025, paired=True) is None
    # a huge effect still needs the fewest pairs with which the exact test can reject: 2^-n <= 0.0152
    assert seq.sessions_for_power(distance=100.0, sd=1.0, alpha_side=0.0152, paired=True) == 7
    assert seq.fewest_decisive(0.0152, paired=False) == 4  # 1 / C(8, 4) = 1/70 = 0.0143; 3 per arm: 1/20
    # every difference the same (e.g. integer switch counts 1, 1, 1): the fewest decisive, not "unknown"
    assert seq.sessions_for_power(distance=1.0, sd=0.0, alpha_side=0.0152, paired=True) == 7
    assert seq.sessions_for_power(distance=0.0, sd=0.0, alpha_side=0.0152, paired=True) is None


def test_decision_distance() -> None:
    assert seq.decision_distance(-0.3, seq.GREATER) == 0.3
    assert seq.decision_distance(0.1, seq.EQUIVALENT, (-0.5, 0.5)) == pytest.approx(0.4)
    assert seq.decision_distance(0.8, seq.EQUIVALENT, (-0.5, 0.5)) == pytest.approx(0.3)
    # a directional claim with a margin: the farther of 0 and the margin decides (either boundary does)
    assert seq.decision_distance(0.1, seq.GREATER, (-0.5, 0.5)) == pytest.approx(0.4)
    assert seq.decision_distance(0.4, seq.GREATER, (-0.5, 0.5)) == pytest.approx(0.4)
    assert seq.decision_distance(-0.2, seq.LESS, (-0.5, 0.5)) == pytest.approx(0.3)


# --- simulated experiments with known truth --------------------------------------------------------------------


def paired_sample(d: np.ndarray) -> Sample:
    """Pairs whose differences are ``d``: arm a = d, arm b = 0 (arms that both sat at 0 in every session would have
    no spread, and their claim would be uninformative: claims.uninformative)."""
    return Sample(np.asarray(d, dtype=float), np.zeros(len(d)), d)


def sequential_run(c: Claim, samples: list[Sample], alpha_at: Callable[[int], float]) -> str:
    """Look after each block until a decision; the decision, or undecided after the last look."""
    for k, s in enumerate(samples, start=1):
        v = judge(c, s, alpha=alpha_at(k), alpha_next=alpha_at(k + 1))
        if v.verdict in seq.DECIDED:
            return v.verdict
    return seq.UNDECIDED


def false_rate(c: Claim, experiments: list[list[Sample]], naive: bool = True) -> tuple[float, float]:
    """(with alpha spending, with the same alpha at every look, or nan): the share of experiments that decided."""
    spend = [sequential_run(c, e, seq.look_alpha) in seq.DECIDED for e in experiments]
    if not naive:
        return float(np.mean(spend)), math.nan
    fixed = [sequential_run(c, e, lambda k: ALPHA) in seq.DECIDED for e in experiments]
    return float(np.mean(spend)), float(np.mean(fixed))


N_EXPERIMENTS, LOOKS = 1000, 5


def null_paired(rng: np.random.Generator, block: int, shift: float = 0.0) -> list[list[Sample]]:
    """Pairs of sessions sharing a session effect, skewed noise: a - b symmetric about ``shift``."""
    n = block * LOOKS
    base = rng.normal(0, 3, (N_EXPERIMENTS, n))
    a = base + rng.lognormal(0, 1, (N_EXPERIMENTS, n)) + shift
    b = base + rng.lognormal(0, 1, (N_EXPERIMENTS, n))
    return [[paired_sample((a - b)[e, : block * k]) for k in range(1, LOOKS + 1)] for e in range(N_EXPERIMENTS)]


def null_counts(rng: np.random.Generator, block: int) -> list[list[Sample]]:
    """Integer counts per session (quality switches: Poisson(2)), so many ties and zero differences."""
    n = block * LOOKS
    d = rng.poisson(2, (N_EXPERIMENTS, n)).astype(float) - rng.poisson(2, (N_EXPERIMENTS, n))
    return [[paired_sample(d[e, : block * k]) for k in range(1, LOOKS + 1)] for e in range(N_EXPERIMENTS)]


def null_unpaired(rng: np.random.Generator, block: int) -> list[list[Sample]]:
    a, b = (rng.lognormal(0, 1, (N_EXPERIMENTS, block * LOOKS)) for _ in range(2))
    return [[Sample(a[e, : block * k], b[e, : block * k]) for k in range(1, LOOKS + 1)] for e in range(N_EXPERIMENTS)]


def null_stratified(rng: np.random.Generator, block: int) -> list[list[Sample]]:
    """Two strata far apart (a pooled test would see their spread as noise), the same law in both arms."""
    draw = [(rng.lognormal(0, 1, (N_EXPERIMENTS, block * LOOKS)) + centre,
             rng.lognormal(0, 1, (N_EXPERIMENTS, block * LOOKS)) + centre) for centre in (0.0, 10.0)]
    out = []
    for e in range(N_EXPERIMENTS):
        looks = []
        for k in range(1, LOOKS + 1):
            groups = tuple((a[e, : block * k], b[e, : block * k]) for a, b in draw)
            looks.append(Sample(np.concatenate([g[0] for g in groups]), np.concatenate([g[1] for g in groups]),
                                None, groups))
        out.append(looks)
    return out


def test_no_effect_sequential_false_decisions_within_alpha() -> None:
    """1000 experiments of 5 looks per design, no true effect (or, for equivalence, the true effect ON the margin,
    the least favourable case): the share that ever agreed or contradicted stays <= alpha with alpha spending;
    the same alpha at every look would not hold it (the check that this simulation can fail)."""
    rng = np.random.default_rng(27)
    cases = {
        "paired, wilcoxon signed-rank (blocks of 8 pairs)": (claim(), null_paired(rng, 8)),
        "unpaired, mann-whitney U (blocks of 6 per arm)": (claim(seq.LESS, paired=False), null_unpaired(rng, 6)),
        "unpaired, 2 strata, van Elteren (blocks of 4 per arm and stratum)":
            (claim(paired=False, strata=("s",)), null_stratified(rng, 4)),
        "equivalence, true shift = margin 0.5 (blocks of 8 pairs)":
            (claim(seq.EQUIVALENT, margin=0.5), null_paired(rng, 8, shift=0.5)),
        "paired integer counts, many ties (blocks of 8 pairs)": (claim(), null_counts(rng, 8)),
    }
    naive_rates = []
    for name, (c, experiments) in cases.items():
        rate, naive = false_rate(c, experiments, naive="counts" not in name)  # the slow exact null given ties
        print(f"\n{name}: false agrees+contradicts {rate:.3f} with alpha spending "
              f"(same alpha {ALPHA} at each look: {naive:.3f}), {N_EXPERIMENTS} experiments x {LOOKS} looks")
        assert rate <= ALPHA, name
        naive_rates.append(naive)
    assert np.nanmax(naive_rates) > ALPHA  # repeated looks at a fixed alpha do inflate the error: the check has teeth


def power_rate(c: Claim, samples: list[Sample]) -> float:
    return float(np.mean([judge(c, s, alpha=ALPHA, alpha_next=ALPHA).verdict == seq.AGREES for s in samples]))


def test_true_effect_found_with_the_stated_power() -> None:
    """200 experiments at the n the sample-size formula gives for power 0.8 (known effect and spread, alpha 0.05):
    the share that agrees is 0.8 within 0.07, i.e. 2.5 binomial SDs (sqrt(0.8 * 0.2 / 200) = 0.028). The formula is
    asymptotic (3/pi efficiency) and the exact test discrete; a gross error either way fails."""
    rng = np.random.default_rng(2027)
    n_pairs = seq.sessions_for_power(distance=0.5, sd=1.0, alpha_side=ALPHA / 2, power=POWER, paired=True)
    n_arm = seq.sessions_for_power(distance=0.8, sd=1.0, alpha_side=ALPHA / 2, power=POWER, paired=False)
    assert (n_pairs, n_arm) == (33, 26)
    paired = [paired_sample(rng.normal(0.5, 1.0, n_pairs)) for _ in range(200)]
    unpaired = [Sample(rng.normal(0.8, 1.0, n_arm), rng.normal(0.0, 1.0, n_arm)) for _ in range(200)]
    for name, c, samples in (("paired", claim(), paired), ("unpaired", claim(paired=False), unpaired)):
        rate = power_rate(c, samples)
        print(f"\n{name}: agrees in {rate:.3f} of 200 experiments at the formula's n (stated power {POWER})")
        assert abs(rate - POWER) <= 0.07, name


def test_counts_with_ties_keep_the_power_of_the_tie_corrected_test() -> None:
    """Quality-switch-like counts (Poisson 2 vs 3, 30 pairs, 200 experiments, alpha 0.05): the exact test given the
    ties agrees as often as scipy's tie-corrected (normal, Pratt) signed-rank test rejects, within 0.05 (the untied
    null agreed in 0.42 of them where scipy rejected in 0.66)."""
    rng = np.random.default_rng(11)
    ours, scipys = [], []
    for _ in range(200):
        d = (rng.poisson(2, 30) - rng.poisson(3, 30)).astype(float)
        ours.append(judge(claim(seq.LESS), paired_sample(d), alpha=ALPHA, alpha_next=ALPHA).verdict == seq.AGREES)
        scipys.append(stats.wilcoxon(d, alternative="less", zero_method="pratt").pvalue <= ALPHA / 2)
    print(f"\ncounts with ties: agrees {np.mean(ours):.3f}, scipy's tie-corrected test rejects {np.mean(scipys):.3f}")
    assert abs(np.mean(ours) - np.mean(scipys)) <= 0.05 and np.mean(ours) > 0.5


def test_unpaired_counts_with_ties_keep_the_power_of_the_tie_corrected_test() -> None:
    """Unpaired counts (Poisson 2 vs 3, 20 sessions per arm, 100 experiments, alpha 0.05): the exact test given the
    ties agrees as often as scipy's tie-corrected U test rejects, within 0.05."""
    rng = np.random.default_rng(12)
    ours, scipys = [], []
    for _ in range(100):
        a, b = rng.poisson(2, 20).astype(float), rng.poisson(3, 20).astype(float)
        ours.append(judge(claim(seq.LESS, paired=False), Sample(a, b), alpha=ALPHA, alpha_next=ALPHA).verdict
                    == seq.AGREES)
        scipys.append(stats.mannwhitneyu(a, b, alternative="less").pvalue <= ALPHA / 2)
    print(f"\nunpaired counts with ties: agrees {np.mean(ours):.3f}, scipy's tie-corrected U test rejects "
          f"{np.mean(scipys):.3f}")
    assert abs(np.mean(ours) - np.mean(scipys)) <= 0.05 and np.mean(ours) > 0.3


def test_pilot_estimate_of_sessions_still_needed_decides_most_claims() -> None:
    """A pilot of 10 pairs (effect 0.5 sd) is undecided at look 1 and says how many more pairs; running those and
    looking again (look 2's alpha) decides the claim in about the stated power of the experiments. The pilot's
    spread and effect are themselves noisy (a pilot that overestimates the effect asks for too few), so the bound is
    the power minus 0.15; the share that contradicts must stay tiny."""
    rng = np.random.default_rng(7)
    c, outcomes = claim(), []
    for _ in range(200):
        pilot = rng.normal(0.5, 1.0, 10)
        v = judge(c, paired_sample(pilot), alpha=seq.look_alpha(1), alpha_next=seq.look_alpha(2))
        if v.verdict in seq.DECIDED:
            outcomes.append(v.verdict)
            continue
        more = min(v.more_needed if v.more_needed is not None else 300, 300)  # a runner's budget caps it too
        d = np.concatenate([pilot, rng.normal(0.5, 1.0, more)])
        outcomes.append(judge(c, paired_sample(d), alpha=seq.look_alpha(2), alpha_next=seq.look_alpha(3)).verdict)
    agree = outcomes.count(seq.AGREES) / len(outcomes)
    print(f"\npilot of 10 pairs + the pairs it asked for: agrees {agree:.3f}, "
          f"contradicts {outcomes.count(seq.CONTRADICTS) / len(outcomes):.3f}")
    assert agree >= POWER - 0.15
    assert outcomes.count(seq.CONTRADICTS) <= 2


def test_decide_equivalence_needs_the_ci_inside_the_margin() -> None:
    rng = np.random.default_rng(5)
    few = signed_rank(rng.normal(0.0, 1.0, 10))  # no difference seen, but a wide CI
    assert few.p_above(0) > 0.025 and few.p_below(0) > 0.025  # no difference test would reject
    d = seq.decide(few, seq.EQUIVALENT, ALPHA, (-0.2, 0.2))
    assert d.verdict == seq.UNDECIDED and d.ci[0] < -0.2 < 0.2 < d.ci[1]
    many = signed_rank(rng.normal(0.0, 0.2, 200))
    assert seq.decide(many, seq.EQUIVALENT, ALPHA, (-0.2, 0.2)).verdict == seq.AGREES
    far = signed_rank(rng.normal(1.0, 0.2, 30))
    assert seq.decide(far, seq.EQUIVALENT, ALPHA, (-0.2, 0.2)).verdict == seq.CONTRADICTS
    d = seq.decide(many, seq.EQUIVALENT, ALPHA, (-0.2, 0.2))
    assert d.ci_level == pytest.approx(0.9) and d.p <= ALPHA  # TOST at alpha: the 1 - 2 alpha CI


def test_decide_direction_uses_alpha_over_two_per_side() -> None:
    t = signed_rank(np.arange(1.0, 8.0))  # all 7 positive: one-sided p = 1/128 = 0.0078
    assert seq.decide(t, seq.GREATER, 0.0304).verdict == seq.AGREES  # 0.0078 <= 0.0152
    assert seq.decide(t, seq.LESS, 0.0304).verdict == seq.CONTRADICTS
    assert seq.decide(t, seq.GREATER, 0.0076).verdict == seq.TOO_FEW  # look 2: 0.0078 > 0.0038, infinite CI
    d = seq.decide(t, seq.GREATER, 0.0304)
    assert d.p == pytest.approx(2 / 128) and d.ci_level == pytest.approx(1 - 0.0304)


def test_directional_claim_with_a_margin_contradicts_an_effect_too_small_to_mean_it() -> None:
    rng = np.random.default_rng(11)
    null = signed_rank(rng.normal(0.0, 0.2, 60))  # no effect, a CI well inside +-0.5
    d = seq.decide(null, seq.GREATER, ALPHA, (-0.5, 0.5))
    assert d.verdict == seq.CONTRADICTS and d.ci[0] < 0 < d.ci[1] < 0.5
    assert seq.decide(null, seq.GREATER, ALPHA).verdict == seq.UNDECIDED  # without the margin: never decided
    assert seq.decide(null, seq.LESS, ALPHA, (-0.5, 0.5)).verdict == seq.CONTRADICTS
    wide = signed_rank(rng.normal(0.0, 2.0, 12))  # the CI reaches past the margin: open
    assert seq.decide(wide, seq.GREATER, ALPHA, (-0.5, 0.5)).verdict == seq.UNDECIDED
    big = signed_rank(rng.normal(1.0, 0.2, 30))  # the claimed effect, larger than the margin
    assert seq.decide(big, seq.GREATER, ALPHA, (-0.5, 0.5)).verdict == seq.AGREES
    small = signed_rank(rng.normal(0.2, 0.1, 80))  # a real but small effect: it agrees (the sign decides first)
    assert seq.decide(small, seq.GREATER, ALPHA, (-0.5, 0.5)).verdict == seq.AGREES
    v = judge(claim(margin=0.5), paired_sample(rng.normal(0.0, 0.2, 60)), alpha=ALPHA, alpha_next=ALPHA)
    assert v.verdict == seq.CONTRADICTS and "margin's size" in v.note


def test_futility_boundary_keeps_the_error_rate_at_an_effect_on_the_margin() -> None:
    """1000 experiments of 5 looks, the true shift ON the margin (0.5, the least favourable case for the futility
    boundary): the share that ever contradicted stays <= alpha with alpha spending (it agrees, rightly, most of
    the time); and with no effect, the futility boundary decides (contradicts) most experiments by the last look."""
    rng = np.random.default_rng(31)
    c = claim(margin=0.5)
    on_margin = null_paired(rng, 8, shift=0.5)
    wrong = float(np.mean([sequential_run(c, e, seq.look_alpha) == seq.CONTRADICTS for e in on_margin]))
    fixed = float(np.mean([sequential_run(c, e, lambda k: ALPHA) == seq.CONTRADICTS for e in on_margin]))
    print(f"\ndirectional, margin 0.5, true shift 0.5: false contradicts {wrong:.3f} with alpha spending "
          f"(same alpha at each look: {fixed:.3f})")
    assert wrong <= ALPHA
    tight = [[paired_sample(rng.normal(0.0, 0.3, 12 * k)) for k in range(1, LOOKS + 1)] for _ in range(200)]
    found = float(np.mean([sequential_run(c, e, seq.look_alpha) == seq.CONTRADICTS for e in tight]))
    print(f"no effect, sd 0.3, margin 0.5, 12 pairs a block: contradicted by look {LOOKS} in {found:.2f}")
    assert found >= 0.8
