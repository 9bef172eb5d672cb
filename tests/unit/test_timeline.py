"""analysis.timeline and reports.timeline: the stalls of a DASH session, what the queue and the transport did in the
seconds before each, and the timeline figure drawn from a run folder's own files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from nest_experiments.analysis import timeline
from nest_experiments.collectors.capture import QDELAY_FIELDS
from nest_experiments.collectors.subflows import FIELDS as SUBFLOW_FIELDS
from nest_experiments.reports.plot import plot_run
from nest_experiments.rundir import (
    DECISIONS,
    MANIFEST,
    QDELAY,
    QDISC,
    QOE,
    SEGMENTS,
    STALLS_TEXT,
    SUBFLOWS,
    TIMELINE_PLOT,
    write_csv,
)
from nest_experiments.rundir.rows import DECISION_FIELDS, SEGMENT_FIELDS


def segment(index: int, t_request: float, t_last: float, *, level: int = 2, buffer_s: float = 8.0,
            stall_s: float = 0.0, stream: str = "video") -> dict[str, object]:
    return {"stream": stream, "index": index, "level": level, "bitrate_bps": 1_000_000 * (level + 1),
            "bytes": 500_000, "t_request": t_request, "t_first_byte": t_request + 0.05, "t_last_byte": t_last,
            "buffer_s": buffer_s, "stall_s": stall_s, "transport": "tcp", "app": "dash"}


SEGMENTS_ROWS = [segment(i, 4.0 * i, 4.0 * i + 1.0) for i in range(5)] + [
    segment(5, 20.0, 26.5, level=0, buffer_s=4.0, stall_s=2.5)]  # the stall from 24.0 to 26.5, ended by index 5
QDISC_ROWS = [{"t": float(t), "node": "r1", "dev": "r1-r2", "kind": "pie", "backlog_pkts": 3, "drops": drops,
               "delay_ms": delay} for t, drops, delay in
              [(17, 10, 5.0), (18, 10, 5.0), (19, 11, 20.0), (20, 14, 30.0), (21, 16, 40.0), (22, 19, 42.0),
               (23, 20, 44.0), (24, 20, 10.0), (25, 21, 6.0)]]
QDELAY_ROWS = [{"t": 19.0 + 0.1 * i, "node": "r1", "dev": "r1-r2", "delay_ms": 30.0 + i % 3, "method": "pcap"}
               for i in range(40)]
SERVER = {"app": "dash", "side": "server", "local": "10.0.1.1", "local_port": 9000, "remote": "10.0.7.2",
          "remote_port": 40000, "link": "s1_r2", "client_link": "h1_r1", "mptcp": False}
SUBFLOW_ROWS = [{**SERVER, "t": float(t), "cwnd": cwnd, "rtt_ms": rtt, "retrans_total": retx}
                for t, cwnd, rtt, retx in [(17, 30, 40.0, 2), (19, 24, 55.0, 3), (21, 12, 70.0, 6),
                                           (23, 6, 80.0, 9), (25, 8, 60.0, 9)]] + [
    {**SERVER, "side": "client", "local": "10.0.7.2", "local_port": 40000, "remote": "10.0.1.1",
     "remote_port": 9000, "t": 21.0, "cwnd": 10, "rtt_ms": 0.1, "retrans_total": 0}]  # the client's end: not it


def frames() -> dict[str, pd.DataFrame]:
    return {"qdisc": pd.DataFrame(QDISC_ROWS), "qdelay": pd.DataFrame(QDELAY_ROWS),
            "subflows": pd.DataFrame(SUBFLOW_ROWS)}


def test_a_stall_is_found_where_a_segment_ended_it_and_where_the_session_stopped_in_one() -> None:
    qoe = {"dash": {"stall_at_end": {"stream": "audio", "t_start": 40.0, "duration_s": 1.5}}}
    first, last = timeline.stalls(pd.DataFrame(SEGMENTS_ROWS), qoe)
    assert (first.start, first.end, first.index, first.level, first.fetch_s) == (24.0, 26.5, 5, 0, 6.5)
    assert (last.start, last.end, last.index, last.stream) == (40.0, 41.5, None, "audio")


def test_the_stall_line_says_what_the_queue_and_the_sender_did_in_the_seconds_before_it() -> None:
    (stall,) = timeline.stalls(pd.DataFrame(SEGMENTS_ROWS))
    line = timeline.stall_summary(stall, **frames())
    assert line.startswith("dash: stall 2.50 s at 24.0-26.5 s (ended by video segment 5 at level 0, fetched in 6.50 s)")
    assert "in the 5 s before" in line
    # per packet 19.0-22.9 s: 14 x 30, 13 x 31, 13 x 32 ms; the kernel's samples in (19, 24]: drops 20 - 11 (the
    # sample at 19 s, the window's start, is the base), delay mean (30 + 40 + 42 + 44 + 10) / 5
    assert "r1->r1-r2 queue delay mean 31.0 ms, max 32.0 ms (40 packets)" in line
    assert "r1->r1-r2 pie: 9 drops, kernel delay mean 33.2 ms" in line
    # the sender's end only (the client row's cwnd 10 is not it): 19-23 s, cwnd 24 -> 6, retransmits 9 - 2
    assert "s1_r2 :9000: cwnd 24->6 segments (min 6), srtt max 80 ms, 7 retransmits" in line
    assert "cwnd 10" not in line


def test_a_folder_without_the_senders_state_still_gets_its_queue_line() -> None:
    (stall,) = timeline.stalls(pd.DataFrame(SEGMENTS_ROWS))
    old = pd.DataFrame([{k: v for k, v in r.items() if k not in ("side", "cwnd", "retrans_total")}
                        for r in SUBFLOW_ROWS])
    line = timeline.stall_summary(stall, qdisc=pd.DataFrame(QDISC_ROWS), subflows=old)
    assert "pie: 9 drops" in line and "cwnd" not in line
    assert timeline.stall_summary(stall).endswith("no queue or transport samples")


def test_plot_run_draws_the_timeline_and_writes_the_stall_lines(tmp_path: Path) -> None:
    run = tmp_path / "sweep" / "kind-pie_r1"
    run.mkdir(parents=True)
    (run / MANIFEST).write_text(json.dumps({"status": "completed"}))
    write_csv(run / SEGMENTS, (*SEGMENT_FIELDS, "app"), SEGMENTS_ROWS)
    write_csv(run / DECISIONS, (*DECISION_FIELDS, "app"),
              [{"t": 4.0 * i, "stream": "video", "index": i, "algorithm": "bola", "buffer_s": 8.0,
                "throughput_bps": 3e6 - 4e5 * i, "level": 2, "bitrate_bps": 3_000_000, "app": "dash"}
               for i in range(6)])
    write_csv(run / QDISC, tuple(QDISC_ROWS[0]), QDISC_ROWS)
    write_csv(run / QDELAY, QDELAY_FIELDS, QDELAY_ROWS)
    write_csv(run / SUBFLOWS, SUBFLOW_FIELDS, SUBFLOW_ROWS)
    (run / QOE).write_text(json.dumps({"dash": {}}))
    out = plot_run(run)
    assert run / TIMELINE_PLOT in out and (run / TIMELINE_PLOT).stat().st_size > 20_000
    (line,) = (run / STALLS_TEXT).read_text().splitlines()
    assert "stall 2.50 s at 24.0-26.5 s" in line and "7 retransmits" in line


def test_a_run_without_segments_gets_no_timeline(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    write_csv(run / QDISC, tuple(QDISC_ROWS[0]), QDISC_ROWS)
    assert [p.name for p in plot_run(run)] == ["qdisc.png"]
    assert not (run / TIMELINE_PLOT).exists()


def test_a_run_with_no_stall_says_so(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    write_csv(run / SEGMENTS, (*SEGMENT_FIELDS, "app"), [segment(i, 4.0 * i, 4.0 * i + 1) for i in range(3)])
    plot_run(run)
    assert (run / STALLS_TEXT).read_text() == "no stall in this run\n"
