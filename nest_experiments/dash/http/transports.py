"""Fetchers over the four DASH transports (the I/O side of :mod:`~nest_experiments.dash.core.fetch`).

- ``tcp``: HTTP/1.1, one persistent connection per stream name (as browsers
  and GPAC keep one per adaptation set); requests on a stream are serialised.
- ``mptcp``: the same over ``IPPROTO_MPTCP`` sockets.
- ``h2``: one TLS connection (ALPN ``h2``), one HTTP/2 stream per request,
  concurrent requests multiplexed; receive windows raised to ``window``.
- ``h3``: one QUIC connection, one stream per request;
  ``max_data``/``max_stream_data`` raised to ``window``. Three QUIC stacks
  (``h3_client``): quic-go in a process of its own (:mod:`.quicgo`), and two
  in this process with the same asyncio API: ``qh3`` (the default: its packet
  protection, TLS (rustls) and QPACK are native code; on unshaped loopback it
  moved 8-9x the bytes per CPU second of aioquic, ``bench/dash_server_throughput.py``;
  through a 5 Mbit/s bottleneck the player's CPU was about the same with
  either, ``bench/player_cpu.py``) and ``aioquic``.

Times come from the caller's ``clock``: ``t_request`` when the request was
handed to the kernel (stamped just before the send call), ``t_first_byte`` when the first response byte (head)
arrived, ``t_last_byte`` when the last body byte arrived. Every low-level
failure is raised as :class:`~nest_experiments.errors.RunError` naming the
URL. Non-2xx answers are results (``status``), not errors.

``python -m nest_experiments.dash.http.transports`` fetches objects and prints one
JSON line per result (used by the integration tests and the bench).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import functools
import hashlib
import json
import os
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from nest_experiments.dash.content.mp4 import HEAD_BYTES
from nest_experiments.dash.core.fetch import TRANSFER_WATCH, Clock, Fetcher, FetchResult
from nest_experiments.dash.http import recovery
from nest_experiments.dash.http.http1 import (
    MAX_HEAD,
    HttpError,
    format_request,
    parse_response_head,
)
from nest_experiments.errors import (
    ConfigError,
    KernelFeatureError,
    NestExpError,
    RunError,
)

KINDS = ("tcp", "mptcp", "h2", "h3")
PY_QUIC_STACKS = ("qh3", "aioquic")  # in this process, with aioquic's asyncio API (quic_stack)
H3_CLIENTS = (*PY_QUIC_STACKS, "quic-go")  # QUIC stacks of the h3 transport (quic-go: .quicgo); the first: default
CHUNK = 256 * 1024
H3_REQUEST_CANCELLED = 0x10C  # RFC 9114 8.1
DEFAULT_WINDOW = 64 * 1024 * 1024  # h2 / QUIC receive windows (QUIC default: 1 MB)
UDP_BUFFER = 4 * 1024 * 1024  # like quic-go / Chromium, which raise it to avoid drops
SOL_MPTCP = 284  # linux/socket.h; not in Python's socket module
MPTCP_INFO = 1
Connector = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


@dataclass(frozen=True, kw_only=True)
class FetcherOptions:
    """Knobs shared by all transports."""

    clock: Clock
    ca: Path | None = None  # CA (or self-signed server) certificate for h2/h3
    insecure: bool = False  # skip certificate verification (h2/h3)
    server_name: str | None = None  # TLS SNI / verification name; default: host
    connect_timeout: float = 10.0  # seconds
    idle_timeout: float = 30.0  # seconds without any response byte -> RunError
    window: int = DEFAULT_WINDOW  # h2/h3 receive windows, bytes
    h2_max_frame: int = 16384  # SETTINGS_MAX_FRAME_SIZE we announce
    h3_client: str = H3_CLIENTS[0]  # QUIC stack of the h3 transport
    quic_cc: str = "reno"  # aioquic congestion control of the client side (qh3 has one: its own)
    quic_max_datagram: int = 1200  # aioquic's default (RFC 9000 minimum); Chromium: 1350 (qh3 probes the path MTU)
    udp_buffer: int = UDP_BUFFER  # SO_RCVBUF/SO_SNDBUF of the QUIC socket (capped by rmem_max)
    qlog: Path | None = None  # h3 over quic-go: the connection's recovery events (qlog JSON-SEQ) into this file
    # h3 over aioquic: the connection's recovery rows (dash.http.recovery: quic.csv's columns, side "client") into
    # this CSV; qh3 logs no recovery (its recovery is Rust's), so there it stays empty of rows
    recovery_log: Path | None = None


async def open_fetcher(
    kind: str,
    host: str,
    port: int,
    *,
    clock: Clock,
    ca: Path | None = None,
    insecure: bool = False,
    **options: Any,
) -> Fetcher:
    """Open a :class:`Fetcher` of ``kind`` (``tcp``, ``mptcp``, ``h2``, ``h3``).

    ``options`` are the other fields of :class:`FetcherOptions`. ``h2`` and
    ``h3`` connect at once (so that a bad origin fails here); ``tcp`` and
    ``mptcp`` connect on the first request of each stream.
    """
    opts = FetcherOptions(clock=clock, ca=ca, insecure=insecure, **options)
    if kind in ("tcp", "mptcp"):
        return Http1Fetcher(kind=kind, host=host, port=port, opts=opts)
    if kind == "h2":
        return await H2Fetcher.open(host, port, opts)
    if kind == "h3":
        if opts.h3_client not in H3_CLIENTS:
            raise ConfigError("h3_client", f"unknown h3 client {opts.h3_client!r}; expected one of {H3_CLIENTS}")
        if opts.h3_client == "quic-go":
            from nest_experiments.dash.http.quicgo import QuicGoFetcher  # a native process; see its module

            return await QuicGoFetcher.open(host, port, clock=opts.clock, ca=opts.ca, insecure=opts.insecure,
                                            server_name=opts.server_name, window=opts.window,
                                            connect_timeout=opts.connect_timeout, idle_timeout=opts.idle_timeout,
                                            qlog=opts.qlog)
        return await H3Fetcher.open(host, port, opts)
    raise ConfigError("transport", f"unknown transport {kind!r}; expected one of {KINDS}")


def url_of(kind: str, host: str, port: int, path: str) -> str:
    scheme = "http" if kind in ("tcp", "mptcp") else "https"
    hostpart = f"[{host}]" if ":" in host else host
    return f"{scheme}://{hostpart}:{port}{path}"


@contextlib.contextmanager
def mapped_errors(kind: str, url: str) -> Iterator[None]:
    """Raise low-level failures as :class:`RunError` naming the transport and URL."""
    try:
        yield
    except NestExpError:
        raise
    except TimeoutError as exc:
        raise RunError(f"{kind} {url}: timed out ({exc or 'no answer in time'})") from exc
    except (OSError, EOFError, HttpError, h2.exceptions.H2Error) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise RunError(f"{kind} {url}: {reason}") from exc


def _ssl_context(opts: FetcherOptions, alpn: list[str]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(opts.ca) if opts.ca else None)
    if opts.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(alpn)
    return ctx


# --------------------------------------------------------------------------- HTTP/1.1


@dataclass
class _Exchange:
    """Progress of one response (shared by all transports)."""

    path: str
    t_request: float = 0.0
    t_first: float | None = None
    t_last: float | None = None
    status: int = 0
    nbytes: int = 0
    chunks: list[bytes] | None = None  # kept only for manifests: segments are counted, not stored
    head: bytearray = field(default_factory=bytearray)  # the body's first HEAD_BYTES: a segment's boxes (dash.mp4)
    alt_svc: str = ""
    cache_control: str = ""
    length: int = 0  # the response's content-length (0: not known yet or not sent)

    def __post_init__(self) -> None:
        if self.path.split("?")[0].endswith(".mpd"):
            self.chunks = []
        if (watch := TRANSFER_WATCH.get()) is not None:
            watch(self)

    def add(self, data: bytes) -> None:
        self.nbytes += len(data)
        if self.chunks is not None:
            self.chunks.append(data)
        elif len(self.head) < HEAD_BYTES:
            self.head += data[:HEAD_BYTES - len(self.head)]

    def result(self, transport: str) -> FetchResult:
        t_first = self.t_request if self.t_first is None else self.t_first
        return FetchResult(
            path=self.path,
            status=self.status,
            bytes=self.nbytes,
            t_request=self.t_request,
            t_first_byte=t_first,
            t_last_byte=self.t_last if self.t_last is not None else t_first,
            transport=transport,
            body=b"".join(self.chunks) if self.chunks is not None else None,
            head=bytes(self.head),
            alt_svc=self.alt_svc,
            cache_control=self.cache_control,
        )


class _H1Connection:
    """One HTTP/1.1 connection; one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.open = True
        self.requests = 0
        self.reused = False  # the current request is not the connection's first
        self.got_bytes = False  # the current request got at least one byte back
        self.length = 0  # content-length of the current response

    async def get(self, path: str, host: str, clock: Clock, idle: float) -> _Exchange:
        ex = _Exchange(path)
        ex.t_request = clock()
        self.writer.write(format_request(target=path, host=host))
        self.reused, self.got_bytes = self.requests > 0, False
        self.requests += 1
        async with asyncio.timeout(idle) as deadline:
            buf = await self._read_head(ex, clock, deadline, idle)
            await self._read_body(ex, buf, clock, deadline, idle)
        return ex

    async def _read(self, n: int, clock: Clock, ex: _Exchange) -> bytes:
        data = await self.reader.read(n)
        if not data:
            self.open = False
            raise ConnectionResetError("connection closed by the server")
        ex.t_last = clock()
        self.got_bytes = True
        if ex.t_first is None:
            ex.t_first = ex.t_last
        return data

    async def _read_head(self, ex: _Exchange, clock: Clock, deadline: asyncio.Timeout, idle: float) -> bytes:
        buf = b""
        while (end := buf.find(b"\r\n\r\n")) < 0:
            if len(buf) > MAX_HEAD:
                raise HttpError(400, "response head too large")
            buf += await self._read(CHUNK, clock, ex)
            deadline.reschedule(asyncio.get_running_loop().time() + idle)
        response = parse_response_head(buf[: end + 4])
        ex.status = response.status
        ex.cache_control = response.headers.get("cache-control", "")
        self.open = response.keep_alive
        self.length = ex.length = response.content_length
        return buf[end + 4 :]

    async def _read_body(
        self,
        ex: _Exchange,
        buf: bytes,
        clock: Clock,
        deadline: asyncio.Timeout,
        idle: float,
    ) -> None:
        if len(buf) > self.length:
            raise HttpError(400, "more bytes than content-length")
        ex.add(buf)
        while ex.nbytes < self.length:
            data = await self._read(min(CHUNK, self.length - ex.nbytes), clock, ex)
            ex.add(data)
            deadline.reschedule(asyncio.get_running_loop().time() + idle)

    def mptcp_active(self) -> bool:
        sock = self.writer.get_extra_info("socket")
        try:
            sock.getsockopt(SOL_MPTCP, MPTCP_INFO, 256)
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.open = False
        self.writer.close()


