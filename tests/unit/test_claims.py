"""claims: declaring claims (dataclass and TOML), judging them on a per-session table, the Markdown verdict table and
the cells still needing sessions."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import (
    Claim,
    cells_needed,
    claim_from_table,
    claims_from_tables,
    evaluate,
    keep_decided,
    more_text,
    replay,
    sample,
    verdict_table,
)
from nest_experiments.errors import ConfigError

H3_FASTER = """
[[claims]]
id = "h3_higher_bitrate"
statement = "QUIC streams a higher bitrate than TCP under BOLA"
figure = "Fig. 5"
paper_value = "+12 %"
metric = "bitrate_kbps"
a = { transport = "h3" }
b = { transport = "tcp" }
conditions = { abr = "bola", target = ["5ms", "15ms"] }
pair_by = ["trace"]
strata = ["trace_family"]
expect = "a > b"
scale = "ratio"

[[claims]]
id = "same_startup"
statement = "start-up delay does not depend on the transport"
figure = "Table 3"
metric = "startup_s"
a = { transport = "h3" }
b = { transport = "tcp" }
pair_by = ["trace"]
strata = ["trace_family"]
expect = "|a - b| < margin"
margin = "10%"
"""


def abr_sessions(seed: int = 0, *, traces: int = 10, gain: float = 1.12, saturated: int = 0) -> pd.DataFrame:
    """Both transports play the same traces of two families (each trace's own level), under BOLA and another ABR.
    The first ``saturated`` h3 sessions are saturated and absurdly fast (they would mislead if kept)."""
    rng = np.random.default_rng(seed)
    rows = []
    for family in ("fcc", "hsdpa"):
        for t in range(traces):
            level = rng.lognormal(8, 0.5)
            for abr in ("bola", "bba"):
                for transport in ("tcp", "h3"):
                    noise = rng.lognormal(0, 0.05)
                    rows.append(dict(trace=f"t{t}", trace_family=family, abr=abr, target="5ms", transport=transport,
                                     bitrate_kbps=level * noise * (gain if transport == "h3" else 1.0),
                                     startup_s=2.0 + rng.normal(0, 0.02), saturated=False))
    df = pd.DataFrame(rows)
    idx = df.index[(df.transport == "h3") & (df.abr == "bola")][:saturated]
    df.loc[idx, "saturated"] = True
    df.loc[idx, "bitrate_kbps"] = 1.0  # the saturated sessions would contradict the claim
    return df


def loaded() -> tuple[Claim, ...]:
    return claims_from_tables(tomllib.loads(H3_FASTER)["claims"])


def test_toml_claims_load() -> None:
    faster, same = loaded()
    assert faster.id == "h3_higher_bitrate" and faster.paired and faster.scale == "ratio"
    assert faster.conditions["target"] == ("5ms", "15ms") and faster.strata == ("trace_family",)
    assert same.margin == pytest.approx(0.10) and same.margin_relative


def test_paired_ratio_claim_agrees_with_the_true_gain() -> None:
    faster, same = loaded()
    v, w = evaluate([faster, same], abr_sessions())
    assert v.verdict == seq.AGREES and v.test == "wilcoxon signed-rank"
    assert v.n_pairs == 20 and (v.n_a, v.n_b) == (20, 20)  # bola only; 10 traces x 2 families
    assert v.ci is not None and v.ci[0] < 1.12 < v.ci[1] and v.effect == pytest.approx(1.12, rel=0.03)
    assert v.ci_level == pytest.approx(0.95) and v.more_needed is None
    assert w.verdict == seq.AGREES and w.test.startswith("TOST") and w.ci_level == pytest.approx(0.90)
    assert (w.n_a, w.n_pairs) == (40, 20)  # no condition: both ABRs, a trace's two sessions per arm averaged


def test_saturated_sessions_are_excluded_and_counted() -> None:
    faster, _ = loaded()
    v = evaluate([faster], abr_sessions(saturated=3))[0]
    assert v.n_saturated_excluded == 3
    assert (v.n_a, v.n_b, v.n_pairs) == (17, 20, 17)
    assert v.verdict == seq.AGREES  # kept, the three 1 kbit/s sessions would pull the other way
    assert "3 saturated out" in verdict_table([v])
    df = abr_sessions(saturated=3).astype({"saturated": object})
    df.loc[df.index[df.transport == "tcp"][:2], "saturated"] = None  # not measured: kept, not counted
    v = evaluate([faster], df)[0]
    assert (v.n_saturated_excluded, v.n_b) == (3, 20)


def test_pairing_never_crosses_strata() -> None:
    """The same trace names in both families: h3 only played the fcc traces and tcp only the hsdpa ones, so no
    session has a partner, although the pair key ("trace") alone would match them all."""
    faster, _ = loaded()
    df = abr_sessions()
    df = df[((df.transport == "h3") & (df.trace_family == "fcc")) | ((df.transport == "tcp") &
                                                                     (df.trace_family == "hsdpa"))]
    v = evaluate([faster], df)[0]
    assert v.n_pairs == 0 and v.verdict == seq.NO_DATA and (v.n_a, v.n_b) == (10, 10)
    assert "without a partner" in v.note


def test_pairs_are_formed_within_strata() -> None:
    """Within each family the pairs are exact (h3 = 1.5 x tcp on the same trace), while the same trace name is 100x
    lower in hsdpa, where h3 played only t0-t3: a pair key without the family would average h3's fcc session
    against tcp's fcc and hsdpa ones for t4-t7 (a ratio of 15)."""
    rows = [dict(trace=f"t{t}", trace_family=fam, transport=tr, abr="bola", target="5ms",
                 bitrate_kbps=(100.0 if fam == "fcc" else 1.0) * (1 + t) * (1.5 if tr == "h3" else 1.0),
                 startup_s=1.0, saturated=False)
            for fam in ("fcc", "hsdpa") for t in range(8) for tr in ("h3", "tcp")
            if not (fam == "hsdpa" and tr == "h3" and t >= 4)]
    v = evaluate([loaded()[0]], pd.DataFrame(rows))[0]
    assert v.n_pairs == 12 and v.effect == pytest.approx(1.5) and v.ci == pytest.approx((1.5, 1.5))


def test_several_sessions_of_one_pair_key_are_averaged() -> None:
    c = Claim(id="c", statement="s", figure="f", metric="m", a={"arm": "a"}, b={"arm": "b"}, expect="a > b",
              pair_by=("seed",))
    df = pd.DataFrame([dict(seed=s, arm=arm, m=s + (1.0 if arm == "a" else 0.0) + rep * 0.1, saturated=False)
                       for s in range(8) for arm in ("a", "b") for rep in range(2 if arm == "a" else 1)])
    v = evaluate([c], df)[0]
    assert (v.n_a, v.n_b, v.n_pairs) == (16, 8, 8) and v.effect == pytest.approx(1.05)


def test_unpaired_claim_is_mann_whitney_with_the_hodges_lehmann_shift() -> None:
    c = Claim(id="c", statement="s", figure="f", metric="m", a={"aqm": "fq_pie"}, b={"aqm": "pie"}, expect="a < b")
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 12), rng.normal(2, 1, 9)
    df = pd.DataFrame([dict(aqm="fq_pie", m=x, saturated=False) for x in a] +
                      [dict(aqm="pie", m=x, saturated=False) for x in b])
    v = evaluate([c], df)[0]
    assert v.test == "mann-whitney U" and v.n_pairs is None and v.verdict == seq.AGREES
    assert v.effect == pytest.approx(float(np.median(np.subtract.outer(a, b))))
    assert v.p == pytest.approx(2 * stats.mannwhitneyu(a, b, alternative="less", method="exact").pvalue)


