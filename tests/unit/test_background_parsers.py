"""sipp and httperf apps: parsers on real output (tests/data/sipp, tests/data/httperf), RTP pcap, CPU cap,
httperf's select wait library, config."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from nest_experiments.apps import selectwait
from nest_experiments.apps.cpucap import find_cpu_controller, parse_cpu_stat, quota_us
from nest_experiments.apps.sipp import SCENARIO, g711_pcap, planned_calls, rtp_packets
from nest_experiments.config import HttperfApp, SippApp, parse_experiment
from nest_experiments.errors import ConfigError, RunError
from nest_experiments.parsers import httperf, sipp

DATA = Path(__file__).resolve().parents[1] / "data"


def _sipp_row(stat_file: str, rtt_file: str | None, **kw: Any) -> dict[str, Any]:
    stat = sipp.parse_stat((DATA / "sipp" / stat_file).read_text(), what="test")
    rtts = sipp.parse_rtt((DATA / "sipp" / rtt_file).read_text()) if rtt_file else []
    args: dict[str, Any] = {"app": "voip", "src": "h1", "dst": "s1", "rate_cps": 10.0, "call_length_s": 2.0,
                            "calls_planned": 100, "rtp_packets_per_call": 100}
    return sipp.summary_row(stat, rtts, **{**args, **kw})


# ---------------------------------------------------------------- sipp parser


def test_sipp_idle_run_every_call_succeeds() -> None:
    row = _sipp_row("uac_stat_idle.csv", "uac_rtt_idle.csv", calls_planned=120)
    assert (row["calls_attempted"], row["calls_successful"], row["calls_failed"]) == (120, 120, 0)
    assert row["success_ratio"] == 1.0
    assert row["response_time_samples"] == 120
    assert 0 <= row["response_time_mean_ms"] < 5  # unloaded veth: set-up in a few ms (sipp's clock ticks ~4 ms)
    assert row["call_length_mean_s"] == pytest.approx(2.0, abs=0.05)  # -d 2000
    assert row["rtp_packets_planned"] == 120 * 100
    assert row["elapsed_s"] == pytest.approx(14.0, abs=0.5)
    assert set(sipp.FIELDS) == set(row)


def test_sipp_congested_run_shows_retransmissions_and_slow_setup() -> None:
    row = _sipp_row("uac_stat_congested.csv", "uac_rtt_congested.csv")
    assert row["calls_successful"] == row["calls_attempted"] == 100
    assert row["retransmissions"] == 64
    assert row["response_time_max_ms"] == 3588.0
    assert row["response_time_mean_ms"] == pytest.approx(289.08, abs=0.01)
    assert row["response_time_mean_ms"] < row["response_time_p95_ms"] <= row["response_time_max_ms"]
    assert row["call_length_mean_s"] > 2.0  # BYE waited behind the queue too


def test_sipp_without_server_counts_failed_calls() -> None:
    row = _sipp_row("uac_stat_noserver.csv", None, rate_cps=5.0, calls_planned=10)
    assert (row["calls_attempted"], row["calls_successful"], row["calls_failed"]) == (10, 0, 10)
    assert row["success_ratio"] == 0.0 and row["failed_max_udp_retrans"] == 10
    assert row["response_time_mean_ms"] == ""  # no call got a 200 OK: no response time, not 0
    assert row["rtp_packets_planned"] == 0


def test_sipp_stat_uses_the_last_complete_row() -> None:
    text = (DATA / "sipp" / "uac_stat_idle.csv").read_text()
    first = text.splitlines()[:2]
    stat = sipp.parse_stat("\n".join([*first, "2026-11-22;truncat"]), what="t")
    assert stat["OutgoingCall(C)"] != "120"  # the row before the truncated one
    with pytest.raises(RunError, match="apps.v: sipp wrote no statistics row"):
        sipp.parse_stat(first[0], what="apps.v")


@pytest.mark.parametrize(("text", "seconds"), [("00:00:02:008000", 2.008), ("00:01:07", 67.0),
                                                ("01:00:00:000001", 3600.000001)])
def test_sipp_durations(text: str, seconds: float) -> None:
    assert sipp.duration_s(text) == pytest.approx(seconds)


def test_sipp_duration_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        sipp.duration_s("2 s")


def test_percentile_is_nearest_rank() -> None:
    assert sipp.percentile([4.0, 1.0, 3.0, 2.0], 95) == 4.0
    assert sipp.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0


# ---------------------------------------------------------------- httperf parser


def _httperf(name: str) -> dict[str, Any]:
    text = (DATA / "httperf" / name).read_text()
    return httperf.summary_row(text, what="apps.web", app="web", src="h1", dst="s1", rate_target=15.0)


def test_httperf_idle_run() -> None:
    row = _httperf("idle.txt")
    assert (row["connections"], row["requests"], row["replies"], row["reply_ratio"]) == (180, 180, 180, 1.0)
    assert row["reply_rate_avg"] == 15.1 and row["reply_rate_samples"] == 2
    assert row["reply_time_ms"] == 3.4 and row["transfer_time_ms"] == 7.8
    assert row["reply_content_bytes"] == 10240.0 and row["status_2xx"] == 180
    assert row["errors_total"] == 0 and row["cpu_pct"] == 20.0  # the 20% cgroup cap
    assert set(httperf.FIELDS) == set(row)


def test_httperf_congested_run() -> None:
    row = _httperf("congested.txt")
    assert row["replies"] == row["requests"] == 150
    assert row["reply_time_ms"] == 152.4
    assert row["connection_time_max_ms"] == 2470.0 and row["net_io_bps"] == 1_200_000


def test_httperf_short_run_has_no_reply_rate_sample() -> None:
    row = _httperf("short_100kb.txt")
    assert row["reply_rate_samples"] == 0 and row["reply_rate_avg"] == ""  # not a fake 0
    assert row["replies"] == 75 and row["reply_content_bytes"] == 102400.0


def test_httperf_refused_connections() -> None:
    row = _httperf("refused.txt")
    assert (row["connections"], row["requests"], row["replies"], row["reply_ratio"]) == (20, 0, 0, 0.0)
    assert row["errors_total"] == 20 and row["errors_connrefused"] == 20
    assert row["reply_time_ms"] == ""


def test_httperf_without_summary_is_an_error() -> None:
    with pytest.raises(RunError, match="apps.web: httperf printed no summary"):
        httperf.summary_row("httperf: connection failed\n", what="apps.web", app="web", src="h1", dst="s1",
                            rate_target=15.0)


# ---------------------------------------------------------------- RTP pcap and scenario


def _pcap_packets(data: bytes) -> list[tuple[float, bytes]]:
    magic, _, _, _, _, _, linktype = struct.unpack("<IHHiIII", data[:24])
    assert (magic, linktype) == (0xA1B2C3D4, 1)
    out, off = [], 24
    while off < len(data):
        sec, usec, caplen, length = struct.unpack("<IIII", data[off:off + 16])
        assert caplen == length
        out.append((sec + usec / 1e6, data[off + 16:off + 16 + caplen]))
        off += 16 + caplen
    return out


def test_g711_pcap_holds_the_call_length_of_rtp() -> None:
    packets = _pcap_packets(g711_pcap(2.0))
    assert len(packets) == rtp_packets(2.0) == 100
    assert packets[-1][0] == pytest.approx(1.98)  # one packet every 20 ms
    frame = packets[1][1]
    ip, udp, rtp = frame[14:34], frame[34:42], frame[42:]
    assert frame[12:14] == b"\x08\x00" and ip[9] == 17  # IPv4, UDP
    assert sum(struct.unpack("!10H", ip)) % 0xFFFF == 0  # a valid header checksum
    assert struct.unpack("!H", udp[4:6])[0] == 8 + 12 + 160
    assert rtp[0] == 0x80 and rtp[1] & 0x7F == 8  # RTP v2, PCMA
    assert struct.unpack("!HI", rtp[2:8]) == (1, 160)  # sequence, timestamp (8 kHz)
    assert len(_pcap_packets(g711_pcap(0.5))) == 25


def test_scenario_pause_takes_the_call_length_from_the_command_line() -> None:
    root = ElementTree.parse(SCENARIO).getroot()
    assert [e.get("play_pcap_audio") for e in root.iter("exec")] == ["pcap/g711a.pcap"]
    pauses = list(root.iter("pause"))
    assert len(pauses) == 1 and pauses[0].attrib == {}  # its length is sipp's -d
    steps = [e.tag for e in root if e.tag in ("send", "recv", "nop", "pause")]
    assert steps == ["send", "recv", "recv", "recv", "send", "nop", "pause", "send", "recv"]  # uac_pcap's flow


# ---------------------------------------------------------------- CPU cap


@pytest.mark.parametrize(("fraction", "expected"), [(0.2, (2000, 10000)), (1.0, (10000, 10000)),
                                                    (0.05, (1000, 20000)), (0.01, (1000, 100000))])
def test_cpu_quota(fraction: float, expected: tuple[int, int]) -> None:
    assert quota_us(fraction) == expected


def test_cpu_quota_refuses_out_of_range() -> None:
    with pytest.raises(ValueError):
        quota_us(0)


def test_cpu_controller_detection(tmp_path: Path) -> None:
    assert find_cpu_controller(tmp_path) is None
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert find_cpu_controller(tmp_path) == (1, tmp_path / "cpu")
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert find_cpu_controller(tmp_path) == (2, tmp_path)
    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")  # a cgroup2 without cpu: fall back to v1
    assert find_cpu_controller(tmp_path) == (1, tmp_path / "cpu")


def test_cpu_stat_v1_and_v2() -> None:
    assert parse_cpu_stat("nr_periods 492\nnr_throttled 473\nthrottled_time 3268440825\n")["nr_throttled"] == 473
    v2 = parse_cpu_stat("usage_usec 2000\nuser_usec 1000\nnr_periods 10\nnr_throttled 3\nthrottled_usec 5\n")
    assert (v2["usage_usec"], v2["nr_periods"]) == (2000, 10)


# ---------------------------------------------------------------- httperf's select wait library

# 20 zero-timeout polls with nothing to wait for; then two on a ready pipe and one with a timeout:
# seconds for the 20 polls, and what the last three select() calls reported ready
SELECT_PROBE = """
import os, select, time
t = time.monotonic()
for _ in range(20):
    assert select.select([], [], [], 0) == ([], [], [])
