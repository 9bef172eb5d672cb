"""The run and its reports say first how many sessions were CPU-saturated and what that leaves the claims.

On a slow machine every session of the default sweep was CPU-saturated: the claim table said "no data, 12
saturated out" in every row, but ``run`` ended with "46 plots" and the report opened with "12 completed, 0
excluded". Here, on synthetic NeST sweeps of 4 sessions (saturated by the per-process rule alone, as on that
machine: the manifest's ``cpu`` record, its machine-rule ``cpu_saturated_windows`` 0), the run's last line, the
first paragraph of ``report.md`` and of ``report.html``, and the first paragraph of an evidence folder's report.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from nest_experiments.analysis import decisions
from nest_experiments.analysis import sequential as seq
from nest_experiments.cli import main
from nest_experiments.reports import evidence
from nest_experiments.reports.report_html import write_report_html
from nest_experiments.reports.report_md import write_sweep_report
from nest_experiments.runs import launch
from nest_experiments.runs.outcome import saturation_summary
from tests.unit.sweep_synth import RunSpec, make_run, make_sweep

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"
WHY = "their windows were shaped by this machine's CPU, not the network"
NONE = "0 of 4 sessions CPU-saturated: every session counts"
SOME = f"1 of 4 sessions CPU-saturated: claims judged on 3 sessions (the 1 left out: {WHY})"
ALL = f"4 of 4 sessions CPU-saturated: no claim judged ({WHY})"
CASES = [(0, NONE), (1, SOME), (4, ALL)]


def saturate(run_dir: Path) -> None:
    """Three saturated windows of the traffic by the per-process rule (the CPU guard's record)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["cpu"] = {"windows": 30, "saturated_windows": 3, "saturated_by": {"machine": 0, "process": 3},
                       "saturated_t": [4.0, 5.0, 6.0]}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def sweep(tmp_path: Path, saturated: int) -> Path:
    """PIE and FQ-PIE at 5 ms, 2 blocks (4 sessions), the first ``saturated`` of them CPU-saturated."""
    root = make_sweep(tmp_path, reps=2, targets=(5,))
    for run_dir in sorted(p.parent for p in root.glob("*/manifest.json"))[:saturated]:
        saturate(run_dir)
    return root


@pytest.mark.parametrize(("saturated", "headline"), CASES)
def test_the_runs_last_line_counts_the_saturated_sessions_and_names_the_report(tmp_path: Path, saturated: int,
                                                                               headline: str) -> None:
    root = sweep(tmp_path, saturated)
    assert saturation_summary(root) == f"{headline}; see {root / 'report' / 'report.md'}"


def test_the_run_ends_with_it_after_the_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # what run, a VM sweep's host after the guest, --until-decided after its last block and --cluster call last
    root = sweep(tmp_path, 4)
    launch._plot(root)
    err = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"\d+ plots in {re.escape(str(root))}", err[-2])
    assert err[-1] == f"{ALL}; see {root / 'report' / 'report.md'}"


@pytest.mark.parametrize(("saturated", "headline"), CASES)
def test_report_md_says_it_before_anything_else(tmp_path: Path, saturated: int, headline: str) -> None:
    root = sweep(tmp_path, saturated)
    text = write_sweep_report(root, figures=False)[0].read_text()
    lines = text.splitlines()
    assert lines[:2] == ["# Sweep report: synth", ""]
    listed = ' The saturated runs, and by which rule: "CPU saturation and other warnings" below.'
    assert lines[2] == f"**{headline}.**" + (listed if saturated else "")
    assert "4 completed, 0 excluded" in lines[4]  # after it
    # the section it points to lists them by every rule (here the per-process one alone)
    warnings = text.split("## CPU saturation and other warnings")[1]
    if saturated:
        assert f"{saturated} run(s) had CPU-saturated windows" in warnings
        assert "| kind-fqpie_target-5ms_r1 | 0.5 | 0.6 | 3 | - |" in warnings  # 3 by the process rule
    else:
        assert "No run had a CPU-saturated window." in warnings
    if saturated == 4:  # the claim table agrees: no claim has data, each counts the sessions it left out
        claims = pd.read_csv(root / "report" / "claims.csv")
        assert len(claims) > 0 and set(claims["verdict"]) == {seq.NO_DATA}
        assert (claims["saturated_excluded"] > 0).all()


