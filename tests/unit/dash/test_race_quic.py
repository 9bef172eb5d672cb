"""The race transport on real QUIC connections (qh3, aioquic) to our server on loopback: what QUICHE's
detectors read off a connection, a cancel that resets one stream only, and a blackhole that closes it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from nest_experiments.dash.core.racing import Racer, RacingParams
from nest_experiments.dash.http import race
from nest_experiments.dash.http.transports import PY_QUIC_STACKS, FetcherOptions, H3Fetcher

SIZE = 2_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], int]]:
    root = tmp_path_factory.mktemp("root")
    (root / "big.bin").write_bytes(os.urandom(SIZE))
    proc = subprocess.Popen([sys.executable, "-m", "nest_experiments.dash.origin.server", "--root", str(root),
                             "--bind", "127.0.0.1", "--port-h3", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc, int(json.loads(proc.stdout.readline())["ports"]["h3"])
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=10)


def opts(stack: str) -> FetcherOptions:
    return FetcherOptions(clock=time.monotonic, insecure=True, h3_client=stack)


@pytest.mark.parametrize("stack", PY_QUIC_STACKS)
def test_a_cancel_resets_one_stream_and_the_connection_serves_on(server: tuple[subprocess.Popen[str], int],
                                                                 stack: str) -> None:
    async def go() -> tuple[int, int, race.QuicSample]:
        f = await H3Fetcher.open("127.0.0.1", server[1], opts(stack))
        try:
            cancelled = f.protocol.request(f.authority, "/big.bin")
            await asyncio.sleep(0.02)
            f.protocol.cancel(cancelled)  # STOP_SENDING on its stream
            p = f.protocol.request(f.authority, "/big.bin")
            await asyncio.wait_for(p.done, 10)
            return cancelled.ex.nbytes, p.ex.nbytes, race.quic_sample(f.protocol)
        finally:
            await f.close()

    partial, full, sample = asyncio.run(go())
    assert partial < SIZE and full == SIZE
    assert sample.srtt_s is not None and 0 < sample.srtt_s < 0.5 and sample.bytes_in_flight == 0


@pytest.mark.parametrize("stack", PY_QUIC_STACKS)
def test_a_silent_server_trips_the_blackhole_detector(server: tuple[subprocess.Popen[str], int], stack: str) -> None:
    racer = Racer(policy="chromium", params=RacingParams(blackhole_rtos=1))  # 2 TLPs + 1 RTO: ~0.4 s
    racer.on_alt_svc(0.0, f'h3=":{server[1]}"')

    async def go() -> race._QuicFailed:
        f = race.RaceFetcher(host="127.0.0.1", port=1, racer=racer, opts=opts(stack))
        f.quic_port = server[1]
        conn = await f._job("quic")
        os.kill(server[0].pid, signal.SIGSTOP)  # the request's packet stays in flight, unacknowledged
        try:
            with pytest.raises(race._QuicFailed) as exc:
                await f._fetch_quic(conn, "/big.bin")
            return exc.value
        finally:
            os.kill(server[0].pid, signal.SIGCONT)
            await f.close()

    t0 = time.monotonic()
    failed = asyncio.run(go())
    assert "QUIC_TOO_MANY_RTOS" in str(failed) and not failed.headers and time.monotonic() - t0 < 5
    closed = [r for r in racer.rows if r.event == "conn_closed"]
    assert len(closed) == 1 and closed[0].value is not None and closed[0].value < 0.5  # its srtt
    assert not [r for r in racer.rows if r.event == "broken"]  # the close itself marks nothing
