"""Pre-registration (analysis/preregistration.py, `claims freeze`): a folder's claims recorded with their margins'
sources, and every claim changed or declared after the record marked post hoc."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from nest_experiments.analysis import preregistration
from nest_experiments.analysis.claims import Claim
from nest_experiments.cli import main
from nest_experiments.errors import NestExpError
from nest_experiments.reports import evidence
from nest_experiments.studies import STUDIES

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"


def _claim(cid: str = "c", **kw: object) -> Claim:
    return Claim(id=cid, statement="s", figure="-", metric="m", a={"arm": "a"}, b={"arm": "b"}, expect="a > b",
                 pair_by=("block",), **kw)  # type: ignore[arg-type]


def test_every_margin_of_the_papers_claims_says_where_it_comes_from() -> None:
    sources = {preregistration.margin_source(c) for s in STUDIES.values() for c in s.paper_claims}
    assert sources <= {"paper", "rule", "none"}  # never "unstated"
    assert preregistration.margin_source(_claim(margin=1.0)) == "unstated"
    assert preregistration.margin_source(_claim(margin=1.0, margin_source="paper: 10-20 ms")) == "paper"
    assert preregistration.margin_source(_claim()) == "none"


def test_a_frozen_folder_marks_what_changed_or_came_after(tmp_path: Path) -> None:
    kept, moved = _claim("kept", margin=1.0, margin_source="rule: one"), _claim("moved", margin=1.0)
    path = preregistration.freeze(tmp_path, "nest", "nest_paper", [kept, moved], date="2026-01-02", before_data=True)
    doc = json.loads(path.read_text())
    assert doc["before_data"] is True and doc["claims_file"] == "nest_experiments/studies/nest/claims.py"
    assert len(doc["claims_file_sha256"]) == 64
    assert doc["claims"][0] | {"declaration": None} == {
        "id": "kept", "sha256": preregistration.declaration_hash(kept), "margin": 1.0, "margin_relative": False,
        "margin_source": "rule", "margin_why": "one", "post_hoc": "", "declaration": None}
    later = [kept, replace(moved, margin=2.0), _claim("new")]
    marked = {c.id: c.post_hoc for c in preregistration.marked(tmp_path, later)}
    assert marked == {"kept": "", "moved": "its margin changed after the freeze of 2026-01-02",
                      "new": "declared after the freeze of 2026-01-02"}
    with pytest.raises(NestExpError, match="frozen already"):
        preregistration.freeze(tmp_path, "nest", "nest_paper", [kept], date="2026-01-03", before_data=True)


def test_a_claims_own_post_hoc_note_stays_without_a_record(tmp_path: Path) -> None:
    claim = _claim(margin=1.0, post_hoc="margin chosen after five blocks")
    assert preregistration.marked(tmp_path, [claim])[0].post_hoc == "margin chosen after five blocks"
    assert preregistration.marked(None, [_claim()])[0].post_hoc == ""


def test_a_record_frozen_before_its_data_registers_a_noted_claim_for_that_folder_only(tmp_path: Path) -> None:
    noted = _claim("noted", margin=1.0, post_hoc="margin chosen after an earlier folder's five blocks")
    before, after = tmp_path / "before", tmp_path / "after"
    preregistration.freeze(before, "nest", "nest_paper", [noted], date="2026-01-02", before_data=True)
    preregistration.freeze(after, "nest", "nest_paper", [noted], date="2026-01-02", before_data=False)
    assert preregistration.marked(before, [noted])[0].post_hoc == ""  # frozen before this folder's data
    assert preregistration.marked(after, [noted])[0].post_hoc == noted.post_hoc  # frozen after: its own note
    assert json.loads((before / preregistration.FROZEN).read_text())["claims"][0]["post_hoc"] == noted.post_hoc
    moved = preregistration.marked(before, [replace(noted, margin=2.0)])[0].post_hoc
    assert moved == f"{noted.post_hoc}; its margin changed after the freeze of 2026-01-02"


def test_freeze_on_a_copy_of_committed_evidence_records_it_after_the_data_and_plot_marks_a_change(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "h2quic_overhead"
    shutil.copytree(EVIDENCE / "h2quic_overhead", copy)
    (copy / preregistration.FROZEN).unlink(missing_ok=True)
    assert main(["claims", "freeze", str(copy), "--date", "2026-12-02"]) == 0
    assert "frozen after its data" in capsys.readouterr().out
    assert json.loads((copy / preregistration.FROZEN).read_text())["before_data"] is False
    assert main(["claims", "freeze", str(copy)]) == 1  # once only
    study = STUDIES["h2quic"]
    changed = tuple(replace(c, expect="a < b") if c.id == "overhead_h3_above_h2" else c for c in study.paper_claims)
    monkeypatch.setitem(STUDIES, "h2quic", replace(study, paper_claims=changed))
    rows = {str(r["id"]): r for r in evidence._claim_rows(copy)}
    assert not isinstance(rows["overhead_h3_above_h2"].get("post_hoc"), str)  # empty: read as missing
    evidence.rebuild(copy)
    rows = {str(r["id"]): r for r in evidence._claim_rows(copy)}
    assert rows["overhead_h3_above_h2"]["post_hoc"] == "its expect changed after the freeze of 2026-12-02"
    assert "**post hoc**: its expect changed" in evidence.readme_table(tmp_path)


def test_an_empty_sweep_folder_is_frozen_before_its_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "abr_quic_tcp"
    sweep.mkdir()
    assert not preregistration.has_sessions(sweep)
    assert main(["claims", "freeze", str(sweep), "--date", "2026-12-02"]) == 0
    n = len(STUDIES["abr_quic"].claims_for("abr_quic_tcp"))  # 22 since issue 53's two across the ABRs
    assert f"{n} claims of abr_quic/abr_quic_tcp frozen before any session" in capsys.readouterr().out
    assert main(["claims", "freeze", str(tmp_path / "no_such_experiment")]) == 2  # no claims to freeze
    assert preregistration.has_sessions(EVIDENCE / "nest_paper")
    assert evidence.is_evidence(EVIDENCE / "nest_paper")


def test_export_carries_the_sweeps_record_into_the_evidence_folder(tmp_path: Path) -> None:
    from tests.unit.sweep_synth import make_sweep

    sweep = make_sweep(tmp_path, reps=2)  # frozen before its runs, say (the record says so)
    preregistration.freeze(sweep, "nest", "nest_paper", STUDIES["nest"].claims_for("nest_paper"), date="2026-12-01",
                           before_data=True)
    out = tmp_path / "ev"
    evidence.export(sweep, out, command="run")
    doc = json.loads((out / preregistration.FROZEN).read_text())
    assert doc["before_data"] is True and doc["date"] == "2026-12-01"
    assert "`preregistration.json`: the claims as `claims freeze` recorded them" in (out / evidence.REPORT).read_text()
