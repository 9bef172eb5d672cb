"""DASH server and fetchers over tcp, mptcp, h2 and h3, in a private network namespace.

The server and the client each run as a subprocess inside a fresh namespace
(only its loopback is up), on one shared monotonic clock (``--t0``).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import json
import os
import random
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.dash.content.mp4 import HEAD_BYTES
from nest_experiments.dash.http.transports import H3_CLIENTS
from nest_experiments.pytest_plugin import require_quicgo

pytestmark = pytest.mark.integration


SIZES = {"/video.bin": 6_000_000, "/audio.bin": 600_000, "/manifest.mpd": 2_000}
# seconds: t_last_byte_sent is stamped after the send returns, and a process can be
# preempted between the two on a busy machine; clock offsets would be far larger.
TOL = 0.05


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def namespace() -> Iterator[str]:
    """A fresh namespace ``nxt<hex>`` with loopback up, always deleted."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) not installed")
    name = "nxt" + secrets.token_hex(4)
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        _run("ip", "netns", "del", name, check=False)


@functools.cache
def body_of(path: str) -> bytes:
    return random.Random(path).randbytes(SIZES[path])


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    with namespace() as name:
        yield name


@pytest.fixture(scope="module")
def content(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dash-content")
    for path in SIZES:
        (root / path.lstrip("/")).write_bytes(body_of(path))
    return root


@dataclass
class Server:
    ns: str
    proc: subprocess.Popen[str]
    ports: dict[str, int]
    log: Path
    ca: Path
    t0: float

    def stop(self) -> list[dict[str, str]]:
        """Stop with SIGTERM (must exit 0) and return the access log rows."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=10) == 0, self.proc.stderr.read() if self.proc.stderr else ""
        with self.log.open() as fh:
            return list(csv.DictReader(fh))


def _ready_line(proc: subprocess.Popen[str], timeout: float = 15.0) -> dict[str, Any]:
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if readable else ""
    if not line:
        proc.kill()
        pytest.fail(f"server not ready: {proc.stderr.read() if proc.stderr else ''}")
    return json.loads(line)


@pytest.fixture
def server(netns: str, content: Path, tmp_path: Path) -> Iterator[Server]:
    with serving(netns, content, tmp_path) as srv:
        yield srv


@contextlib.contextmanager
def serving(netns: str, content: Path, tmp_path: Path) -> Iterator[Server]:
    """The DASH server on every transport in ``netns``, killed at exit if still running."""
    t0 = time.monotonic()
    log, ca = tmp_path / "access.csv", tmp_path / "ca.pem"
    cmd = ["ip", "netns", "exec", netns, sys.executable, "-m", "nest_experiments.dash.origin.server",
           "--root", str(content), "--bind", "127.0.0.1", "--access-log", str(log),
           "--t0", repr(t0), "--ca-out", str(ca)]  # fmt: skip
    for kind in ("tcp", "mptcp", "h2", "h3"):
        cmd += [f"--port-{kind}", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = _ready_line(proc)
        yield Server(netns, proc, dict(ready["ports"]), log, ca, t0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def fetch(srv: Server, kind: str, *gets: str, repeat: int = 1, port: int | None = None,
          check: bool = True, h3_client: str = H3_CLIENTS[0]) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """Run the fetcher CLI in the namespace; return (results, summary)."""
    cmd = ["ip", "netns", "exec", srv.ns, sys.executable, "-m", "nest_experiments.dash.http.transports",
           "--kind", kind, "--host", "127.0.0.1", "--port", str(port or srv.ports[kind]),
           "--ca", str(srv.ca), "--t0", repr(srv.t0), "--repeat", str(repeat), "--h3-client", h3_client]  # fmt: skip
    for get in gets:
        cmd += ["--get", get]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    results = [d for d in lines if "summary" not in d]
    summary = next((d["summary"] for d in lines if "summary" in d), {"stderr": proc.stderr})
    return results, summary


def check_results(results: list[dict[str, Any]], kind: str) -> None:
    for r in results:
        assert r["status"] == 200 and r["transport"] == kind
        assert r["bytes"] == SIZES[str(r["path"])]
        # the body's first HEAD_BYTES are kept for a segment's boxes (dash.mp4); the MPD's body is kept whole
        head = b"" if r["path"].endswith(".mpd") else body_of(r["path"])[:HEAD_BYTES]
        assert (r["head_bytes"], r["head_sha256"]) == (len(head), hashlib.sha256(head).hexdigest())
        assert r["t_request"] <= r["t_first_byte"] <= r["t_last_byte"]


def check_log(results: list[dict[str, Any]], rows: list[dict[str, str]], kind: str) -> None:
    """Every client result has its server row, and the two clocks agree."""
    assert len(rows) == len(results)
    assert all(row["transport"] == kind for row in rows)
    unmatched = list(rows)
    for r in sorted(results, key=lambda r: float(r["t_request"])):
        row = next(x for x in unmatched if x["path"] == r["path"])
        unmatched.remove(row)
        assert int(row["status"]) == r["status"] and int(row["bytes"]) == r["bytes"]
        t_arr, t_first, t_last = (float(row[k]) for k in
                                  ("t_arrival", "t_first_byte_sent", "t_last_byte_sent"))  # fmt: skip
        assert t_arr <= t_first <= t_last
        assert float(r["t_request"]) <= t_arr
        assert t_first <= float(r["t_first_byte"]) + TOL
        assert t_last <= float(r["t_last_byte"]) + TOL


def conn_ids(rows: list[dict[str, str]], path: str) -> set[str]:
    return {row["conn_id"] for row in rows if row["path"] == path}


def overlap(results: list[dict[str, Any]]) -> bool:
    """Were an audio and a video request in flight at the same time?"""
    audio = [r for r in results if r["path"] == "/audio.bin"]
    video = [r for r in results if r["path"] == "/video.bin"]
    return any(a["t_request"] < v["t_last_byte"] and v["t_request"] < a["t_last_byte"]
               for a in audio for v in video)  # fmt: skip


GETS = ("video=/video.bin", "audio=/audio.bin")


def test_tcp_one_persistent_connection_per_stream(server: Server) -> None:
    results, summary = fetch(server, "tcp", "mpd=/manifest.mpd", *GETS, repeat=2)
    rows = server.stop()
    check_results(results, "tcp")
    check_log(results, rows, "tcp")
    video, audio, mpd = (conn_ids(rows, p) for p in ("/video.bin", "/audio.bin", "/manifest.mpd"))
    assert len(video) == len(audio) == len(mpd) == 1  # keep-alive: 2 requests, 1 connection
    assert len(video | audio | mpd) == 3
    assert summary["mptcp_active"] == {"mpd": False, "video": False, "audio": False}


def test_mptcp_connections_are_mptcp(server: Server) -> None:
    monitor = subprocess.Popen(["ip", "netns", "exec", server.ns, "ip", "mptcp", "monitor"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        time.sleep(0.3)
        results, summary = fetch(server, "mptcp", *GETS, repeat=2)
        time.sleep(0.3)
    finally:
        monitor.terminate()
        events, _ = monitor.communicate(timeout=10)
    rows = server.stop()
    check_results(results, "mptcp")
    check_log(results, rows, "mptcp")
    assert summary["mptcp_active"] == {"video": True, "audio": True}  # MPTCP_INFO answers
    port = server.ports["mptcp"]
    established = [e for e in events.splitlines() if "ESTABLISHED" in e and f"dport={port}" in e]
    assert len(established) == 2, events  # one MPTCP connection per stream


@pytest.mark.parametrize("kind", ["h2", "h3"])
def test_multiplexed_streams_share_one_connection(server: Server, kind: str) -> None:
    results, _ = fetch(server, kind, *GETS, repeat=2)
    rows = server.stop()
    check_results(results, kind)
    check_log(results, rows, kind)
    assert len({row["conn_id"] for row in rows}) == 1
    assert overlap(results), results  # audio and video really were concurrent


@pytest.mark.parametrize("client", H3_CLIENTS)
def test_h3_clients_stamp_times_on_the_run_clock(server: Server, client: str) -> None:
    """Every QUIC stack of the player (quic-go in its own process) on one connection, with times the server's log brackets."""
    require_quicgo(client)
    results, summary = fetch(server, "h3", "mpd=/manifest.mpd", *GETS, repeat=2, h3_client=client)
    rows = server.stop()
    check_results(results, "h3")
    check_log(results, rows, "h3")
    assert len({row["conn_id"] for row in rows}) == 1
    assert summary["h3_client"].split()[0] == client
    assert overlap(results), results


def test_h3_advertised_by_alt_svc(server: Server) -> None:
    # the test process is outside the namespace: ask from inside it
    code = ("import urllib.request,sys; r=urllib.request.urlopen(sys.argv[1]); "
            "print(r.headers['alt-svc'])")  # fmt: skip
    url = f"http://127.0.0.1:{server.ports['tcp']}/manifest.mpd"
    out = _run("ip", "netns", "exec", server.ns, sys.executable, "-c", code, url).stdout
    assert out.strip().startswith(f'h3=":{server.ports["h3"]}"')
    server.stop()


def test_media_say_how_long_a_browser_may_reuse_them(server: Server) -> None:
    # dash.httpcache: every 200 says max-age (media never change), so a browser's cache does not depend on the
    # files' age on disk; an error is not to be reused
    code = ("import urllib.request,urllib.error,sys\n"
            "for path in sys.argv[2:]:\n"
            "    try: r=urllib.request.urlopen(sys.argv[1]+path)\n"
            "    except urllib.error.HTTPError as e: r=e\n"
            "    print(r.status, r.headers.get('cache-control'))")  # fmt: skip
    base = f"http://127.0.0.1:{server.ports['tcp']}"
    out = _run("ip", "netns", "exec", server.ns, sys.executable, "-c", code, base, "/manifest.mpd", "/video.bin",
               "/missing.m4s").stdout
    assert out.split("\n")[:3] == ["200 max-age=86400", "200 max-age=86400", "404 None"], out
    server.stop()


def test_errors_name_the_url(server: Server) -> None:
    results, summary = fetch(server, "tcp", "video=/missing.bin")
    assert results[0]["status"] == 404 and results[0]["bytes"] == 0
    closed = server.ports["tcp"]
    server.stop()
    _, summary = fetch(server, "tcp", "video=/video.bin", port=closed, check=False)
    assert f"http://127.0.0.1:{closed}/video.bin" in str(summary["stderr"])
    assert "ConnectionRefused" in str(summary["stderr"])


def test_server_without_mptcp_fails_clearly(content: Path) -> None:
    with namespace() as ns:
        _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.mptcp.enabled=0")
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "nest_experiments.dash.origin.server",
               "--root", str(content), "--bind", "127.0.0.1", "--port-mptcp", "0"]  # fmt: skip
        proc = _run(*cmd, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: cannot create an MPTCP socket"), proc.stderr


# Each h2 row's t_last_byte_sent against the client's t_last_byte, several streams at once, the
# connection idle between rounds (the last response of a round used to be logged when the next
# round's requests or the close arrived). The namespace's sockets buffer at most 64 KiB each way
# (tcp_wmem/tcp_rmem are per namespace), so a byte handed to the kernel reaches the client's read
# within the time it takes the client to read and decrypt ~128 KiB.
SMALL_SOCKBUF = "4096 16384 65536"
# Measured here: |lag| <= 2.8 ms over 48 responses (the server polls a buffered tail every 1 ms; the
# client reads <= 128 KiB behind). 10 ms leaves room for either process waiting for one of 2 busy
# cores; the bug's error is the idle time that follows, PAUSE.
LOG_TOL = 0.010  # s
PAUSE = 0.3  # s: idle connection between rounds
# rounds of concurrent requests: big ones end with the TLS layer's socket buffer full, small ones
# with it empty (the case the old log got wrong)
ROUNDS = ("/manifest.mpd,/audio.bin,/video.bin,/audio.bin", "/manifest.mpd,/manifest.mpd",
          "/video.bin,/manifest.mpd,/audio.bin", "/manifest.mpd,/manifest.mpd,/manifest.mpd")


def h2_rounds(srv: Server, rounds: tuple[str, ...]) -> list[dict[str, Any]]:
    cmd = ["ip", "netns", "exec", srv.ns, sys.executable, str(Path(__file__).with_name("h2_rounds.py")),
           "--port", str(srv.ports["h2"]), "--ca", str(srv.ca), "--t0", repr(srv.t0),
           "--pause", str(PAUSE), *rounds]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_h2_log_ends_when_the_client_got_the_last_byte(content: Path, tmp_path: Path) -> None:
    with namespace() as ns:
        for key in ("net.ipv4.tcp_wmem", "net.ipv4.tcp_rmem"):
            _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={SMALL_SOCKBUF}")
        with serving(ns, content, tmp_path) as srv:
            results = h2_rounds(srv, ROUNDS)
            rows = srv.stop()
    check_results(results, "h2")
    assert len(rows) == len(results) == sum(len(r.split(",")) for r in ROUNDS)
    for path in {r["path"] for r in results}:  # the n-th request for a path is the n-th row for it
        sent = sorted((r for r in rows if r["path"] == path), key=lambda r: float(r["t_arrival"]))
        got = sorted((r for r in results if r["path"] == path), key=lambda r: float(r["t_request"]))
        for row, res in zip(sent, got, strict=True):
            lag = float(res["t_last_byte"]) - float(row["t_last_byte_sent"])
            assert abs(lag) <= LOG_TOL, (path, row, res)
