"""dash.js events -> segments.csv rows, stalls, decisions; Chromium's command line (no browser runs here)."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.dash.content.mpd import parse_mpd
from nest_experiments.dash.origin.certs import issue
from nest_experiments.dash.players import browser, dashjs

DATA = Path(__file__).resolve().parents[2] / "data" / "encode"
EPOCH = 1_800_000_000_000.0  # ms: the wall clock at the run's t = 0 in these events


def _manifest() -> Any:
    from nest_experiments.dash.content import encode, media

    ladder = media.parse_ladder({
        "name": "t", "segment_duration_s": 4, "duration_s": 8,
        "video": {"codecs": "avc1", "frame_rate": 30,
                  "levels": [{"bitrate_bps": 300_000}, {"bitrate_bps": 1_000_000}]},
        "audio": {"codecs": "mp4a.40.2", "levels": [{"bitrate_bps": 128_000}]},
    })
    return parse_mpd(encode.rewrite_mpd((DATA / "ffmpeg_dash.mpd").read_text(), ladder))


def _to_run(wall_s: float) -> float:
    return wall_s - EPOCH / 1000


def _frag(t: float, stream: str, index: int, rep: str, *, kind: str = "MediaSegment", size: int = 1000,
          buffer: float = 1.0) -> dict[str, Any]:
    url = f"http://10.0.0.1:8000/seg_{rep}_{index + 1}.m4s"
    return {"type": "fragment_completed", "t": EPOCH + t * 1000, "media_type": stream, "kind": kind, "index": index,
            "url": url, "rep": {"id": rep, "bandwidth": 0}, "start": EPOCH + (t - 0.5) * 1000,
            "first_byte": EPOCH + (t - 0.4) * 1000, "end": EPOCH + t * 1000, "bytes": size, "buffer": buffer}


def _ev(t: float, kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "t": EPOCH + t * 1000, **extra}


def test_segments_levels_times_and_buffer_from_events() -> None:
    events = [
        _frag(1.0, "video", 0, "1", kind="InitializationSegment"),
        _frag(2.0, "video", 0, "1", size=150_000),
        _frag(2.1, "audio", 0, "0", size=64_000),
        _ev(2.3, "buffer_level", media_type="video", level=4.0),
        _ev(2.4, "playing"),
        _frag(3.0, "video", 1, "2", size=500_000, buffer=3.5),
    ]
    # Resource Timing for video segment 1 only: it wins over dash.js's ms dates
    resources = [{"url": "http://10.0.0.1:8000/seg_2_2.m4s", "start": EPOCH + 2500.25, "first_byte": EPOCH + 2600.5,
                  "end": EPOCH + 2999.75, "protocol": "h3", "body_size": 500_000}]
    s = dashjs.convert(events, resources, _manifest(), to_run=_to_run, transport="h3", abr="dynamic")
    rows = [(r.stream, r.index, r.level, r.bitrate_bps, r.bytes) for r in s.segments]
    assert rows == [("video", 0, 0, 300_000, 150_000), ("audio", 0, 0, 128_000, 64_000),
                    ("video", 1, 1, 1_000_000, 500_000)]  # the init segment is no row
    v0, a0, v1 = s.segments
    assert (v0.t_request, v0.t_first_byte, v0.t_last_byte) == pytest.approx((1.5, 1.6, 2.0))
    assert (v1.t_request, v1.t_first_byte, v1.t_last_byte) == pytest.approx((2.50025, 2.6005, 2.99975))
    assert v0.buffer_s == 4.0  # the first buffer level of the stream after its last byte
    assert a0.buffer_s == 1.0 and v1.buffer_s == 3.5  # none after: the level when it completed
    assert s.startup_delay_s == pytest.approx(2.4 - 1.5) and s.stalls == () and not s.ended
    assert {r.transport for r in s.segments} == {"h3"}
    assert dashjs.protocols(resources) == {"h3": 1}
    # with the manifest's own Resource Timing entry, startup counts from its request (as our player's does)
    mpd = {"url": "http://10.0.0.1:8000/manifest.mpd?x=1", "start": EPOCH + 800.0, "first_byte": EPOCH + 850.0,
           "end": EPOCH + 900.0, "protocol": "h2", "body_size": 2_000}
    s = dashjs.convert(events, [mpd, *resources], _manifest(), to_run=_to_run, transport="h3", abr="dynamic")
    assert s.startup_delay_s == pytest.approx(2.4 - 0.8)


def test_over_race_each_segment_says_the_protocol_that_carried_it() -> None:
    events = [_frag(2.0, "video", 0, "1"), _frag(3.0, "video", 1, "1"), _frag(4.0, "audio", 0, "0"),
              _frag(5.0, "audio", 1, "0")]
    resources = [{"url": f"http://10.0.0.1:8000/seg_{rep}_{i}.m4s", "start": EPOCH + t * 1000 - 400,
                  "first_byte": EPOCH + t * 1000 - 300, "end": EPOCH + t * 1000, "protocol": protocol}
                 for rep, i, t, protocol in (("1", 1, 2.0, "h2"), ("1", 2, 3.0, "h3"), ("0", 1, 4.0, "http/1.1"))]
    s = dashjs.convert(events, resources, _manifest(), to_run=_to_run, transport="race", abr="dynamic")
    assert [r.transport for r in s.segments] == ["tcp", "h3", "tcp", ""]  # the last: no Resource Timing entry


def test_a_stall_is_waiting_after_playing_and_is_written_on_the_segment_that_ended_it() -> None:
    events = [
        _frag(1.0, "video", 0, "1"), _frag(1.1, "audio", 0, "0"), _ev(1.5, "playing"),
        _ev(5.0, "buffer_empty", media_type="video"), _ev(5.1, "waiting"),
        _frag(6.0, "audio", 1, "0"), _frag(6.5, "video", 1, "2"), _ev(7.0, "playing"),
        _frag(8.0, "video", 2, "2"),
        _ev(9.0, "waiting"), _ev(9.5, "ended"),  # the end of the media is no stall
    ]
    s = dashjs.convert(events, [], _manifest(), to_run=_to_run, transport="tcp", abr="bola")
    assert [(st.start, st.end, st.stream) for st in s.stalls] == [pytest.approx((5.1, 7.0, "video"))]
    stalled = {(r.stream, r.index): r.stall_s for r in s.segments if r.stall_s}
    assert stalled == {("video", 1): pytest.approx(1.9)}  # the video segment, not the later audio-free one
    assert s.ended


def test_a_stall_that_never_ended_is_the_stall_at_the_end_up_to_the_last_event() -> None:
    events = [_frag(1.0, "video", 0, "1"), _ev(1.5, "playing"), _ev(2.9, "buffer_empty", media_type="audio"),
              _ev(3.0, "waiting"), _ev(7.5, "buffer_level", media_type="video", level=0.0)]
    s = dashjs.convert(events, [], _manifest(), to_run=_to_run, transport="tcp", abr="bola")
    assert len(s.stalls) == 1 and s.stalls[0].end is None and s.segments[0].stall_s == 0  # no segment ended it
    assert s.stall_at_end is not None and s.stall_at_end.stream == "audio"
    assert (s.stall_at_end.t_start, s.stall_at_end.duration_s) == pytest.approx((3.0, 4.5))


def test_a_session_that_ended_playing_has_no_stall_at_the_end() -> None:
    events = [_frag(1.0, "video", 0, "1"), _ev(1.5, "playing"), _ev(3.0, "waiting"), _ev(4.0, "playing")]
    assert dashjs.convert(events, [], _manifest(), to_run=_to_run, transport="tcp", abr="bola").stall_at_end is None


def test_quality_requests_become_decisions() -> None:
    events = [_ev(0.5, "quality_requested", media_type="video", rep={"id": "2", "bandwidth": 1_000_000}, buffer=2.0),
              _frag(1.0, "video", 0, "2"),
              _ev(1.2, "quality_requested", media_type="video", rep={"id": "1", "bandwidth": 300_000}, buffer=3.0),
              _ev(1.3, "error", message="boom")]
    s = dashjs.convert(events, [], _manifest(), to_run=_to_run, transport="tcp", abr="throughput")
    assert [(d.index, d.level, d.bitrate_bps, d.algorithm, d.buffer_s) for d in s.decisions] == [
        (0, 1, 1_000_000, "dashjs:throughput", 2.0), (1, 0, 300_000, "dashjs:throughput", 3.0)]
    assert s.errors == ("boom",)


def test_protocols_count_a_cache_hit_apart_from_the_network() -> None:
    """A response from the browser's cache has no nextHopProtocol and transferSize 0 (CI's dash.js run asked
    init_6.mp4 again when its ABR came back to level 6): "cache", not an unknown protocol."""
    resources = [{"protocol": "http/1.1", "transfer_size": 1145}, {"protocol": "", "transfer_size": 0},
                 {"protocol": "h3", "transfer_size": 33042}, {"protocol": "", "transfer_size": 300}]
    assert dashjs.protocols(resources) == {"http/1.1": 1, "cache": 1, "h3": 1, "?": 1}


def test_chromium_argv_never_reaches_out_and_forces_quic_for_our_origin() -> None:
    argv = browser.chromium_argv("chromium", profile=Path("/tmp/p"), transport="h3", server="10.0.1.2", port=8443,
                                 spki=["abc="], netlog=Path("/r/n.json"))
    for flag in ("--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--user-data-dir=/tmp/p", "--no-proxy-server",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 10.0.1.2", "--remote-debugging-pipe",
                 "--enable-quic", "--origin-to-force-quic-on=10.0.1.2:8443",
                 "--ignore-certificate-errors-spki-list=abc=", "--log-net-log=/r/n.json"):
        assert flag in argv
    tcp = browser.chromium_argv("chromium", profile=Path("/tmp/p"), transport="tcp", server="10.0.1.2", port=80,
                                spki=[], netlog=None)
    assert not any(a.startswith(("--enable-quic", "--origin-to-force", "--ignore-cert")) for a in tcp)
    assert browser.page_url(transport="tcp", server="10.0.1.2", port=80, page="/p.html", abr="bola",
                            max_buffer_s=10) == "http://10.0.1.2:80/p.html?mpd=manifest.mpd&abr=bola&max_buffer=10"


def test_spki_hash_is_what_openssl_computes(tmp_path: Path) -> None:
    pem = issue(["10.0.1.2"]).ca
    (tmp_path / "ca.pem").write_bytes(pem)
    pub = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "ca.pem"), "-pubkey", "-noout"],
                         capture_output=True, check=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, capture_output=True,
                         check=True).stdout
    import hashlib

    assert browser.spki_hash(pem) == base64.b64encode(hashlib.sha256(der).digest()).decode()


def test_chromium_cpu_counts_the_processes_of_the_profile(tmp_path: Path) -> None:
    import sys
    import time

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", burn, f"--user-data-dir={tmp_path}"])
    try:
        deadline = time.monotonic() + 10
        while browser.chromium_cpu_s(tmp_path) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.3 <= browser.chromium_cpu_s(tmp_path) < 1.0
        assert browser.chromium_cpu_s(tmp_path / "other") == 0.0
    finally:
        proc.kill()
        proc.wait()


def test_dashjs_s_own_playback_ended_ends_the_session_when_the_element_fires_late() -> None:
    """dash.js's end timer fires PLAYBACK_ENDED with the playhead at the stream's end, then seeks the element to
    the end; on a busy machine the element's "ended" came more than a poll later (CI: the session was marked
    "stopped" although it played the whole clip)."""
    events = [_frag(1.0, "video", 0, "1"), _ev(1.5, "playing"), _ev(9.4, "ended_dashjs")]
    s = dashjs.convert(events, [], _manifest(), to_run=_to_run, transport="h3", abr="dynamic")
    assert s.ended and not s.stalls
    assert dashjs.end_seen([_ev(1.5, "playing")]) is None


def test_the_poller_waits_longer_for_the_element_after_dashjs_said_ended() -> None:
    element = dashjs.EndWatch()
    assert not element.done([_ev(1.0, "playing")], 1.0)
    assert not element.done([_ev(8.0, "ended"), _ev(8.1, "ended_dashjs")], 8.0)
    assert not element.done([], 8.0 + dashjs.END_SLACK_S)
    assert element.done([], 8.01 + dashjs.END_SLACK_S)
    first = dashjs.EndWatch()
    assert not first.done([_ev(8.0, "ended_dashjs")], 8.0)
    assert not first.done([], 8.0 + dashjs.ENDED_WAIT_S)  # still waiting for the element
    assert first.done([], 8.01 + dashjs.ENDED_WAIT_S)  # it never came: ended anyway
    late = dashjs.EndWatch()
    assert not late.done([_ev(8.0, "ended_dashjs")], 8.0)
    assert not late.done([_ev(9.0, "ended")], 9.0)  # the element's came: a last poll after it
    assert late.done([], 9.01 + dashjs.END_SLACK_S)
