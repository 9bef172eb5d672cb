"""The NeST paper's claims (studies/nest/claims.py): declared, runnable on the default, measured, judged.

Synthetic run folders (tests/unit/sweep_synth.py), no network.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from nest_experiments.analysis import sequential as seq
from nest_experiments.config import load_default_raw
from nest_experiments.config.sweep import apply_paper, expand
from nest_experiments.rundir import RunFolder, write_csv
from nest_experiments.studies import nest
from nest_experiments.studies.nest import claims as nest_claims
from nest_experiments.studies.nest.claims import PAPER_CLAIMS, cell_of, session_metrics

sys.path.insert(0, str(Path(__file__).parent))
from sweep_synth import RunSpec, make_run, make_sweep  # noqa: E402

FIGURES = {f"Fig. {n}" for n in range(2, 14)}


def test_the_findings_of_figs_2_to_13_are_declared_fq_pie_vs_pie_paired_within_target_and_block() -> None:
    claims = {c.id: c for c in PAPER_CLAIMS}
    assert len(claims) == len(PAPER_CLAIMS) == 18
    assert {c.figure for c in PAPER_CLAIMS} == FIGURES | {"Figs. 3 and 6"}  # the RTT at its bitrate, and with size
    one_sample = {"pie_at_target_bn1", "pie_at_target_bn2", "fq_pie_delay_10_20ms_bn1", "fq_pie_delay_10_20ms_bn2",
                  "video_rtt_rises_with_size"}
    pie_only = {"pie_follows_target", "pie_at_target_bn1", "pie_at_target_bn2"}
    versus = [c for c in PAPER_CLAIMS if c.id not in pie_only | one_sample]
    assert all(c.a == {"aqm": "fq_pie"} and c.b == {"aqm": "pie"} for c in versus)
    assert all(c.strata == ("target",) and c.pair_by == ("block",) for c in versus)
    expects = {cid: c.expect for cid, c in claims.items()}
    # Fig. 6 within each session (issue 53's derived metrics): the video segments' RTT rises with their size
    size = claims["video_rtt_rises_with_size"]
    assert size.metric == nest_claims.RTT_SIZE_RHO and size.reference == 0.0 and size.expect == seq.GREATER
    assert size.a == {} and size.post_hoc
    assert [k for k, e in expects.items() if e == seq.LESS] == ["video_switches", "video_buffer",
                                                                "video_rtt_per_bitrate", "video_jitter",
                                                                "audio_buffer", "audio_rtt"]
    assert {c.id for c in PAPER_CLAIMS if c.scale == "ratio"} == {"video_throughput", "audio_throughput",
                                                                   "video_rtt_per_bitrate"} | pie_only
    assert claims["pie_follows_target"].conditions == {"aqm": "pie"}
    # the RTT "only slightly higher" at twice the bitrate: per unit of bitrate (issue 53), no margin, post hoc
    rtt = claims["video_rtt_per_bitrate"]
    assert rtt.per == "video.avg_bitrate_kbps" and rtt.margin is None and rtt.post_hoc
    # every other directional claim states the smallest difference it means (session 17, after the earlier run)
    margins = {cid: (c.margin, c.margin_relative) for cid, c in claims.items()
               if c.expect != seq.EQUIVALENT and c.margin is not None}
    assert margins == {cid: nest_claims.MARGINS[cid] for cid in margins} and len(margins) == 12
    assert margins["video_switches"] == (1.0, False) and margins["video_throughput"] == (0.5, True)
    assert all(claims[cid].post_hoc for cid in margins)  # chosen after an earlier run of the same design
    for link in ("bn1", "bn2"):  # "in all the scenarios": per block the target farthest from 1, within 1.5x
        c = claims[f"pie_at_target_{link}"]
        assert c.one_sample and c.reference == 1.0 and c.a == {"aqm": "pie"} and c.metric.endswith(link)
        assert c.expect == seq.EQUIVALENT and c.margin == 0.5 and c.margin_relative
        assert c.worst_over == ("target",) and c.pair_by == ("block",)
        fq = claims[f"fq_pie_delay_10_20ms_{link}"]  # "oscillates from 10ms to 20ms" at the 5 ms target
        assert fq.reference == 15.0 and fq.margin == 5.0 and fq.conditions == {"target": "5ms"}
        assert fq.margin_source.startswith("paper:")
    assert nest.STUDY.paper_claims == PAPER_CLAIMS and nest.STUDY.cell_of is cell_of


def _matches(cell: Mapping[str, object], want: Mapping[str, object]) -> bool:
    return all(cell.get(k) == v for k, v in want.items())


@pytest.mark.parametrize("paper", [False, True], ids=["default", "paper"])
def test_every_claim_names_cells_the_shipped_experiment_runs_in_the_same_blocks(paper: bool) -> None:
    raw = load_default_raw()
    runs = expand(apply_paper(raw) if paper else raw)
    found = [(r.repetition, cell_of(r.experiment.raw)) for r in runs]
    assert {c["aqm"] for _, c in found} == {"pie", "fq_pie"} and {c["target"] for _, c in found} == {"5ms", "10ms",
                                                                                                        "15ms"}
    for claim in PAPER_CLAIMS:
        arms = [{(rep, c["target"]) for rep, c in found if _matches(c, {**claim.conditions, **arm})}
                for arm in ((claim.a,) if claim.one_sample else (claim.a, claim.b))]
        assert all(arms), claim.id  # a claim naming a cell the sweep never runs fails here
        if claim.one_sample:
            continue
        if "target" not in claim.a:  # pairs: the same target in the same block, under both arms
            assert arms[0] == arms[1], claim.id


def test_cell_of_reads_the_aqm_and_target_of_any_resolved_config() -> None:
    pie = {"links": {"bn1": {"forward": {"qdisc": {"kind": "pie", "target": "0.005s"}}, "reverse": {"delay": "20ms"}},
                     "bn2": {"forward": {"qdisc": {"kind": "pie", "target": "5ms"}}}}}
    assert cell_of(pie) == {"aqm": "pie", "target": "5ms"}
    assert cell_of({"links": {"x": {"qdisc": "fq_pie"}, "y": {"qdisc": {"kind": "pfifo", "limit": 5}}}}) == {
        "aqm": "fq_pie", "target": "-"}
    assert cell_of({}) == {"aqm": "-", "target": "-"}


def test_session_metrics_are_the_reports_numbers_and_each_bottlenecks_delay(tmp_path: Path) -> None:
    pie = RunFolder(make_run(tmp_path, RunSpec(aqm="pie", target_ms=10, kernel_delay_ms=9.0,
                                               measured_delay_ms=11.0)))
    m = session_metrics(pie)
    assert m["qdelay_ms.bn1"] == m["qdelay_ms.bn2"] == pytest.approx(11.0)  # measured (captures), as for FQ-PIE
    assert m["qdelay_kernel_ms.bn2"] == pytest.approx(9.0)
    assert m["pie_delay_x_target.bn2"] == pytest.approx(0.9)  # 9 ms at a 10 ms target
    assert m["video.switches"] == 2 and m["video.avg_bitrate_kbps"] == pytest.approx((145 + 300 + 300 + 600) / 4)
    shown = nest.STUDY.load_run(pie.path).metrics  # the shared report's per-run numbers: the same, same units
    assert {k: m[k] for k in shown if not k.startswith("qdelay_ms.")} == {k: v for k, v in shown.items()
                                                                       if not k.startswith("qdelay_ms.")}
    fq = RunFolder(make_run(tmp_path, RunSpec(aqm="fq_pie", measured_delay_ms=14.0)))
    assert session_metrics(fq)["qdelay_kernel_ms.bn2"] is None and session_metrics(fq)["qdelay_ms.bn2"] == 14.0
    assert session_metrics(fq)["pie_delay_x_target.bn2"] is None
    # with both capture methods, PIE's way is the one the claims use (what PIE's own statistic reads)
    rows = [{"t": 5 + 0.1 * k, "node": node, "dev": dev, "delay_ms": value, "method": method}
            for k in range(100) for node, dev in (("r1", "r3"), ("r2", "r4"))
            for method, value in (("capture-per-packet", 30.0), ("capture-pie-style", 12.0))]
    write_csv(fq.path / "qdelay.csv", ("t", "node", "dev", "delay_ms", "method"), rows)
    assert session_metrics(fq)["qdelay_ms.bn2"] == pytest.approx(12.0)
    bare = RunFolder(make_run(tmp_path, RunSpec(aqm="pie", repetition=2, files=frozenset())))
    assert session_metrics(bare)["video.switches"] is None  # every claim's metric is a column, None when absent
    assert session_metrics(bare)[nest_claims.RTT_SIZE_RHO] is None and m[nest_claims.RTT_SIZE_RHO] is None  # < 8


def test_the_rtt_size_correlation_is_each_sessions_rank_correlation_of_its_video_segments(tmp_path: Path) -> None:
    """Fig. 6 within a session: Spearman's rho of each video segment's RTT (last byte - request) against its
    size; audio and untimed segments do not count."""
    from nest_experiments.rundir.rows import SegmentRow, write_segments

    rows = [SegmentRow(stream="video", index=i, level=i % 3, bitrate_bps=100_000 * (1 + i % 3),
                       bytes=50_000 * (1 + i % 3), t_request=4.0 * i, t_first_byte=4.0 * i + 0.1,
                       t_last_byte=4.0 * i + 0.3 * (1 + i % 3) + 0.01 * i, buffer_s=4.0) for i in range(12)]
    rows += [SegmentRow(stream="audio", index=i, level=0, bitrate_bps=128_000, bytes=64_000 + i,
                        t_request=4.0 * i, t_first_byte=4.0 * i + 0.05, t_last_byte=4.0 * i + 9.0 - i,
                        buffer_s=4.0) for i in range(12)]  # RTT falling with size: would pull rho down
    rows.append(SegmentRow(stream="video", index=12, level=0, bitrate_bps=100_000, bytes=500_000, t_request=None,
                           t_first_byte=None, t_last_byte=None, buffer_s=None))
    write_segments(tmp_path / "segments.csv", rows)
    rho = nest_claims.rtt_size_rho(RunFolder(tmp_path).frame("segments.csv"))
    assert rho is not None and rho > 0.9  # larger segments take longer
    write_segments(tmp_path / "segments.csv", [replace(r, t_last_byte=(r.t_request or 0.0) + 1.0 - 0.001 * r.bytes
                                                       / 1000) for r in rows[:12]])
    assert (nest_claims.rtt_size_rho(RunFolder(tmp_path).frame("segments.csv")) or 0.0) < -0.9
    assert nest_claims.rtt_size_rho(None) is None  # no segments.csv


def test_known_truth_sweep_gives_the_planted_verdicts(tmp_path: Path) -> None:
    """make_sweep plants FQ-PIE higher levels (more bitrate and throughput), a shorter video RTT (the paper's is
    longer) and a measured delay of 2 x target + rep against PIE's 1.2 x target."""
    found = {v.claim.id: v for v in nest.STUDY.verdicts(make_sweep(tmp_path, reps=4))}
    assert found["video_bitrate"].verdict == seq.AGREES and found["video_bitrate"].n_pairs == 12
    assert found["video_throughput"].verdict == seq.AGREES and found["video_throughput"].effect > 1
    assert found["qdelay_bn2"].verdict == seq.AGREES and found["qdelay_bn1"].verdict == seq.AGREES
    # planted: FQ-PIE's RTT 0.4 s shorter at higher levels: per unit of bitrate lower, as the paper's reading says
    assert found["video_rtt_per_bitrate"].verdict == seq.AGREES
    assert found["pie_follows_target"].n_pairs == 4 and found["pie_follows_target"].effect == pytest.approx(3.0)
    # planted: PIE's kernel delay 1.1 x its target in every session (12 PIE sessions), inside the 1.5x margin, but
    # exactly 1.1 everywhere: no spread, so uninformative (claims.uninformative), not agrees
    # (judged per block on its worst target: 4 blocks)
    assert found["pie_at_target_bn2"].verdict == seq.UNINFORMATIVE and found["pie_at_target_bn2"].n_a == 4
    assert found["pie_at_target_bn2"].effect == pytest.approx(1.1)
    assert found["pie_at_target_bn2"].note == "no spread: all 4 sessions have pie_delay_x_target.bn2 = 1.1"
    # no difference planted, the same audio RTT (500 ms) in every session: "FQ-PIE's audio RTT shorter" is
    # uninformative (no spread), neither contradicted by its margin nor left open
    assert found["audio_rtt"].note == "no spread: all 24 sessions have audio.app_rtt_ms = 500"
    assert found["audio_rtt"].verdict == seq.UNINFORMATIVE
