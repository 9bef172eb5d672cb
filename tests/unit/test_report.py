"""The sweep report on synthetic run folders: statistics, grouping, checks, the Markdown and the figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from nest_experiments.analysis import report, stats
from nest_experiments.cli import main
from nest_experiments.reports.report_md import write_sweep_report
from nest_experiments.studies import generic, nest, study_for
from tests.unit.sweep_synth import ALL_FILES, RunSpec, make_run, make_sweep

# ---------------------------------------------------------------- statistics


def test_estimate_matches_a_hand_computed_t_interval() -> None:
    # mean 3, s = sqrt(2.5) = 1.5811, sem = 0.70711, t(0.975, 4) = 2.77645 -> half width 1.96324
    est = stats.estimate([1, 2, 3, 4, 5])
    assert est.n == 5 and est.mean == pytest.approx(3.0)
    assert est.low == pytest.approx(3 - 1.96324, abs=1e-4)
    assert est.high == pytest.approx(3 + 1.96324, abs=1e-4)


def test_estimate_skips_missing_values() -> None:
    est = stats.estimate([2.0, None, 4.0, float("nan"), 6.0, 8.0])
    assert est.n == 4 and est.mean == pytest.approx(5.0) and est.enough


def test_fewer_than_four_values_give_no_interval_and_no_p() -> None:
    est = stats.estimate([1.0, 2.0, 3.0])
    assert est.mean == pytest.approx(2.0) and est.low is None and est.high is None and not est.enough
    assert stats.mann_whitney_p([1, 2, 3], [4, 5, 6, 7]) is None
    assert stats.mann_whitney_p([1, 2, 3, 4], [4, 5, 6]) is None
    assert stats.estimate([]).mean is None


def test_mann_whitney_exact_p_on_a_known_example() -> None:
    # complete separation of 5 vs 5: U = 0, exact two-sided p = 2 / C(10, 5) = 2 / 252
    assert stats.mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert stats.mann_whitney_p([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert stats.mann_whitney_p([3, 3, 3, 3], [3, 3, 3, 3]) == 1.0


# ---------------------------------------------------------------- grouping


def test_runs_group_into_cells_by_aqm_and_target(tmp_path: Path) -> None:
    sweep = report.load_sweep(make_sweep(tmp_path, reps=4))
    assert sweep.compared == ["pie", "fq_pie"]
    assert sweep.ats == ["5ms", "10ms", "15ms"]
    assert sweep.contexts == [()]
    assert all(len(sweep.cell((), t, a)) == 4 for t in sweep.ats for a in sweep.compared)
    assert sweep.pairs() == [("pie", "fq_pie")]


def test_other_swept_keys_make_separate_contexts(tmp_path: Path) -> None:
    root = tmp_path / "s"
    for abr in ("grate", "bola"):
        for aqm in ("pie", "fq_pie"):
            make_run(root, RunSpec(aqm=aqm, extra_point={"apps.video.abr": abr}))
    sweep = report.load_sweep(root)
    assert sweep.contexts == [(("apps.video.abr", "bola"),), (("apps.video.abr", "grate"),)]
    assert [r.at for r in sweep.completed] == ["5ms"] * 4


def test_point_with_a_qdisc_table_is_flattened() -> None:
    flat = report.flatten({"links.bn1.forward.qdisc": {"kind": "pie", "target": "5ms"}})
    assert flat == {"links.bn1.forward.qdisc.kind": "pie", "links.bn1.forward.qdisc.target": "5ms"}


def test_an_axis_of_several_keys_counts_once(tmp_path: Path) -> None:
    flat = report.flatten({"links.bn1.forward.qdisc.kind, links.bn2.forward.qdisc.kind": "fq_pie"})
    assert flat == {"links.bn1.forward.qdisc.kind": "fq_pie", "links.bn2.forward.qdisc.kind": "fq_pie"}
    root = tmp_path / "s"
    run = make_run(root, RunSpec(aqm="fq_pie", target_ms=10))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["point"] = {"links.bn1.forward.qdisc.kind, links.bn2.forward.qdisc.kind": "fq_pie",
                         "links.bn1.forward.qdisc.target, links.bn2.forward.qdisc.target": "10ms"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    loaded = report.load_run(run)
    assert (loaded.compared, loaded.at, loaded.context) == ("fq_pie", "10ms", ())


def test_table_values_and_p(tmp_path: Path) -> None:
    sweep = report.load_sweep(make_sweep(tmp_path, reps=4))
    rows = {(r.metric.key, r.at): r for r in report.table(sweep)}
    rtt = rows[("video.app_rtt_ms", "5ms")]
    # PIE RTTs 1.61..1.64 s, FQ-PIE 1.21..1.24 s
    assert rtt.estimates["pie"].mean == pytest.approx(1625.0)
    assert rtt.estimates["fq_pie"].mean == pytest.approx(1225.0)
    assert rtt.p_values[("pie", "fq_pie")] == pytest.approx(2 / 70)  # 4 vs 4 separated: 2 / C(8, 4)
    assert rows[("video.switches", "10ms")].estimates["pie"].mean == pytest.approx(3.0)
    kernel = rows[("qdelay_ms.bn1 r1->r3.kernel", "10ms")]
    assert kernel.estimates["pie"].mean == pytest.approx(11.0)
    assert kernel.estimates["fq_pie"].n == 0


def test_qoe_and_response_latency_per_stream(tmp_path: Path) -> None:
    sweep = report.load_sweep(make_sweep(tmp_path, reps=4, targets=(5,)))
    rows = {r.metric.key: r for r in report.table(sweep)}
    # PIE video levels 0,1,0,1 (145, 300 kbit/s): 0.89 - 3 x 0.155 = 0.425; FQ-PIE 0,1,2,2: 1.645 - 0.455 = 1.19
    assert rows["video.qoe"].estimates["pie"].mean == pytest.approx(0.425)
    assert rows["video.qoe"].estimates["fq_pie"].mean == pytest.approx(1.19)
    assert rows["video.qoe"].p_values[("pie", "fq_pie")] < 0.05  # 4 vs 4, separated (ties within groups)
    assert rows["audio.qoe"].estimates["pie"].mean == pytest.approx(4 * 0.128)
    assert rows["session.qoe"].estimates["fq_pie"].mean == pytest.approx(1.19 + 4 * 0.128)
    assert rows["video.response_latency_ms"].estimates["pie"].mean == pytest.approx(100.0)  # ms: t_first_byte 0.1 s
    assert rows["audio.response_latency_ms"].estimates["fq_pie"].mean == pytest.approx(50.0)
    text = write_sweep_report(tmp_path / "synth", figures=False)[0].read_text()
    for label in ("video QoE (eq. 1)", "audio QoE (eq. 1)", "session QoE (eq. 1)",
                  "video average response latency (TTFB)", "audio average response latency (TTFB)"):
        assert f"| {label} |" in text, label


def test_failed_runs_are_excluded_and_listed(tmp_path: Path) -> None:
    root = make_sweep(tmp_path, reps=4, targets=(5,))
    make_run(root, RunSpec(aqm="pie", repetition=9, status="failed", reason="qdisc pie missing"))
    sweep = report.load_sweep(root)
    assert [r.name for r in sweep.excluded] == ["kind-pie_target-5ms_r9"]
    assert len(sweep.cell((), "5ms", "pie")) == 4
    text = (write_sweep_report(root, figures=False)[0]).read_text()
    assert "kind-pie_target-5ms_r9 | failed | qdisc pie missing" in text


# ---------------------------------------------------------------- sanity checks


def _checks(tmp_path: Path, spec: RunSpec) -> dict[tuple[str, str], report.Check]:
    run = nest.STUDY.load_run(make_run(tmp_path / "s", spec))
    return {(c.name, c.subject): c for c in run.checks}


def test_checks_pass_on_a_healthy_pie_run(tmp_path: Path) -> None:
    checks = _checks(tmp_path, RunSpec(aqm="pie", target_ms=5, kernel_delay_ms=5.5))
    assert {c.status for c in checks.values()} == {"pass"}
    assert "1.10x" in checks[("PIE kernel delay / target", "bn1 r1->r3")].detail
    assert checks[("DASH bytes per bottleneck", "bn1")].detail.startswith("60.0%")  # h2_r1 -> bn1 via the topology
    assert len([k for k in checks if k[0] == "iperf3 flow moved data"]) == 5


def test_checks_fail_with_numbers(tmp_path: Path) -> None:
    checks = _checks(tmp_path, RunSpec(aqm="pie", target_ms=5, kernel_delay_ms=11.0, subflow_bytes=(950, 50),
                                       sipp_ok=(170, 200), httperf_rates=(15.0, 12.0)))
    assert checks[("PIE kernel delay / target", "bn2 r2->r4")].status == "fail"
    assert checks[("DASH bytes per bottleneck", "bn2")].status == "fail"
    assert checks[("DASH bytes per bottleneck", "bn1")].status == "pass"
    assert checks[("DASH bytes per bottleneck", "bn2")].detail.endswith("(pass >= 10%)")  # no mptcp.json: no hint
    assert checks[("SIPp calls succeeded", "voip h1->s1")].detail.startswith("170/200 calls (85.0%")
    assert checks[("httperf reply rate", "web h3->s3")].status == "fail"


def test_a_failed_path_share_says_what_the_players_kernel_counted(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "s", RunSpec(aqm="pie", target_ms=5, kernel_delay_ms=5.5, subflow_bytes=(950, 50)))
    counters = {"s2": {"MPCapableSYNACKRX": 3, "AddAddr": 2, "MPJoinSynAckRx": 2}, "h2": {"AddAddrTx": 3}}
    (run_dir / "mptcp.json").write_text(json.dumps({"video": {"client": "s2", "server": "h2", "counters": counters}}))
    checks = {(c.name, c.subject): c for c in nest.STUDY.load_run(run_dir).checks}
    assert checks[("DASH bytes per bottleneck", "bn2")].detail.endswith(
        "; player's kernel: 3 connections, 2 ADD_ADDRs received, 2 joins answered (mptcp.json)")
    assert "mptcp.json" not in checks[("DASH bytes per bottleneck", "bn1")].detail


def test_fq_pie_needs_a_measured_series(tmp_path: Path) -> None:
    ok = _checks(tmp_path / "a", RunSpec(aqm="fq_pie"))
    assert ok[("FQ-PIE measured delay series", "bn1 r1->r3")].status == "pass"
    missing = _checks(tmp_path / "b", RunSpec(aqm="fq_pie", files=ALL_FILES - {"qdelay.csv"}))
    assert missing[("FQ-PIE measured delay series", "bn1 r1->r3")].status == "fail"


def test_missing_files_degrade_gracefully(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_run(root, RunSpec(aqm="pie", files=frozenset({"links.json", "qdisc.csv"})))
    make_run(root, RunSpec(aqm="fq_pie", files=frozenset()))
    paths = write_sweep_report(root, figures=False)
    text = paths[0].read_text()
    for note in ("segments.csv absent: no DASH metrics", "qdelay.csv absent", "links.json absent",
                 "subflows.csv absent", "iperf3_summary.csv absent although the experiment has the app",
                 "sipp.csv absent", "httperf.csv absent"):
        assert note in text, note
    assert "No run had data for: video bitrate switches" in text


def test_an_unreadable_run_is_excluded_with_the_reason(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_run(root, RunSpec(aqm="fq_pie"))
    bad = make_run(root, RunSpec(aqm="pie"))
    (bad / "segments.csv").write_text("stream,index,level,bitrate_bps,bytes\nvideo,zero,0,1,2\n")
    sweep = report.load_sweep(root)
    assert [(r.name, r.status) for r in sweep.excluded] == [(bad.name, "completed, unreadable")]
    assert "ValueError" in sweep.excluded[0].reason
    assert sweep.compared == ["fq_pie"]


def test_cell_checks_average_pie_delay_over_repetitions(tmp_path: Path) -> None:
    sweep = nest.STUDY.load_sweep(make_sweep(tmp_path, reps=4, targets=(10,)))
    pie = [c for c in nest.STUDY.sweep_cell_checks(sweep) if c.name.startswith("PIE mean kernel delay") and c.compared == "pie"]
    assert {c.status for c in pie} == {"pass"} and len(pie) == 2
    assert "11.00 ms over 4 run(s) vs 10 ms (1.10x)" in pie[0].detail


# ---------------------------------------------------------------- studies


def test_the_study_follows_the_experiment_name(tmp_path: Path) -> None:
    assert study_for(make_sweep(tmp_path / "a", reps=1, targets=(5,))) is nest.STUDY
    mine = tmp_path / "b" / "anything"
    make_run(mine, RunSpec(aqm="pie"), experiment="my_aqm_test")
    assert study_for(mine) is generic.STUDY
    bare = tmp_path / "c" / "nest_paper"  # no readable config.toml: the folder's name decides
    run = make_run(bare, RunSpec(aqm="pie"))
    (run / "config.toml").unlink()
    assert study_for(bare) is nest.STUDY


def test_a_user_experiment_gets_the_generic_report(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    for rep in range(1, 5):
        make_run(root, RunSpec(aqm="fq_pie", repetition=rep, subflow_bytes=(1000, 0)), experiment="my_aqm_test")
        make_run(root, RunSpec(aqm="pie", repetition=rep, subflow_bytes=(1000, 0)), experiment="my_aqm_test")
    paths = write_sweep_report(root)
    text = paths[0].read_text()
    assert "- Study: no paper's study" in text and "cf. paper" not in text
    assert "FQ-PIE measured delay series" not in text and "DASH bytes per bottleneck" not in text  # NeST's checks
    assert "PIE kernel delay / target" in text and "SIPp calls succeeded" in text  # the shared ones
    names = {p.name for p in paths}
    assert "video_switches.png" in names and not any(n.startswith("fig") for n in names)
    nest_text = write_sweep_report(root, study=nest.STUDY)[0].read_text()
    assert "DASH bytes per bottleneck" in nest_text and "FAIL" in nest_text  # bn2 carried nothing


def test_a_study_claims_table(tmp_path: Path) -> None:
    """A study with claims as data gets them judged in report.md and claims.csv; one without, no claims section."""
    plain = write_sweep_report(make_sweep(tmp_path, reps=1, targets=(5,)), figures=False, study=generic.STUDY)
    assert "## The paper's claims" not in plain[0].read_text() and not any(p.name == "claims.csv" for p in plain)
    nest = write_sweep_report(tmp_path / "synth", figures=False)
    nest_text = nest[0].read_text()
    assert "## The paper's claims, judged" in nest_text and "One fixed-size analysis at alpha = 0.05" in nest_text
    assert any(p.name == "claims.csv" for p in nest)


# ---------------------------------------------------------------- the report and its figures


def test_report_lists_every_metric_and_embeds_figures(tmp_path: Path) -> None:
    root = make_sweep(tmp_path, reps=4)
    paths = write_sweep_report(root)
    md = root / "report" / "report.md"
    assert paths[0] == md and (root / "report" / "summary.csv").exists()
    text = md.read_text()
    for metric in report.DASH_METRICS:
        assert f"| {metric.label} |" in text, metric.label
    assert "mean queue delay bn1 r1->r3, as the kernel reports it" in text
    assert "mean queue delay bn2 r2->r4, measured (capture)" in text
    pngs = [p for p in paths if p.suffix == ".png"]
    assert len(pngs) == 16 + 2  # 8 metrics x 2 streams + one queue-delay figure per bottleneck
    for png in pngs:
        assert png.stat().st_size > 10_000 and f"]({png.name})" in text
    assert (root / "report" / "fig02_video_switches.png") in pngs
    assert "too few repetitions" not in text.split("## Sanity checks")[0].split("## Metrics")[1]
    assert "PASS" in text and "< 0.001" not in text  # 4 vs 4: p >= 2/70


def test_report_says_too_few_repetitions(tmp_path: Path) -> None:
    root = make_sweep(tmp_path, reps=3, targets=(5,))
    text = write_sweep_report(root, figures=False)[0].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| video average application RTT |"))
    assert row.count("too few repetitions") == 3  # PIE, FQ-PIE, p
    assert "[" not in row


def test_cpu_warnings_are_reported(tmp_path: Path) -> None:
    root = tmp_path / "s"
    hot = make_run(root, RunSpec(aqm="pie", cpu_saturated_windows=7,
                                 warnings=("CPU saturated (>= 95%) in 7 of 30 windows",)))
    manifest = json.loads((hot / "manifest.json").read_text())
    (hot / "manifest.json").write_text(json.dumps(manifest | {"host_steal": 0.12}))  # as the VM runtime writes it
    make_run(root, RunSpec(aqm="fq_pie"))
    text = write_sweep_report(root, figures=False)[0].read_text()
    assert "| kind-pie_target-5ms_r1 | 0.5 | 0.99 | 7 | 0.12 |" in text
    assert "CPU saturated (>= 95%) in 7 of 30 windows" in text


def test_plot_cli_writes_run_plots_and_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_sweep(tmp_path, reps=1, targets=(5,))
    assert main(["plot", str(root)]) == 0
    out = capsys.readouterr().out.split()
    report_md, run_png = root / "report" / "report.md", root / "kind-pie_target-5ms_r1" / "qdisc.png"
    assert str(report_md) in out and str(run_png) in out
    pngs = [Path(p) for p in out if p.endswith(".png")]
    report_pngs = [p for p in pngs if p.parent == report_md.parent]
    assert run_png in pngs and report_pngs
    for png in pngs:  # each printed figure is a whole PNG that decodes, not an empty or truncated file
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        with Image.open(png) as image:
            assert image.format == "PNG" and image.width >= 300 and image.height >= 200
            image.load()
    text = report_md.read_text()
    assert text.startswith(f"# Sweep report: {root.name}\n")
    headings = {line for line in text.splitlines() if line.startswith("## ")}
    assert {"## Completed repetitions per cell", "## Figures", "## Sanity checks"} <= headings
    assert any(h.startswith("## Metrics: mean [95% CI]") for h in headings)
    assert all(f"]({png.name})" in text for png in report_pngs)  # the report embeds every figure it wrote


def test_plot_cli_report_of_a_sweep_whose_runs_all_failed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_run(root, RunSpec(status="failed", reason="boom"))
    assert main(["plot", str(root)]) == 0
    assert "| kind-pie_target-5ms_r1 | failed | boom |" in (root / "report" / "report.md").read_text()
    assert main(["plot", str(root / "kind-pie_target-5ms_r1")]) == 1  # a single failed run: nothing to plot