def test_equivalence_with_p_above_alpha_but_a_wide_ci_stays_undecided() -> None:
    """8 pairs, no difference in truth: the signed-rank test is far from rejecting (p >= 0.05), yet the CI spans
    beyond the 0.1 margin, so "no difference" is not shown: undecided, with the pairs still needed."""
    c = Claim(id="c", statement="s", figure="f", metric="m", a={"arm": "a"}, b={"arm": "b"}, pair_by=("seed",),
              expect="|a - b| < margin", margin=0.1)
    rng = np.random.default_rng(4)
    d = rng.normal(0, 0.5, 8)
    df = pd.DataFrame([dict(seed=s, arm="a", m=10 + d[s], saturated=False) for s in range(8)] +
                      [dict(seed=s, arm="b", m=10.0, saturated=False) for s in range(8)])
    assert stats.wilcoxon(d).pvalue >= 0.05
    v = evaluate([c], df)[0]
    assert v.ci is not None and v.ci[0] < -0.1 and v.ci[1] > 0.1
    assert v.verdict == seq.UNDECIDED and v.more_needed is not None and v.more_needed > 0
    assert "pairs" in verdict_table([v])


def test_relative_margin_on_the_difference_scale_is_a_fraction_of_bs_median() -> None:
    c = Claim(id="c", statement="s", figure="f", metric="m", a={"arm": "a"}, b={"arm": "b"}, pair_by=("seed",),
              expect="|a - b| < margin", margin=0.05, margin_relative=True)
    rng = np.random.default_rng(6)
    df = pd.DataFrame([dict(seed=s, arm=arm, m=100 + (3.0 if arm == "a" else 0.0) + rng.normal(0, 0.2),
                            saturated=False) for s in range(30) for arm in ("a", "b")])
    assert evaluate([c], df)[0].verdict == seq.AGREES  # 3 < 5 % of 100
    df.loc[df.arm == "a", "m"] += 5.0  # now 8 > 5
    assert evaluate([c], df)[0].verdict == seq.CONTRADICTS


