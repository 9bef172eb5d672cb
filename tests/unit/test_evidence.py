"""Committed evidence regenerates (nest_experiments/reports/evidence.py).

- every evidence folder under evidence/: its claims.csv is what the evaluator gives on its sessions.csv, and
  ``plot`` on a copy of it writes the same claims.csv and report.md again;
- the README's result table is what ``evidence --readme`` generates from the folders;
- ``export`` makes an evidence folder of a synthetic sweep of every paper's study, whose claims are the study's
  verdicts on the run folders, and ``plot`` on it reproduces them.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from nest_experiments.analysis import decisions, preregistration
from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import FIDELITY
from nest_experiments.cli import main
from nest_experiments.config import load_default_raw, read_toml
from nest_experiments.config.sweep import apply_paper
from nest_experiments.errors import NestExpError
from nest_experiments.reports import evidence
from nest_experiments.resources import experiment_file, shipped_experiments
from nest_experiments.runs.until_decided import committed_runs
from nest_experiments.studies import STUDIES
from tests.unit import test_abr_quic_study as abr
from tests.unit import test_h2quic_study as h2q
from tests.unit import test_racing_study as racing
from tests.unit import test_under_hood_study as uh
from tests.unit.sweep_synth import RunSpec, make_run, make_sweep

PROJECT = Path(__file__).resolve().parents[2]
EVIDENCE = PROJECT / "evidence"
FOLDERS = [p.name for p in evidence.evidence_folders(EVIDENCE)]
ALL_CLAIMS = {c.id for s in STUDIES.values() for c in s.paper_claims}  # the five papers' (ids are unique)


def test_the_project_has_evidence_folders() -> None:
    assert "nest_paper" in FOLDERS  # a folder losing its evidence.json would silently drop out of the tests below


def same_rows(written: pd.DataFrame, expected: list[dict[str, object]]) -> None:
    """claims.csv's rows against verdict_rows: strings equal, numbers to 1e-9, missing (None, NaN, "") as missing."""
    assert list(written.columns) == list(expected[0])
    assert len(written) == len(expected)
    for got, want in zip(written.to_dict("records"), expected, strict=True):
        for key, value in want.items():
            have = got[key]
            if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
                assert have is None or (isinstance(have, float) and math.isnan(have)) or have == "", (want["id"], key)
            elif isinstance(value, float | int) and not isinstance(value, bool):
                assert math.isclose(float(have), float(value), rel_tol=1e-9, abs_tol=1e-12), (want["id"], key)
            else:
                assert str(have) == str(value), (want["id"], key)


