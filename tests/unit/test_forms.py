"""The claim forms that keep a sentence's condition (analysis/claims.py): a metric per unit of another, a share of
pairs or sessions against the paper's share, the worst case of a block against a bound, cells left out."""

from __future__ import annotations

import pandas as pd
import pytest

from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import Claim, evaluate, sample
from nest_experiments.analysis.ranktests import share_test
from nest_experiments.errors import ConfigError


def _pairs(a: list[float], b: list[float], **extra: list[object]) -> pd.DataFrame:
    rows = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for arm, v in (("a", x), ("b", y)):
            rows.append({"run": f"{arm}{i}", "block": i + 1, "arm": arm, "saturated": False, "m": v,
                         **{k: vals[i] for k, vals in extra.items()}})
    return pd.DataFrame(rows)


def test_the_binomial_share_test_and_its_ci() -> None:
    t = share_test(0, 10, 0.5)
    assert t.estimate == -0.5 and t.p_below(0.0) == pytest.approx(0.5**10)
    lo, hi = t.ci(0.05)
    assert lo == -0.5 and hi + 0.5 == pytest.approx(0.3085, abs=1e-4)  # Clopper-Pearson upper of 0/10
    assert share_test(10, 10, 0.5).p_above(0.0) == pytest.approx(0.5**10)
    with pytest.raises(ValueError):
        share_test(3, 2, 0.5)


def test_a_share_of_the_pairs_not_alike_against_the_papers() -> None:
    # 12 pairs: 10 with a lower by 20 % (outside the 10 % band), 2 alike (2 % apart)
    b = [100.0 + i for i in range(12)]
    a = [x * 0.8 for x in b[:10]] + [x * 0.98 for x in b[10:]]
    claim = Claim(id="worse", statement="a worse in 41 % of the pairs", figure="-", metric="m", a={"arm": "a"},
                  b={"arm": "b"}, pair_by=("block",), share="a lower", paper_share=0.41, share_of="unlike",
                  tie=0.10, tie_relative=True, expect=seq.EQUIVALENT, margin=0.15)
    s = sample(claim, _pairs(a, b))
    assert s.diffs is not None and len(s.diffs) == 10 and "12 pairs: 10 a lower, 2 alike, 0 a higher" in s.note
    v = evaluate([claim], _pairs(a, b))[0]
    assert v.effect == 1.0 and v.verdict == seq.CONTRADICTS  # 10 of 10 worse: far from the paper's 41 %
    assert v.ci is not None and v.ci[0] > 0.56
    every = Claim(**{**claim.__dict__, "id": "all", "share_of": "all"})
    assert evaluate([every], _pairs(a, b))[0].n_pairs == 12
    alike = evaluate([claim], _pairs([x * 0.99 for x in b], b))[0]
    assert alike.verdict == seq.UNINFORMATIVE and alike.note.startswith("all 12 pairs alike within the tie band")


def test_a_share_of_one_arms_sessions_above_a_threshold() -> None:
    claim = Claim(id="half", statement="about half correlate at >= 0.55", figure="-", metric="m", a={}, b={},
                  share="above", threshold=0.55, paper_share=0.5, expect=seq.EQUIVALENT, margin=0.15)
    sessions = pd.DataFrame({"run": [f"r{i}" for i in range(40)], "block": 1, "saturated": False,
                             "m": [0.9 if i % 2 else 0.1 for i in range(40)]})
    v = evaluate([claim], sessions)[0]
    assert v.effect == 0.5 and v.n_pairs == 40 and v.verdict == seq.AGREES  # 20 of 40: inside 0.35-0.65
    few = evaluate([claim], sessions.iloc[:4])[0]
    assert few.verdict == seq.TOO_FEW  # no count of 4 sessions could decide


def test_the_worst_case_of_each_block_against_a_bound() -> None:
    # 6 blocks x 3 cases; every case above 87 but one case of every block below it: "in all cases" fails
    rows = [{"run": f"{blk}{case}", "block": blk, "case": case, "saturated": False,
             "m": (80.0 + blk / 10) if case == "c" else 95.0} for blk in range(1, 7) for case in ("a", "b", "c")]
    sessions = pd.DataFrame(rows)
    claim = Claim(id="all", statement="> 87 % in all cases", figure="-", metric="m", a={}, b={}, reference=87.0,
                  worst_over=("case",), pair_by=("block",), expect=seq.GREATER)
    s = sample(claim, sessions)
    assert list(s.a) == pytest.approx([80.1, 80.2, 80.3, 80.4, 80.5, 80.6])  # per block, its worst case
    worst = evaluate([claim], sessions)[0]
    assert worst.verdict == seq.CONTRADICTS and worst.n_a == 6
    assert worst.more_unit == "blocks"  # one value per block, not per session (18 sessions here)
    pooled = Claim(id="median", statement="> 87 %", figure="-", metric="m", a={}, b={}, reference=87.0,
                   expect=seq.GREATER)
    assert evaluate([pooled], sessions)[0].verdict == seq.AGREES  # the median session hides the worst case
    left_out = Claim(**{**claim.__dict__, "id": "but_c", "exclude": ({"case": "c"},)})
    assert evaluate([left_out], sessions)[0].verdict == seq.UNINFORMATIVE  # every other case at 95: no spread
    with pytest.raises(ConfigError, match="worst_over"):
        Claim(id="x", statement="s", figure="-", metric="m", a={}, b={}, reference=1.0, worst_over=("case",),
              expect=seq.GREATER)


def test_a_metric_per_unit_of_another() -> None:
    # the paper: FQ-PIE 1700 ms at 600 kbit/s, PIE 1600 at 300: higher RTT, lower RTT per unit of bitrate
    sessions = _pairs([1700.0 + i for i in range(8)], [1600.0 + i for i in range(8)], rate=[0.0] * 16)
    sessions["rate"] = [600.0 if arm == "a" else 300.0 for arm in sessions["arm"]]
    per = Claim(id="per", statement="s", figure="-", metric="m", per="rate", a={"arm": "a"}, b={"arm": "b"},
                pair_by=("block",), expect=seq.LESS, scale="ratio")
    v = evaluate([per], sessions)[0]
    assert v.verdict == seq.AGREES and v.effect == pytest.approx((1703.5 / 600) / (1603.5 / 300), rel=1e-3)
    raw = Claim(**{**per.__dict__, "id": "raw", "per": ""})
    assert evaluate([raw], sessions)[0].verdict == seq.CONTRADICTS  # unconditionally the RTT is higher