def test_report_html_opens_with_the_same_paragraph(tmp_path: Path) -> None:
    root = sweep(tmp_path, 4)
    write_sweep_report(root, figures=False)
    text = write_report_html(root, root / "report").read_text()
    body = text.split("<body>", 1)[1]
    first = re.match(r"\s*<h1[^>]*>Sweep report: synth</h1>\s*<p>(.*?)</p>", body, flags=re.S)
    assert first is not None, body[:300]
    assert first.group(1).startswith(f"<strong>{ALL}.</strong>")
    assert body.index("<nav>") > body.index(first.group(1))  # the table of contents after it


def test_the_sessions_of_a_sweep_gone_on_from_evidence_count_too(tmp_path: Path) -> None:
    # run --until-decided --continue-from: the claims judge the committed sessions and the new ones alike
    root = sweep(tmp_path, 1)
    prior = root / decisions.PRIOR_DIR
    prior.mkdir()
    pd.DataFrame([{"run": f"committed_r{i}", "block": 9, "runtime": "vm", "saturated": i == 0} for i in range(3)]) \
        .to_csv(prior / decisions.PRIOR_SESSIONS, index=False)
    assert saturation_summary(root).startswith(
        f"2 of 7 sessions CPU-saturated: claims judged on 5 sessions (the 2 left out: {WHY}); see ")


def test_an_experiment_without_claims_says_what_the_saturated_sessions_are_in(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    saturate(make_run(root, RunSpec(aqm="pie"), experiment="mine"))  # a user's experiment: the generic study
    make_run(root, RunSpec(aqm="fq_pie"), experiment="mine")
    assert saturation_summary(root).startswith(
        f"1 of 2 sessions CPU-saturated: {WHY} (this experiment has no claims to leave them out of: the report's "
        "tables include them); see ")


def test_a_sweep_without_a_completed_session() -> None:
    assert decisions.Saturation(sessions=0, saturated=0, claims=3).headline() == \
        "no completed session: no claim judged"


# ---------------------------------------------------------------- evidence folders


def first_paragraph(report: str) -> str:
    lines = report.splitlines()
    assert lines[0].startswith("# Evidence: ") and lines[1] == ""
    return lines[2]


def test_the_committed_evidence_reports_say_it_first() -> None:
    # none saturated, and some (2 of abr_quic_tcp's 184: the claims are judged on the other 182)
    assert first_paragraph((EVIDENCE / "nest_paper" / evidence.REPORT).read_text()) == \
        "**0 of 24 sessions CPU-saturated: every session counts.**"
    assert first_paragraph((EVIDENCE / "abr_quic_tcp" / evidence.REPORT).read_text()) == \
        (f"**2 of 184 sessions CPU-saturated: claims judged on 182 sessions (the 2 left out: {WHY}).** The "
         'saturated runs, and by which rule: "CPU-saturated sessions" below.')


def test_an_evidence_folder_whose_sessions_all_saturated_says_no_claim_judged(tmp_path: Path) -> None:
    copy = tmp_path / "nest_paper"
    shutil.copytree(EVIDENCE / "nest_paper", copy)
    sessions = evidence.read_sessions(copy / evidence.SESSIONS)
    sessions.assign(saturated=True).to_csv(copy / evidence.SESSIONS, index=False)
    (copy / evidence.RUNS).unlink()  # its runs.json says none saturated: the report then reads sessions.csv alone
    assert main(["plot", str(copy)]) == 0
    report = (copy / evidence.REPORT).read_text()
    assert first_paragraph(report) == (f"**24 of 24 sessions CPU-saturated: no claim judged ({WHY}).** The saturated "
                                       'runs, and by which rule: "CPU-saturated sessions" below.')
    assert "24 of 24 sessions saturated (`sessions.csv`" in report
    assert set(pd.read_csv(copy / evidence.CLAIMS)["verdict"]) == {seq.NO_DATA}


def test_the_readme_quotes_the_lines_as_the_run_prints_them() -> None:
    readme = (EVIDENCE.parent / "README.md").read_text()
    for saturated in (0, 3, 12):
        line = decisions.Saturation(sessions=12, saturated=saturated, claims=13).headline()
        assert f"\n{line}; see " in readme, line
