"""Our player's ``race`` transport through the whole runner (host kernel: HTB, nftables; our server).

A 16 s clip of the ``abr_quic_tcp`` ladder through a 3 Mbit/s bottleneck:
- ``chromium`` on a clean link: the MPD over TCP teaches ``alt-svc: h3``, the
  next request races, QUIC connects first and wins; QUIC then carries >= 90 %
  of the bytes after the first segment;
- ``tcp_only``: not one QUIC byte, although h3 is advertised;
- ``chromium`` with UDP to the server's port dropped on r1 (``[firewalls]``):
  the QUIC job fails its handshake, QUIC is marked broken with Chromium's
  300 s back-off, and TCP carries >= 90 % of the bytes;
- ``firefox`` with UDP dropped: the QUIC connection that validates the
  alternative starts with the ``alt-svc`` header, requests keep to the open
  TCP connection meanwhile (served before it fails), the failed validation
  puts the origin on the excluded list (no back-off) and QUIC is never tried
  again;
- ``quic_only`` on a clean link: after the MPD taught ``alt-svc``, not one
  segment over TCP and no TCP connection but the MPD's;
- ``chromium`` behind a 64 kbit/s UDP shaper with ``abandon = "dashjs"``:
  dash.js's AbandonRequestsRule cancels a trickling QUIC request and asks the
  segment again at the lowest level on the same QUIC connection (issue 29);
- ``firefox`` behind the 64 kbit/s UDP shaper on aioquic: none of the
  client's datagrams dropped upstream (qh3 2.1.0 flooded it);
- ``dynamic`` on a clean link, probing every 2 s: QUIC and TCP probes on
  every round, a ``quic_only`` decision from like RTTs, and no TCP segment
  after it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.apps.dash import CADDY_PORT
from nest_experiments.config.sweep import expand
from nest_experiments.runs.runner import Run

pytestmark = pytest.mark.integration

CLIP_S = 16


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _run(tmp_path: Path, policy: str, *, firewall: bool = False, shaper: str = "", abandon: str = "none",
         h3_client: str = "qh3", initial_bitrate: str = "abr", **params: Any) -> Path:
    raw: dict[str, Any] = {
        "experiment": {"name": "dash_race", "topology": "dumbbell", "duration": f"{CLIP_S + 6}s",
                       "end_when_done": True},
        "links": {"bottleneck": {"rate": "3mbit"}},
        "apps": {"video": {"kind": "dash", "server": "s1", "client": "h1", "transport": "race", "racing": policy,
                           "ladder": "abr_quic_tcp", "clip": f"{CLIP_S}s", "abr": "grate", "abandon": abandon,
                           "racing_params": {"quic_handshake_timeout": "3s", **params}, "h3_client": h3_client,
                           "initial_bitrate": initial_bitrate}},
    }
    if firewall:
        raw["firewalls"] = {"udp": {"router": "r1", "proto": "udp", "port": CADDY_PORT, "action": "drop"}}
    if shaper:
        raw["firewalls"] = {"udp": {"router": "r1", "proto": "udp", "port": CADDY_PORT, "action": "shape",
                                    "rate": shaper}}
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


def test_chromium_behind_a_udp_shaper_abandons_by_dashjs_rule_and_stays_on_the_same_quic_session(
        no_leftovers: None, tmp_path: Path) -> None:
    """Issue 29: behind a 64 kbit/s UDP shaper the first segment goes over TCP at 3 Mbit/s (grate then asks a high
    level), the next ones over QUIC trickle; dash.js's AbandonRequestsRule (abandon = "dashjs") cancels the QUIC
    request and asks the same segment at the lowest level, on the same QUIC connection, marking nothing."""
    # The first media requests race the QUIC handshake (~70 ms each): when QUIC connected first, the first segment
    # went over QUIC at grate's lowest level and nothing was left to abandon (1 of 2 runs of this file here, once
    # on each QUIC stack). dash.js's initial bitrate (1000 kbit/s) puts the first segment above the lowest level
    # whichever protocol carries it
    run_dir = _run(tmp_path, "chromium", shaper="64kbit", abandon="dashjs", initial_bitrate="dashjs")
    decisions = _csv(run_dir / "abr_decisions.csv")
    abandons = [r for r in decisions if r["algorithm"] == "abandon"]  # audio's 128 kbit/s level may be abandoned too
    video = [r for r in abandons if r["stream"] == "video"]
    assert video and all(r["level"] == "0" for r in abandons), decisions
    index = video[0]["index"]
    chosen = [r for r in decisions if r["index"] == index and r["stream"] == "video"]
    assert int(chosen[0]["level"]) > 0 and chosen[0]["algorithm"] == "grate", chosen  # what was abandoned
    rows = _csv(run_dir / "racing.csv")
    cancels = [r for r in rows if r["event"] == "stream_cancelled"]
    assert cancels and cancels[0]["protocol"] == "quic" and cancels[0]["detail"] == "abandoned by the player", rows
    assert sum(r["event"] == "connected" and r["protocol"] == "quic" for r in rows) == 1, rows  # one QUIC session
    assert not [r for r in rows if r["event"] in ("broken", "backoff", "failed", "stream_error")], rows
    again = [r for r in _csv(run_dir / "segments.csv") if r["stream"] == "video" and r["index"] == index]
    assert [(r["level"], r["transport"]) for r in again] in ([], [("0", "h3")]), again  # asked again (done or not)
    assert json.loads((run_dir / "qoe.json").read_text())["video"]["abandoned"] == len(abandons)


def test_firefox_behind_a_udp_shaper_sends_the_shaper_no_more_than_it_can_carry(no_leftovers: None,
                                                                                  tmp_path: Path) -> None:
    """Issue 29, session 25: the QUIC connection starts while the 64 kbit/s shaper's bucket is full, so its first
    RTT sample is ~1 ms and the rest of the server's handshake trickles in. qh3 2.1.0 then sent Handshake probes every
    ~8 ms without RFC 9002's back-off, each with the lost CRYPTO frames again, and the shaper dropped a seventh of
    the client's datagrams (racing_firefox: 107-128 of ~840; Firefox none). racing_firefox.toml runs our client on
    aioquic, whose probes back off (38, 68, 140 ms apart here): the shaper drops next to nothing upstream.

    Weakened in session 33 from ``dropped_pkts == 0``: the CI run of stop 49 dropped 1 of 174 (here 0 of 173-177 in
    nine runs). Any QUIC client pads its Initials: two datagrams of 1228 B and one of 394 B leave in the first 13 ms
    (2850 B, 356 ms at 64 kbit/s), and the backed-off probes and the ACKs of the handshake queue behind them; replayed
    at the shaper's rate without HTB's burst, the captured upstream of one run here reaches 12 packets at 0.39 s, so
    the 10-packet FIFO is one packet from full whether or not the client misbehaves. The flood this test guards
    against is of another size: on qh3 2.1.0 the same run sent 294 datagrams and lost 100."""
    run_dir = _run(tmp_path, "firefox", shaper="64kbit", abandon="dashjs", h3_client="aioquic")
    rows = _csv(run_dir / "racing.csv")
    assert ("connected", "quic") in [(r["event"], r["protocol"]) for r in rows], rows
    [up] = [r for r in _csv(run_dir / "firewall.csv") if r["direction"] == "to_port"]
    assert 50 < int(up["matched_pkts"]) < 240 and int(up["dropped_pkts"]) <= 2, up


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


def test_firefox_udp_blocked_requests_keep_to_tcp_while_quic_validates_and_quic_is_excluded_for_good(
        no_leftovers: None, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "firefox", firewall=True)
    rows = _csv(run_dir / "racing.csv")
    (t_alt,) = [float(r["t"]) for r in rows if r["event"] == "alt_svc"]
    quic_jobs = [float(r["t"]) for r in rows if r["event"] == "job_started" and r["protocol"] == "quic"]
    assert len(quic_jobs) == 1, rows  # excluded until restart: QUIC never tried again
    assert 0 <= quic_jobs[0] - t_alt < 0.05, rows  # the validation starts with the header (a speculative connect)
    (t_failed,) = [float(r["t"]) for r in rows if r["event"] == "failed" and r["protocol"] == "quic"]
    assert 2.5 < t_failed - quic_jobs[0] < 4.5, rows  # quic_handshake_timeout = 3 s
    segments = _csv(run_dir / "segments.csv")
    assert {r["transport"] for r in segments} == {"tcp"}
    # no request waited for QUIC: requests asked while the validation ran were served over TCP before it failed
    during = [r for r in segments if quic_jobs[0] < float(r["t_request"]) and float(r["t_last_byte"]) < t_failed]
    assert during, segments
    assert sum(r["event"] == "job_started" and r["protocol"] == "tcp" for r in rows) == 1, rows  # no backup job
    broken = [r for r in rows if r["event"] == "broken"]
    assert len(broken) == 1 and broken[0]["detail"].startswith("excluded until restart"), rows
    assert not [r for r in rows if r["event"] == "backoff"]  # Firefox has no back-off


def test_quic_only_clean_link_no_tcp_segment_after_alt_svc(no_leftovers: None, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "quic_only")
    segments = _csv(run_dir / "segments.csv")
    assert len([r for r in segments if r["stream"] == "video"]) == CLIP_S // 4
    assert {r["transport"] for r in segments} == {"h3"}  # the MPD (not a segment) was the only TCP request
    rows = _csv(run_dir / "racing.csv")
    assert [(r["event"], r["protocol"]) for r in rows if r["protocol"] == "tcp"][:3] == [
        ("job_started", "tcp"), ("connected", "tcp"), ("won", "tcp")]
    assert sum(r["event"] == "job_started" and r["protocol"] == "tcp" for r in rows) == 1  # no TCP job, ever
    assert not [r for r in rows if r["event"] in ("broken", "backoff", "failed")], rows
    over_tcp = [r["path"] for r in _csv(run_dir / "access.csv") if r["transport"] != "h3"]
    assert len(over_tcp) == 1 and over_tcp[0].endswith(".mpd"), over_tcp  # the server saw the MPD alone over TCP


def test_dynamic_clean_link_probes_both_protocols_and_decides_quic_only(no_leftovers: None, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "dynamic", probe_interval="2s", min_probes=3, probe_window=3)
    rows = _csv(run_dir / "racing.csv")
    probes = {p: [float(r["value"]) for r in rows if r["event"] == "probe_rtt" and r["protocol"] == p]
              for p in ("quic", "tcp")}
    assert min(len(v) for v in probes.values()) >= 3, probes  # a round every 2 s from alt-svc on
    assert all(0 < v < 1.0 for v in probes["quic"] + probes["tcp"]), probes  # answered, on a clean 3 Mbit/s link
    decisions = [r for r in rows if r["event"] == "decision"]
    assert decisions and decisions[0]["detail"] == "quic_only", decisions  # like RTTs: no racing
    assert float(decisions[0]["value"]) < 3.0
    t_decided = float(decisions[0]["t"])
    after = [r["transport"] for r in _csv(run_dir / "segments.csv") if float(r["t_request"]) > t_decided]
    assert after and set(after) == {"h3"}, after  # QUIC only from then on