def read_claims(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_committed_claim_table_is_what_the_sessions_give(folder: str) -> None:
    path = EVIDENCE / folder
    manifest = evidence.read_manifest(path)
    sessions = evidence.read_sessions(path / evidence.SESSIONS)
    claims = preregistration.marked(path, STUDIES[manifest.study].claims_for(manifest.experiment))  # post hoc marks
    verdicts = decisions.judge_folder(claims, sessions, path)  # a block still in progress: not judged yet
    same_rows(read_claims(path / evidence.CLAIMS), decisions.verdict_rows(verdicts))
    # the looks recorded are the blocks the sessions have; relaxed (session 43) from "every block" to "every block
    # but at most one, the next, that its budget ended part-way", which the report must then name
    if (path / decisions.SEQUENTIAL_FILE).exists():
        looks = json.loads((path / decisions.SEQUENTIAL_FILE).read_text())["looks"]
        blocks = sorted(sessions["block"].unique().tolist())
        assert [look["block"] for look in looks] == blocks[:len(looks)] and len(blocks) - len(looks) <= 1
        waiting = decisions.in_progress(path, sessions)
        assert (waiting is None) == (len(blocks) == len(looks))
        assert waiting is None or f"Block {waiting[0]} is not complete" in (path / evidence.REPORT).read_text()


@pytest.mark.parametrize("folder", FOLDERS)
def test_plot_on_a_copy_regenerates_the_claim_table_and_the_report(folder: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / folder
    shutil.copytree(EVIDENCE / folder, copy)
    for name in (evidence.CLAIMS, evidence.REPORT):
        (copy / name).unlink()
    shutil.rmtree(copy / evidence.FIGURES_DIR, ignore_errors=True)
    assert main(["plot", str(copy)]) == 0
    assert (copy / evidence.CLAIMS).read_bytes() == (EVIDENCE / folder / evidence.CLAIMS).read_bytes()
    report = (copy / evidence.REPORT).read_text()
    assert report == (EVIDENCE / folder / evidence.REPORT).read_text(), "report.md is stale: run plot on the folder"
    # weakened (session 43) for a folder whose only block is in progress: every claim "no data", the figure is one
    # panel saying so (2695 bytes measured for abr_quic_tcp_paper), so it is held to > 1 kB there, > 10 kB elsewhere
    judged = bool(read_claims(copy / evidence.CLAIMS)["effect"].notna().any())
    assert (copy / evidence.FIGURES_DIR / "claims.png").stat().st_size > (10_000 if judged else 1_000)
    assert str(copy / evidence.REPORT) in capsys.readouterr().out


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_committed_folder_is_gone_on_from_by_its_shipped_experiment(folder: str) -> None:
    # `run X --until-decided --continue-from evidence/<folder>` on a fresh machine: every committed session is a
    # run of its block in the file shipped today, so its blocks are not run again (else the command refuses)
    manifest = evidence.read_manifest(EVIDENCE / folder)
    experiment = manifest.experiment
    raw = read_toml(experiment_file(Path(experiment))) if experiment in shipped_experiments() else load_default_raw()
    if evidence.at_paper_design(EVIDENCE / folder):  # made with --paper: gone on from with --paper
        raw = apply_paper(raw)
    committed = evidence.committed_sessions(EVIDENCE / folder, experiment)
    assert committed_runs(raw, committed) == set(committed["run"])


def test_the_readme_table_is_what_the_evidence_gives() -> None:
    section = evidence.current_section((PROJECT / "README.md").read_text())
    assert section is not None, "README.md has no evidence table markers"
    assert section == evidence.readme_section(EVIDENCE), \
        "README's evidence table is stale: run `python -m nest_experiments evidence --readme`"


def test_each_folder_at_the_papers_design_says_in_a_paragraph_what_it_found_and_where_it_differs() -> None:
    paragraphs = evidence.findings(EVIDENCE).split("\n\n")
    folders = [f for f in evidence.evidence_folders(EVIDENCE) if evidence.at_paper_design(f)]
    assert folders and len(paragraphs) == len(folders)
    for folder in folders:  # one paragraph each, in the papers' order
        (text,) = [p for p in paragraphs if f"[{folder.name}](evidence/{folder.name}/report.md)" in p]
        rows = read_claims(folder / evidence.CLAIMS)
        for verdict in ("agrees", "contradicts"):
            ids = rows[rows.verdict == verdict].id.tolist()
            assert all(f"`{cid}`" in text for cid in ids), (folder.name, verdict)
        for cid in rows[~rows.verdict.isin(["agrees", "contradicts"])].id:
            assert f"`{cid}`" not in text  # the rest counted, not listed
        departs = [str(r["item"]) for r in json.loads((folder / "design.json").read_text()) if r["departs"]]
        assert all(item in text for item in departs) and f"in {len(departs)} item(s)" in text


def test_the_nest_paper_report_counts_its_saturated_sessions_and_cells() -> None:
    report = (EVIDENCE / "nest_paper" / evidence.REPORT).read_text()
    assert "0 of 24 runs had a CPU-saturated 1 s window" in report
    assert "| saturated runs | 0 |" in report
    assert "| vm | fq_pie | 10ms | 4 | 0 |" in report and "| vm | pie | 5ms | 4 | 0 |" in report
    assert "run --until-decided --budget 30min" in report  # the command that made it


# ---------------------------------------------------------------- export, per study


def _nest(folder: Path) -> None:
    """The synthetic NeST sweep (sweep_synth: FQ-PIE higher levels, lower RTT), 5 blocks, one PIE run saturated."""
    shutil.move(make_sweep(folder.parent / f"{folder.name}.build", reps=5), folder)  # 5 blocks: 14 pairs, enough
    shutil.rmtree(folder / "kind-pie_target-5ms_r5")  # for the family's Holm level; replaced by a saturated one
    make_run(folder, RunSpec(aqm="pie", target_ms=5, repetition=5, cpu_saturated_windows=2))


def _under_hood(folder: Path, blocks: range = range(1, 13)) -> None:
    for block in blocks:  # 12 pairs: enough at the level Holm gives the objects' claims in the paper's family
        uh._run(folder, f"transport-tcp_r{block}", "tcp", uh._rows("tcp", 0.010 + block / 1000), block=block)
        uh._run(folder, f"transport-h3_r{block}", "h3", uh._rows("h3", 0.004 + block / 1000), block=block)


SWEEPS: dict[str, Callable[[Path], None]] = {
    "nest": _nest, "abr_quic": lambda folder: abr._paper_like(folder, blocks=6), "under_hood": _under_hood,
    "h2quic": h2q._overhead_sweep, "racing": lambda folder: racing._paper_like(folder, n=12)}


def test_every_paper_study_has_a_sweep_here() -> None:
    assert set(SWEEPS) == {s.name for s in STUDIES.values() if s.paper_claims}


@pytest.mark.parametrize("study", SWEEPS)
def test_export_makes_an_evidence_folder_whose_claims_are_the_studys_verdicts(study: str, tmp_path: Path) -> None:
    sweep, out = tmp_path / "sweep", tmp_path / "evidence" / study
    SWEEPS[study](sweep)
    written = evidence.export(sweep, out, command="sudo python -m nest_experiments run X --until-decided")
    manifest = evidence.read_manifest(out)
    assert manifest.study == study and manifest.command.endswith("--until-decided")
    assert all(p.exists() for p in written)
    # the committed sessions give the claims the run folders give (the CSV round trip loses nothing they need)
    expected = decisions.verdict_rows(STUDIES[study].verdicts(sweep))
    same_rows(read_claims(out / evidence.CLAIMS), expected)
    assert {r["verdict"] for r in expected} - {seq.NO_DATA, seq.TOO_FEW}  # something was judged
    runs = json.loads((out / evidence.RUNS).read_text())["runs"]
    assert len(runs) == manifest.machine["runs"] == len(list(p for p in sweep.iterdir() if p.is_dir()))
    for name in ("runs", "metrics", *STUDIES[study].evidence_tables):
        info = manifest.tables and manifest.tables[name]
        assert isinstance(info, dict), (name, info)
        frame = pd.read_csv(gzip.open(out / str(info["file"])))
        assert len(frame) == info["rows"]
    assert len(pd.read_csv(gzip.open(out / "tables" / "runs.csv.gz"))) == len(runs)
    before = (out / evidence.CLAIMS).read_bytes(), (out / evidence.REPORT).read_text()
    assert main(["plot", str(out)]) == 0  # plot on the folder: the same claim table and report
    assert ((out / evidence.CLAIMS).read_bytes(), (out / evidence.REPORT).read_text()) == before
    # the papers' claims, then the fidelity checks (our models against the browsers) in a table of their own
    table = evidence.readme_table(tmp_path / "evidence") + evidence.readme_table(tmp_path / "evidence", FIDELITY)
    unjudged = ALL_CLAIMS - {str(r["id"]) for r in expected}  # every other claim of the five papers says so
    assert table.count(evidence.NO_EVIDENCE) == len(unjudged) > 0
    assert table.count(f"[{study}](evidence/{study}/report.md)") == 1  # named once, on its first row
    assert all(f"; `{r['id']}`)" in table for r in expected)  # one row per claim
    assert all(f"; `{c}`)" in table for c in unjudged)
    assert len(table.splitlines()) == 4 + len(unjudged) + len(expected)
    commands = re.findall(rf"{evidence.NO_EVIDENCE} \(`run (\w+ )?--until-decided`\)", table)
    assert len(commands) == len(unjudged)
    for name in filter(None, commands):  # the shipped experiment a user runs to judge it (none: the default)
        assert (PROJECT / "experiments" / f"{name.strip()}.toml").is_file()
    assert ("`run --until-decided`" in table) == (study != "nest")  # the NeST paper's is the default config


def test_the_export_lists_saturated_runs_by_rule_and_keeps_the_sweeps_report(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sweep, out = tmp_path / "nest_paper", tmp_path / "ev"
    _nest(sweep)
    (sweep / "report").mkdir()
    (sweep / "report" / "report.md").write_text("# the sweep's own report\n")
    (sweep / "report" / "big.pcap").write_text("not copied")
    (sweep / "report" / "report.html").write_text("<p>" + "x" * 2_000 + "</p>")  # its plots embedded
    monkeypatch.setattr(evidence, "MAX_HTML_BYTES", 1_000)
    evidence.export(sweep, out, command="run")
    assert not (out / "sweep_report" / "report.html").exists()  # over the cap: left out, and said where
    why = evidence.read_manifest(out).sweep_report
    assert why == {"report.html": f"left out: 0.0 MB (over 0.001 MB); `plot {sweep}` writes it again from the run "
                                  "folders"}
    assert f"- `sweep_report/report.html`: left out: 0.0 MB (over 0.001 MB); `plot {sweep}`" in (
        out / evidence.REPORT).read_text()
    monkeypatch.setattr(evidence, "MAX_HTML_BYTES", 1_000_000)  # under it: copied, nothing said
    evidence.export(sweep, out, command="run")
    assert (out / "sweep_report" / "report.html").is_file() and evidence.read_manifest(out).sweep_report is None
    assert not (out / "sweeps.jsonl").exists()  # the sweep has no log: none made up
    report = (out / evidence.REPORT).read_text()
    assert "1 of 30 runs had a CPU-saturated 1 s window" in report
    assert "| kind-pie_target-5ms_r5 | completed | 2 |" in report
    assert "| aqm | target | sessions | saturated |" in report  # synthetic runs say no runtime: no such column
    assert "| pie | 5ms | 5 | 1 |" in report
    assert (out / "sweep_report" / "report.md").read_text() == "# the sweep's own report\n"
    assert not (out / "sweep_report" / "big.pcap").exists()
    assert evidence.read_manifest(out).machine["saturated_runs"] == 1


def test_a_sweep_that_went_on_from_evidence_exports_as_one_folder(tmp_path: Path) -> None:
    first, later, full, ev = (tmp_path / name for name in ("first", "later", "full", "ev"))
    _under_hood(first, range(1, 4))
    (first / "report").mkdir()
    (first / "report" / "report.md").write_text("# blocks 1-3\n")
    (first / "report" / "report.html").write_text("<p>regenerated only from the run folders</p>")
    (first / "sweeps.jsonl").write_text('{"block": 1}\n{"block": 2}\n{"block": 3}\n')
    evidence.export(first, ev, command="run A")
    assert (ev / "sweeps.jsonl").read_text() == '{"block": 1}\n{"block": 2}\n{"block": 3}\n'
    (ev / "README.md").write_text("# what the runs found, in prose\n")  # the folder's own, not generated
    evidence.adopt(ev, later)  # a fresh machine: `run --until-decided --continue-from ev`
    evidence.adopt(ev, later)  # the same command again (a resume): nothing to do
    _under_hood(later, range(4, 7))
    (later / "report").mkdir()
    (later / "report" / "report.md").write_text("# blocks 4-6\n")
    (later / "sweeps.jsonl").write_text('{"block": 4}\n{"block": 5}\n\n{"block": 6}\n')
    evidence.export(later, ev, command="run B")  # the same evidence folder, now with both sweeps
    # each block's wall time, the committed blocks' first: the whole sweep's, as one folder's would be
    assert [json.loads(line)["block"] for line in (ev / "sweeps.jsonl").read_text().splitlines()] == [1, 2, 3, 4, 5, 6]
    _under_hood(full, range(1, 7))  # blocks 1-6 in one folder: what the two must give together
    evidence.export(full, tmp_path / "whole", command="run")
    same_rows(read_claims(ev / evidence.CLAIMS), decisions.verdict_rows(STUDIES["under_hood"].verdicts(full)))
    manifest, whole = evidence.read_manifest(ev), evidence.read_manifest(tmp_path / "whole")
    assert manifest.command == "run B" and manifest.earlier == ({"command": "run A", "source": str(first), "runs": 6},)
    assert manifest.machine["runs"] == 12 and len(json.loads((ev / evidence.RUNS).read_text())["runs"]) == 12
    assert manifest.tables and whole.tables
    for name in ("runs", "metrics", *STUDIES["under_hood"].evidence_tables):
        assert manifest.tables[name]["rows"] == whole.tables[name]["rows"], name
    assert manifest.tables["runs"]["rows"] == 12 and manifest.tables["objects"]["rows"] == 12 * 6
    assert (ev / "sweep_report" / "report.md").read_text() == "# blocks 4-6\n"
    assert (ev / "sweep_report" / "earlier" / "report.md").read_text() == "# blocks 1-3\n"
    assert not list((ev / "sweep_report").rglob("*.html"))
    report = (ev / evidence.REPORT).read_text()
    assert "\n    run A   # 6 runs\n    run B   # 6 runs\n" in report and "`sweep_report/earlier/`" in report
    assert "- `sweeps.jsonl`: the wall time of each block" in report
    assert (ev / "README.md").read_text() == "# what the runs found, in prose\n"  # exported again: kept
    assert main(["plot", str(ev)]) == 0 and (ev / evidence.REPORT).read_text() == report
    with pytest.raises(NestExpError, match="goes on from other evidence already"):
        evidence.adopt(ev, later)  # ev has 12 sessions now: not the 6 that sweep went on from
    with pytest.raises(NestExpError, match="holds runs of its own"):
        evidence.adopt(ev, full)
    with pytest.raises(NestExpError, match="of experiment 'under_hood_objects', this sweep runs 'under_hood_dash'"):
        evidence.committed_sessions(ev, "under_hood_dash")


def test_export_refuses_what_is_not_a_paper_sweep_or_would_overwrite(tmp_path: Path) -> None:
    make_run(tmp_path / "mine", RunSpec(), experiment="my_own")
    with pytest.raises(NestExpError, match="declares no claims"):
        evidence.export(tmp_path / "mine", tmp_path / "out", command="run")
    _nest(tmp_path / "nest_paper")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(NestExpError, match="not an evidence folder"):
        evidence.export(tmp_path / "nest_paper", tmp_path / "busy", command="run")
    with pytest.raises(NestExpError, match="--command"):
        evidence.export(tmp_path / "nest_paper", tmp_path / "out", command=" ")


def test_a_bad_manifest_is_one_line_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / evidence.MANIFEST).write_text(json.dumps({"study": "nope", "experiment": "x", "command": "run"}))
    with pytest.raises(NestExpError, match="'study' 'nope' is not one of"):
        evidence.read_manifest(tmp_path)
    (tmp_path / evidence.MANIFEST).write_text(json.dumps({"study": "nest", "experiment": "", "command": "run"}))
    with pytest.raises(NestExpError, match="'experiment' must be a non-empty string"):
        evidence.read_manifest(tmp_path)


def test_the_readme_rows_say_the_verdict_and_what_an_open_claim_needs() -> None:
    row = {"id": "c", "statement": "A beats B", "figure": "Fig. 1", "paper_value": "2x", "metric": "video.app_rtt_ms",
           "scale": "diff", "effect": -271.0, "ci_low": -537.0, "ci_high": -169.0, "ci_level": 0.97, "n_pairs": 8,
           "n_a": 8, "n_b": 9, "b": "aqm=pie", "saturated_excluded": 1, "verdict": seq.CONTRADICTS,
           "more_needed": float("nan"), "more_unit": "pairs", "alpha": 0.00234, "family_open": 13,
           "family_size": 15, "look": 1}
    assert evidence_row(row) == ["A beats B (Fig. 1; `c`)", "2x", "-271 [-537, -169] (97.0% CI) ms",
                                 "0.0023 (13 of 15 open, look 1)", "8 pairs (1 saturated out)", "**contradicts**"]
    open_row = row | {"verdict": seq.UNDECIDED, "more_needed": 51.0, "scale": "ratio", "effect": 0.976,
                      "ci_low": 0.89, "ci_high": 1.07, "saturated_excluded": 0}
    assert evidence_row(open_row)[2:] == ["x0.976 [x0.89, x1.07] (97.0% CI)", "0.0023 (13 of 15 open, look 1)",
                                          "8 pairs", "undecided (+51 pairs needed)"]
    one_sample = row | {"b": "", "n_pairs": 6, "n_a": 6, "n_b": 0, "saturated_excluded": 0, "family_open": None}
    assert evidence_row(one_sample)[3:5] == ["0.0023", "6 sessions"]  # a claim of no family: its level alone


def evidence_row(row: dict[str, object]) -> list[str]:
    from nest_experiments.reports.evidence_report import claim_row

    return claim_row(row)


def test_readme_markers_missing_is_an_error_naming_them(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# project\n")
    with pytest.raises(NestExpError, match="no generated section"):
        evidence.update_readme(readme, tmp_path / "evidence")
    readme.write_text(f"# project\n\n{evidence.README_BEGIN}\nold\n{evidence.README_END}\n\nafter\n")
    assert evidence.update_readme(readme, tmp_path / "evidence") is True
    text = readme.read_text()
    assert text.startswith("# project\n\n") and text.endswith("\n\nafter\n") and "\nold\n" not in text
    assert text.count(evidence.NO_EVIDENCE) == len(ALL_CLAIMS) + 2  # each claim's row, the count, the counts table
    assert f"{len(ALL_CLAIMS)} claims with {evidence.NO_EVIDENCE}" in text
    assert evidence.update_readme(readme, tmp_path / "evidence") is False  # generated again: unchanged


def test_the_fidelity_checks_stand_apart_from_the_papers_verdicts() -> None:
    paper, fidelity = evidence.readme_table(EVIDENCE), evidence.readme_table(EVIDENCE, FIDELITY)
    ours = {c.id for s in STUDIES.values() for c in s.paper_claims if c.kind == FIDELITY}
    assert ours and all(f"; `{cid}`)" in fidelity and f"`{cid}`" not in paper for cid in ours)
    racing = evidence.verdict_counts(EVIDENCE)["racing"]
    judged = sum(n for k, n in racing.items() if k != evidence.POST_HOC)  # verdicts and "no evidence"
    assert judged == sum(c.kind != FIDELITY for c in STUDIES["racing"].paper_claims)
    section = evidence.readme_section(EVIDENCE)
    assert section.index("### The papers' claims") < section.index("### Fidelity") < section.index("chromium_vs_browser")


def test_the_readme_says_how_far_each_papers_own_design_got(tmp_path: Path) -> None:
    """Issue 55: per paper, the folders made with --paper (sessions, blocks, CPU-saturated, verdicts, departures
    left), a block the budget cut short named as in progress, and each experiment with a [paper] table that none
    has yet with the command that starts it."""
    table = evidence.designs_table(EVIDENCE)
    paper_folders = [f for f in evidence.evidence_folders(EVIDENCE) if evidence.at_paper_design(f)]
    assert "nest_paper_full" in {f.name for f in paper_folders} and "nest_paper" not in {f.name for f in paper_folders}
    for folder in paper_folders:
        sessions = decisions.read_sessions(folder / evidence.SESSIONS)
        row = next(r for r in table.splitlines() if f"[{folder.name}](" in r)
        assert f"| {len(sessions)} ({sessions['block'].nunique()}; {int(sessions['saturated'].eq(True).sum())})" in row
        departs = [r["item"] for r in json.loads((folder / "design.json").read_text()) if r["departs"]]
        assert f"{len(departs)} of " in row and all(item in row for item in departs)
    assert "[nest_paper](" not in table  # the reduced design: not the paper's
    not_yet = [r for r in table.splitlines() if "not run at the paper's design yet" in r]
    assert not_yet and all("--paper --until-decided`)" in r for r in not_yet)
    assert any("under_hood_dash: not run" in r and "`run under_hood_dash --paper --until-decided`" in r
               for r in not_yet) or any("under_hood_dash" in f.name for f in paper_folders)
    # a block its budget cut short: kept, named, not judged
    root = tmp_path / "evidence"
    shutil.copytree(EVIDENCE / "nest_paper_full", root / "nest_paper_full")
    looks = json.loads((root / "nest_paper_full" / decisions.SEQUENTIAL_FILE).read_text())
    last = looks["looks"].pop()
    (root / "nest_paper_full" / decisions.SEQUENTIAL_FILE).write_text(json.dumps(looks))
    n_last = int((decisions.read_sessions(root / "nest_paper_full" / evidence.SESSIONS)["block"] == last["block"]).sum())
    row = next(r for r in evidence.designs_table(root).splitlines() if "[nest_paper_full](" in r)
    assert f"block {last['block']} in progress ({n_last} sessions, not judged yet)" in row
