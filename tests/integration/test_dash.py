"""DASH through the whole runner: experiment dict -> namespaces -> run folder (host kernel: HTB only).

Each session plays a 30 s clip of the ``abr_quic_tcp`` ladder (200 kbit/s -
4 Mbit/s video, 64/128 kbit/s audio) with the throughput ABR (``grate``)
through an HTB bottleneck without added delay.
"""

from __future__ import annotations

import csv
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nest_experiments.config.sweep import expand
from nest_experiments.dash.core.records import SEGMENT_FIELDS
from nest_experiments.reports.plot import plot_run
from nest_experiments.rundir import QUIC, STALLS_TEXT, SUBFLOWS, TIMELINE_PLOT
from nest_experiments.runs.outcome import RunOutcome
from nest_experiments.runs.runner import Run
from tests.integration.mptcp_paths import sample_paths

pytestmark = pytest.mark.integration

CLIP_S = 30
BOTTLENECK_BPS = 3_000_000


def _outcome(raw: dict[str, Any], tmp_path: Path, during: Any = None) -> RunOutcome:
    """Run ``raw`` (``during(run)`` in a thread beside it); no DASH process may outlive it."""
    (spec,) = expand(raw)
    run = Run(spec, tmp_path / spec.name)
    if during is not None:
        threading.Thread(target=during, args=(run,), daemon=True).start()
    outcome = run.execute()
    dash = subprocess.run(["pgrep", "-af", r"nest_experiments\.dash\.(server|client)"], capture_output=True,
                          text=True, check=False).stdout
    assert dash == "", f"DASH processes left behind: {dash}"
    return outcome


def _execute(raw: dict[str, Any], tmp_path: Path, during: Any = None) -> Path:
    outcome = _outcome(raw, tmp_path, during)
    assert outcome.status == "completed", outcome.reason
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    assert manifest["warnings"] == [], manifest["warnings"]
    return outcome.run_dir


