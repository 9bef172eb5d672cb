"""dash.js in headless Firefox ESR over ``race`` (``player = "firefox"``): Firefox discovers QUIC from Caddy's alt-svc.

A 12 s clip of the ``abr_quic_tcp`` ladder through a 5 Mbit/s HTB bottleneck on the host kernel, as
``test_dashjs_race`` runs Chromium. Firefox is driven over Marionette on the player namespace's loopback; the run's
CA is in its profile, and HTTP/3 is allowed with it (``network.http.http3.disable_when_third_party_roots_found``
false: without it Firefox closes its HTTP/3 connection to our origin after the handshake, NS_ERROR_NET_RESET).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config.sweep import expand
from nest_experiments.dash import players
from nest_experiments.runs.runner import Run

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(players.missing("firefox", "race") is not None,
                                 reason=str(players.missing("firefox", "race")))]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_firefox_discovers_quic_from_alt_svc_and_quic_carries_the_media(no_leftovers: None, tmp_path: Path) -> None:
    raw: dict[str, Any] = {
        "experiment": {"name": "firefox_race", "topology": "dumbbell", "duration": "30s"},
        "links": {"bottleneck": {"rate": "5mbit"}},
        "apps": {"video": {"kind": "dash", "server": "s1", "client": "h1", "transport": "race", "http_server": "caddy",
                           "player": "firefox", "media": "encoded", "abr": "dynamic", "ladder": "abr_quic_tcp",
                           "clip": "12s"}}}
    (spec,) = expand(raw)
    outcome = Run(spec, tmp_path / spec.name).execute()
    assert outcome.status == "completed", outcome.reason
    segments = sorted(_rows(outcome.run_dir / "segments.csv"), key=lambda r: float(r["t_request"]))
    assert len(segments) >= 6
    later = segments[2:]  # the first of each stream may have gone before the alt-svc was known
    assert sum(r["transport"] == "h3" for r in later) >= 0.9 * len(later), [r["transport"] for r in segments]
    bound = _rows(outcome.run_dir / "racing.csv")
    assert bound and {r["event"] for r in bound} == {"bound"}
    assert bound[0]["detail"] == "/dash.all.min.js"  # the page itself is no Resource Timing entry
    assert sum(r["protocol"] == "quic" for r in bound) >= 0.8 * len(bound)
    doc = json.loads((outcome.run_dir / "qoe.json").read_text())["video"]
    assert doc["player"] == "firefox" and doc["firefox"].startswith("Mozilla Firefox")
    assert doc["resource_protocols"]["quic"] > doc["resource_protocols"]["tcp"]