async def _connect_tcp(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port, limit=4 * CHUNK)


async def _connect_mptcp(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, _, _, _, addr = infos[0]
    try:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_MPTCP)
    except OSError as exc:
        raise KernelFeatureError(
            f"mptcp {host}:{port}: cannot create an MPTCP socket (kernel without MPTCP or net.mptcp.enabled=0): {exc}"
        ) from exc
    try:
        await _sock_connect(sock, addr)
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock, limit=4 * CHUNK)


async def _sock_connect(sock: socket.socket, addr: Any) -> None:
    """Non-blocking connect without ``loop.sock_connect``, whose address
    resolution passes ``proto=IPPROTO_MPTCP`` to getaddrinfo (EAI_SOCKTYPE)."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    err = sock.connect_ex(addr)
    if err not in (0, errno.EINPROGRESS):
        raise OSError(err, os.strerror(err))
    if err == errno.EINPROGRESS:
        writable = loop.create_future()
        loop.add_writer(sock.fileno(), writable.set_result, None)
        try:
            await writable
        finally:
            loop.remove_writer(sock.fileno())
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))


class Http1Fetcher(Fetcher):
    """HTTP/1.1 over TCP or MPTCP, one keep-alive connection per stream name."""

    def __init__(self, *, kind: str, host: str, port: int, opts: FetcherOptions) -> None:
        self.kind, self.host, self.port, self.opts = kind, host, port, opts
        connect = _connect_mptcp if kind == "mptcp" else _connect_tcp
        self._connect: Connector = functools.partial(connect, host, port)
        self._host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._conns: dict[str, _H1Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def fetch(self, stream: str, path: str) -> FetchResult:
        url = url_of(self.kind, self.host, self.port, path)
        async with self._locks.setdefault(stream, asyncio.Lock()):
            with mapped_errors(self.kind, url):
                return await self._fetch(stream, path)

    async def _fetch(self, stream: str, path: str) -> FetchResult:
        conn = await self._connection(stream)
        try:
            ex = await conn.get(path, self._host_header, self.opts.clock, self.opts.idle_timeout)
        except asyncio.CancelledError:  # abandoned by the player mid-response: the rest would arrive on it
            conn.close()
            raise
        except (ConnectionError, OSError):
            conn.close()
            if not conn.reused or conn.got_bytes:
                raise
            conn = await self._connection(stream)  # server closed an idle connection: retry once
            ex = await conn.get(path, self._host_header, self.opts.clock, self.opts.idle_timeout)
        if not conn.open:
            conn.close()
        return ex.result(self.kind)

    async def _connection(self, stream: str) -> _H1Connection:
        conn = self._conns.get(stream)
        if conn is None or not conn.open:
            async with asyncio.timeout(self.opts.connect_timeout):
                conn = _H1Connection(*await self._connect())
            self._conns[stream] = conn
        return conn

    def mptcp_active(self) -> dict[str, bool]:
        """Per stream: is its open connection really MPTCP (``MPTCP_INFO`` answers)?"""
        return {s: c.mptcp_active() for s, c in self._conns.items() if c.open}

    async def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


# --------------------------------------------------------------------------- HTTP/2


@dataclass
class _Pending:
    ex: _Exchange
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    stream_id: int = -1  # h3: its stream

    def fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _wait_idle(p: _Pending, idle: float) -> None:
    """Wait for ``p`` to finish; fail after ``idle`` seconds without progress."""
    while True:
        seen = p.ex.t_last
        try:
            await asyncio.wait_for(asyncio.shield(p.done), idle)
            return
        except TimeoutError:
            if p.ex.t_last == seen:
                raise


def _header(headers: Iterable[tuple[bytes | str, bytes | str]], name: str) -> str:
    for key, value in headers:
        key = key.decode("latin-1") if isinstance(key, bytes) else key
        if key == name:
            return value.decode("latin-1") if isinstance(value, bytes) else value
    raise HttpError(400, f"response without {name}")


class H2Fetcher(Fetcher):
    """HTTP/2 over TLS; one connection, one stream per request."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        opts: FetcherOptions,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.host, self.port, self.opts = host, port, opts
        self.reader, self.writer = reader, writer
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.pending: dict[int, _Pending] = {}
        self.authority = url_of("h2", host, port, "").split("//", 1)[1]
        self._reader_task: asyncio.Task[None] | None = None
        self._pings: dict[bytes, asyncio.Future[None]] = {}

    @classmethod
    async def open(cls, host: str, port: int, opts: FetcherOptions) -> H2Fetcher:
        ctx = _ssl_context(opts, ["h2"])
        with mapped_errors("h2", url_of("h2", host, port, "/")):
            async with asyncio.timeout(opts.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=ctx,
                    server_hostname=opts.server_name or host,
                    limit=4 * CHUNK,
                )
            alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
            if alpn != "h2":
                writer.close()
                raise RunError(f"h2 {url_of('h2', host, port, '/')}: server chose ALPN {alpn!r}")
        fetcher = cls(host=host, port=port, opts=opts, reader=reader, writer=writer)
        fetcher.start()
        return fetcher

    def start(self) -> None:
        self.conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: min(self.opts.window, 2**31 - 1),
                h2.settings.SettingCodes.MAX_FRAME_SIZE: self.opts.h2_max_frame,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(min(self.opts.window, 2**31 - 1) - 65535)
        self.writer.write(self.conn.data_to_send())
        self._reader_task = asyncio.create_task(self._read_loop())

    async def _read_loop(self) -> None:
        error: BaseException = ConnectionResetError("connection closed by the server")
        try:
            while data := await self.reader.read(CHUNK):
                now = self.opts.clock()
                for event in self.conn.receive_data(data):
                    self._handle(event, now)
                self.writer.write(self.conn.data_to_send())
        except (OSError, h2.exceptions.H2Error) as exc:
            error = exc
        for p in self.pending.values():
            p.fail(error)
        for ping in self._pings.values():
            if not ping.done():
                ping.set_exception(error)

    def _handle(self, event: h2.events.Event, now: float) -> None:
        p = self.pending.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and p:
            p.ex.status = int(_header(event.headers or [], ":status"))
            with contextlib.suppress(HttpError):
                p.ex.alt_svc = _header(event.headers or [], "alt-svc")
            with contextlib.suppress(HttpError):
                p.ex.cache_control = _header(event.headers or [], "cache-control")
            with contextlib.suppress(HttpError, ValueError):
                p.ex.length = int(_header(event.headers or [], "content-length"))
            p.ex.t_first = p.ex.t_last = now
        elif isinstance(event, h2.events.DataReceived) and p:
            p.ex.add(event.data or b"")
            p.ex.t_last = now
            self.conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded) and p:
            p.finish()
        elif isinstance(event, h2.events.StreamReset) and p:
            p.fail(ConnectionResetError(f"stream reset by the server (code {event.error_code})"))
        elif isinstance(event, h2.events.PingAckReceived):
            ping = self._pings.pop(event.ping_data or b"", None)
            if ping is not None and not ping.done():
                ping.set_result(None)
        elif isinstance(event, h2.events.ConnectionTerminated):
            reason = f"GOAWAY (code {event.error_code})"
            for q in self.pending.values():
                q.fail(ConnectionResetError(reason))

    async def fetch(self, stream: str, path: str) -> FetchResult:
        with mapped_errors("h2", url_of("h2", self.host, self.port, path)):
            stream_id = self.conn.get_next_available_stream_id()
            p = self.pending[stream_id] = _Pending(_Exchange(path))
            headers = [
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", self.authority),
                (":path", path),
            ]
            self.conn.send_headers(stream_id, headers, end_stream=True)
            p.ex.t_request = self.opts.clock()
            self.writer.write(self.conn.data_to_send())
            try:
                await _wait_idle(p, self.opts.idle_timeout)
            except asyncio.CancelledError:  # abandoned by the player: RST_STREAM(CANCEL), as a browser's abort
                with contextlib.suppress(Exception):
                    self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                    self.writer.write(self.conn.data_to_send())
                raise
            finally:
                del self.pending[stream_id]
            return p.ex.result("h2")

    async def ping(self) -> None:
        """Send an HTTP/2 PING and wait for its ACK (the race transport's TCP RTT probe)."""
        opaque = os.urandom(8)
        ping = self._pings[opaque] = asyncio.get_running_loop().create_future()
        try:
            self.conn.ping(opaque)
            self.writer.write(self.conn.data_to_send())
            await ping
        finally:
            self._pings.pop(opaque, None)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close_connection()
            self.writer.write(self.conn.data_to_send())
        self.writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task


