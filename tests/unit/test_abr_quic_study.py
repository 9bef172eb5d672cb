"""The ABR x transport study (studies/abr_quic/): metrics, cells, claims (paired by trace), noise floor, report.

Synthetic run folders (DESIGN.md §4 files), no network: each session's video
levels, stalls, CPU saturation and ABR estimates are knobs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from nest_experiments.analysis import sequential as seq
from nest_experiments.dash.core.records import SegmentRow
from nest_experiments.reports.plot import plot_folder
from nest_experiments.rundir import RunFolder, write_csv
from nest_experiments.studies import abr_quic, study_for
from nest_experiments.studies.abr_quic import claims as aqc
from nest_experiments.studies.abr_quic import metrics as aq
from nest_experiments.studies.abr_quic.report import estimates, rate_at, trace_schedule
from tests.unit.claims_alone import each_alone

LADDER = (200_000, 400_000, 600_000, 800_000, 1_000_000, 1_500_000, 2_500_000, 4_000_000)
SEGMENT_FIELDS = ("stream", "index", "level", "bitrate_bps", "bytes", "t_request", "t_first_byte", "t_last_byte",
                  "buffer_s", "stall_s", "transport", "app")


@dataclass(kw_only=True)
class Synth:
    abr: str
    transport: str
    family: str = "fcc"
    repetition: int = 1  # the block
    seed: int | None = None  # the trace's seed: the block's, unless an A/A copy replays another
    levels: tuple[int, ...] = (0, 2, 4, 4)
    stall_s: float = 0.0
    cpu_saturated: int = 0
    ended: bool = True
    estimate_bps: float = 2e6

    @property
    def name(self) -> str:
        return f"abr-{self.abr.replace('_', '')}_transport-{self.transport}_trace-{self.family}_r{self.repetition}"


def make(folder: Path, s: Synth) -> Path:
    d = folder / s.name
    d.mkdir(parents=True)
    seed = s.repetition if s.seed is None else s.seed
    point = {"apps.video.abr": s.abr, "apps.video.transport": s.transport,
             "links.bottleneck.forward.trace": {"generator": s.family}}
    (d / "manifest.json").write_text(json.dumps({
        "status": "completed", "point": point, "repetition": s.repetition, "cpu_saturated_windows": s.cpu_saturated,
        "cpu_mean": 0.5, "cpu_max": 0.7, "warnings": [], "traffic_start_t": 0.0, "traffic_end_t": 20.0,
        "versions": {"apps.video.http_server": "caddy v2.6.2"}}))
    (d / "config.toml").write_text(f'[experiment]\nname = "abr_quic_tcp"\n\n[links.bottleneck.forward.trace]\n'
                                   f'generator = "{s.family}"\nseed = {seed}\n\n[apps.video]\nkind = "dash"\n'
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


def test_segment_metrics_follow_the_definitions() -> None:
    rows = [seg("video", 0, 1_000_000), seg("video", 1, 2_500_000, stall=0.5), seg("video", 2, 1_500_000),
            seg("video", 3, 1_500_000), seg("audio", 0, 128_000, stall=0.25), seg("audio", 1, 64_000)]
    m = aq.segment_metrics(rows)
    assert m["bitrate"] == pytest.approx((1000 + 2500 + 1500 + 1500) / 4)  # video only, kbit/s
    assert m["variation"] == pytest.approx((1500 + 1000 + 0) / 3)  # zero changes count, audio does not
    assert m["rebuffer"] == pytest.approx(0.75)  # both streams' stalls
    # eq. (1), Mbit/s: sum q - 4.3 x stall - sum |dq|
    assert m["qoe"] == pytest.approx((1 + 2.5 + 1.5 + 1.5) - 4.3 * 0.75 - (1.5 + 1.0))
    assert aq.segment_metrics([seg("audio", 0, 64_000)]) == {}


def test_session_metrics_and_cells_of_a_run_folder(tmp_path: Path) -> None:
    run = RunFolder(make(tmp_path, Synth(abr="mpc_fast", transport="h3", family="hsdpa", repetition=3,
                                         levels=(0, 2, 2, 2), stall_s=1.5)))
    assert aq.session_metrics(run) == pytest.approx({"bitrate": 500.0, "variation": 400 / 3, "rebuffer": 1.5,
                                                     "qoe": 0.2 + 3 * 0.6 - 4.3 * 1.5 - 0.4})
    assert aq.cell_of(run.config()) == {"abr": "mpc_fast", "transport": "h3", "family": "hsdpa", "trace": "hsdpa-3"}
    (run.path / "segments.csv").unlink()
    assert aq.session_metrics(run) == dict.fromkeys(("bitrate", "variation", "rebuffer", "qoe"))  # None, not absent
    assert aq.cell_of({"links": {"b": {"forward": {"trace": "/t/fcc/trace_7.mahimahi"}}}})["trace"] == "trace_7.mahimahi"
    assert aq.cell_of({}) == {"abr": "grate", "transport": "tcp", "family": "-", "trace": "-"}


def test_every_claim_of_section_iv_is_declared_once_paired_by_trace() -> None:
    every = {c.id: c for c in aqc.PAPER_CLAIMS}
    assert len(every) == len(aqc.PAPER_CLAIMS) == 22  # 4 metrics x 5 ABRs, and IV-A's two across ABRs
    across = {cid: every.pop(cid) for cid in ("bitrate_bba_above_model_based", "bitrate_bola_above_model_based")}
    assert all(c.b == {"abr": ("mpc_fast", "mpc_robust", "pensieve")} and c.pair_by == ("trace", "transport")
               and c.expect == seq.GREATER and c.post_hoc for c in across.values())
    claims = every  # TCP against h3
    assert all(c.a == {"transport": "tcp"} and c.b == {"transport": "h3"} for c in claims.values())
    assert all(c.pair_by == ("trace",) and c.strata == ("family",) for c in claims.values())
    equivalent = {cid for cid, c in claims.items() if c.expect == seq.EQUIVALENT}
    assert equivalent == {"variation_bola", "variation_mpc_robust", "rebuffer_mpc_robust", "rebuffer_pensieve",
                          "qoe_mpc_robust"}  # the letter's "insignificant" ones, each with a stated margin
    assert (claims["rebuffer_pensieve"].margin, claims["rebuffer_pensieve"].margin_relative) == (1.0, False)
    # QoE's: what eq. (1) charges for the rebuffer margin's 1 s (a relative one fails on a sum near 0)
    assert (claims["qoe_mpc_robust"].margin, claims["qoe_mpc_robust"].margin_relative) == (4.3, False)
    # the directional claims: their metric's margin, the smallest difference they mean (a futility boundary)
    assert {(c.metric, c.margin, c.margin_relative) for c in claims.values()} == {
        ("bitrate", 0.10, True), ("variation", 0.10, True), ("rebuffer", 1.0, False), ("qoe", 4.3, False)}
    assert claims["variation_bba"].expect == seq.LESS and claims["variation_mpc_fast"].expect == seq.GREATER
    assert claims["rebuffer_mpc_fast"].expect == seq.LESS and claims["qoe_pensieve"].expect == seq.GREATER
    assert abr_quic.STUDY.paper_claims == aqc.PAPER_CLAIMS and abr_quic.STUDY.cell_of is aq.cell_of


def test_buffer_based_abrs_above_the_model_based_ones_paired_by_trace_and_transport(tmp_path: Path) -> None:
    # BB and BOLA at 2250 kbit/s on every trace and transport; MPC-Fast at 600 and MPC-Robust at 350: the model-based
    # arm of a pair is their mean (475), so each of the 12 pairs (6 traces x 2 transports) differs by 1775
    for k in (1, 2, 3):
        for family in ("fcc", "hsdpa"):
            for transport in ("tcp", "h3"):
                for abr, levels in (("bba", (5, 6, 6, 6)), ("bola", (5, 6, 6, 6)), ("mpc_fast", (2, 2, 2, 2)),
                                    ("mpc_robust", (0, 1, 0, 2))):
                    make(tmp_path, Synth(abr=abr, transport=transport, family=family, repetition=k, levels=levels))
    found = {v.claim.id: v for v in each_alone(abr_quic.STUDY, tmp_path)}
    for cid in ("bitrate_bba_above_model_based", "bitrate_bola_above_model_based"):
        assert found[cid].verdict == seq.AGREES and found[cid].n_pairs == 12
        assert found[cid].effect == pytest.approx(2250 - (600 + 350) / 2)


def _paper_like(folder: Path, *, blocks: int = 3) -> None:
    """TCP beats h3 on bitrate and QoE for every ABR; h3 stalls more (not under MPC-Robust); MPC-Fast is constant
    on h3. Each block plays one fcc and one hsdpa trace under every ABR and transport."""
    for abr in ("bba", "bola", "mpc_fast", "mpc_robust"):
        for k in range(1, blocks + 1):
            for family in ("fcc", "hsdpa"):
                make(folder, Synth(abr=abr, transport="tcp", family=family, repetition=k, levels=(4, 5, 6, 6)))
                # MPC-Robust's h3 lower still: its QoE 0.6 against TCP's 6.0, beyond the 4.3 margin (with (1, 3, 2, 4)
                # it is 1.8: 4.2 apart, inside the margin)
                h3_levels = {"mpc_fast": (2, 2, 2, 2), "mpc_robust": (0, 1, 0, 2)}.get(abr, (1, 3, 2, 4))
                make(folder, Synth(abr=abr, transport="h3", family=family, repetition=k, levels=h3_levels,
                                   stall_s=0.0 if abr == "mpc_robust" else 0.5 + 0.1 * k))


def test_known_truth_sweep_gives_the_planted_verdicts(tmp_path: Path) -> None:
    _paper_like(tmp_path)
    found = {v.claim.id: v for v in each_alone(abr_quic.STUDY, tmp_path)}
    bitrate = found["bitrate_bola"]  # TCP 1875 vs h3 700 kbit/s on each of 6 traces
    assert bitrate.verdict == seq.AGREES and bitrate.n_pairs == 6 and bitrate.effect == pytest.approx(1175.0)
    assert found["rebuffer_bola"].verdict == seq.AGREES  # h3 stalls, TCP does not
    assert found["variation_mpc_fast"].verdict == seq.AGREES  # h3 constant: varies less
    # no stall either way, in any session: no spread, uninformative (not "alike inside the 1 s margin")
    assert found["rebuffer_mpc_robust"].verdict == seq.UNINFORMATIVE
    assert found["rebuffer_mpc_robust"].note == "no spread: all 12 sessions have rebuffer = 0"
    assert found["variation_bba"].verdict == seq.CONTRADICTS  # h3 varies less here, the letter says more
    assert found["qoe_mpc_robust"].verdict == seq.CONTRADICTS  # TCP better by 5.4, beyond the 4.3 margin
    assert {found[c].verdict for c in found if c.endswith("_pensieve")} == {seq.NO_DATA}  # not in this sweep
    two = {v.claim.id: v for v in each_alone(abr_quic.STUDY, _blocks(tmp_path / "two", 1))}
    assert two["bitrate_bola"].verdict == seq.TOO_FEW and two["bitrate_bola"].n_pairs == 2  # one block: 2 traces


def _blocks(folder: Path, blocks: int) -> Path:
    _paper_like(folder, blocks=blocks)
    return folder


def test_pairs_never_cross_traces_and_aa_copies_join_their_traces_pair(tmp_path: Path) -> None:
    _paper_like(tmp_path)
    # A/A copies of BOLA on fcc seed 1 (block 4 replays block 1's trace), both transports
    make(tmp_path, Synth(abr="bola", transport="tcp", repetition=4, seed=1, levels=(4, 5, 6, 7)))
    make(tmp_path, Synth(abr="bola", transport="h3", repetition=4, seed=1, levels=(1, 3, 2, 4)))
    # an h3 session of a trace without its TCP partner
    make(tmp_path, Synth(abr="bola", transport="h3", family="hsdpa", repetition=5, levels=(0, 0, 0, 0)))
    bola = {v.claim.id: v for v in each_alone(abr_quic.STUDY, tmp_path)}["bitrate_bola"]
    assert bola.n_pairs == 6 and (bola.n_a, bola.n_b) == (7, 8)  # copies averaged into fcc-1, the orphan unpaired
    assert bola.verdict == seq.AGREES


def test_noise_floor_from_aa_pairs(tmp_path: Path) -> None:
    _paper_like(tmp_path)
    # an A/A copy of bola/tcp/fcc-1 that played one level higher at the end: bitrate spread (4000-2500)/4 = 375
    make(tmp_path, Synth(abr="bola", transport="tcp", repetition=4, seed=1, levels=(4, 5, 6, 7)))
    sessions = aq.load_sessions(tmp_path)
    pairs = aq.aa_pairs(sessions)
    assert [p.cell for p in pairs] == [("bola", "tcp", "fcc-1")]
    floor = aq.noise_floor(pairs)
    assert floor["bitrate"] == pytest.approx(375.0) and floor["rebuffer"] == 0.0
    assert floor["variation"] == pytest.approx(500.0)  # (500+1000+1500)/3 - (500+1000+0)/3
    assert len(aq.usable(sessions)) == len(sessions) - 1  # the copy stays out of the box plots
    assert aq.noise_floor([]) == {}


def test_cpu_saturated_runs_are_left_out_and_incomplete_ones_flagged(tmp_path: Path) -> None:
    _paper_like(tmp_path)
    make(tmp_path, Synth(abr="bola", transport="h3", repetition=9, levels=(7, 7, 7, 7), cpu_saturated=3))
    make(tmp_path, Synth(abr="bola", transport="tcp", repetition=9, levels=(0, 0), ended=False))
    sessions = aq.load_sessions(tmp_path)
    used = aq.usable(sessions)
    assert not any(s.cpu_saturated for s in used) and any(s.run.endswith("trace-fcc_r9") for s in used)
    assert [s.complete for s in sessions if s.condition == "fcc-9" and s.transport == "tcp"] == [False]
    bola = {v.claim.id: v for v in each_alone(abr_quic.STUDY, tmp_path)}["bitrate_bola"]
    assert bola.n_saturated_excluded == 1 and bola.n_pairs == 6  # fcc-9 has no unsaturated h3 partner


def test_estimates_join_the_trace_rate_at_the_decision_time(tmp_path: Path) -> None:
    run = make(tmp_path, Synth(abr="mpc_fast", transport="h3", estimate_bps=2e6))
    times, rates, label = trace_schedule([{"t": "6.01", "link": "b", "direction": "forward", "rate_bps": "4"},
                                          {"t": "0", "link": "b", "direction": "forward", "rate_bps": "1"}])
    assert (times, rates, label) == ([0.0, 6.01], [1.0, 4.0], "b forward")
    assert rate_at(times, rates, -0.1) is None and rate_at(times, rates, 6.0) == 1.0 and rate_at(times, rates, 6.01) == 4.0
    points = estimates(run)  # decisions at 4, 8, 12 s (the first has no estimate)
    assert [(p.t, p.trace_bps, p.ratio) for p in points] == [(4.0, 1e6, 2.0), (8.0, 4e6, 0.5), (12.0, 4e6, 0.5)]


def test_report_is_chosen_by_the_experiment_and_written_by_plot(tmp_path: Path) -> None:
    folder = tmp_path / "abr_quic_tcp"
    _paper_like(folder, blocks=2)
    make(folder, Synth(abr="bola", transport="h3", repetition=3, seed=1, levels=(1, 3, 2, 3)))
    assert study_for(folder) is abr_quic.STUDY
    written = plot_folder(folder, run_plots=False)
    names = {p.name for p in written}
    assert {"report.md", "claims.csv", "abr_quic.md", "fig02_bitrate.png", "fig05_qoe.png",
            "estimate_ratio.png"} <= names
    assert sum(1 for p in written if p.parent.name == "estimates") == 33
    md = (folder / "report" / "abr_quic.md").read_text()
    assert "## Noise floor (A/A pairs)" in md and "bola/h3/fcc-1" in md and "1 s" in md
    assert "## The paper's claims (section IV), judged" in md and "Mann-Whitney" not in md
    assert ("| bitrate_bola: bitrate, transport=tcp vs transport=h3, a > b (margin 10%, rule); post hoc: margin "
            "chosen in session 15 after five blocks of an earlier run of the same design |") in md
    assert "Pensieve: much better quality on TCP" in md and "no data" in md
    assert "![average video bitrate](fig02_bitrate.png)" in md
    shared = (folder / "report" / "report.md").read_text()
    assert "## The paper's claims, judged" in shared and "| paper's claim | ours | agree? |" not in shared
    assert "qoe_mpc_robust: qoe, transport=tcp vs transport=h3, \\|a - b\\| < margin (margin 4.3, rule); post hoc: margin 4.3 stated in session 30" in shared
    assert "origin is Caddy" in shared
