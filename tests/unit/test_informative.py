"""Uninformative claims (analysis/claims.py uninformative): a metric with no spread, at its cap, or every pair tied
neither agrees nor contradicts, spends no alpha, and asks for no more sessions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import Claim, cells_needed, evaluate, replay


def _claim(expect: str = seq.GREATER, **kw: object) -> Claim:
    return Claim(id="c", statement="s", figure="-", metric="m", a={"arm": "a"}, b={"arm": "b"}, expect=expect,
                 pair_by=("block",), **kw)  # type: ignore[arg-type]


def _sessions(a: list[float], b: list[float]) -> pd.DataFrame:
    rows = [{"run": f"{arm}{i}", "block": i + 1, "arm": arm, "saturated": False, "m": v}
            for arm, values in (("a", a), ("b", b)) for i, v in enumerate(values)]
    return pd.DataFrame(rows)


def test_a_metric_with_one_value_everywhere_is_uninformative_even_for_equivalence() -> None:
    same = _sessions([144.0] * 8, [144.0] * 8)  # the lowest level in every session of both arms
    for claim in (_claim(), _claim(seq.EQUIVALENT, margin=10.0)):
        v = evaluate([claim], same)[0]
        assert v.verdict == seq.UNINFORMATIVE and v.more_needed is None
        assert v.note == "no spread: all 16 sessions have m = 144"
    # without the rule the equivalence claim would agree: TOST on 8 zero differences inside the margin rejects
    assert evaluate([_claim(seq.EQUIVALENT, margin=10.0)], _sessions([144.0 + i for i in range(8)],
                                                                     [144.0 + i for i in range(8)]))[0].verdict \
        == seq.AGREES  # the same zero differences with a spread across pairs: the arms track each other


def test_a_metric_at_its_cap_in_every_session_is_uninformative() -> None:
    rng = np.random.default_rng(1)
    a, b = list(11.5 + rng.uniform(-0.2, 0.2, 8)), list(11.6 + rng.uniform(-0.2, 0.2, 8))
    capped = evaluate([_claim(seq.LESS, cap=(10.0, 14.0))], _sessions(a, b))[0]
    assert capped.verdict == seq.UNINFORMATIVE and capped.note.startswith("at its cap: all 16 sessions' m within")
    assert evaluate([_claim(seq.LESS)], _sessions(a, b))[0].verdict != seq.UNINFORMATIVE  # no cap declared
    below = evaluate([_claim(seq.LESS, cap=(10.0, 14.0))], _sessions([9.0] + a[1:], b))[0]
    assert below.verdict != seq.UNINFORMATIVE  # one session off the cap: the metric moved


def test_every_pair_tied_makes_a_directional_claim_uninformative() -> None:
    values = [float(i) for i in range(8)]
    v = evaluate([_claim()], _sessions(values, values))[0]
    assert v.verdict == seq.UNINFORMATIVE and v.note == "every pair tied (8 of 8 differences 0)"
    v = evaluate([_claim()], _sessions([x + (i == 3) for i, x in enumerate(values)], values))[0]
    assert v.verdict != seq.UNINFORMATIVE  # one pair apart


def test_an_uninformative_look_spends_no_alpha_and_asks_for_no_sessions() -> None:
    # blocks 1-6 all at one value (uninformative), block 7 a pair apart: block 7's look is the claim's look 1
    sessions = _sessions([5.0] * 6 + [6.0], [5.0] * 7)
    assert [v.look for v in replay([_claim()], sessions[sessions["block"] <= 6])] == [1]  # six looks, none spent
    assert replay([_claim()], sessions[sessions["block"] <= 6])[0].verdict == seq.UNINFORMATIVE
    v = replay([_claim()], sessions)[0]
    assert v.verdict == seq.UNDECIDED and v.look == 1 and v.alpha == seq.look_alpha(1)
    flat = evaluate([_claim()], _sessions([5.0] * 6, [5.0] * 6), look=1)
    assert cells_needed(flat) == []
