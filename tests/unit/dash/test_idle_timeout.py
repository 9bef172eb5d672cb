"""Our player's idle timeout over HTTP/1.1, against a real server on a localhost socket that holds its response
back: a response that sends no byte for longer than ``idle_timeout`` fails the request (the guard against a dead
server); one held back for less is waited for, as a browser waits behind a deep queue (``idle_timeout = "none"``
gives the session's length)."""

from __future__ import annotations

import asyncio
import time

import pytest

from nest_experiments.dash.http.transports import open_fetcher
from nest_experiments.dash.players.client import parse_args
from nest_experiments.errors import RunError

BODY = b"x" * 5000


async def _fetch_held(hold_s: float, idle_timeout: float) -> int:
    """GET /a from a server that sends nothing for ``hold_s`` seconds, then the head and half the body, then waits
    ``hold_s`` again before the rest: the bytes the fetcher got."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(hold_s)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY[:2500])
        await writer.drain()
        await asyncio.sleep(hold_s)
        writer.write(BODY[2500:])
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    t0 = time.monotonic()
    fetcher = await open_fetcher("tcp", "127.0.0.1", port, clock=lambda: time.monotonic() - t0,
                                 idle_timeout=idle_timeout)
    try:
        result = await fetcher.fetch("/a", "/a")
        return int(result.bytes)
    finally:
        await fetcher.close()
        server.close()
        await server.wait_closed()


def test_a_response_held_back_longer_than_the_idle_timeout_fails_the_request() -> None:
    with pytest.raises(RunError, match=r"tcp http://127\.0\.0\.1:\d+/a: timed out"):
        asyncio.run(_fetch_held(hold_s=0.6, idle_timeout=0.2))


def test_a_response_held_back_less_than_the_idle_timeout_is_waited_for_each_pause_counted_apart() -> None:
    # two pauses of 0.6 s: 1.2 s in all, more than the timeout, but no single wait without a byte reaches 1 s
    assert asyncio.run(_fetch_held(hold_s=0.6, idle_timeout=1.0)) == len(BODY)


def test_the_player_takes_its_idle_timeout_from_the_command_line() -> None:
    base = ["--server", "10.0.0.1", "--port", "80", "--transport", "tcp", "--out", "/tmp/x", "--mpd", "/m.mpd"]
    assert parse_args(base).idle_timeout == 30.0
    assert parse_args([*base, "--idle-timeout", "261"]).idle_timeout == 261.0
