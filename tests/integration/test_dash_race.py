"""Our player's ``race`` transport through the whole runner (host kernel: HTB, nftables; our server).

A 16 s clip of the ``abr_quic_tcp`` ladder through a 3 Mbit/s bottleneck:
- ``chromium`` on a clean link: the MPD over TCP teaches ``alt-svc: h3``, the
  next request races, QUIC connects first and wins; QUIC then carries >= 90 %
  of the bytes after the first segment;
- ``tcp_only``: not one QUIC byte, although h3 is advertised;
- ``chromium`` with UDP to the server's port dropped on r1 (``[firewalls]``):
  the QUIC job fails its handshake, QUIC is marked broken with Chromium's
  300 s back-off, and TCP carries >= 90 % of the bytes.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.apps.dash import CADDY_PORT
from nest_experiments.runner import Run
from nest_experiments.sweep import expand

pytestmark = pytest.mark.integration

CLIP_S = 16


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _run(tmp_path: Path, policy: str, *, firewall: bool = False) -> Path:
    raw: dict[str, Any] = {
        "experiment": {"name": "dash_race", "topology": "dumbbell", "duration": f"{CLIP_S + 6}s"},
        "links": {"bottleneck": {"rate": "3mbit"}},
        "apps": {"video": {"kind": "dash", "server": "s1", "client": "h1", "transport": "race", "racing": policy,
                           "ladder": "abr_quic_tcp", "clip": f"{CLIP_S}s", "abr": "grate",
                           "racing_params": {"quic_handshake_timeout": "3s"}}},
    }
    if firewall:
        raw["firewalls"] = {"udp": {"router": "r1", "proto": "udp", "port": CADDY_PORT, "action": "drop"}}
    (spec,) = expand(raw)
    outcome = Run(spec, tmp_path / spec.name).execute()
    assert outcome.status == "completed", outcome.reason
    return outcome.run_dir


def _bytes_after_first(segments: list[dict[str, str]]) -> dict[str, int]:
    """Bytes per transport of every segment but the first one requested."""
    first = min(segments, key=lambda r: float(r["t_request"]))
    out = {"tcp": 0, "h3": 0}
    for r in segments:
        if r is not first:
            out[r["transport"]] += int(r["bytes"])
    return out


def test_chromium_clean_link_quic_carries_the_session(no_leftovers: None, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "chromium")
    segments = _csv(run_dir / "segments.csv")
    assert len([r for r in segments if r["stream"] == "video"]) == CLIP_S // 4
    by = _bytes_after_first(segments)
    assert by["h3"] >= 0.9 * (by["h3"] + by["tcp"]), by
    events = [(r["event"], r["protocol"]) for r in _csv(run_dir / "racing.csv")]
    assert events[:3] == [("job_started", "tcp"), ("connected", "tcp"), ("won", "tcp")]  # the MPD, over TCP
    assert ("alt_svc", "tcp") in events and ("connected", "quic") in events and ("won", "quic") in events
    assert not [e for e in events if e[0] in ("broken", "failed", "stream_error")], events


def test_tcp_only_carries_no_quic_byte(no_leftovers: None, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "tcp_only")
    segments = _csv(run_dir / "segments.csv")
    assert segments and {r["transport"] for r in segments} == {"tcp"}
    assert not [r for r in _csv(run_dir / "racing.csv") if r["protocol"] == "quic"]
    access = _csv(run_dir / "access.csv")
    assert "h3" not in {r["transport"] for r in access}  # the server saw no QUIC request either


def test_chromium_udp_blocked_falls_back_to_tcp(no_leftovers: None, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "chromium", firewall=True)
    segments = _csv(run_dir / "segments.csv")
    total = sum(int(r["bytes"]) for r in segments)
    tcp = sum(int(r["bytes"]) for r in segments if r["transport"] == "tcp")
    assert tcp >= 0.9 * total, (tcp, total)
    rows = _csv(run_dir / "racing.csv")
    failed = [r for r in rows if r["event"] == "failed" and r["protocol"] == "quic"]
    backoff = [float(r["value"]) for r in rows if r["event"] == "backoff"]
    assert failed and backoff == [300.0], rows