# --------------------------------------------------------------------------- HTTP/3


def set_udp_buffers(transport: asyncio.BaseTransport | None, size: int) -> None:
    """Raise a UDP socket's buffers: a Python QUIC endpoint reads in bursts and the
    default 208 KiB receive buffer overflows (drops look like congestion to QUIC)."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None and size > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


@dataclass(frozen=True, kw_only=True)
class QuicStack:
    """One QUIC + HTTP/3 library with aioquic's asyncio API (aioquic, or qh3, its fork)."""

    name: str
    version: str
    protocol: type[Any]  # asyncio.QuicConnectionProtocol
    connect: Callable[..., Any]  # asyncio.connect
    h3_connection: type[Any]
    alpn: tuple[str, ...]
    configuration: Callable[..., Any]  # QuicConfiguration
    headers_received: type[Any]
    data_received: type[Any]
    connection_terminated: type[Any]
    stream_reset: type[Any]
    options: Callable[[FetcherOptions], dict[str, Any]]  # the stack's own QuicConfiguration fields


@functools.cache
def quic_stack(name: str) -> QuicStack:
    """Import ``name``'s QUIC stack (only the one a session uses: imports are slow in the TCG guest)."""
    if name == "aioquic":
        import aioquic as lib
        from aioquic import asyncio as aio
        from aioquic.h3 import connection as h3c
        from aioquic.h3 import events as h3e
        from aioquic.quic import configuration as qconf
        from aioquic.quic import events as qe

        def options(opts: FetcherOptions) -> dict[str, Any]:
            return {"congestion_control_algorithm": opts.quic_cc, "max_datagram_size": opts.quic_max_datagram}
    elif name == "qh3":
        import qh3 as lib  # type: ignore[no-redef]
        from qh3 import asyncio as aio  # type: ignore[no-redef]
        from qh3.h3 import connection as h3c  # type: ignore[no-redef]
        from qh3.h3 import events as h3e  # type: ignore[no-redef]
        from qh3.quic import configuration as qconf  # type: ignore[no-redef]
        from qh3.quic import events as qe  # type: ignore[no-redef]

        def options(opts: FetcherOptions) -> dict[str, Any]:
            return {}
    else:
        raise ConfigError("h3_client", f"unknown h3 client {name!r}; expected one of {H3_CLIENTS}")
    return QuicStack(name=name, version=lib.__version__, protocol=aio.QuicConnectionProtocol, connect=aio.connect,
                     h3_connection=h3c.H3Connection, alpn=tuple(h3c.H3_ALPN), configuration=qconf.QuicConfiguration,
                     headers_received=h3e.HeadersReceived, data_received=h3e.DataReceived,
                     connection_terminated=qe.ConnectionTerminated, stream_reset=qe.StreamReset,
                     options=options)  # fmt: skip


