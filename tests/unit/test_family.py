"""A paper's claims as one family: Holm's step-down inside the alpha spending (analysis/claims.py step_down), the
family's share per experiment, and the family-wise error by simulation (bench/family_error.py, fewer
experiments here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import FIDELITY, Claim, evaluate, family_shares, in_families, replay
from nest_experiments.studies import STUDIES

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("family_error", ROOT / "bench" / "family_error.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["family_error"] = module
    spec.loader.exec_module(module)
    return module


def _claim(cid: str, *, family: str = "paper", size: int = 0, kind: str = "paper") -> Claim:
    return Claim(id=cid, statement="s", figure="-", metric=cid, a={"arm": "a"}, b={"arm": "b"}, expect=seq.GREATER,
                 pair_by=("block", "unit"), family=family, family_size=size, kind=kind)


def _sessions(diffs: dict[str, list[float]], blocks: list[int] | None = None) -> pd.DataFrame:
    """One pair per unit; metric ``cid`` differs by ``diffs[cid][i]`` between the arms of unit i (nan: no pair),
    unit i in block ``blocks[i]`` (all in block 1 by default)."""
    n = max(len(d) for d in diffs.values())
    rows = []
    for i in range(n):
        for arm in ("a", "b"):
            row = {"run": f"{arm}{i}", "block": blocks[i] if blocks else 1, "unit": i, "arm": arm, "saturated": False}
            for cid, d in diffs.items():
                row[cid] = (d[i] if i < len(d) else float("nan")) if arm == "a" else 0.0
            rows.append(row)
    return pd.DataFrame(rows)


UP6, UP8 = [1.0 + i / 10 for i in range(6)], [1.0 + i / 10 for i in range(8)]  # two-sided p 2/64, 2/256
MIXED = [1.0, -1.1, 1.2, -1.3, 1.4, -1.5, 1.6, -1.7]


def test_holm_passes_a_decided_claims_share_on_to_the_family() -> None:
    # fixed-size, family of two at 0.05: each at 0.025 first; 6 pairs all up (p 0.031) decide only at 0.05
    alone = evaluate([_claim("six"), _claim("null")], _sessions({"six": UP6, "null": MIXED}))
    assert [v.verdict for v in alone] == [seq.TOO_FEW, seq.UNDECIDED]  # 6 pairs cannot reach 0.025
    assert alone[0].alpha == pytest.approx(0.025) and alone[0].family_open == 2 and alone[0].family_size == 2
    together = evaluate([_claim("six"), _claim("eight")], _sessions({"six": UP6, "eight": UP8}))
    assert [v.verdict for v in together] == [seq.AGREES, seq.AGREES]
    assert together[1].alpha == pytest.approx(0.025) and together[1].family_open == 2  # decided first, at 0.05 / 2
    assert together[0].alpha == pytest.approx(0.05) and together[0].family_open == 1  # then at 0.05 / 1


def test_claims_of_no_family_are_each_judged_at_alpha() -> None:
    verdicts = evaluate([_claim("six", family=""), _claim("null", family="")], _sessions({"six": UP6, "null": MIXED}))
    assert verdicts[0].verdict == seq.AGREES and verdicts[0].alpha == pytest.approx(0.05)


def test_an_experiments_share_of_its_familys_alpha_is_its_claims_over_the_family() -> None:
    shares = family_shares([_claim("x", size=10), _claim("y", size=10), _claim("z", family="other", size=4)], 0.05)
    assert shares["x"] == ("paper", pytest.approx(0.01), 10)
    assert shares["z"] == ("other", pytest.approx(0.0125), 4)
    assert family_shares([_claim("solo", family="")], 0.05)["solo"][1] == 0.05


def test_replay_judges_an_earlier_look_again_at_the_share_a_decision_passed_on() -> None:
    # block 1: 8 pairs each. "x": 7 up, 1 down (the smallest): p 0.0156, above look 1's 0.0152 at 0.05 / 2; it has
    # no pair in block 2. "y": mixed in block 1; in block 2 24 more pairs, all up: it decides at its look 2.
    x = [1.0 + i / 10 for i in range(7)] + [-0.5]
    blocks = [1] * 8 + [2] * 24
    y_up = MIXED + [5.0 + i / 100 for i in range(24)]
    y_null = MIXED + [(5.0 + i / 100) * (-1) ** i for i in range(24)]
    v_x, v_y = replay([_claim("x"), _claim("y")], _sessions({"x": x, "y": y_up}, blocks))
    assert v_y.verdict == seq.AGREES and v_y.look == 2 and v_y.family_open == 2
    # x's sessions are those of its look 1; with y decided it is judged there again at 0.05 / 1: 0.0304 >= 0.0156
    assert v_x.verdict == seq.AGREES and v_x.look == 1 and v_x.family_open == 1
    assert v_x.alpha == pytest.approx(seq.look_alpha(1, 0.05))
    v_x, v_y = replay([_claim("x"), _claim("y")], _sessions({"x": x, "y": y_null}, blocks))
    assert v_y.verdict == seq.UNDECIDED and v_x.verdict == seq.UNDECIDED  # nothing passed on: x stays open
    assert v_x.alpha == pytest.approx(seq.look_alpha(1, 0.025))


def test_a_study_puts_its_paper_claims_in_one_family_and_its_fidelity_checks_in_another() -> None:
    racing = STUDIES["racing"]
    paper = [c for c in racing.paper_claims if c.kind != FIDELITY]
    fidelity = [c for c in racing.paper_claims if c.kind == FIDELITY]
    assert paper and fidelity
    judged = racing.claims_for("racing_patterns") + racing.claims_for("racing_chromium")
    assert {c.family for c in judged if c.kind == FIDELITY} == {"racing (fidelity)"}
    assert {c.family for c in judged if c.kind != FIDELITY} == {"racing"}
    assert {c.family_size for c in judged if c.kind != FIDELITY} == {len(paper)}
    assert {c.family_size for c in judged if c.kind == FIDELITY} == {len(fidelity)}
    marked = in_families("x", [_claim("a", family=""), _claim("b", family="", kind=FIDELITY)],
                         [_claim("b", family="", kind=FIDELITY)])
    assert [(c.family, c.family_size) for c in marked] == [("x (fidelity)", 1)]


def test_fifteen_claims_with_no_effect_err_together_within_alpha_with_holm_not_without() -> None:
    """The family-wise error of bench/family_error.py's null family (15 directional claims, no effect: paired,
    tied counts, unpaired, with margins), 150 sequential experiments of 6 blocks: within alpha with Holm (plus 2
    binomial SEs of 150, 0.036), far above it without (each claim at 0.05)."""
    bench = _bench()
    holm = bench.simulate("null", reps=150, blocks=6, per_block=3, seed=7)
    none = bench.simulate("null", reps=60, blocks=6, per_block=3, seed=7, holm=False)
    print(f"\nfamily-wise error, 15 claims, no effect: {holm.family_wise:.3f} with Holm (150 experiments), "
          f"{none.family_wise:.3f} without (60)")
    assert holm.family_wise <= 0.05 + 0.036
    assert none.family_wise >= 0.15  # the check has teeth: the same claims without family control err far more