polls = time.monotonic() - t
r, w = os.pipe()
os.write(w, b"x")
print(polls, *(len(select.select([r], [], [], timeout)[0]) for timeout in (0, 0, 1)))
"""


def _select_probe(env: dict[str, str]) -> tuple[float, list[int]]:
    out = subprocess.run([sys.executable, "-c", SELECT_PROBE], env=env, capture_output=True, text=True, check=True)
    polls, *ready = out.stdout.split()
    return float(polls), [int(n) for n in ready]


def test_select_wait_library_turns_a_zero_timeout_into_a_wait(tmp_path: Path) -> None:
    cc = shutil.which("cc")
    assert cc, f"no C compiler: apt-get install {selectwait.PACKAGES}"
    lib = tmp_path / "selectwait.so"
    subprocess.run(selectwait.compile_argv(cc, lib), check=True)
    polls, ready = _select_probe({"LD_PRELOAD": str(lib)})
    assert polls >= 20 * selectwait.WAIT_US * 1e-6  # each zero-timeout select() slept its wait
    # a ready socket ends the wait as "nothing ready" (httperf then reads the clock); the next poll reports it;
    # a select() with a timeout is left alone
    assert ready == [0, 1, 1]
    polls, ready = _select_probe({})
    assert polls < 20 * selectwait.WAIT_US * 1e-6 and ready == [1, 1, 1]  # the probe: without the library


# ---------------------------------------------------------------- config


def _exp(kind: str, **app: Any) -> dict[str, Any]:
    return {"experiment": {"name": "bg", "topology": "dumbbell", "duration": "30s"},
            "apps": {"v": {"kind": kind, "src": "h1", "dst": "s1", **app}}}


def test_sipp_defaults() -> None:
    (app,) = parse_experiment(_exp("sipp")).apps
    assert isinstance(app, SippApp)
    assert (app.rate, app.call_length_s, app.duration_s, app.port, app.media_port, app.timer_slack_s) == \
        (10.0, 2.0, None, 5060, 6000, 0.002)
    (app,) = parse_experiment(_exp("sipp", timer_slack="5ms")).apps
    assert isinstance(app, SippApp) and app.timer_slack_s == 0.005


def test_httperf_defaults_and_units() -> None:
    (app,) = parse_experiment(_exp("httperf")).apps
    assert isinstance(app, HttperfApp)
    assert (app.rate, app.size, app.port, app.timeout_s, app.cpu_limit, app.server) == \
        (15.0, 10240, 8080, 5.0, 0.2, "nginx")
    (app,) = parse_experiment(_exp("httperf", rate=2.5, size="100kb", cpu_limit="50%", duration="20s",
                                   start="5s", server="caddy")).apps
    assert isinstance(app, HttperfApp)
    assert (app.rate, app.size, app.cpu_limit, app.duration_s, app.start_s, app.server) == \
        (2.5, 102400, 0.5, 20.0, 5.0, "caddy")


@pytest.mark.parametrize(("kind", "key", "value", "message"), [
    ("sipp", "rate", 0, "apps.v.rate"),
    ("sipp", "rate", -3, "apps.v.rate"),
    ("sipp", "rate", "10/s", "apps.v.rate"),
    ("sipp", "rate", True, "apps.v.rate"),
    ("sipp", "call_length", "0s", "apps.v.call_length"),
    ("sipp", "call_length", "-2s", "apps.v.call_length"),
    ("sipp", "call_length", 2, "apps.v.call_length"),
    ("sipp", "call_length", "5ms", "apps.v.call_length"),
    ("sipp", "duration", "40s", "apps.v.duration"),
    ("sipp", "port", 80, "apps.v.port"),
    ("sipp", "media_port", 5061, "apps.v.media_port"),
    ("sipp", "dst", "h1", "apps.v.dst"),
    ("sipp", "calls", 3, "apps.v.calls"),
    ("sipp", "timer_slack", "50ms", "apps.v.timer_slack"),
    ("sipp", "timer_slack", 2, "apps.v.timer_slack"),
    ("httperf", "rate", 0.0, "apps.v.rate"),
    ("httperf", "cpu_limit", "0%", "apps.v.cpu_limit"),
    ("httperf", "cpu_limit", "150%", "apps.v.cpu_limit"),
    ("httperf", "cpu_limit", 0.2, "apps.v.cpu_limit"),
    ("httperf", "size", 0, "apps.v.size"),
    ("httperf", "size", "10 apples", "apps.v.size"),
    ("httperf", "timeout", "0s", "apps.v.timeout"),
    ("httperf", "port", 70000, "apps.v.port"),
    ("httperf", "server", "apache", "apps.v.server"),
    ("httperf", "start", "30s", "apps.v.start"),
    ("httperf", "src", "nowhere", "apps.v.src"),
])
def test_bad_values_name_the_key(kind: str, key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_experiment(_exp(kind, **{key: value}))


def test_selectwait_is_built_once_into_the_cache_and_per_run_where_it_cannot_be(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from nest_experiments.net.procs import RunState

    built: list[Path] = []
    real = selectwait._compile
    monkeypatch.setattr(selectwait, "_compile", lambda out: (built.append(out), real(out))[1])
    cache = tmp_path / "cache"
    first = selectwait.build_cached(cache)
    assert first == selectwait.cached_library(cache) and first.is_file() and len(built) == 1
    assert selectwait.build_cached(cache) == first and len(built) == 1  # cached: no second build
    assert selectwait.preload_library(RunState(prefix="nx0000aa"), cache) == first and len(built) == 1
    assert not list(cache.glob(".*.tmp"))
    (tmp_path / "file").write_text("")  # a cache under a file cannot be made, even by root
    state = RunState(prefix="nx0000ab")
    try:
        lib = selectwait.preload_library(state, tmp_path / "file" / "cache")
        assert lib.name == "selectwait.so" and "nx0000ab" in str(lib) and lib.is_file()  # the run's own copy
        assert len(built) == 2
    finally:
        state.remove()
    assert not lib.exists()  # removed with the run


def test_sipp_calls_end_with_the_run_unless_a_duration_says_when_they_start() -> None:
    # the default's VoIP: 1 call/s of 2 s from 1 s in a 65 s run: the last starts at 63 s and ends at 65 s
    assert planned_calls(rate=1, call_length_s=2, start_s=1, run_s=65, length_s=None) == 63
    assert planned_calls(rate=10, call_length_s=2, start_s=0, run_s=10, length_s=None) == 81  # 0, 0.1, ..., 8.0
    assert planned_calls(rate=1, call_length_s=2, start_s=1, run_s=65, length_s=30) == 30  # started within 30 s
    assert planned_calls(rate=1, call_length_s=20, start_s=0, run_s=10, length_s=None) == 1  # at least one