def test_look_spends_alpha_and_more_needed_counts_at_the_next_look() -> None:
    faster, _ = loaded()
    df = abr_sessions(traces=3, gain=1.02)
    v1, v3 = evaluate([faster], df, look=1)[0], evaluate([faster], df, look=3)[0]
    assert v1.alpha == pytest.approx(seq.look_alpha(1)) and v3.alpha == pytest.approx(seq.look_alpha(3))
    assert v1.ci_level == pytest.approx(1 - seq.look_alpha(1))
    assert v1.verdict not in seq.DECIDED
    assert v3.more_needed is not None and v1.more_needed is not None and v3.more_needed > v1.more_needed


def test_ratio_claim_with_nonpositive_values_has_no_data_and_says_why() -> None:
    faster, _ = loaded()
    df = abr_sessions()
    df.loc[0, "bitrate_kbps"] = 0.0
    v = evaluate([faster], df)[0]
    assert v.verdict == seq.NO_DATA and 'scale = "diff"' in v.note


def test_empty_arm_says_which_values_exist() -> None:
    c = Claim(id="c", statement="s", figure="f", metric="bitrate_kbps", a={"transport": "h2"},
              b={"transport": "tcp"}, expect="a > b")
    v = evaluate([c], abr_sessions())[0]
    assert v.verdict == seq.NO_DATA and "'h3'" in v.note and v.n_a == 0


def test_cells_needed_lists_both_arms_of_undecided_claims_only() -> None:
    faster, same = loaded()
    df = abr_sessions(traces=2)
    v_faster, v_same = evaluate([faster, same], df, look=2)
    assert v_faster.verdict not in seq.DECIDED
    cells = cells_needed([v_faster, v_same])
    undecided = [v.claim.id for v in (v_faster, v_same) if v.verdict not in seq.DECIDED]
    assert {tuple(sorted(c.cell.items())) for c in cells} >= {
        (("abr", "bola"), ("target", ("5ms", "15ms")), ("transport", t)) for t in ("h3", "tcp")}
    assert all(set(c.claims) <= set(undecided) for c in cells)
    decided = evaluate([faster], abr_sessions())
    assert cells_needed(decided) == []


def test_verdict_table_renders_one_row_per_claim() -> None:
    vs = evaluate(list(loaded()), abr_sessions())
    table = verdict_table(vs)
    lines = table.strip().splitlines()
    assert len(lines) == 2 + len(vs)
    assert "Fig. 5" in lines[2] and "+12 %" in lines[2] and "x1.1" in lines[2] and "agrees" in lines[2]
    assert "\\|a - b\\| < margin (margin 10%, source unstated)" in lines[3]  # a margin whose source is not said
    assert all(line.count(" | ") == 6 for line in lines[2:])  # the escaped | stays inside its cell


