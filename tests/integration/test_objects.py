"""Object-download sessions through the whole runner on the host (HTB): tcp from Caddy, h3 from our server.

A tiny design (small objects through a 20 Mbit/s bottleneck, seconds): every
planned object arrives whole, in the schedule's order, with request <= first
byte <= last byte on the run clock, each stream's next request a pause after
its last byte; over h3 in parallel mode both streams share one QUIC
connection per session (our server's access log), over tcp each stream has
its own.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.apps import objects_client as objects
from nest_experiments.apps.objects import design
from nest_experiments.config import ObjectsApp
from nest_experiments.config.sweep import expand
from nest_experiments.runs.runner import Run

pytestmark = pytest.mark.integration

DURATION_S = 12
EPS_S = 0.002


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _run(tmp_path: Path, app: dict[str, Any]) -> tuple[Path, ObjectsApp]:
    raw: dict[str, Any] = {
        "experiment": {"name": "objects_smoke", "topology": "dumbbell", "duration": f"{DURATION_S}s"},
        "links": {"bottleneck": {"rate": "20mbit"}},
        "apps": {"obj": {"kind": "objects", "server": "h1", "client": "s1", "sizes": ["50kb", "400kb"],
                         "requests": 3, "sessions": 2, "seed": 7, **app}},
    }
    (spec,) = expand(raw)
    outcome = Run(spec, tmp_path / spec.name).execute()
    assert outcome.status == "completed", outcome.reason
    (cfg,) = spec.experiment.apps
    assert isinstance(cfg, ObjectsApp)
    return outcome.run_dir, cfg


def _check_rows(run_dir: Path, cfg: ObjectsApp, transport: str) -> list[dict[str, str]]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["warnings"] == [], manifest["warnings"]
    rows = _csv(run_dir / "objects.csv")
    plan = objects.schedule(design(cfg))
    key = lambda r: (int(r["session"]), r["stream"], int(r["index"]))  # noqa: E731
    assert sorted(map(key, rows)) == [(p.session, p.stream, p.index) for p in plan]
    by_key = {key(r): r for r in rows}
    for p in plan:
        r = by_key[(p.session, p.stream, p.index)]
        assert (r["transport"], r["status"], int(r["size"]), int(r["bytes"])) == (transport, "200", p.size, p.size)
        t_req, t_first, t_last = (float(r[k]) for k in ("t_request", "t_first_byte", "t_last_byte"))
        assert 0 <= t_req <= t_first <= t_last <= manifest["traffic_end_t"]
        assert float(r["latency_s"]) == pytest.approx(t_first - t_req, abs=2e-6)
        if p.index:  # the stream waited its pause after the previous object's last byte
            prev = by_key[(p.session, p.stream, p.index - 1)]
            assert t_req >= float(prev["t_last_byte"]) + p.pause_s - EPS_S
    return rows


def test_tcp_sequential_sessions_from_caddy(no_leftovers: None, tmp_path: Path) -> None:
    # 8 requests a session (the h3 test: 3), so that each connection lives across a few of the sampler's 1 s ticks
    run_dir, cfg = _run(tmp_path, {"transport": "tcp", "http_server": "caddy", "pause": "200ms", "requests": 8})
    rows = _check_rows(run_dir, cfg, "tcp")
    assert {r["stream"] for r in rows} == {"objects"}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["versions"]["apps.obj.http_server"].startswith(("caddy 2", "caddy v2"))
    log = [json.loads(line) for line in (run_dir / "raw" / "obj.access.json").read_text().splitlines()]
    served = sorted(int(e["size"]) for e in log if e.get("status") == 200)
    assert served == sorted(int(r["size"]) for r in rows)  # Caddy sent exactly the objects, over HTTP/1.1
    assert {e["request"]["proto"] for e in log} == {"HTTP/1.1"}
    # the connections' socket state at both ends, on the run clock: the sender's (Caddy's, on h1) cwnd and RTT
    sockets = _csv(run_dir / "subflows.csv")
    assert {r["app"] for r in sockets} == {"obj"} and {r["side"] for r in sockets} == {"client", "server"}
    sent = [r for r in sockets if r["side"] == "server" and r["cwnd"]]
    assert sent and all(int(r["cwnd"]) >= 1 and float(r["rtt_ms"]) > 0 for r in sent), sent[:3]
    assert all(0 <= float(r["t"]) <= manifest["traffic_end_t"] + 2 for r in sockets)


def test_h3_parallel_streams_share_one_quic_connection(no_leftovers: None, tmp_path: Path) -> None:
    run_dir, cfg = _run(tmp_path, {"transport": "h3", "http_server": "nest", "mode": "parallel",
                                   "pause": ["100ms", "300ms"]})
    rows = _check_rows(run_dir, cfg, "h3")
    assert {r["stream"] for r in rows} == {"s1", "s2"}
    access = [r for r in _csv(run_dir / "raw" / "obj.access.csv") if r["path"].startswith("/obj-")]
    assert len(access) == len(rows) and {r["transport"] for r in access} == {"h3"}
    assert len({r["conn_id"] for r in access}) == cfg.sessions  # one QUIC connection per session, both streams on it
    assert not (run_dir / "subflows.csv").exists()  # QUIC is no kernel socket: no rows (its recovery: quic.csv)
