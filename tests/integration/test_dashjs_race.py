"""dash.js in headless Chromium over ``race``: Chromium discovers QUIC from Caddy's alt-svc and races it with TCP.

A 12 s clip of the ``abr_quic_tcp`` ladder through a 5 Mbit/s HTB bottleneck
on the host kernel. On a clean link QUIC carries the media after the page and
dash.js came over TCP; with UDP to the origin's port dropped by a firewall on
r1 (nftables) Chromium's QUIC job never connects and TCP carries everything.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config.sweep import expand
from nest_experiments.runs.runner import Run

pytestmark = pytest.mark.integration

CLIP_S = 12
CADDY_PORT = 8443


def _raw(firewall: str | None) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "experiment": {"name": "dashjs_race", "topology": "dumbbell", "duration": "30s",
                       "end_when_done": True},
        "links": {"bottleneck": {"rate": "5mbit"}},
        "apps": {"video": {"kind": "dash", "server": "s1", "client": "h1", "transport": "race",
                           "http_server": "caddy", "player": "dashjs", "media": "encoded", "abr": "dynamic",
                           "ladder": "abr_quic_tcp", "clip": f"{CLIP_S}s"}}}
    if firewall:
        raw["firewalls"] = {"udp": {"router": "r1", "port": CADDY_PORT, "action": firewall}}
    return raw


def _run(raw: dict[str, Any], tmp_path: Path) -> Path:
    (spec,) = expand(raw)
    outcome = Run(spec, tmp_path / spec.name).execute()
    assert outcome.status == "completed", outcome.reason
    return outcome.run_dir


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def _bytes_by_transport(run_dir: Path) -> dict[str, int]:
    """Media bytes per protocol, without the first segment of each stream (requested before QUIC was known)."""
    segments = sorted(_rows(run_dir / "segments.csv"), key=lambda r: float(r["t_request"]))
    seen: set[str] = set()
    out: dict[str, int] = {}
    for r in segments:
        if r["stream"] in seen:
            out[r["transport"]] = out.get(r["transport"], 0) + int(r["bytes"])
        seen.add(r["stream"])
    return out


def test_on_a_clean_link_quic_is_discovered_and_carries_the_media(no_leftovers: None, tmp_path: Path) -> None:
    run_dir = _run(_raw(None), tmp_path)
    by = _bytes_by_transport(run_dir)
    assert by.get("h3", 0) >= 0.9 * sum(by.values()), by
    racing = _rows(run_dir / "racing.csv")
    events = [(r["event"], r["protocol"]) for r in racing]
    # the page came over TCP, its alt-svc started QUIC, and QUIC won the races after it connected
    assert events.index(("job_started", "tcp")) < events.index(("alt_svc", "")) < events.index(("job_started", "quic"))
    assert ("connected", "quic") in events and events.count(("won", "quic")) >= 3
    doc = json.loads((run_dir / "qoe.json").read_text())["video"]
    assert doc["netlog_protocols"]["quic"] > doc["netlog_protocols"]["tcp"]
    assert doc["chromium_cpu_s"] > 0


def test_with_udp_blocked_chromium_falls_back_to_tcp(no_leftovers: None, tmp_path: Path) -> None:
    run_dir = _run(_raw("drop"), tmp_path)
    by = _bytes_by_transport(run_dir)
    assert by.get("tcp", 0) >= 0.9 * sum(by.values()) > 0, by
    events = [(r["event"], r["protocol"]) for r in _rows(run_dir / "racing.csv")]
    assert ("job_started", "quic") in events and ("connected", "quic") not in events  # it tried, it never connected
    assert ("won", "quic") not in events
    [dropped] = [r for r in _rows(run_dir / "firewall.csv") if r["direction"] == "to_port"]
    assert int(dropped["dropped_pkts"]) > 0  # Chromium's QUIC handshakes died at the firewall
