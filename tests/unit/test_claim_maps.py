"""The papers' claim maps (nest_experiments/reports/claimmap.py): every declared claim quotes the paper, every
quoted finding has a claim or a reason, and docs/claims/ is what `claims map` generates."""

from __future__ import annotations

from pathlib import Path

import pytest

from nest_experiments.analysis.claims import Claim
from nest_experiments.cli import main
from nest_experiments.errors import ConfigError
from nest_experiments.reports import claimmap
from nest_experiments.studies import STUDIES

PROJECT = Path(__file__).resolve().parents[2]
PAPER_STUDIES = [s.name for s in STUDIES.values() if s.paper_claims]


def _claim(cid: str) -> Claim:
    return Claim(id=cid, statement="s", figure="Fig. 1", metric="m", a={"x": 1}, b={"x": 2}, expect="a > b")


def _sentences(*tables: dict[str, object]) -> claimmap.PaperSentences:
    return claimmap.parse({"paper": "P", "sentences": list(tables)})


def test_every_paper_study_has_its_sentences() -> None:
    assert set(PAPER_STUDIES) == {"nest", "abr_quic", "under_hood", "h2quic", "racing"}
    for name in PAPER_STUDIES:
        assert claimmap.has_sentences(name), name


@pytest.mark.parametrize("name", PAPER_STUDIES)
def test_the_committed_sentences_keep_the_rules(name: str) -> None:
    sentences = claimmap.load(name)
    assert claimmap.problems(sentences, STUDIES[name].paper_claims) == []
    n = claimmap.counts(sentences)
    assert n["statements"] == n["declared"] + n["not testable"] + n["not declared"] >= 10


def test_a_declared_claim_without_a_quote_is_a_problem() -> None:
    sentences = _sentences({"where": "IV", "quote": "A is faster.", "claims": ["a_faster"]})
    assert claimmap.problems(sentences, [_claim("a_faster")]) == []
    found = claimmap.problems(sentences, [_claim("a_faster"), _claim("b_slower")])
    assert found == ["declared claim b_slower has no quote (no sentence lists it)"]


def test_a_quote_with_neither_a_claim_nor_a_reason_is_a_problem() -> None:
    sentences = _sentences({"where": "IV", "quote": "A is faster.", "claims": ["a_faster"]},
                           {"where": "V", "quote": "B is nicer."})
    assert any("neither a claim nor a reason" in p for p in claimmap.problems(sentences, [_claim("a_faster")]))


def test_a_reason_names_why_and_an_unknown_id_is_a_problem() -> None:
    sentences = _sentences({"where": "IV", "quote": "A is faster.", "claims": ["a_fastr"]},
                           {"where": "V", "quote": "B is nicer.", "reason": "vague"},
                           {"where": "V", "quote": "C is red.", "reason": "not testable here: needs YouTube"})
    found = claimmap.problems(sentences, [_claim("a_faster")])
    assert any("no declared claim has the id a_fastr" in p for p in found)
    assert any("must start with" in p and "B is nicer" in p for p in found)
    assert not any("C is red" in p for p in found)
    assert claimmap.counts(sentences) == {"statements": 3, "declared": 1, "not testable": 1, "not declared": 1}


def test_a_malformed_sentence_is_a_one_line_error_naming_its_key() -> None:
    with pytest.raises(ConfigError, match=r"sentences\[0\]\.quote"):
        _sentences({"where": "IV", "claims": ["x"]})
    with pytest.raises(ConfigError, match=r"sentences\[0\]\.claim"):
        _sentences({"where": "IV", "quote": "q", "claim": ["x"]})


def test_the_map_lists_each_sentence_and_each_claim() -> None:
    sentences = _sentences({"where": "IV", "quote": "A is | faster.", "claims": ["a_faster"], "note": "paired"},
                           {"where": "V", "quote": "C is red.", "reason": "not testable here: needs YouTube"})
    text = claimmap.render("x", "P", sentences, [_claim("a_faster")])
    assert "2 statements: 1 tested by declared claims, 1 not testable here, 0 testable but not declared" in text
    assert "| 1 | IV | A is \\| faster. | `a_faster` | paired |" in text
    assert "| 2 | V | C is red. | — | not testable here: needs YouTube |" in text
    assert "| `a_faster` | `a_faster`: m, x=1 vs x=2, a > b | s | Fig. 1 | 1 |" in text


def test_the_committed_maps_are_what_the_command_generates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["claims", "map", "--check"]) == 0, "docs/claims/ is stale: run `python -m nest_experiments claims map`"
    assert "5 claim maps current" in capsys.readouterr().out
    for name in PAPER_STUDIES:
        text = (PROJECT / "docs" / "claims" / f"{name}.md").read_text()
        assert all(f"`{c.id}`" in text for c in STUDIES[name].paper_claims)


def test_a_stale_map_is_found_and_rewritten(tmp_path: Path) -> None:
    studies = {"nest": (STUDIES["nest"].paper, STUDIES["nest"].paper_claims)}
    assert claimmap.write_maps(tmp_path, studies, check=True) == [tmp_path / "nest.md"]
    assert not (tmp_path / "nest.md").exists()  # --check writes nothing
    assert claimmap.write_maps(tmp_path, studies) == [tmp_path / "nest.md"]
    assert claimmap.write_maps(tmp_path, studies, check=True) == []
    (tmp_path / "nest.md").write_text("edited by hand\n")
    assert claimmap.write_maps(tmp_path, studies, check=True) == [tmp_path / "nest.md"]
