"""The quic-go fetcher's protocol with its process (ready line, requests, JSON results, clock), against a stand-in."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from nest_experiments.dash.content.mp4 import HEAD_BYTES
from nest_experiments.dash.core.fetch import FetchResult
from nest_experiments.dash.http import quicgo
from nest_experiments.errors import MissingToolError, RunError

# Speaks nest-h3get's protocol: answers "ID PATH KEEP" with a fixed CLOCK_MONOTONIC reading plus 1/2/3 s,
# a 404 for /missing, an error for /broken, the whole body when KEEP is -1, its first KEEP bytes when KEEP > 0;
# records its argv.
STAND_IN = '''#!{python}
import base64, json, sys, time
open({argv_file!r}, "w").write(json.dumps(sys.argv[1:]))
print(json.dumps({{"ready": "quic-go v0.0.0-test"}}), flush=True)
for line in sys.stdin:
    rid, path, keep = line.split()
    t = time.monotonic()
    if path == "/broken":
        print(json.dumps({{"id": int(rid), "bytes": 0, "error": "stream reset"}}), flush=True)
        continue
    body = b"<MPD/>" if path.endswith(".mpd") else bytes(range(256)) * 300
    doc = {{"id": int(rid), "status": 404 if path == "/missing" else 200, "bytes": len(body),
           "t_request": t + 1, "t_first": t + 2, "t_last": t + 3}}
    if int(keep) != 0:
        doc["body"] = base64.b64encode(body if int(keep) < 0 else body[:int(keep)]).decode()
    print(json.dumps(doc), flush=True)
'''


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "nest-h3get"
    exe.write_text(STAND_IN.format(python=sys.executable, argv_file=str(tmp_path / "argv.json")))
    exe.chmod(0o755)
    monkeypatch.setenv(quicgo.ENV_BINARY, str(exe))
    return tmp_path


async def _open_async(t0: float, ca: Path | None) -> quicgo.QuicGoFetcher:
    return await quicgo.QuicGoFetcher.open("10.0.0.2", 8443, clock=lambda: time.monotonic() - t0, ca=ca,
                                           insecure=False, server_name=None, window=1 << 20, connect_timeout=5.0,
                                           idle_timeout=30.0)  # fmt: skip


def test_results_arrive_on_the_run_clock_with_the_mpd_body(stand_in: Path) -> None:
    async def session() -> tuple[list[FetchResult], str]:
        t0 = time.monotonic() - 100.0
        fetcher = await _open_async(t0, stand_in / "ca.pem")
        try:
            results = await asyncio.gather(fetcher.fetch("mpd", "/m.mpd"), fetcher.fetch("video", "/v/1.m4s"),
                                           fetcher.fetch("audio", "/missing"))  # fmt: skip
            return list(results), fetcher.implementation
        finally:
            await fetcher.close()

    results, implementation = asyncio.run(session())
    assert implementation == "quic-go v0.0.0-test"
    mpd, video, missing = results
    assert mpd.body == b"<MPD/>" and mpd.bytes == 6 and mpd.transport == "h3"
    # a segment: counted, and its first HEAD_BYTES kept for its boxes (dash.mp4)
    assert video.body is None and video.bytes == 76_800 and video.head == (bytes(range(256)) * 300)[:HEAD_BYTES]
    assert mpd.head == b""
    assert missing.status == 404
    for r in results:  # the process's monotonic + 1/2/3 s, minus the run's t0 (100 s ago): 101-104 s
        assert 100.5 < r.t_request < 104 and r.t_first_byte - r.t_request == pytest.approx(1)
        assert r.t_last_byte - r.t_first_byte == pytest.approx(1)
    argv = (stand_in / "argv.json").read_text()
    assert '"-ca"' in argv and '"-host", "10.0.0.2"' in argv and '"-port", "8443"' in argv


def test_a_failed_request_is_a_run_error_naming_the_url(stand_in: Path) -> None:
    async def session() -> None:
        fetcher = await _open_async(time.monotonic(), None)
        try:
            await fetcher.fetch("video", "/broken")
        finally:
            await fetcher.close()

    with pytest.raises(RunError, match=r"h3 https://10\.0\.0\.2:8443/broken: stream reset"):
        asyncio.run(session())


def test_a_result_line_cut_off_by_the_childs_death_fails_the_waiting_requests(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that ends while writing a result leaves a line without its end (nest-h3get returns at the end of
    its input while a response of a request in flight is being written: abr_quic_tcp, session 30, the warm-up
    and `abr-bba_transport-h3_trace-hsdpa_r5`: "Unterminated string starting at: line 1 column 121", the base64
    body, raised by ``close`` after the session had played to its end, so the player wrote nothing and the run
    failed). Now every request still waiting fails with a RunError naming the child, none waits for ever, a
    request after that fails at once, and ``close`` (the ``finally`` below) raises nothing."""
    exe = tmp_path / "nest-h3get"
    exe.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps({{'ready': 'test'}}), flush=True)\n"
                   "sys.stdin.readline(); sys.stdin.readline()\n"
                   "sys.stdout.write('{\"id\": 1, \"status\": 200, \"body\": \"AAAA'); sys.stdout.flush()\n"
                   "raise SystemExit(-15)\n")  # as if killed by the SIGTERM of the run's deadline
    exe.chmod(0o755)
    monkeypatch.setenv(quicgo.ENV_BINARY, str(exe))

    async def session() -> list[BaseException | FetchResult]:
        fetcher = await _open_async(time.monotonic(), None)
        try:
            first = await asyncio.wait_for(asyncio.gather(fetcher.fetch("video", "/v/1.m4s"),
                                                          fetcher.fetch("audio", "/a/1.m4s"),
                                                          return_exceptions=True), 10.0)  # fmt: skip
            later = await asyncio.gather(fetcher.fetch("video", "/v/2.m4s"), return_exceptions=True)
            return [*first, *later]
        finally:
            await fetcher.close()

    got = asyncio.run(session())
    assert [type(r) for r in got] == [RunError] * 3
    assert all("nest-h3get exited" in str(r) and "unreadable line" in str(r) and "body" in str(r) for r in got[:2])
    assert "v/2.m4s: nest-h3get is gone" in str(got[2])


def test_a_missing_binary_says_how_to_build_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(quicgo.ENV_BINARY, str(tmp_path / "absent"))
    with pytest.raises(MissingToolError, match=r"setup\.sh.*Go >= 1\.26.*qh3"):
        quicgo.binary()


def test_a_process_that_cannot_connect_fails_the_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "nest-h3get"
    exe.write_text(f'#!{sys.executable}\nimport json\nprint(json.dumps({{"error": "QUIC handshake: timeout"}}))\n'
                   "raise SystemExit(1)\n")
    exe.chmod(0o755)
    monkeypatch.setenv(quicgo.ENV_BINARY, str(exe))
    with pytest.raises(RunError, match="QUIC handshake: timeout"):
        asyncio.run(_open_async(time.monotonic(), None))