def test_sessions_still_needed_past_a_practical_size_say_the_effect_is_near_its_boundary() -> None:
    assert more_text(12, "pairs") == "+12 pairs"
    assert more_text(1000, "pairs") == "+1000 pairs"  # the cap itself is still a count
    assert more_text(546635, "pairs", " needed") == \
        "> 1000 pairs needed: effect near its boundary, not decidable at a practical size"
    assert more_text(None, "pairs") == "—" and more_text(float("nan"), "blocks") == "—"


def base(**over: Any) -> dict[str, Any]:
    table = dict(id="c", statement="s", figure="Fig. 1", metric="m", a={"aqm": "fq_pie"}, b={"aqm": "pie"},
                 expect="a < b")
    return {**table, **over}


@pytest.mark.parametrize("table, key, words", [
    (base(colour="red"), "claims.c.colour", "unknown key"),
    ({k: v for k, v in base().items() if k != "metric"}, "claims.c.metric", "missing"),
    (base(expect="a >> b"), "claims.c.expect", "is not one of"),
    (base(scale="log"), "claims.c.scale", "'diff' or 'ratio'"),
    (base(margin=-0.5), "claims.c.margin", "needs margin > 0"),  # a directional claim's smallest meant effect
    (base(expect="|a - b| < margin"), "claims.c.margin", "needs margin > 0"),
    (base(expect="|a - b| < margin", margin="5 percent"), "claims.c.margin", "percentage like"),
    (base(expect="|a - b| < margin", margin=0.5, scale="ratio"), "claims.c.margin", "relative margin"),
    (base(b={"transport": "tcp"}), "claims.c.b", "same axes"),
    (base(b={"aqm": "fq_pie"}), "claims.c.b", "the same cell"),
    (base(a={"aqm": ["fq_pie", "pie"]}), "claims.c.a", "one value per axis"),
    (base(conditions={"aqm": "pie"}), "claims.c.conditions", "is an arm axis"),
    (base(pair_by="trace"), "claims.c.pair_by", "list of column names"),
    (base(strata=3), "claims.c.strata", "list of column names"),
    (base(strata=["aqm"]), "claims.c.strata", "is an arm axis"),
    (base(pair_by=["trace", "aqm"]), "claims.c.pair_by", "is an arm axis"),
    (base(figure=4), "claims.c.figure", "expected a string"),
    (base(reference=5.0), "claims.c.b", "leave b empty"),
    ({k: v for k, v in base(reference="5ms").items() if k != "b"}, "claims.c.reference", "expected a number"),
    ({k: v for k, v in base(reference=0.0, scale="ratio").items() if k != "b"}, "claims.c.reference", "> 0"),
    ({k: v for k, v in base(reference=1.0, pair_by=["block"]).items() if k != "b"}, "claims.c.pair_by",
     "no partner"),
    ("c", "claims", "expected a table"),
])
def test_bad_declarations_give_one_line_errors_naming_the_key(table: Any, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        claim_from_table(table)
    assert err.value.path == key and words in str(err.value) and "\n" not in str(err.value)


def test_duplicate_ids_and_missing_columns_are_errors() -> None:
    with pytest.raises(ConfigError, match=r"claims\.c\.id: used by two claims"):
        claims_from_tables([base(), base()])
    with pytest.raises(ConfigError, match=r"^claims\.d\.colour: unknown key"):  # the same path as a single claim's
        claims_from_tables([base(), base(id="d", colour="red")])
    c = claim_from_table(base(metric="bitrate"))
    with pytest.raises(ConfigError, match=r"claims\.c\.metric: the session table has no column 'bitrate'"):
        evaluate([c], pd.DataFrame({"aqm": ["pie"], "m": [1.0], "saturated": [False]}))
    with pytest.raises(ConfigError, match=r"claims\.c\.saturated: the session table has no column 'saturated'"):
        evaluate([claim_from_table(base())], pd.DataFrame({"aqm": ["pie"], "m": [1.0]}))


def test_claim_is_frozen_and_keyword_only() -> None:
    c = claim_from_table(base())
    with pytest.raises(AttributeError):
        c.metric = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.a["aqm"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        Claim("c", "s", "f", "m", {"aqm": "a"}, {"aqm": "b"}, "a < b")  # type: ignore[misc]


def test_a_decided_claim_keeps_its_decision_over_later_looks() -> None:
    """Look 1 (6 traces per family): the start-up claim agrees, the bitrate claim has too few pairs; look 2 on data
    where no claim can be decided: the start-up claim keeps its look-1 decision, the bitrate claim takes look 2's."""
    faster, same = loaded()
    first = evaluate([faster, same], abr_sessions(traces=3), look=1)
    later = evaluate([faster, same], abr_sessions(seed=1, traces=2, gain=1.0), look=2)
    assert [v.verdict for v in first] == [seq.TOO_FEW, seq.AGREES] and "agrees at look 1" in verdict_table(first)
    assert "x1.1" in verdict_table(first) and "(no 97.0% CI at this n" in verdict_table(first)
    assert [v.verdict for v in later] == [seq.TOO_FEW, seq.TOO_FEW]
    kept = keep_decided(first, later)
    assert kept[0] is later[0] and kept[1] is first[1]


def test_the_statistical_core_imports_no_system_module() -> None:
    """claims, sequential and ranktests are pure: importing them loads nothing that touches the system."""
    code = ("import sys, nest_experiments.analysis.claims; print(' '.join(m for m in sys.modules "
            "if m.startswith('nest_experiments')))")
    loaded_modules = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    banned = ("net", "procs", "vm", "apps", "collectors", "runner", "studies", "launch", "kernel")
    assert not [m for m in loaded_modules.split() if m.split(".")[1:2] and m.split(".")[1] in banned]
    assert "nest_experiments.analysis.sequential" in loaded_modules.split()


# --- replay: a sequential run's verdicts from its sessions -------------------------------------------------------


def blocked(d: np.ndarray, per_block: int) -> pd.DataFrame:
    """Paired sessions (arm a = b + d) in blocks of ``per_block`` pairs."""
    rows = []
    for i, diff in enumerate(d):
        for arm, value in (("a", 10.0 + diff), ("b", 10.0)):
            rows.append(dict(arm=arm, pair=i, block=i // per_block + 1, m=value, saturated=False))
    return pd.DataFrame(rows)


def paired_claim(expect: str = seq.GREATER) -> Claim:
    return Claim(id="c", statement="s", figure="Fig. 1", metric="m", a={"arm": "a"}, b={"arm": "b"}, expect=expect,
                 pair_by=("pair",))


def test_replay_spends_no_alpha_on_looks_that_could_not_decide() -> None:
    """Blocks of one pair: the first looks have too few pairs to reject at any alpha; the first look that could
    decide is the claim's look 1, at alpha_1, not at the alpha of the sixth block."""
    sessions = blocked(np.arange(1.0, 13.0), per_block=1)
    [v] = replay([paired_claim()], sessions)
    assert v.verdict == seq.AGREES
    assert v.look == 1 and v.alpha == pytest.approx(seq.look_alpha(1))
    assert v.n_pairs == seq.fewest_decisive(seq.look_alpha(1) / 2, paired=True)


def test_replay_keeps_the_first_decision_and_judges_each_look_on_the_blocks_so_far() -> None:
    """Blocks of 4 pairs: block 1 is too few to decide, blocks 1-2 show a clear effect (agrees at the claim's look
    1); blocks 3-12 reverse it: the claim stays decided as at its first decision, with that look's n."""
    d = np.concatenate([np.linspace(1, 2, 8), -np.linspace(3, 4, 40)])
    [v] = replay([paired_claim()], blocked(d, per_block=4))
    assert v.verdict == seq.AGREES and v.n_pairs == 8 and v.look == 1
    assert evaluate([paired_claim()], blocked(d, per_block=4), look=1)[0].verdict == seq.CONTRADICTS


def test_replay_spends_no_alpha_on_a_block_that_added_no_session_to_the_claim() -> None:
    """Blocks 3-5 of 4 pairs each, every session saturated (a slower machine): their looks would judge block 1-2's
    pairs again at smaller alphas, rejecting only where the last look did; they spend nothing, so the claim keeps
    that look's verdict and block 6's look is its next (before: look 5, alpha 0.0012 against 0.0076)."""
    rng = np.random.default_rng(5)
    sessions = blocked(rng.normal(0.4, 1, 24), per_block=4)
    sessions.loc[sessions["block"].between(3, 5), "saturated"] = True
    [two] = replay([paired_claim()], sessions[sessions["block"] <= 2])
    [five] = replay([paired_claim()], sessions[sessions["block"] <= 5])
    assert two.verdict == seq.UNDECIDED and two.look == 1 and five == two and five.n_pairs == 8
    [six] = replay([paired_claim()], sessions)
    assert six.n_pairs == 12 and six.look == 2 and six.alpha == pytest.approx(seq.look_alpha(2))
    # a block that adds one pair counts as a look
    sessions.loc[sessions["pair"] == 8, "saturated"] = False
    assert replay([paired_claim()], sessions[sessions["block"] <= 3])[0].look == 2


def test_replay_of_a_fixed_table_without_blocks_is_an_error_naming_the_column() -> None:
    with pytest.raises(ConfigError, match="block"):
        replay([paired_claim()], blocked(np.ones(8), 4).drop(columns="block"))


def test_replay_with_no_effect_decides_falsely_at_most_alpha() -> None:
    """300 simulated sequential runs of 6 blocks of 3 pairs with no effect, replayed: false decisions <= alpha."""
    rng = np.random.default_rng(7)
    c = paired_claim()
    wrong = sum(replay([c], blocked(rng.normal(0, 1, 18), per_block=3))[0].verdict in seq.DECIDED
                for _ in range(300))
    print(f"replay, no effect: {wrong / 300:.3f} false decisions over 300 runs of 6 looks")
    assert wrong / 300 <= 0.05


def one_sample_sessions(ratio: float, *, n: int = 12, sd: float = 0.08, seed: int = 3) -> pd.DataFrame:
    """PIE sessions at three targets whose delay is ``ratio`` x the target (log-normal noise), one FQ-PIE session
    per target (no say in a one-sample claim on PIE; one of them saturated: not counted as one of the claim's),
    one saturated PIE session with an absurd delay."""
    rng = np.random.default_rng(seed)
    rows = [dict(aqm="pie", target=t, block=b, saturated=False, x=ratio * rng.lognormal(0, sd))
            for b in range(n // 3) for t in ("5ms", "10ms", "15ms")]
    rows += [dict(aqm="fq_pie", target=t, block=0, saturated=t == "5ms", x=9.0) for t in ("5ms", "10ms", "15ms")]
    rows.append(dict(aqm="pie", target="5ms", block=0, saturated=True, x=50.0))
    return pd.DataFrame(rows)


ONE_SAMPLE = dict(id="pie_at_target", statement="PIE holds its target", figure="Fig. 12", metric="x",
                  a={"aqm": "pie"}, expect="|a - b| < margin", margin="50%", scale="ratio", reference=1.0)


@pytest.mark.parametrize(("ratio", "verdict"), [(0.85, "agrees"), (2.4, "contradicts"), (1.0, "agrees")])
def test_one_sample_claim_judges_each_session_against_the_constant(ratio: float, verdict: str) -> None:
    c = claim_from_table(ONE_SAMPLE)
    assert c.one_sample and c.paired and dict(c.b) == {}
    [v] = evaluate([c], one_sample_sessions(ratio))
    assert v.verdict == verdict and v.n_a == 12 and v.n_b == 0 and v.n_pairs == 12
    assert v.n_saturated_excluded == 1  # the saturated PIE session; the saturated FQ-PIE one is in no arm
    assert v.effect == pytest.approx(ratio, rel=0.06)  # the HL estimate of the ratio to the reference
    assert v.ci is not None and v.ci[0] < ratio * 1.06 and v.ci[1] > ratio * 0.94
    assert v.test.startswith("TOST (wilcoxon signed-rank)")


def test_one_sample_claim_near_its_margin_stays_undecided_and_says_how_many_more() -> None:
    [v] = evaluate([claim_from_table(ONE_SAMPLE)], one_sample_sessions(1.45, n=6, sd=0.2))
    assert v.verdict == "undecided" and v.more_needed is not None and v.more_needed >= 1
    assert v.more_unit == "sessions"
    need = cells_needed([v])
    assert [dict(n.cell) for n in need] == [{"aqm": "pie"}]  # arm a only: there is no arm b to run
    assert "the constant 1" in verdict_table([v])


def test_one_sample_directional_claim_against_a_constant() -> None:
    c = claim_from_table({**ONE_SAMPLE, "expect": "a < b", "margin": None, "scale": "diff", "reference": 1.2,
                          "id": "below"})
    [v] = evaluate([c], one_sample_sessions(0.9))
    assert v.verdict == "agrees" and v.effect == pytest.approx(0.9 - 1.2, abs=0.05)


def _one_pair_per_block(diffs: list[float], *, blocks: list[int] | None = None) -> pd.DataFrame:
    blocks = blocks or list(range(1, len(diffs) + 1))
    return pd.DataFrame([dict(block=k, seed=i, arm=arm, m=10.0 + i / 10 + (d if arm == "a" else 0.0), saturated=False)
                         for i, (k, d) in enumerate(zip(blocks, diffs, strict=True)) for arm in ("a", "b")])


def test_more_needed_in_a_sequential_run_counts_the_looks_the_pairs_take() -> None:
    lower = Claim(id="c", statement="s", figure="f", metric="m", a={"arm": "a"}, b={"arm": "b"}, expect="a < b",
                  pair_by=("block", "seed"))
    # racing_patterns' RQvsT claims after 6 blocks: one pair per block, every pair one way. 6 pairs are too few at
    # look 1 (exact p 2 x 2^-6 = 0.031 > 0.0304), a look that spends nothing: one more pair decides at look 1 still
    # (before, the next look's alpha, 0.0076, asked for 3 more)
    six = replay([lower], _one_pair_per_block([-1.0 - k / 100 for k in range(6)]))[0]
    assert six.verdict == seq.TOO_FEW and six.look == 1 and six.more_needed == 1
    seven = replay([lower], _one_pair_per_block([-1.0 - k / 100 for k in range(7)]))[0]
    assert seven.verdict == seq.AGREES and seven.look == 1
    # 5 pairs: block 6's look is too few as well (6 pairs, spending nothing), so block 7's look is look 1 still and
    # decides with 7 pairs: 2 more (before, block 7 was counted as look 2, alpha 0.0076, which asks for 9 pairs,
    # and the next looks smaller still: racing_patterns' committed table said +7 at 5 pairs)
    five = replay([lower], _one_pair_per_block([-1.0 - k / 100 for k in range(5)]))[0]
    assert five.verdict == seq.TOO_FEW and five.look == 1 and five.more_needed == 2
    # undecided at look 1: the pairs still needed arrive at the rate so far, each look at a smaller alpha, so the
    # count is above what the next look's alpha alone asks for (the count before), and the more so the slower
    diffs = [-1.0, -0.8, 0.6, -1.2, -0.6, 0.5, -0.9, 0.7, -0.5, -0.7]
    per_block = evaluate([lower], _one_pair_per_block(diffs), look=1)[0]  # 1 pair per block
    one_block = evaluate([lower], _one_pair_per_block(diffs, blocks=[1] * len(diffs)), look=1)[0]  # 10 per block
    assert per_block.verdict == one_block.verdict == seq.UNDECIDED
    s = sample(lower, _one_pair_per_block(diffs))
    at_next = seq.sessions_for_power(distance=abs(per_block.effect or 0), sd=float(np.std(s.diffs, ddof=1)),
                                     alpha_side=seq.look_alpha(2) / 2, power=0.8, paired=True)
    assert at_next is not None and per_block.more_needed is not None and one_block.more_needed is not None
    assert per_block.more_needed > one_block.more_needed > at_next - len(diffs) > 0
    # the count decides where it says: at the look by which that many pairs have come (10 per block here)
    blocks = -(-one_block.more_needed // 10)
    assert seq.sessions_for_power(distance=abs(per_block.effect or 0), sd=float(np.std(s.diffs, ddof=1)),
                                  alpha_side=seq.look_alpha(1 + blocks) / 2, power=0.8, paired=True) == \
        len(diffs) + one_block.more_needed


def pause_sessions(gap_short: float, gap_long: float, *, blocks: int = 14, seed: int = 3) -> pd.DataFrame:
    """Two parallel streams per block at two pause times: TCP's latency per block and pause, QUIC's ``gap_*`` above
    it (plus noise). The interaction is the gap at the short pause against the gap at the long one."""
    rng = np.random.default_rng(seed)
    rows = []
    for block in range(1, blocks + 1):
        for pause, gap in ((0.5, gap_short), (8.0, gap_long)):
            base = 100 + rng.normal(0, 15)
            for transport, extra in (("tcp", 0.0), ("h3", gap)):
                rows.append(dict(block=block, pause_s=pause, transport=transport, saturated=False,
                                 latency_ms=base + extra + rng.normal(0, 2)))
    return pd.DataFrame(rows)


INTERACTION = Claim(id="gap_larger_short_pause", statement="QUIC's excess latency more prominent at short pauses",
                    figure="Fig. 8b", metric="latency_ms", a={"transport": "h3"}, b={"transport": "tcp"},
                    conditions={"pause_s": 0.5}, versus={"pause_s": 8.0}, pair_by=("block",), expect="a > b")


@pytest.mark.parametrize(("gaps", "verdict"), [((30.0, 5.0), seq.AGREES), ((20.0, 20.0), seq.UNDECIDED),
                                                ((5.0, 30.0), seq.CONTRADICTS)],
                         ids=["larger-at-x", "same-gap", "larger-at-y"])
def test_an_interaction_claim_judges_the_effect_at_x_against_the_same_effect_at_y(gaps: tuple[float, float],
                                                                                    verdict: str) -> None:
    """"More prominent at X than at Y": per block, (QUIC - TCP) at 0.5 s less (QUIC - TCP) at 8 s, signed-rank. A
    gap as large at both pauses is no interaction, though QUIC is higher at 0.5 s (the claim the map had before)."""
    sessions = pause_sessions(*gaps)
    v = evaluate([INTERACTION], sessions)[0]
    assert v.verdict == verdict and v.n_pairs == 14 and v.test == "wilcoxon signed-rank"
    assert v.effect == pytest.approx(gaps[0] - gaps[1], abs=3.0)
    s = sample(INTERACTION, sessions)
    assert len(s.a) == len(s.b) == 14 and s.diffs is not None and np.allclose(s.diffs, s.a - s.b)
    at_short = Claim(id="higher_short", statement="QUIC higher at 0.5 s", figure="Fig. 8b", metric="latency_ms",
                     a={"transport": "h3"}, b={"transport": "tcp"}, conditions={"pause_s": 0.5},
                     pair_by=("block",), expect="a > b")
    assert evaluate([at_short], sessions)[0].verdict == seq.AGREES  # every gap here is positive at 0.5 s


def test_an_interaction_pairs_only_keys_with_both_cases_and_needs_both_cases_cells() -> None:
    sessions = pause_sessions(30.0, 5.0)
    sessions = sessions[~((sessions.block == 1) & (sessions.pause_s == 8.0))]  # block 1 lost its long pause
    sessions.loc[(sessions.block == 2) & (sessions.transport == "h3"), "saturated"] = True
    s = sample(INTERACTION, sessions)
    assert len(s.diffs) == 12 and s.n_saturated == 2 and "1 keys at X, 0 at Y without the other case" in s.note
    need = cells_needed(evaluate([replace(INTERACTION, expect="|a - b| < margin", margin=1.0)],
                                 sessions.iloc[:8]))
    assert {tuple(sorted(n.cell.items())) for n in need} == {
        (("pause_s", p), ("transport", t)) for p in (0.5, 8.0) for t in ("h3", "tcp")}
    assert "the effect transport=h3 vs transport=tcp at pause_s=0.5 less the same at pause_s=8.0" in \
        verdict_table(evaluate([INTERACTION], sessions))


@pytest.mark.parametrize(("change", "key", "words"), [
    ({"versus": {"abr": "bola"}}, "versus", "a condition"),
    ({"versus": {"pause_s": 0.5}}, "versus", "same value"),
    ({"pair_by": ()}, "versus", "pair_by"),
    ({"scale": "diff", "margin": 0.1, "margin_relative": True}, "margin", "absolute"),
])
def test_bad_interactions_are_one_line_errors_naming_the_key(change: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as err:
        replace(INTERACTION, **change)
    assert f"claims.gap_larger_short_pause.{key}" in str(err.value)