class _H3Client:
    """HTTP/3 requests over a QUIC connection; mixed into a stack's ``QuicConnectionProtocol``."""

    _quic: Any
    _connected_waiter: asyncio.Future[None] | None

    def __init__(self, *args: Any, clock: Clock, stack: QuicStack, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock, self.stack = clock, stack
        self.h3 = stack.h3_connection(self._quic)
        self.pending: dict[int, _Pending] = {}
        self.last_rx = clock()  # when the connection last had an event (the race transport's detectors)
        self.terminated = ""  # why the connection closed ("": open)
        self.terminated_code: int | None = None  # the error code of the CONNECTION_CLOSE that closed it

    def transmit(self) -> None:  # the stack's
        super().transmit()  # type: ignore[misc]

    async def wait_connected(self) -> None:  # the stack's
        await super().wait_connected()  # type: ignore[misc]

    def quic_event_received(self, event: Any) -> None:
        self.last_rx = self.clock()
        if isinstance(event, self.stack.connection_terminated):
            reason = self.terminated = f"QUIC connection closed (code {event.error_code}: {event.reason_phrase})"
            self.terminated_code = event.error_code
            for p in self.pending.values():
                p.fail(ConnectionResetError(reason))
        elif isinstance(event, self.stack.stream_reset) and event.stream_id in self.pending:
            reason = f"stream reset by the server (code {event.error_code})"
            self.pending[event.stream_id].fail(ConnectionResetError(reason))
        for h3_event in self.h3.handle_event(event):
            self._h3_event(h3_event)

    def _h3_event(self, event: Any) -> None:
        p = self.pending.get(getattr(event, "stream_id", -1))
        if p is None:
            return
        p.ex.t_last = self.clock()
        if isinstance(event, self.stack.headers_received):
            headers = dict(event.headers)
            p.ex.status = int(headers[b":status"])
            p.ex.cache_control = headers.get(b"cache-control", b"").decode("latin-1")
            with contextlib.suppress(ValueError):
                p.ex.length = int(headers.get(b"content-length", b"0"))
            p.ex.t_first = p.ex.t_last
        elif isinstance(event, self.stack.data_received):
            p.ex.add(event.data)
        if getattr(event, "stream_ended", False):
            p.finish()

    async def handshake(self, timeout: float) -> None:
        """Send the Initial and wait for the handshake (``connect`` did neither)."""
        self.transmit()
        try:
            async with asyncio.timeout(timeout):
                await self.wait_connected()
        except TimeoutError:
            # the stack fails its own shielded waiter on close; nobody would read it
            waiter = self._connected_waiter
            if waiter is not None:
                waiter.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise TimeoutError(f"no QUIC handshake within {timeout} s") from None

    def request(self, authority: str, path: str) -> _Pending:
        stream_id = self._quic.get_next_available_stream_id()
        p = self.pending[stream_id] = _Pending(_Exchange(path), stream_id=stream_id)
        headers = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
        ]
        self.h3.send_headers(stream_id, headers, end_stream=True)
        p.ex.t_request = self.clock()
        self.transmit()
        p.done.add_done_callback(lambda _f: self.pending.pop(stream_id, None))
        return p

    def cancel(self, p: _Pending) -> None:
        """Cancel an unfinished request and only it, as Chromium's ``QuicHttpStream::Close`` resets its stream
        (QUIC_STREAM_CANCELLED; on the wire STOP_SENDING with H3_REQUEST_CANCELLED): the connection stays."""
        if p.done.done():
            return
        self.pending.pop(p.stream_id, None)
        p.done.cancel()
        with contextlib.suppress(Exception):  # the stream may be gone already
            self._quic.stop_stream(p.stream_id, H3_REQUEST_CANCELLED)
            self.transmit()


