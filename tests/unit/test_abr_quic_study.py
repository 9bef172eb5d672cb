"""The ABR x transport study (studies/abr_quic/): metrics, U-test directions, noise floor, claims, report.

Synthetic run folders (DESIGN.md §4 files), no network: each session's video
levels, stalls, CPU saturation and ABR estimates are knobs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from nest_experiments.analysis.plot import plot_folder
from nest_experiments.dash.records import SegmentRow
from nest_experiments.rundir import write_csv
from nest_experiments.studies import abr_quic, study_for
from nest_experiments.studies.abr_quic import metrics as aq
from nest_experiments.studies.abr_quic.report import estimates, rate_at, trace_schedule

LADDER = (200_000, 400_000, 600_000, 800_000, 1_000_000, 1_500_000, 2_500_000, 4_000_000)
SEGMENT_FIELDS = ("stream", "index", "level", "bitrate_bps", "bytes", "t_request", "t_first_byte", "t_last_byte",
                  "buffer_s", "stall_s", "transport", "app")


@dataclass(kw_only=True)
class Synth:
    abr: str
    transport: str
    trace: int  # fcc seed
    levels: tuple[int, ...] = (0, 2, 4, 4)
    stall_s: float = 0.0
    repetition: int = 1
    cpu_saturated: int = 0
    ended: bool = True
    estimate_bps: float = 2e6

    @property
    def name(self) -> str:
        return f"abr-{self.abr.replace('_', '')}_transport-{self.transport}_trace-fcc-{self.trace}_r{self.repetition}"


def make(folder: Path, s: Synth) -> Path:
    d = folder / s.name
    d.mkdir(parents=True)
    point = {"apps.video.abr": s.abr, "apps.video.transport": s.transport,
             "links.bottleneck.forward.trace": {"generator": "fcc", "seed": s.trace}}
    (d / "manifest.json").write_text(json.dumps({
        "status": "completed", "point": point, "repetition": s.repetition, "cpu_saturated_windows": s.cpu_saturated,
        "cpu_mean": 0.5, "cpu_max": 0.7, "warnings": [], "traffic_start_t": 0.0, "traffic_end_t": 20.0,
        "versions": {"apps.video.http_server": "caddy v2.6.2"}}))
    (d / "config.toml").write_text(f'[experiment]\nname = "abr_quic_tcp"\n\n[apps.video]\nkind = "dash"\n'
                                   f'abr = "{s.abr}"\ntransport = "{s.transport}"\n')
    (d / "qoe.json").write_text(json.dumps({"video": {"end_reason": "ended" if s.ended else "max_duration"}}))
    rows, decisions = [], []
    for i, level in enumerate(s.levels):
        t = 4.0 * i
        stall = s.stall_s if i == 1 else 0.0
        rows.append({"stream": "video", "index": i, "level": level, "bitrate_bps": LADDER[level],
                     "bytes": LADDER[level] // 2, "t_request": t, "t_first_byte": t + 0.1, "t_last_byte": t + 1.0,
                     "buffer_s": 4.0, "stall_s": stall, "transport": s.transport, "app": "video"})
        rows.append({"stream": "audio", "index": i, "level": 0, "bitrate_bps": 64_000, "bytes": 32_000,
                     "t_request": t, "t_first_byte": t + 0.1, "t_last_byte": t + 0.3, "buffer_s": 4.0,
                     "stall_s": 0.0, "transport": s.transport, "app": "video"})
        decisions.append({"t": t, "stream": "video", "index": i, "algorithm": s.abr, "buffer_s": 4.0,
                          "throughput_bps": "" if i == 0 else s.estimate_bps, "level": level,
                          "bitrate_bps": LADDER[level], "app": "video"})
    write_csv(d / "segments.csv", SEGMENT_FIELDS, rows)
    write_csv(d / "abr_decisions.csv", ("t", "stream", "index", "algorithm", "buffer_s", "throughput_bps", "level",
                                        "bitrate_bps", "app"), decisions)
    write_csv(d / "rates.csv", ("t", "t_scheduled", "link", "direction", "node", "rate_bps"),
              [{"t": 0.0, "t_scheduled": 0.0, "link": "bottleneck", "direction": "forward", "node": "r1",
                "rate_bps": 1_000_000},
               {"t": 6.01, "t_scheduled": 6.0, "link": "bottleneck", "direction": "forward", "node": "r1",
                "rate_bps": 4_000_000}])
    return d


def seg(stream: str, index: int, bitrate: int, stall: float = 0.0) -> SegmentRow:
    return SegmentRow(stream=stream, index=index, level=LADDER.index(bitrate) if bitrate in LADDER else 0,
                      bitrate_bps=bitrate, bytes=1000, t_request=float(index), t_first_byte=index + 0.1,
                      t_last_byte=index + 0.5, buffer_s=4.0, stall_s=stall)


def test_session_metrics_follow_the_definitions() -> None:
    rows = [seg("video", 0, 1_000_000), seg("video", 1, 2_500_000, stall=0.5), seg("video", 2, 1_500_000),
            seg("video", 3, 1_500_000), seg("audio", 0, 128_000, stall=0.25), seg("audio", 1, 64_000)]
    m = aq.session_metrics(rows)
    assert m["bitrate"] == pytest.approx((1000 + 2500 + 1500 + 1500) / 4)  # video only, kbit/s
    assert m["variation"] == pytest.approx((1500 + 1000 + 0) / 3)  # zero changes count, audio does not
    assert m["rebuffer"] == pytest.approx(0.75)  # both streams' stalls
    # eq. (1), Mbit/s: sum q - 4.3 x stall - sum |dq|
    assert m["qoe"] == pytest.approx((1 + 2.5 + 1.5 + 1.5) - 4.3 * 0.75 - (1.5 + 1.0))
    assert aq.session_metrics([seg("audio", 0, 64_000)]) == {}


def _paper_like(folder: Path, *, n: int = 5) -> None:
    """TCP beats h3 on bitrate and QoE for every ABR; h3 stalls more; MPC-Fast varies less on h3."""
    for abr in ("bba", "bola", "mpc_fast", "mpc_robust"):
        for k in range(1, n + 1):
            make(folder, Synth(abr=abr, transport="tcp", trace=k, levels=(4, 5, 6, 6)))
            h3_levels = (2, 2, 2, 2) if abr == "mpc_fast" else (1, 3, 2, 4)
            make(folder, Synth(abr=abr, transport="h3", trace=k, levels=h3_levels,
                               stall_s=0.0 if abr == "mpc_robust" else 0.5 + 0.1 * k))


def test_u_test_directions_per_metric(tmp_path: Path) -> None:
    _paper_like(tmp_path)
    found = {(c.abr, c.metric.key): c for c in aq.comparisons(aq.load_sessions(tmp_path))}
    bitrate = found[("bola", "bitrate")]  # higher is better: TCP higher -> "TCP better" small
    assert bitrate.p_tcp_better is not None and bitrate.p_tcp_better < 0.05
    assert bitrate.p_h3_better is not None and bitrate.p_h3_better > 0.5
    rebuffer = found[("bola", "rebuffer")]  # lower is better: h3 stalls more -> "TCP better" small
    assert rebuffer.p_tcp_better is not None and rebuffer.p_tcp_better < 0.05 and rebuffer.diff is not None
    assert rebuffer.diff < 0
    variation = found[("mpc_fast", "variation")]  # h3 constant -> varies less -> "QUIC better" small
    assert variation.p_h3_better is not None and variation.p_h3_better < 0.05
    assert found[("mpc_robust", "rebuffer")].p_two == 1.0  # no stall anywhere: no difference
    few = aq.compare(aq.load_sessions(tmp_path)[:6], "bola", aq.BY_KEY["bitrate"])
    assert few.p_two is None and few.p_tcp_better is None  # fewer than MIN_REPS per side


def test_claim_table_agrees_where_the_data_say_so_and_pensieve_is_not_run(tmp_path: Path) -> None:
    _paper_like(tmp_path)
    table = {c.claim: c for c in aq.claim_table(aq.load_sessions(tmp_path))}
    assert len(table) == len(aq.PAPER_CLAIMS) == 20
    assert table["BOLA: bitrate TCP > QUIC, p < 0.05 (IV-A, Fig. 2)"].agree == "yes"
    assert table["MPC-Fast: variation less with QUIC, p < 0.05 (IV-B, Fig. 3)"].agree == "yes"
    assert table["MPC-Robust: rebuffering TCP vs QUIC insignificant (IV-C, Fig. 4)"].agree == "yes"
    assert table["BB: rebuffering more with QUIC, p < 0.05 (IV-C, Fig. 4)"].agree == "yes"
    # BOLA's variation: h3 (1,3,2,4) varies more than TCP (4,5,6,6) -> significant, the paper says insignificant
    assert table["BOLA: variation TCP vs QUIC insignificant (IV-B, Fig. 3)"].agree == "no"
    # MPC-Robust's QoE: TCP better here, the paper says insignificant
    assert table["MPC-Robust: QoE TCP vs QUIC insignificant (IV-D, Fig. 5)"].agree == "no"
    pensieve = [c for c in table.values() if c.claim.startswith("Pensieve")]
    assert len(pensieve) == 4 and {c.agree for c in pensieve} == {"not run"}
    assert {c.ours for c in pensieve} == {"no pensieve session in this sweep"}  # in the registry, not in this sweep
    assert "n=5/5" in table["BOLA: bitrate TCP > QUIC, p < 0.05 (IV-A, Fig. 2)"].ours


def test_too_few_sessions_say_so(tmp_path: Path) -> None:
    _paper_like(tmp_path, n=2)
    table = {c.claim: c for c in aq.claim_table(aq.load_sessions(tmp_path))}
    assert table["BOLA: bitrate TCP > QUIC, p < 0.05 (IV-A, Fig. 2)"].agree.startswith("too few sessions (n=2/2")


def test_noise_floor_from_aa_pairs_marks_small_differences(tmp_path: Path) -> None:
    _paper_like(tmp_path)
    # an A/A twin of bola/tcp/fcc-1 that played one level lower at the end: bitrate spread (4000-2500)/4 = 375
    make(tmp_path, Synth(abr="bola", transport="tcp", trace=1, levels=(4, 5, 6, 7), repetition=2))
    sessions = aq.load_sessions(tmp_path)
    pairs = aq.aa_pairs(sessions)
    assert [p.cell for p in pairs] == [("bola", "tcp", "fcc-1")]
    floor = aq.noise_floor(pairs)
    assert floor["bitrate"] == pytest.approx(375.0) and floor["rebuffer"] == 0.0
    assert len(aq.usable(sessions)) == len(sessions) - 1  # the twin stays out of the U tests
    found = {(c.abr, c.metric.key): c for c in aq.comparisons(sessions, floor)}
    # mpc_fast: TCP median (1000+1500+2500+2500)/4 = 1875 vs h3 600: a difference of 1275 > 375
    assert found[("mpc_fast", "bitrate")].within_noise is False
    # variation: TCP (500+1000+0)/3 = 500 vs bba's h3 (400+200+400)/3 ~ 333 (diff 167) against a floor of 500
    assert floor["variation"] == pytest.approx(500.0)
    assert found[("bba", "variation")].within_noise is True
    assert found[("bba", "variation")].within_noise_pairs == found[("bba", "variation")].pairs == 5
    assert aq.noise_floor([]) == {}


def test_cpu_saturated_runs_are_left_out_and_incomplete_ones_flagged(tmp_path: Path) -> None:
    _paper_like(tmp_path)
    make(tmp_path, Synth(abr="bola", transport="h3", trace=9, levels=(7, 7, 7, 7), cpu_saturated=3))
    make(tmp_path, Synth(abr="bola", transport="tcp", trace=9, levels=(0, 0), ended=False))
    sessions = aq.load_sessions(tmp_path)
    used = aq.usable(sessions)
    assert not any(s.cpu_saturated for s in used) and any(s.run.endswith("trace-fcc-9_r1") for s in used)
    assert [s.complete for s in sessions if s.condition == "fcc-9" and s.transport == "tcp"] == [False]
    c = aq.compare(used, "bola", aq.BY_KEY["bitrate"])
    assert (len(c.tcp), len(c.h3)) == (6, 5)


def test_estimates_join_the_trace_rate_at_the_decision_time(tmp_path: Path) -> None:
    run = make(tmp_path, Synth(abr="mpc_fast", transport="h3", trace=1, estimate_bps=2e6))
    times, rates, label = trace_schedule([{"t": "6.01", "link": "b", "direction": "forward", "rate_bps": "4"},
                                          {"t": "0", "link": "b", "direction": "forward", "rate_bps": "1"}])
    assert (times, rates, label) == ([0.0, 6.01], [1.0, 4.0], "b forward")
    assert rate_at(times, rates, -0.1) is None and rate_at(times, rates, 6.0) == 1.0 and rate_at(times, rates, 6.01) == 4.0
    points = estimates(run)  # decisions at 4, 8, 12 s (the first has no estimate)
    assert [(p.t, p.trace_bps, p.ratio) for p in points] == [(4.0, 1e6, 2.0), (8.0, 4e6, 0.5), (12.0, 4e6, 0.5)]


def test_report_is_chosen_by_the_experiment_and_written_by_plot(tmp_path: Path) -> None:
    folder = tmp_path / "abr_quic_tcp"
    _paper_like(folder, n=4)
    make(folder, Synth(abr="bola", transport="h3", trace=1, repetition=2, levels=(1, 3, 2, 3)))
    assert study_for(folder) is abr_quic.STUDY
    written = plot_folder(folder, run_plots=False)
    names = {p.name for p in written}
    assert {"report.md", "abr_quic.md", "fig02_bitrate.png", "fig05_qoe.png", "estimate_ratio.png"} <= names
    assert sum(1 for p in written if p.parent.name == "estimates") == 33
    md = (folder / "report" / "abr_quic.md").read_text()
    assert "## Noise floor (A/A pairs)" in md and "bola/h3/fcc-1" in md
    assert "Pensieve: bitrate TCP > QUIC" in md and "not run" in md
    assert "![average video bitrate](fig02_bitrate.png)" in md
    shared = (folder / "report" / "report.md").read_text()
    assert "## The paper's claims" in shared and "BOLA: bitrate TCP > QUIC" in shared
    assert "origin is Caddy" in shared
