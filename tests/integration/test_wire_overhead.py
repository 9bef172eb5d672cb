"""Bytes on the wire of a real DASH session (experiment.wire_links), over HTTP/1.1-TCP and HTTP/3-QUIC (host kernel).

A 10 s clip of one pinned representation (abr = "fixed", 1.3 Mbit/s) from
Caddy through a 20 Mbit/s bottleneck, captured on r1's bottleneck interface
both ways: wire.csv holds the session's transport only, both directions,
packets no larger than the link's MTU (the offloads are off, UDP GSO too),
and the overhead over the media payload is positive and plausible.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config.sweep import expand
from nest_experiments.runs.runner import Run
from nest_experiments.studies.h2quic import metrics as h2quic

pytestmark = pytest.mark.integration

CLIP_S = 10
MTU_FRAME = 1514  # 1500-byte IP packets + the Ethernet header


def _run(tmp_path: Path, transport: str) -> Path:
    raw: dict[str, Any] = {
        "experiment": {"name": "h2quic_overhead", "topology": "dumbbell", "duration": f"{CLIP_S + 6}s",
                       "wire_links": ["bottleneck"]},
        "links": {"bottleneck": {"rate": "20mbit"}},
        "apps": {"video": {"kind": "dash", "server": "h1", "client": "s1", "transport": transport,
                           "http_server": "caddy", "ladder": "bbb_h2quic_video", "clip": f"{CLIP_S}s",
                           "abr": "fixed", "level": "1300kbit"}},
    }
    (spec,) = expand(raw)
    outcome = Run(spec, tmp_path / spec.name).execute()
    assert outcome.status == "completed", outcome.reason
    return outcome.run_dir


@pytest.mark.parametrize(("transport", "proto"), [("tcp", "tcp"), ("h3", "udp")])
def test_wire_bytes_of_a_session_and_its_overhead(no_leftovers: None, tmp_path: Path, transport: str,
                                                  proto: str) -> None:
    run_dir = _run(tmp_path, transport)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["warnings"] == [], manifest["warnings"]
    with (run_dir / "wire.csv").open(newline="") as fh:
        rows = {(r["direction"], r["proto"]): r for r in csv.DictReader(fh)}
    for direction in ("forward", "reverse"):
        mine, other = rows[(direction, proto)], rows[(direction, "udp" if proto == "tcp" else "tcp")]
        assert int(mine["packets"]) > 0 and int(other["packets"]) == 0
        # no super-packet: every frame fits the MTU (a 64 KB GSO packet would make the mean far larger)
        assert int(mine["frame_bytes"]) <= MTU_FRAME * int(mine["packets"])
    meta = json.loads((run_dir / "wire.json").read_text())
    assert all(s.get("dropped_by_kernel", 0) == 0 for s in meta["tcpdump_stats"].values())
    assert not (run_dir / "captures").exists()  # pcaps removed: keep_captures is off

    run = h2quic.load_run(run_dir)
    assert run is not None and run.bitrate_bps == 1_300_000 and len(run.video) == CLIP_S // 2
    (o,) = h2quic.overheads([run])
    forward = int(rows[("forward", proto)]["l4_payload_bytes"])
    assert forward > o.payload_bytes  # the media is inside what TCP/UDP carried, with HTTP (and QUIC) around it
    assert 0.01 < o.total < 0.20, o  # plausible: headers alone are ~3-5 % of full-size packets
    assert 0.0 < o.forward < o.total