@functools.cache
def _protocol_class(stack: QuicStack) -> type[_H3Client]:
    return type(f"H3ClientProtocol_{stack.name}", (_H3Client, stack.protocol), {})


class H3Fetcher(Fetcher):
    """HTTP/3 over one QUIC connection (``opts.h3_client``'s stack); one stream per request."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        opts: FetcherOptions,
        protocol: _H3Client,
        stack: contextlib.AsyncExitStack,
    ) -> None:
        self.host, self.port, self.opts = host, port, opts
        self.protocol, self._stack = protocol, stack
        self.authority = url_of("h3", host, port, "").split("//", 1)[1]

    @classmethod
    async def open(cls, host: str, port: int, opts: FetcherOptions) -> H3Fetcher:
        quic = quic_stack(opts.h3_client)
        config = quic.configuration(is_client=True, alpn_protocols=list(quic.alpn), max_data=opts.window,
                                    max_stream_data=opts.window, server_name=opts.server_name or host,
                                    **quic.options(opts))  # fmt: skip
        if opts.insecure:
            config.verify_mode = ssl.CERT_NONE
        elif opts.ca is not None:
            config.load_verify_locations(cafile=str(opts.ca))
        stack = contextlib.AsyncExitStack()
        if opts.recovery_log is not None:  # the receiver's side: RTT samples, its ACK-only cwnd, losses of requests
            sink = recovery.RecoverySink(opts.recovery_log, side="client", t0=time.monotonic() - opts.clock())
            stack.callback(sink.close)
            config.quic_logger = recovery.recovery_logger(sink)
        factory = functools.partial(_protocol_class(quic), clock=opts.clock, stack=quic)
        connecting = quic.connect(host, port, configuration=config, create_protocol=factory, wait_connected=False)
        with mapped_errors("h3", url_of("h3", host, port, "/")):
            try:
                protocol = await stack.enter_async_context(connecting)
                assert isinstance(protocol, _H3Client)
                if opts.recovery_log is not None:
                    recovery.bind(protocol._quic)  # pto_count from the connection's recovery
                set_udp_buffers(protocol._transport, opts.udp_buffer)  # type: ignore[attr-defined]
                await protocol.handshake(opts.connect_timeout)
            except BaseException:
                await stack.aclose()
                raise
        return cls(host=host, port=port, opts=opts, protocol=protocol, stack=stack)

    @property
    def implementation(self) -> str:
        """``name version`` of the QUIC stack, for the run's records."""
        quic = self.protocol.stack
        return f"{quic.name} {quic.version}"

    async def fetch(self, stream: str, path: str) -> FetchResult:
        with mapped_errors("h3", url_of("h3", self.host, self.port, path)):
            p = self.protocol.request(self.authority, path)
            try:
                await _wait_idle(p, self.opts.idle_timeout)
            except BaseException:
                self.protocol.cancel(p)
                raise
            return p.ex.result("h3")

    async def ping(self) -> None:
        """Send a QUIC PING and wait for its ACK (the race transport's QUIC RTT probe)."""
        await self.protocol.ping()  # type: ignore[attr-defined]

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._stack.aclose()


