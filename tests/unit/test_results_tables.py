"""results.load covers every table a run writes: each frame is the file's rows with run, repetition and the swept
keys in front.

The real cluster sweep (tests/data/run_folders) has iperf3, iperf3_summary, cpu and qdisc. The other files have no
real sample there: :func:`writer_run` writes them through the writers' own code paths where the project has
captured tool output (sipp.csv, httperf.csv: the parsers' summary rows and the apps' field lists; access.csv:
Caddy's captured log; racing.csv: Chromium's captured NetLog through ``dash.netlog``; qoe.json: the player's
``qoe_document`` shape from ``dash.qoe.summarize``) and otherwise rows under the writers' field constants
(so that a renamed column fails here)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nest_experiments import results
from nest_experiments.analysis.results import TABLES
from nest_experiments.apps import httperf as httperf_app
from nest_experiments.apps import objects_client as objects_design
from nest_experiments.collectors import capture, cpu, subflows, wire
from nest_experiments.dash.core import qoe, records
from nest_experiments.dash.core.racing_log import RACING_FIELDS
from nest_experiments.dash.players import netlog
from nest_experiments.errors import NestExpError
from nest_experiments.net import nftplan
from nest_experiments.parsers import caddy, httperf, sipp
from nest_experiments.rundir import write_csv
from nest_experiments.rundir.rows import QUIC_FIELDS
from nest_experiments.runs import traceplay

DATA = Path(__file__).resolve().parents[1] / "data"
REAL = DATA / "run_folders" / "cluster_short"
POINT = {"links.bottleneck.qdisc.kind": "fq_pie", "dash.transport": "race"}


def test_real_run_folders_every_table_they_hold() -> None:
    r = results.load(REAL)
    front = ["run", "repetition", *r.swept]
    for name, file in (("iperf3", "iperf3.csv"), ("iperf3_summary", "iperf3_summary.csv"), ("cpu", "cpu.csv"),
                       ("qdisc", "qdisc.csv")):
        frame = r.table(name)
        assert list(frame.columns[:len(front)]) == front
        assert set(frame.run) == {"qdisc-pfifo-100_r1", "qdisc-pfifo-20_r1"}  # completed runs only
        for run in set(frame.run):
            own = pd.read_csv(REAL / run / file)
            mine = frame[frame.run == run]
            pd.testing.assert_frame_equal(mine.drop(columns=front).reset_index(drop=True), own, check_dtype=False)
            limit = int(run.split("-")[2].split("_")[0])
            assert set(mine["links.bottleneck.qdisc.limit"]) == {limit} and set(mine.repetition) == {1}
    assert r.iperf3.bits_per_second.gt(0).any() and r.cpu.busy.between(0, 1).all()
    assert r.iperf3_summary.groupby("run").flow.nunique().min() >= 1
    assert r.racing.empty and list(r.racing.columns) == front  # a file no run wrote


def _captured_rows() -> dict[str, tuple[tuple[str, ...], list[dict[str, Any]]]]:
    stat = sipp.parse_stat((DATA / "sipp" / "uac_stat_idle.csv").read_text(), what="test")
    rtts = sipp.parse_rtt((DATA / "sipp" / "uac_rtt_idle.csv").read_text())
    sipp_row = sipp.summary_row(stat, rtts, app="voip", src="h1", dst="s1", rate_cps=10.0, call_length_s=2.0,
                                calls_planned=100, rtp_packets_per_call=100)
    web = httperf.summary_row((DATA / "httperf" / "idle.txt").read_text(), what="apps.web", app="web", src="h3",
                              dst="s3", rate_target=15.0)
    web.update(size_bytes=10_000, cpu_limit_pct=5.0, cpu_throttled_ratio=0.1, select_wait_us=1000)  # as the app does
    access = [{**row, "app": "video"} for row in caddy.access_rows((DATA / "caddy" / "access.json").read_text(),
                                                                   wall_t0=0.0)]
    doc = json.loads((DATA / "netlog" / "race_clean.json").read_text())
    t0 = (float(doc["events"][0]["time"]) + float(doc["constants"]["timeTickOffset"])) / 1000
    racing = [{**asdict(row), "app": "video"}
              for row in netlog.racing_rows(doc, "10.0.3.2:8443", to_run=lambda wall_s: wall_s - t0)]
    return {"sipp.csv": (sipp.FIELDS, [sipp_row]), "httperf.csv": (httperf_app.FIELDS, [web]),
            "access.csv": ((*records.ACCESS_LOG_FIELDS, "app"), access), "racing.csv": ((*RACING_FIELDS, "app"), racing)}


def _field_rows() -> dict[str, tuple[tuple[str, ...], list[dict[str, Any]]]]:
    segs = [records.SegmentRow(stream=s, index=i, level=i % 2, bitrate_bps=(300_000, 600_000)[i % 2] if s == "video"
                               else 128_000, bytes=150_000, t_request=2.0 * i, t_first_byte=2.0 * i + 0.05,
                               t_last_byte=2.0 * i + 0.5, buffer_s=2.0 + i, transport="h3")
            for i in range(4) for s in ("video", "audio")]
    decisions = [records.DecisionRow(t=2.0 * i, stream="video", index=i, algorithm="bola", buffer_s=2.0 + i,
                                     throughput_bps=1e6, level=i % 2, bitrate_bps=(300_000, 600_000)[i % 2])
                 for i in range(4)]
    return {
        "segments.csv": ((*records.SEGMENT_FIELDS, "app"), [{**asdict(s), "app": "video"} for s in segs]),
        "abr_decisions.csv": ((*records.DECISION_FIELDS, "app"), [{**asdict(d), "app": "video"} for d in decisions]),
        "firewall.csv": (nftplan.COUNTER_FIELDS, [dict.fromkeys(nftplan.COUNTER_FIELDS, 1) | {"firewall": "udp"}]),
        "wire.csv": (wire.FIELDS, [dict.fromkeys(wire.FIELDS, 10) | {"link": "bn", "proto": "udp"}]),
        "objects.csv": ((*objects_design.FIELDS, "app"), [dict.fromkeys(objects_design.FIELDS, 1.5) | {"app": "o"}]),
        "qdelay.csv": (capture.QDELAY_FIELDS, [{"t": 0.1 * k, "node": "r1", "dev": "r3", "delay_ms": 5.0 + k,
                                                "method": "capture"} for k in range(5)]),
        "cpu.csv": (("t", "busy"), [{"t": 1.0, "busy": 0.5}]),  # the runner's field tuple, written inline there
        "cpu_procs.csv": (cpu.PROCESS_FIELDS, [{"t": 1.0, "pid": 42, "comm": "python3", "app": "video", "share": 0.4}]),
        "rates.csv": (traceplay.FIELDS, [dict.fromkeys(traceplay.FIELDS, 1) | {"rate_bps": 2_000_000}]),
        "subflows.csv": (subflows.FIELDS, [dict.fromkeys(subflows.FIELDS, 2) | {"link": "h2_r1"}]),
        "quic.csv": ((*QUIC_FIELDS, "app"), [dict.fromkeys(QUIC_FIELDS, 3) | {"event": "metrics",
                                                                                             "app": "video"}]),
    }, segs


def writer_run(sweep: Path, name: str, repetition: int) -> Path:
    run = sweep / name
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"status": "completed", "point": POINT, "repetition": repetition}))
    field_rows, segs = _field_rows()
    for file, (fields, rows) in {**_captured_rows(), **field_rows}.items():
        write_csv(run / file, fields, rows)
    summary = qoe.summarize(segs)  # qoe.json: {app: dash.client.qoe_document(...)}
    (run / "qoe.json").write_text(json.dumps({"video": {
        "transport": "h3", "client": "ours", "end_reason": "media ended", "ended_at": 9.0, "stalls": 0,
        "stall_at_end": None, "qoe": {k: asdict(v) for k, v in summary.items()}}}))
    return run


def test_every_table_of_a_run_folder(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    runs = [writer_run(sweep, f"r{i}", i) for i in (1, 2)]
    r = results.load(sweep)
    front = ["run", "repetition", *POINT]
    assert r.swept == tuple(POINT)
    files = {t.file for t in TABLES.values()}
    on_real = {"iperf3.csv", "iperf3_summary.csv", "qdisc.csv"}  # tested on the real folders above
    assert files == {p.name for p in runs[0].iterdir() if p.name != "manifest.json"} | on_real
    for t in TABLES.values():
        frame = r.table(t.name)
        assert frame is getattr(r, t.name)  # one attribute per table, read once
        if t.file == "qoe.json":
            continue
        if t.file in on_real:
            assert frame.empty
            continue
        assert list(frame.columns[:len(front)]) == front, t.name
        own = pd.read_csv(runs[0] / t.file)
        assert list(frame.columns[len(front):]) == list(own.columns), t.name  # the writer's columns, in order
        assert frame.run.value_counts().to_dict() == {"r1": len(own), "r2": len(own)}, t.name
        assert (frame[frame.run == "r2"].repetition == 2).all() and (frame["dash.transport"] == "race").all()
        assert set(dict(t.units)) <= set(own.columns), t.name  # units documented for columns that exist
    assert len(r.sipp) == 2 and r.sipp.calls_successful.gt(0).all()
    assert r.httperf.reply_rate_avg.gt(0).all() and r.access.status.eq(200).any()
    assert {"job_started", "won"} <= set(r.racing.event)
    q = r.qoe.set_index(["run", "stream"])
    assert sorted(set(r.qoe.stream)) == ["audio", "session", "video"] and set(r.qoe.app) == {"video"}
    assert q.loc[("r1", "video"), "switches"] == 3 and q.loc[("r1", "video"), "avg_bitrate_bps"] == 450_000
    assert q.loc[("r1", "session"), "end_reason"] == "media ended"
    assert results.Results.units("cpu")["busy"] == "0-1 of all CPUs"


def test_an_unknown_table_is_an_error() -> None:
    with pytest.raises(NestExpError, match="results table 'iperf': not one of segments, qdisc"):
        results.load(REAL).table("iperf")
