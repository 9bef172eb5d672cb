"""The GPAC log parser on the real GPAC 26.07 logs (tests/data/gpac)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nest_experiments.dash.content.mpd import parse_mpd
from nest_experiments.dash.players import gpac
from nest_experiments.errors import ConfigError, MissingToolError

DATA = Path(__file__).resolve().parents[2] / "data" / "gpac"
LOGS = sorted(p.stem for p in DATA.glob("*.log"))
MANIFEST = parse_mpd((DATA / "manifest.mpd").read_text())

# The sample README's table: changed, BBA/BOLA, V stall, A stall, rebuffer done, A underflow
README_TABLE = {
    "grate_nest-allinfo": (9, 0, 0, 0, 0, 269),
    "grate_paper-buf1000-mbuf10000": (9, 0, 0, 0, 0, 229),
    "grate_rbuf1000": (6, 0, 1, 0, 1, 0),
    "bba0_rbuf1000": (9, 27, 6, 2, 8, 0),
    "bolaf_rbuf1000": (7, 23, 3, 2, 5, 18),
    "grate_rbuf1000_dash-debug": (9, 0, 1, 0, 1, 0),
    "grate_rbuf1000_log-utc": (9, 0, 0, 0, 0, 0),
    "bba0_rbuf1000_log-utc": (7, 22, 7, 3, 10, 0),
    "grate_inspect-nodecoder": (8, 0, 0, 0, 0, 0),
}


def text(name: str) -> str:
    return (DATA / f"{name}.log").read_bytes().decode("utf-8", errors="replace")


def count(name: str, pattern: str) -> int:
    """Independent count: records (split on \\r and \\n) matching ``pattern``."""
    return sum(1 for line in re.split(r"[\r\n]", text(name)) if re.search(pattern, line))


def parsed(name: str) -> gpac.GpacLog:
    return gpac.parse_gpac_log(text(name), MANIFEST)


def test_all_samples_present() -> None:
    assert set(LOGS) == set(README_TABLE)


@pytest.mark.parametrize("name", LOGS)
def test_every_record_accounted_for(name: str) -> None:
    log = parsed(name)
    assert len(log.segments) == count(name, r"\] AS#\d+ got \S+ stats: ")
    assert len(log.quality_changes) == count(name, r"changed quality to bitrate")
    assert len(log.decisions) == count(name, r"\] (BBA-0|BOLA): buffer")
    assert len(log.stalls) == count(name, r"Out\] buffer \d+ less than min threshold")
    assert sum(s.duration_s is not None for s in log.stalls) == count(name, r"rebuffer done in")
    assert sum(log.underflows.values()) == count(name, r"buffer underflow")
    assert log.inspect_rebuffering == count(name, r"\[Inspect\] PID \d+ rebuffering")


@pytest.mark.parametrize("name", LOGS)
def test_matches_the_readme_table(name: str) -> None:
    changed, decisions, v_stall, a_stall, done, a_underflow = README_TABLE[name]
    log = parsed(name)
    assert len(log.quality_changes) == changed
    assert len(log.decisions) == decisions
    assert sum(s.stream == "video" for s in log.stalls) == v_stall
    assert sum(s.stream == "audio" for s in log.stalls) == a_stall
    assert sum(s.duration_s is not None for s in log.stalls) == done
    assert log.underflows["audio"] == a_underflow


@pytest.mark.parametrize("name", LOGS)
def test_segments_fill_the_schema(name: str) -> None:
    log = parsed(name)
    for stream, reps in (("audio", MANIFEST.adaptation_set("audio")), ("video", MANIFEST.adaptation_set("video"))):
        rows = [r for r in log.segments if r.stream == stream]
        assert sorted(r.index for r in rows) == list(range(15))
        for r in rows:
            assert r.level is not None and r.bitrate_bps == reps.bitrates_bps[r.level]
            assert r.bytes > 0 and r.buffer_s is not None and r.t_first_byte is None
    stall_total = sum(s.duration_s or 0.0 for s in log.stalls)
    assert sum(r.stall_s for r in log.segments) == pytest.approx(stall_total)


def test_segment_fields_of_a_known_line() -> None:
    # "[DASH] AS#2 got video_200k_dash1.m4s stats: 123600 bytes in 1.46 sec at 683 kbps ... buffer 11103 ms"
    log = parsed("grate_rbuf1000_log-utc")
    row = next(r for r in log.segments if r.stream == "video" and r.index == 0)
    assert (row.level, row.bitrate_bps, row.bytes, row.buffer_s) == (0, 202094, 123600, 11.103)
    i = log.segments.index(row)
    assert log.download_s[i] == 1.46
    assert row.t_last_byte is not None and row.t_request == pytest.approx(row.t_last_byte - 1.46)


def test_times_only_with_log_utc() -> None:
    assert all(r.t_last_byte is None for r in parsed("grate_rbuf1000").segments)
    timed = parsed("bba0_rbuf1000_log-utc")
    times = [r.t_last_byte for r in timed.segments]
    assert all(t is not None for t in times) and times == sorted(times)  # type: ignore[type-var]
    assert all(s.t_start is not None for s in timed.stalls)  # carried over \r-records


def test_initial_quality_changes_and_decision_streams() -> None:
    log = parsed("bba0_rbuf1000")
    initial = [c for c in log.quality_changes if c.initial]
    assert [(c.stream, c.bitrate_kbps) for c in initial] == [("audio", 127), ("video", 202)]
    assert {d.stream for d in log.decisions} == {"audio", "video"}
    first = log.decisions[0]
    assert (first.algorithm, first.buffer_s, first.quality) == ("BBA-0", 5.994, 0)


def test_without_manifest_levels_are_unknown() -> None:
    log = gpac.parse_gpac_log(text("grate_rbuf1000"))
    assert {r.stream for r in log.segments} == {"audio", "video"}
    assert all(r.level is None and r.bitrate_bps is None for r in log.segments)
    assert sorted(r.index for r in log.segments if r.stream == "video") == list(range(15))


def test_ansi_colours_are_stripped() -> None:
    line = "\x1b[32m[DASH] AS#2 changed quality to bitrate 505 kbps - Width 480 Height 270 FPS 25/1 (playback speed 1)\x1b[0m\n"
    assert len(gpac.parse_gpac_log(line).quality_changes) == 1


# ----------------------------------------------------------------- command


def test_command_matches_the_verified_line() -> None:
    argv = gpac.gpac_command("http://10.77.1.2:8000/manifest.mpd", binary="gpac", log_utc=False)
    assert argv == [
        "gpac",
        "-p=0",
        "-i",
        "http://10.77.1.2:8000/manifest.mpd:gpac:algo=grate:start_with=min_bw:debug_as=0,1",
        "aout:buffer=2000:mbuffer=10000:rbuffer=1000",
        "vout:disp=soft:buffer=2000:mbuffer=10000:rbuffer=1000",
        "-logs=dash@info:mmio@info:ncl",
        "-clean-cache",
    ]
    assert gpac.gpac_command("u", algo="bba0", binary="gpac")[-1] == "-log-utc"


def test_command_rejects_settings_that_disable_rebuffering() -> None:
    with pytest.raises(ConfigError, match="rebuffer_ms"):
        gpac.gpac_command("u", rebuffer_ms=2000, buffer_ms=2000, binary="gpac")
    with pytest.raises(ConfigError, match="algo"):
        gpac.gpac_command("u", algo="gpac_auto", binary="gpac")


def test_find_gpac_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpac.shutil, "which", lambda name: None)
    with pytest.raises(MissingToolError, match=r"on Debian 12 sudo ./setup.sh installs bullseye.s gpac 1.0.1 \(unless NEST_GPAC=0\).*apt-get install gpac.*github.com/gpac/gpac"):
        gpac.find_gpac()
    with pytest.raises(MissingToolError):
        gpac.gpac_command("u")


# ------------------------------------------------------------ GPAC 1.0.x

V1_0 = DATA / "v1.0.1"


def test_version_tells_1_0_from_26_07() -> None:
    new = gpac.parse_version("\x1b[37mgpac - GPAC command line filter engine - version 26.07-revrelease\x1b[0m\n")
    old = gpac.parse_version("Nothing to do\ngpac - GPAC command line filter engine - version 1.0.1-rev1.0.1+dfsg1-4\n")
    assert (new.number, new.legacy, old.number, old.legacy) == ((26, 7), False, (1, 0), True)
    assert old.line == "gpac - GPAC command line filter engine - version 1.0.1-rev1.0.1+dfsg1-4"
    assert gpac.parse_version("gpac (unknown build)").legacy is False  # unknown: the current command line


def test_legacy_command_has_only_what_1_0_knows() -> None:
    argv = gpac.gpac_command("http://h:1/manifest.mpd", binary="gpac", legacy=True, log_utc=False)
    assert argv == [
        "gpac",
        "-p=0",
        "-i",
        "http://h:1/manifest.mpd:gpac:algo=grate:start_with=min_bw",  # 1.0's debug_as=0,1 plays the audio only
        "aout:buffer=2000",
        "vout:disp=soft:buffer=2000",
        "-logs=dash@info:mmio@info:ncl",
        "-clean-cache",
    ]
    with pytest.raises(ConfigError, match="bba0 stops after the first segment"):
        gpac.gpac_command("u", algo="bba0", binary="gpac", legacy=True)


def test_the_real_1_0_1_log() -> None:
    log = gpac.parse_gpac_log((V1_0 / "grate_tcp_log-utc.log").read_text(), parse_mpd((V1_0 / "manifest.mpd").read_text()))
    got = [(s.stream, s.index, s.level, s.bitrate_bps, s.bytes, s.buffer_s) for s in log.segments]
    assert got == [
        ("audio", 0, 0, 64000, 32742, 7.285),
        ("video", 0, 0, 200000, 99573, 6.559),
        ("audio", 1, 1, 128000, 65169, 8.501),
        ("video", 1, 7, 4000000, 2001389, 5.941),
    ]
    assert log.download_s == (0.004333, 0.031029, 0.021621, 0.07446)
    assert [c.bitrate_kbps for c in log.quality_changes] == [62, 195, 125, 3906]  # 1.0 divides by 1024
    t = [s.t_last_byte for s in log.segments]
    assert all(x is not None for x in t) and t == sorted(t)  # type: ignore[type-var]


@pytest.mark.skipif(gpac.shutil.which("Xvfb") is None, reason="no Xvfb (setup.sh installs it with gpac 1.0)")
def test_virtual_display_starts_and_stops() -> None:
    import socket

    with gpac.virtual_display() as display:
        assert re.fullmatch(r":\d+", display)
        path = Path(f"/tmp/.X11-unix/X{display[1:]}")
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(path))  # the X server accepts connections
    assert not path.exists()  # and it is gone


def test_virtual_display_says_how_to_get_xvfb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpac.shutil, "which", lambda name: None)
    with pytest.raises(MissingToolError, match="apt-get install xvfb"), gpac.virtual_display():
        pass


def test_1_0_video_starving_is_a_stall() -> None:
    """GPAC 1.0 logs no rebuffering: in this real run (Eldorado AV1 over MPTCP, 5 Mbit/s) grate asked for the
    27.5 Mbit/s level, the 14 MB segment came 22 s late, and VideoOut sat at its one held frame meanwhile."""
    text = (V1_0 / "av1_grate_mptcp_log-utc.log").read_text()
    mpd = parse_mpd((V1_0 / "eldorado_av1_8s.mpd").read_text())
    log = gpac.parse_gpac_log(text, mpd, starving=True)
    assert [(s.stream, s.t_start, s.duration_s) for s in log.stalls] == [("video", 4.682, 22.009)]
    assert [(s.stream, s.index, s.level, s.stall_s) for s in log.segments if s.stall_s] == [("video", 1, 14, 22.009)]
    assert gpac.parse_gpac_log(text, mpd).stalls == ()  # only asked for (GPAC 1.0)
    tcp = (V1_0 / "grate_tcp_log-utc.log").read_text()
    assert gpac.parse_gpac_log(tcp, parse_mpd((V1_0 / "manifest.mpd").read_text()), starving=True).stalls == ()


def _utc(ms: int, line: str) -> str:
    return f"UTC 2026-11-25T00:00:00Z (TS {1795600000000 + ms}) - {line}\n"


def test_1_0_starving_at_the_end_of_the_content_is_no_stall() -> None:
    frames = [_utc(i * 33, f"[VideoOut] buffer {max(33, 1000 - i * 33)} / 2000 ms") for i in range(40)]
    tail = [_utc(1400 + i * 200, "[VideoOut] buffer 33 / 2000 ms") for i in range(20)]  # 4 s at one frame
    assert gpac.parse_gpac_log("".join(frames + tail), starving=True).stalls == ()
    got = _utc(3000, "[DASH] AS#2 got v_2.m4s stats: 9 bytes in 1 sec (1 kbps) - duration 4 sec - Media Rate: "
                     "indicated 1 - computed 1 kbps - buffer 0 ms")
    refill = _utc(5600, "[VideoOut] buffer 900 / 2000 ms")
    assert [s.duration_s for s in gpac.parse_gpac_log("".join(frames + tail + [got]), starving=True).stalls] \
        == [round(3.0 - 0.957, 3)]  # ended by the log: up to the segment that came while starving
    assert [s.duration_s for s in gpac.parse_gpac_log("".join(frames + tail + [refill]), starving=True).stalls] \
        == [round(5.6 - 0.957, 3)]  # ended by the buffer growing