# --------------------------------------------------------------------------- CLI


def result_row(result: FetchResult) -> dict[str, Any]:
    """``result`` as a JSON-able row: sizes and times, the kept head by its length and SHA-256, no body."""
    row = dataclasses.asdict(result)
    row.pop("body", None)
    head = row.pop("head", b"")
    return {**row, "head_bytes": len(head), "head_sha256": hashlib.sha256(head).hexdigest()}


async def _run_stream(fetcher: Fetcher, stream: str, paths: list[str]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        rows.append({"stream": stream, **result_row(await fetcher.fetch(stream, path))})
        print(json.dumps(rows[-1]), flush=True)
    return rows


async def run_cli(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic() if args.t0 is None else args.t0
    fetcher = await open_fetcher(
        args.kind,
        args.host,
        args.port,
        clock=lambda: time.monotonic() - t0,
        ca=args.ca,
        insecure=args.insecure,
        quic_max_datagram=args.quic_max_datagram,
        h3_client=args.h3_client,
    )
    plan: dict[str, list[str]] = {}
    for item in args.get:
        stream, _, path = item.partition("=")
        plan.setdefault(stream, []).extend([path] * args.repeat)
    try:
        jobs = [_run_stream(fetcher, s, paths) for s, paths in plan.items()]
        results = await asyncio.gather(*jobs)
        summary: dict[str, Any] = {"results": sum(len(r) for r in results)}
        if isinstance(fetcher, Http1Fetcher):
            summary["mptcp_active"] = fetcher.mptcp_active()
        if args.kind == "h3":
            summary["h3_client"] = fetcher.implementation  # type: ignore[attr-defined]
        return summary
    finally:
        await fetcher.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nest_experiments.dash.http.transports")
    p.add_argument("--kind", choices=KINDS, required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument(
        "--get",
        action="append",
        required=True,
        metavar="STREAM=PATH",
        help="fetch PATH on STREAM; streams run concurrently, paths in order",
    )
    p.add_argument("--repeat", type=int, default=1, help="fetch each PATH this many times")
    p.add_argument("--t0", type=float, help="time.monotonic() at the run's t = 0")
    p.add_argument("--ca", type=Path, help="CA certificate (PEM) for h2/h3")
    p.add_argument("--insecure", action="store_true", help="do not verify the certificate")
    p.add_argument("--quic-max-datagram", type=int, default=1200, help="QUIC UDP payload, bytes (aioquic)")
    p.add_argument("--h3-client", choices=H3_CLIENTS, default=H3_CLIENTS[0], help="QUIC stack of h3")
    args = p.parse_args(argv)
    try:
        summary = asyncio.run(run_cli(args))
    except NestExpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"summary": summary}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
