"""DASH from Caddy (quic-go) over HTTP/3 with the player on qh3 and on quic-go, through the whole runner (host kernel: HTB).

A 20 s clip of the ``abr_quic_tcp`` ladder through a 3 Mbit/s bottleneck:
every segment arrives with sane times, the manifest names Caddy and the client, and
Caddy's access log (``access.csv``) has one response per media segment (besides
the MPD and the init segments), on one connection, at times that fit the player's.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config.sweep import expand
from nest_experiments.pytest_plugin import require_quicgo
from nest_experiments.runs.runner import Run

pytestmark = pytest.mark.integration

CLIP_S = 20
EPS_S = 0.010  # the access log's wall-clock times mapped onto the run clock, and log-writing delays


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _run(tmp_path: Path, client: str, *, transport: str = "h3", server: str = "caddy") -> Path:
    raw: dict[str, Any] = {
        "experiment": {"name": f"dash_{server}_{transport}", "topology": "dumbbell", "duration": f"{CLIP_S + 8}s",
                       "end_when_done": True},
        "links": {"bottleneck": {"rate": "3mbit"}},
        "apps": {"video": {"kind": "dash", "server": "s1", "client": "h1", "transport": transport,
                           "http_server": server, "h3_client": client, "ladder": "abr_quic_tcp", "clip": f"{CLIP_S}s",
                           "abr": "grate"}},
    }
    (spec,) = expand(raw)
    outcome = Run(spec, tmp_path / spec.name).execute()
    assert outcome.status == "completed", outcome.reason
    return outcome.run_dir


def _match(segment: dict[str, str], access: list[dict[str, str]]) -> dict[str, str]:
    """The unmatched response of the segment's size that arrived between its request and its first byte."""
    t_req, t_first = float(segment["t_request"]), float(segment["t_first_byte"])
    for row in access:
        if int(row["bytes"]) == int(segment["bytes"]) and t_req - EPS_S <= float(row["t_arrival"]) <= t_first + EPS_S:
            access.remove(row)
            return row
    raise AssertionError(f"no response in the access log for {segment}")


@pytest.mark.parametrize("client", ["qh3", "quic-go"])
def test_h3_session_from_caddy(no_leftovers: None, tmp_path: Path, client: str) -> None:
    require_quicgo(client)
    run_dir = _run(tmp_path, client)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["warnings"] == [], manifest["warnings"]
    assert manifest["versions"]["apps.video.http_server"].startswith(("caddy 2", "caddy v2"))  # Debian's, or ours
    assert manifest["versions"]["apps.video.client"].startswith(f"{client} ")
    qoe = json.loads((run_dir / "qoe.json").read_text())["video"]
    assert qoe["end_reason"] == "ended" and qoe["client"].startswith(f"{client} ") and qoe["http_server"].startswith("caddy")

    segments = _csv(run_dir / "segments.csv")
    for stream in ("video", "audio"):
        mine = [r for r in segments if r["stream"] == stream]
        assert [int(r["index"]) for r in mine] == list(range(CLIP_S // 4))
    for r in segments:
        assert r["transport"] == "h3" and int(r["bytes"]) > 0
        t_req, t_first, t_last = (float(r[k]) for k in ("t_request", "t_first_byte", "t_last_byte"))
        assert 0 <= t_req <= t_first <= t_last <= CLIP_S + 8
    video = [int(r["bitrate_bps"]) for r in segments if r["stream"] == "video"]
    assert sum(video) / len(video) >= 0.4 * 3_000_000  # the player kept up with the link

    access = _csv(run_dir / "access.csv")
    assert {r["transport"] for r in access} == {"h3"} and {r["status"] for r in access} == {"200"}
    assert len({r["conn_id"] for r in access}) == 1  # audio, video and the MPD on one QUIC connection
    media = [r for r in access if r["path"].endswith(".m4s")]
    assert len(media) == len(segments)
    for segment in sorted(segments, key=lambda r: float(r["t_request"])):
        row = _match(segment, media)
        assert float(row["t_arrival"]) <= float(row["t_last_byte_sent"]) <= float(segment["t_last_byte"]) + EPS_S
    others = [r["path"] for r in access if not r["path"].endswith(".m4s")]
    assert others[0].endswith(".mpd") and all(p.endswith("_init.mp4") for p in others[1:])  # MPD, init segments
    _check_recovery(run_dir, client, t_end=max(float(r["t_last_byte"]) for r in segments))


def _check_recovery(run_dir: Path, client: str, *, t_end: float) -> None:
    """quic.csv from quic-go's qlog: Caddy's connection at the sender (cwnd, RTT samples while the segments came,
    thinned to 20/s), and with the quic-go fetcher its own side too; qh3 logs none. No qlog is left in /tmp."""
    rows = _csv(run_dir / "quic.csv")
    server = [r for r in rows if r["side"] == "server" and r["event"] == "metrics"]
    assert len(server) >= 30 and min(int(r["cwnd"]) for r in server) > 0
    assert max(float(r["smoothed_rtt_ms"] or 0) for r in server) > 0
    t = sorted(float(r["t"]) for r in server)
    assert t[0] < 5 and 0.7 * t_end < t[int(0.95 * (len(t) - 1))] <= t_end + 1  # on the run clock
    assert all(b - a >= 0.05 - 1e-4 for a, b in zip(t, t[1:], strict=False))  # one connection: thinned
    clients = [r for r in rows if r["side"] == "client"]
    if client == "quic-go":
        assert clients and (run_dir / "raw" / "video.client.quic.sqlog").stat().st_size > 0
    else:
        assert clients == []


def test_tcp_session_from_webfsd(no_leftovers: None, tmp_path: Path) -> None:
    """The ABR letter's TCP server (Debian's webfs, webfsd 1.21): plain HTTP/1.1, every segment with sane times,
    the manifest naming it; it logs no per-response times, so access.csv has no rows (its own log stays in raw/)."""
    run_dir = _run(tmp_path, "qh3", transport="tcp", server="webfs")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["warnings"] == [], manifest["warnings"]
    assert manifest["versions"]["apps.video.http_server"].startswith("webfsd 1.21")
    qoe = json.loads((run_dir / "qoe.json").read_text())["video"]
    assert qoe["end_reason"] == "ended" and qoe["http_server"].startswith("webfsd")
    segments = _csv(run_dir / "segments.csv")
    for stream in ("video", "audio"):
        assert [int(r["index"]) for r in segments if r["stream"] == stream] == list(range(CLIP_S // 4))
    for r in segments:
        t_req, t_first, t_last = (float(r[k]) for k in ("t_request", "t_first_byte", "t_last_byte"))
        assert r["transport"] == "tcp" and int(r["bytes"]) > 0 and 0 <= t_req <= t_first <= t_last <= CLIP_S + 8
    video = [int(r["bitrate_bps"]) for r in segments if r["stream"] == "video"]
    assert sum(video) / len(video) >= 0.4 * 3_000_000
    assert _csv(run_dir / "access.csv") == []
    log = (run_dir / "raw" / "video.webfs.log").read_text()
    assert log.count('"GET /') >= len(segments) and ".m4s HTTP/1.1\" 200" in log
