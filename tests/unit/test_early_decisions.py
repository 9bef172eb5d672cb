"""Early decisions that hold (analysis/claims.py held_back): a decision carried by a few untied pairs among many
ties is held back; a claim decided at an earlier look shows its CI on all the sessions beside the decision."""

from __future__ import annotations

import pandas as pd

from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import Claim, evaluate, replay


def _claim(expect: str = seq.GREATER, **kw: object) -> Claim:
    return Claim(id="c", statement="s", figure="-", metric="m", a={"arm": "a"}, b={"arm": "b"}, expect=expect,
                 pair_by=("block",), **kw)  # type: ignore[arg-type]


def _sessions(diffs: list[float]) -> pd.DataFrame:
    rows = [{"run": f"{arm}{i}", "block": i + 1, "arm": arm, "saturated": False,
             "m": 10.0 + i + (d if arm == "a" else 0.0)} for i, d in enumerate(diffs) for arm in ("a", "b")]
    return pd.DataFrame(rows)


def test_a_decision_on_mostly_tied_pairs_is_held_back() -> None:
    # 8 pairs up, 10 tied: the tie-aware test rejects (p 0.0078 at 0.05), but the ties are more than half
    mostly_tied = _sessions([1.0 + i / 10 for i in range(8)] + [0.0] * 10)
    v = evaluate([_claim()], mostly_tied)[0]
    assert v.p is not None and v.p < 0.05
    assert v.verdict == seq.UNDECIDED and v.note == "held back: 10 of 18 pairs tied (more than half)"
    assert v.more_needed is None  # at this tie share no number of pairs clears the rule (held_more)
    v = evaluate([_claim()], _sessions([1.0 + i / 10 for i in range(8)] + [0.0] * 7))[0]
    assert v.verdict == seq.AGREES  # 7 of 15 tied: at most half, and 8 untied pairs suffice at 0.05


def test_an_equivalence_claims_zero_differences_count_for_it() -> None:
    v = evaluate([_claim(seq.EQUIVALENT, margin=1.0)], _sessions([0.0] * 8))[0]
    assert v.verdict == seq.AGREES and not v.note  # the arms track each other in every pair: no difference


def test_a_claim_decided_early_shows_its_ci_on_all_the_sessions() -> None:
    # decided early on the first pairs, all up but one; the later blocks bring pairs that go either way
    diffs = [1.0 + i / 10 for i in range(6)] + [(-1) ** i * (0.5 + i / 10) for i in range(6)]
    v = replay([_claim()], _sessions(diffs))[0]
    assert v.verdict == seq.AGREES and v.n_pairs is not None and v.n_pairs < 12 and v.all_n == 12
    assert v.all_ci is not None and v.all_ci[0] < 0 < v.all_ci[1]  # on all 12 the same level's CI spans 0
    on_six = replay([_claim()], _sessions(diffs[:6]))[0]
    assert on_six.all_n is None  # its look had every session: nothing to add


def test_a_claim_held_back_by_its_ties_says_no_count_of_sessions_clears_the_rule() -> None:
    from nest_experiments.reports.evidence_report import _verdict

    v = evaluate([_claim()], _sessions([1.0 + i / 10 for i in range(8)] + [0.0] * 10))[0]
    row = {"verdict": v.verdict, "more_needed": v.more_needed, "more_unit": v.more_unit, "note": v.note}
    assert _verdict(row) == "undecided (no number of sessions clears the early-decision rule at this tie share)"
    # the power formula's count is what an undecided claim the rule does not hold back shows
    open_claim = evaluate([_claim()], _sessions([1.0, -0.5, 0.8, 0.3, -0.2, 0.6]))[0]
    assert open_claim.verdict == seq.UNDECIDED and not open_claim.note and open_claim.more_needed is not None