def _segments(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "segments.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames is not None
        assert tuple(reader.fieldnames[: len(SEGMENT_FIELDS)]) == SEGMENT_FIELDS  # DESIGN §4, in order
        return list(reader)


def _check_segments(rows: list[dict[str, str]], transport: str) -> None:
    for stream in ("video", "audio"):
        mine = [r for r in rows if r["stream"] == stream]
        assert [int(r["index"]) for r in mine] == list(range(len(mine)))
        assert len(mine) * 4 >= CLIP_S  # 4 s segments: the whole clip
    for r in rows:
        assert r["transport"] == transport
        assert int(r["bytes"]) > 0 and int(r["bitrate_bps"]) > 0
        t_req, t_first, t_last = (float(r[k]) for k in ("t_request", "t_first_byte", "t_last_byte"))
        assert 0 <= t_req <= t_first <= t_last
        assert float(r["buffer_s"]) >= 0 and float(r["stall_s"]) >= 0


def _dumbbell(transport: str) -> dict[str, Any]:
    return {
        "experiment": {"name": f"dash_{transport}", "topology": "dumbbell", "duration": "38s",
                       "end_when_done": True},
        "links": {"bottleneck": {"rate": "3mbit"}},
        "apps": {"video": {"kind": "dash", "server": "s1", "client": "h1", "transport": transport,
                           "ladder": "abr_quic_tcp", "clip": f"{CLIP_S}s", "abr": "grate"}},
    }


@pytest.mark.parametrize("transport", ["tcp", "mptcp", "h2", "h3"])
def test_dash_through_an_htb_bottleneck(no_leftovers: None, tmp_path: Path, transport: str) -> None:
    run_dir = _execute(_dumbbell(transport), tmp_path)
    rows = _segments(run_dir)
    _check_segments(rows, transport)
    video = [int(r["bitrate_bps"]) for r in rows if r["stream"] == "video"]
    mean_bps = sum(video) / len(video)
    assert 0.4 * BOTTLENECK_BPS <= mean_bps <= BOTTLENECK_BPS, f"{transport}: mean video bitrate {mean_bps:.0f}"
    qoe = json.loads((run_dir / "qoe.json").read_text())["video"]
    assert qoe["end_reason"] == "ended" and qoe["transport"] == transport
    assert qoe["qoe"]["video"]["avg_bitrate_bps"] == pytest.approx(mean_bps)
    with (run_dir / "abr_decisions.csv").open(newline="") as fh:
        assert len(list(csv.DictReader(fh))) >= len(rows)
    if transport == "h3":  # audio and video multiplexed on one QUIC connection (one UDP flow)
        with (run_dir / "raw" / "video.access.csv").open(newline="") as fh:
            access = list(csv.DictReader(fh))
        assert {r["transport"] for r in access} == {"h3"}
        assert len({r["conn_id"] for r in access}) == 1
    _check_sender_state(run_dir, transport)


def test_our_aioquic_player_logs_the_receivers_recovery_beside_the_senders(no_leftovers: None, tmp_path: Path) -> None:
    raw = _dumbbell("h3")
    raw["apps"]["video"]["h3_client"] = "aioquic"
    run_dir = _execute(raw, tmp_path)
    quic = pd.read_csv(run_dir / QUIC)
    server, client = (quic[(quic["side"] == side) & (quic["event"] == "metrics")] for side in ("server", "client"))
    with (run_dir / "raw" / "video.access.csv").open(newline="") as fh:
        assert set(server["conn"]) == {r["conn_id"] for r in csv.DictReader(fh)}  # the sender's, as before
    # the receiver's: its RTT samples of the same connection (one), on the run clock while the segments came
    assert client["conn"].nunique() == 1 and len(client) >= 10 and client["smoothed_rtt_ms"].max() > 0
    t_end = float(pd.read_csv(run_dir / "segments.csv")["t_last_byte"].max())
    # (the last row: the connection's close, when the player stopped: measured 32.8 s of the 38 s run)
    assert client["t"].min() < 5 and client["t"].quantile(0.9) <= t_end + 1 and client["t"].max() <= 38 + 5
    assert not (run_dir / "raw" / "video.client.quic.csv.partial").exists()  # renamed when the player closed


def _check_sender_state(run_dir: Path, transport: str) -> None:
    """The transport at the sender on the run clock (TCP: ss at the server's end; QUIC: aioquic's recovery
    events), and the timeline drawn from them."""
    segments = pd.read_csv(run_dir / "segments.csv")
    t_end = float(segments["t_last_byte"].max())
    if transport == "h3":
        quic = pd.read_csv(run_dir / QUIC)
        metrics = quic[quic["event"] == "metrics"]
        with (run_dir / "raw" / "video.access.csv").open(newline="") as fh:
            assert set(quic["conn"]) == {r["conn_id"] for r in csv.DictReader(fh)}  # named as the access log
        assert len(metrics) >= 50 and metrics["cwnd"].min() > 0 and metrics["smoothed_rtt_ms"].max() > 0
        # the run clock: the events of the transfer fall while the segments came (measured: 0.48 s to the last
        # segment's 21.9 s); the last, the connection's close, when the 38 s run stopped the server (36.7 s)
        t = metrics["t"]
        assert t.min() < 5 and 0.8 * t_end < t.quantile(0.95) <= t_end + 1 and t.max() <= 38 + 5
        assert metrics["t"].diff().dropna().min() >= 0.05 - 1e-6 or metrics["conn"].nunique() > 1  # thinned
    else:
        sub = pd.read_csv(run_dir / SUBFLOWS)
        server = sub[sub["side"] == "server"]
        client = sub[sub["side"] == "client"]
        assert len(server) >= 20 and server["cwnd"].min() >= 1 and server["rtt_ms"].max() > 0
        assert server["pacing_rate_bps"].max() > 0 and server["delivery_rate_bps"].max() > 0
        # the server's bytes sent are the client's received, connection by connection (the same sockets)
        sent = server.groupby(["remote", "remote_port"])["bytes_acked"].max().sum()
        got = client.groupby(["local", "local_port"])["bytes_received"].max().sum()
        assert got > 1_000_000 and abs(sent - got) <= 0.05 * got, (sent, got)
    out = plot_run(run_dir)
    assert run_dir / TIMELINE_PLOT in out and (run_dir / STALLS_TEXT).read_text().strip()


def test_a_player_that_dies_fails_the_run(no_leftovers: None, tmp_path: Path) -> None:
    """DESIGN §4: a run whose player died measured no session: its status is "failed" with the reason (a resumed
    sweep runs it again; the studies read completed runs only), what it wrote stays, nothing is left running."""
    raw = _dumbbell("tcp")
    raw["experiment"]["duration"] = "15s"

    def kill_player(run: Run) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            client = getattr(run.apps[0], "client", None) if run.apps else None
            if client is not None:
                time.sleep(3.0)  # a few segments in
                client.kill()
                return
            time.sleep(0.1)

    outcome = _outcome(raw, tmp_path, during=kill_player)
    assert outcome.status == "failed", outcome.reason
    assert outcome.reason.startswith("apps.video: DASH client failed"), outcome.reason
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["reason"] == outcome.reason
    assert (outcome.run_dir / "raw" / "video.client.err").exists()


def test_mptcp_uses_both_paths_of_the_multihomed_dumbbell(no_leftovers: None, tmp_path: Path) -> None:
    raw = {
        "experiment": {"name": "dash_mptcp_2paths", "topology": "multihomed_dumbbell", "duration": "38s",
                       "end_when_done": True},
        "links": {"bn1": {"rate": "2mbit"}, "bn2": {"rate": "2mbit"}},
        "apps": {"video": {"kind": "dash", "server": "s2", "client": "h2", "transport": "mptcp",
                           "ladder": "abr_quic_tcp", "clip": f"{CLIP_S}s", "abr": "grate",
                           "mptcp_add_addr_timeout": "2s"}},
    }
    counters: dict[str, int] = {}
    run_dir = _execute(raw, tmp_path, during=lambda run: sample_paths(run, counters))
    rows = _segments(run_dir)
    _check_segments(rows, "mptcp")
    stream_bytes = sum(int(r["bytes"]) for r in rows)
    assert set(counters) == {"r1", "r2"}
    for node, sent in counters.items():
        assert sent >= 0.1 * stream_bytes, f"path via {node} carried {sent} of {stream_bytes} bytes"
    (run_dir / "path_bytes.json").write_text(json.dumps({**counters, "stream": stream_bytes}))
    mptcp = json.loads((run_dir / "mptcp.json").read_text())["video"]
    assert mptcp["add_addr_timeout_s"] == {"h2": 2, "s2": 2}
    client, server = mptcp["counters"]["h2"], mptcp["counters"]["s2"]
    # every connection (the MPD's, video's, audio's) got the server's second address and joined from it
    assert client["MPCapableSYNACKRX"] >= 2 and client["AddAddr"] >= client["MPCapableSYNACKRX"]
    assert server["MPJoinAckRx"] >= client["MPCapableSYNACKRX"]
