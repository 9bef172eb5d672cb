"""DASH origin server: one asyncio process, one directory, four transports.

- ``tcp``: HTTP/1.1 (keep-alive, ``Content-Length``) on a TCP listener;
- ``mptcp``: the same on an ``IPPROTO_MPTCP`` listener;
- ``h2``: HTTP/2 over TLS, ALPN ``h2`` (``http/1.1`` is also accepted there,
  logged as transport ``https``);
- ``h3``: HTTP/3 over QUIC (aioquic), flow-control windows raised.

TCP-based responses advertise HTTP/3 with ``alt-svc: h3=":PORT"`` when an h3
port is served; every 200 says ``cache-control: max-age=86400`` (media never
change: :mod:`~nest_experiments.dash.http.httpcache`). The certificate is a leaf signed by a CA, both generated at
start (:mod:`.certs`) into a temp dir that is removed at exit; ``--ca-out``
gets the CA. Every response is one row of the access log (:data:`LOG_FIELDS`);
times are ``time.monotonic() - t0`` so that they share the run clock with the
client's log (CLOCK_MONOTONIC is one clock for all namespaces of a kernel).
``t_last_byte_sent`` is when the last body byte left the process (handed to
the kernel for TCP, put in a datagram for QUIC).

    python -m nest_experiments.dash.origin.server --root DIR --bind ADDR \
        [--port-tcp N] [--port-mptcp N] [--port-h2 N] [--port-h3 N] \
        [--access-log FILE] [--t0 FLOAT] [--ca-out FILE] [--quic-cc reno|cubic] [--quic-log FILE]
        [--quic-max-datagram BYTES]

Port 0 picks a free port. When listening, one JSON line
``{"ready": true, "ports": {...}}`` is printed on stdout. SIGTERM/SIGINT stop
the server cleanly: the log is completed (written as ``FILE.partial`` and
renamed at exit) and the certificate dir removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import email.utils
import functools
import json
import mimetypes
import os
import signal
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from aioquic.asyncio import QuicConnectionProtocol
from aioquic.asyncio import serve as quic_serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ProtocolNegotiated, QuicEvent
from aioquic.quic.stream import QuicStream

from nest_experiments.dash.http import recovery
from nest_experiments.dash.http.http1 import (
    MAX_HEAD,
    HttpError,
    format_response_head,
    parse_request_head,
)
from nest_experiments.dash.http.httpcache import MEDIA_CACHE_CONTROL
from nest_experiments.dash.http.transports import UDP_BUFFER, set_udp_buffers
from nest_experiments.dash.origin import certs
from nest_experiments.errors import KernelFeatureError, NestExpError, RunError
from nest_experiments.rundir import write_bytes_atomic
from nest_experiments.rundir.rows import ACCESS_LOG_FIELDS as LOG_FIELDS

CHUNK = 256 * 1024  # file read size
TCP_HIGH_WATER = 1024 * 1024  # asyncio write buffer before drain() blocks
HANDOVER_POLL = (0.001, 0.02)  # s: shortest and longest wait between checks of a tail still in asyncio
QUIC_WINDOW = 64 * 1024 * 1024  # max_data / max_stream_data (aioquic default: 1 MB)
QUIC_SEND_BUFFER = 4 * 1024 * 1024  # unacknowledged bytes per QUIC stream before we stop feeding


# --------------------------------------------------------------------------- content


@dataclass(frozen=True)
class Resource:
    status: int
    path: Path | None  # file to send; None for an error
    size: int
    content_type: str


def resolve(root: Path, target: str) -> Resource:
    """Map a request target to a file under ``root`` (resolved; no escape, no listing)."""
    rel = unquote(target.split("?", 1)[0]).lstrip("/")
    try:
        path = (root / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        return _error(404)
    if not path.is_relative_to(root) or not path.is_file():
        return _error(404)
    return Resource(200, path, path.stat().st_size, _content_type(path))


def _error(status: int) -> Resource:
    return Resource(status, None, 0, "text/plain")


def _content_type(path: Path) -> str:
    if path.suffix == ".mpd":
        return "application/dash+xml"
    if path.suffix in (".m4s", ".mp4", ".m4v"):
        return "video/mp4"
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def read_chunks(path: Path | None) -> Iterator[bytes]:
    if path is None:
        return
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


# --------------------------------------------------------------------------- shared state


class AccessLog:
    """CSV access log written to ``FILE.partial``, renamed to ``FILE`` on close."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._fh: IO[str] | None = None
        if path is not None:
            self._fh = open(f"{path}.partial", "w", newline="")  # noqa: SIM115
            self._writer = csv.writer(self._fh)
            self._writer.writerow(LOG_FIELDS)

    def write(
        self,
        *,
        t: tuple[float, float, float],
        transport: str,
        path: str,
        status: int,
        nbytes: int,
        conn_id: str,
    ) -> None:
        if self._fh is None:
            return
        times = [f"{x:.6f}" for x in t]
        self._writer.writerow([*times, transport, path, status, nbytes, conn_id])
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None and self._path is not None:
            self._fh.close()
            self._fh = None
            os.replace(f"{self._path}.partial", self._path)


@dataclass(kw_only=True)
class Context:
    root: Path
    log: AccessLog
    now: Callable[[], float]
    alt_svc: str | None = None
    _counter: dict[str, int] = field(default_factory=dict)

    def conn_id(self, transport: str) -> str:
        self._counter[transport] = self._counter.get(transport, 0) + 1
        return f"{transport}-{self._counter[transport]}"

    def base_headers(self, res: Resource, nbytes: int) -> dict[str, str]:
        headers = {
            "server": "nest_experiments",
            "date": email.utils.formatdate(usegmt=True),
            "content-type": res.content_type,
            "content-length": str(nbytes),
        }
        if res.status == 200:  # media never change: a browser may reuse them (dash.httpcache)
            headers["cache-control"] = MEDIA_CACHE_CONTROL
        if self.alt_svc:
            headers["alt-svc"] = self.alt_svc
        return headers


# --------------------------------------------------------------------------- HTTP/1.1


class Outbox:
    """A connection's writer that knows when the bytes given to it have left the process.

    ``write`` counts the bytes written; ``handed_over(mark)`` waits until every
    byte up to ``mark`` (a value of ``written``) has been handed to the kernel,
    however many bytes other responses write after it. The transport's write
    limits are the connection's, set once: nothing here changes them.

    Why not ``set_write_buffer_limits(high=0)`` + ``drain()``: asyncio's TLS
    transport (CPython 3.11 ``sslproto``) pauses the writer when its size is
    ``>=`` the high-water mark, so ``high=0`` pauses an *empty* buffer, and only
    the next TLS record in either direction resumes it: the last response on an
    h2 connection was logged when the next request came or the connection
    closed. That size also leaves out the socket transport beneath TLS, and
    concurrent streams reset each other's limits.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.written = 0

    def write(self, data: bytes) -> None:
        self.writer.write(data)
        self.written += len(data)

    def pending(self) -> int:
        """Bytes written and not yet handed to the kernel (TLS: ciphertext counted, a slight overestimate)."""
        transport = self.writer.transport
        size = transport.get_write_buffer_size()
        # the socket transport under asyncio's TLS transport (3.11 sslproto internals)
        raw = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None)
        return size + (raw.get_write_buffer_size() if raw is not None else 0)

    def behind(self, mark: int) -> int:
        """How many of the first ``mark`` bytes are still in the process."""
        return mark - (self.written - self.pending())

    async def handed_over(self, mark: int) -> None:
        """Wait until the first ``mark`` bytes have left the process (or the connection closes).

        asyncio has no callback for "this byte left", so a tail still buffered is
        polled, every ``HANDOVER_POLL[0]`` s near its end: the wait is predicted
        from the drain rate seen so far and halved, up to ``HANDOVER_POLL[1]``.
        """
        loop = asyncio.get_running_loop()
        left, t = self.behind(mark), loop.time()
        delay = HANDOVER_POLL[0]
        while left > 0 and not self.writer.is_closing():
            await asyncio.sleep(delay)
            now, was, left = loop.time(), left, self.behind(mark)
            rate = (was - left) / max(now - t, 1e-6)
            t = now
            guess = left / rate / 2 if rate > 0 else delay * 2
            delay = min(max(guess, HANDOVER_POLL[0]), HANDOVER_POLL[1])


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise HttpError(400, "connection closed inside a request head") from exc
        return None
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, "request head too large") from exc


async def _respond_http1(
    ctx: Context,
    out: Outbox,
    *,
    res: Resource,
    head_only: bool,
    keep_alive: bool,
) -> tuple[float, int]:
    headers = ctx.base_headers(res, res.size)
    headers["connection"] = "keep-alive" if keep_alive else "close"
    t_first = ctx.now()
    out.write(format_response_head(res.status, headers))
    sent = 0
    for chunk in [] if head_only else read_chunks(res.path):
        out.write(chunk)
        sent += len(chunk)
        await out.writer.drain()
        await asyncio.sleep(0)  # one process serves every connection: take turns
    await out.handed_over(out.written)
    return t_first, sent


async def _http1_exchange(
    ctx: Context,
    reader: asyncio.StreamReader,
    out: Outbox,
    transport: str,
    conn_id: str,
) -> bool:
    """Serve one request; return whether the connection stays open."""
    try:
        head = await _read_head(reader)
        if head is None:
            return False
        req = parse_request_head(head)
        res, target, keep = resolve(ctx.root, req.target), req.target, req.keep_alive
        head_only = req.method == "HEAD"
    except HttpError as exc:
        res, target, keep, head_only = _error(exc.status), "", False, False
    t_arrival = ctx.now()
    t_first, sent = await _respond_http1(ctx, out, res=res, head_only=head_only, keep_alive=keep)
    ctx.log.write(
        t=(t_arrival, t_first, ctx.now()),
        transport=transport,
        path=target,
        status=res.status,
        nbytes=sent,
        conn_id=conn_id,
    )
    return keep


async def serve_http1(
    ctx: Context,
    transport: str,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    conn_id = ctx.conn_id(transport)
    writer.transport.set_write_buffer_limits(high=TCP_HIGH_WATER)  # type: ignore[attr-defined]
    try:
        while await _http1_exchange(ctx, reader, Outbox(writer), transport, conn_id):
            pass
    except (ConnectionError, TimeoutError):
        pass
    finally:
        writer.close()


# --------------------------------------------------------------------------- HTTP/2


def _str_headers(headers: Iterable[tuple[bytes | str, bytes | str]]) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in headers}


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


class H2Session:
    """One HTTP/2 connection: a reader loop plus one sender task per stream."""

    def __init__(self, ctx: Context, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.ctx, self.reader, self.writer = ctx, reader, writer
        self.out = Outbox(writer)
        writer.transport.set_write_buffer_limits(high=TCP_HIGH_WATER)  # type: ignore[attr-defined]
        self.conn_id = ctx.conn_id("h2")
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.window_open = asyncio.Event()
        self.tasks: dict[int, asyncio.Task[None]] = {}

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.out.write(data)

    async def run(self) -> None:
        self.conn.initiate_connection()
        self.flush()
        try:
            while data := await self.reader.read(65536):
                for event in self.conn.receive_data(data):
                    self.handle(event)
                self.flush()
        except (ConnectionError, h2.exceptions.ProtocolError):
            pass
        finally:
            self.writer.close()  # unfinished responses fail; finished ones get logged
            self.window_open.set()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    def handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self.start_response(event.stream_id, _str_headers(event.headers or []))
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self.window_open.set()
        elif isinstance(event, h2.events.StreamReset):
            self.cancel(event.stream_id)

    def start_response(self, stream_id: int, headers: dict[str, str]) -> None:
        task = asyncio.create_task(self.respond(stream_id, headers))
        self.tasks[stream_id] = task
        task.add_done_callback(lambda _t: self.tasks.pop(stream_id, None))

    def cancel(self, stream_id: int) -> None:
        task = self.tasks.get(stream_id)
        if task is not None:
            task.cancel()

    async def respond(self, stream_id: int, headers: dict[str, str]) -> None:
        with contextlib.suppress(ConnectionError, h2.exceptions.H2Error):
            await self._respond(stream_id, headers)

    async def _respond(self, stream_id: int, headers: dict[str, str]) -> None:
        t_arrival = self.ctx.now()
        target = headers.get(":path", "")
        method = headers.get(":method", "")
        res = resolve(self.ctx.root, target) if method in ("GET", "HEAD") else _error(405)
        out = self.ctx.base_headers(res, res.size)
        self.conn.send_headers(stream_id, [(":status", str(res.status)), *out.items()])
        t_first = self.ctx.now()
        self.flush()
        sent = 0 if method == "HEAD" else await self.send_body(stream_id, res.path)
        self.conn.end_stream(stream_id)
        self.flush()
        await self.out.handed_over(self.out.written)  # this stream's END_STREAM, not later frames
        self.ctx.log.write(
            t=(t_arrival, t_first, self.ctx.now()),
            transport="h2",
            path=target,
            status=res.status,
            nbytes=sent,
            conn_id=self.conn_id,
        )

    async def send_body(self, stream_id: int, path: Path | None) -> int:
        sent = 0
        for chunk in read_chunks(path):
            view = memoryview(chunk)
            while view:
                n = await self.wait_window(stream_id, len(view))
                self.conn.send_data(stream_id, view[:n].tobytes())
                self.flush()
                view = view[n:]
                sent += n
                await self.writer.drain()
                await asyncio.sleep(0)  # let the other streams' senders interleave
        return sent

    async def wait_window(self, stream_id: int, want: int) -> int:
        while True:
            window = self.conn.local_flow_control_window(stream_id)
            n = min(want, window, self.conn.max_outbound_frame_size)
            if n > 0:
                return n
            if self.writer.is_closing():
                raise ConnectionResetError("connection closed while waiting for a window")
            self.window_open.clear()
            await self.window_open.wait()


async def serve_tls(ctx: Context, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    ssl_obj = writer.get_extra_info("ssl_object")
    if ssl_obj is not None and ssl_obj.selected_alpn_protocol() == "h2":
        await H2Session(ctx, reader, writer).run()
    else:
        await serve_http1(ctx, "https", reader, writer)


# --------------------------------------------------------------------------- HTTP/3


@dataclass
class _H3Out:
    stream_id: int
    target: str
    status: int
    chunks: Iterator[bytes]
    t_arrival: float
    t_first: float
    sent: int = 0
    fed_all: bool = False


class H3ServerProtocol(QuicConnectionProtocol):
    """HTTP/3 responses fed into aioquic as acknowledgements free send buffer."""

    def __init__(self, *args: Any, ctx: Context, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ctx = ctx
        self.conn_id = ctx.conn_id("h3")
        recovery.bind(self._quic, self.conn_id)
        self.h3: H3Connection | None = None
        self.outs: dict[int, _H3Out] = {}

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
            self.h3 = H3Connection(self._quic)
        if self.h3 is not None:
            for h3_event in self.h3.handle_event(event):
                self.h3_event_received(h3_event)

    def h3_event_received(self, event: H3Event) -> None:
        if isinstance(event, HeadersReceived) and self.h3 is not None:
            headers = {k.decode(): v.decode() for k, v in event.headers}
            t_arrival = self.ctx.now()
            target, method = headers.get(":path", ""), headers.get(":method", "")
            res = resolve(self.ctx.root, target) if method in ("GET", "HEAD") else _error(405)
            out = self.ctx.base_headers(res, res.size)
            head = [(b":status", str(res.status).encode())]
            head += [(k.encode(), v.encode()) for k, v in out.items()]
            self.h3.send_headers(event.stream_id, head)
            chunks = read_chunks(res.path if method == "GET" else None)
            self.outs[event.stream_id] = _H3Out(event.stream_id, target, res.status, chunks, t_arrival, self.ctx.now())

    def transmit(self) -> None:
        self.feed()
        super().transmit()
        self.reap()

    def feed(self) -> None:
        if self.h3 is None:  # transmit() runs during the handshake too, before ALPN picked h3: nothing to feed yet
            return
        for out in self.outs.values():
            stream = self._quic._streams.get(out.stream_id)
            while stream is not None and not out.fed_all and _unacked(stream) < QUIC_SEND_BUFFER:
                chunk = next(out.chunks, None)
                self.h3.send_data(out.stream_id, chunk or b"", end_stream=chunk is None)
                out.fed_all = chunk is None
                out.sent += len(chunk or b"")

    def reap(self) -> None:
        done = [s for s, o in self.outs.items() if o.fed_all and self._all_sent(s)]
        for sid in done:
            out = self.outs.pop(sid)
            self.ctx.log.write(
                t=(out.t_arrival, out.t_first, self.ctx.now()),
                transport="h3",
                path=out.target,
                status=out.status,
                nbytes=out.sent,
                conn_id=self.conn_id,
            )

    def _all_sent(self, stream_id: int) -> bool:
        """Every byte and the FIN went out at least once (aioquic internals, pinned 1.7.2)."""
        stream = self._quic._streams.get(stream_id)
        if stream is None:  # finished and forgotten: everything was acknowledged
            return True
        sender = stream.sender
        return len(sender._pending) == 0 and not sender._pending_eof and sender._buffer_fin is not None


def _unacked(stream: QuicStream) -> int:
    """Bytes written to a QUIC stream and not yet acknowledged."""
    return stream.sender._buffer_stop - stream.sender._buffer_start


# --------------------------------------------------------------------------- listeners


def mptcp_listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_MPTCP)
    except OSError as exc:
        raise KernelFeatureError(
            f"cannot create an MPTCP socket (kernel without MPTCP or net.mptcp.enabled=0): {exc}"
        ) from exc
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


def quic_config(cert: Path, key: Path, cfg: ServerConfig, recovery_sink: recovery.RecoverySink | None = None
                ) -> QuicConfiguration:
    config = QuicConfiguration(
        is_client=False,
        alpn_protocols=H3_ALPN,
        max_data=QUIC_WINDOW,
        max_stream_data=QUIC_WINDOW,
        congestion_control_algorithm=cfg.quic_cc,
        max_datagram_size=cfg.quic_max_datagram,
        quic_logger=None if recovery_sink is None else recovery.recovery_logger(recovery_sink),
    )
    config.load_cert_chain(cert, key)
    return config


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    root: Path
    bind: str
    port_tcp: int | None = None
    port_mptcp: int | None = None
    port_h2: int | None = None
    port_h3: int | None = None
    access_log: Path | None = None
    t0: float | None = None
    ca_out: Path | None = None
    cert_dir: Path | None = None  # where the certificates go (the caller removes it); None: a temp folder of ours
    quic_cc: str = "reno"
    quic_max_datagram: int = 1200  # aioquic's default (RFC 9000 minimum); Chromium: 1350
    quic_log: Path | None = None  # each h3 connection's recovery (dash.http.recovery), the sender's side


async def _start_h3(cfg: ServerConfig, ctx: Context, cert: Path, key: Path,
                    recovery_sink: recovery.RecoverySink | None) -> tuple[Any, int]:
    assert cfg.port_h3 is not None
    server = await quic_serve(
        cfg.bind,
        cfg.port_h3,
        configuration=quic_config(cert, key, cfg, recovery_sink),
        create_protocol=functools.partial(H3ServerProtocol, ctx=ctx),
    )
    assert server._transport is not None
    set_udp_buffers(server._transport, UDP_BUFFER)
    port = server._transport.get_extra_info("sockname")[1]
    ctx.alt_svc = f'h3=":{port}"; ma=86400'
    return server, port


async def _start_tcp(cfg: ServerConfig, ctx: Context, cert: Path, key: Path) -> dict[str, Any]:
    servers: dict[str, Any] = {}
    if cfg.port_tcp is not None:
        handler = functools.partial(serve_http1, ctx, "tcp")
        servers["tcp"] = await asyncio.start_server(handler, cfg.bind, cfg.port_tcp, limit=MAX_HEAD)
    if cfg.port_mptcp is not None:
        handler = functools.partial(serve_http1, ctx, "mptcp")
        sock = mptcp_listener(cfg.bind, cfg.port_mptcp)
        servers["mptcp"] = await asyncio.start_server(handler, sock=sock, limit=MAX_HEAD)
    if cfg.port_h2 is not None:
        handler = functools.partial(serve_tls, ctx)
        servers["h2"] = await asyncio.start_server(
            handler, cfg.bind, cfg.port_h2, ssl=tls_context(cert, key), limit=MAX_HEAD
        )
    return servers


async def serve(cfg: ServerConfig, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set; prints the ready line once listening."""
    t0 = time.monotonic() if cfg.t0 is None else cfg.t0
    ctx = Context(
        root=cfg.root.resolve(),
        log=AccessLog(cfg.access_log),
        now=lambda: time.monotonic() - t0,
    )
    with contextlib.ExitStack() as stack:
        tmp = cfg.cert_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nxt-certs-")))
        stack.callback(ctx.log.close)
        files = certs.write_certs(tmp, [cfg.bind])
        cert, key = files.chain, files.key
        if cfg.ca_out is not None:
            write_bytes_atomic(cfg.ca_out, files.ca.read_bytes())
        ports: dict[str, int] = {}
        if cfg.port_h3 is not None:
            sink = None
            if cfg.quic_log is not None:
                sink = recovery.RecoverySink(cfg.quic_log, side="server", t0=t0)
                stack.callback(sink.close)  # after the server closed (callbacks run last-in first-out)
            quic_server, ports["h3"] = await _start_h3(cfg, ctx, cert, key, sink)
            stack.callback(quic_server.close)
        servers = await _start_tcp(cfg, ctx, cert, key)
        for name, server in servers.items():
            stack.callback(server.close)
            ports[name] = server.sockets[0].getsockname()[1]
        print(json.dumps({"ready": True, "pid": os.getpid(), "ports": ports}), flush=True)
        await stop.wait()


def parse_args(argv: list[str] | None = None) -> ServerConfig:
    p = argparse.ArgumentParser(
        prog="python -m nest_experiments.dash.origin.server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--root", type=Path, required=True, help="directory to serve")
    p.add_argument("--bind", default="0.0.0.0", help="address to listen on")
    for name in ("tcp", "mptcp", "h2", "h3"):
        p.add_argument(f"--port-{name}", type=int, help=f"{name} port (0 = any free port)")
    p.add_argument("--access-log", type=Path, help="CSV access log")
    p.add_argument("--t0", type=float, help="time.monotonic() at the run's t = 0")
    p.add_argument("--ca-out", type=Path, help="write the CA certificate (PEM) that clients trust here")
    p.add_argument("--cert-dir", type=Path, help="write the certificates into this existing folder (default: a "
                   "temporary folder removed at exit; a run passes one of its own, removed with the run even if "
                   "the server is killed)")
    p.add_argument(
        "--quic-cc",
        default="reno",
        choices=("reno", "cubic"),
        help="QUIC congestion control",
    )
    p.add_argument("--quic-max-datagram", type=int, default=1200, help="QUIC UDP payload, bytes")
    p.add_argument("--quic-log", type=Path, help="CSV of each h3 connection's recovery (cwnd, RTT, losses)")
    a = p.parse_args(argv)
    if not a.root.is_dir():
        p.error(f"--root {a.root}: not a directory")
    return ServerConfig(
        root=a.root,
        bind=a.bind,
        port_tcp=a.port_tcp,
        port_mptcp=a.port_mptcp,
        port_h2=a.port_h2,
        port_h3=a.port_h3,
        access_log=a.access_log,
        t0=a.t0,
        ca_out=a.ca_out,
        cert_dir=a.cert_dir,
        quic_cc=a.quic_cc,
        quic_max_datagram=a.quic_max_datagram,
        quic_log=a.quic_log,
    )


async def _main(cfg: ServerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(cfg, stop)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        asyncio.run(_main(cfg))
    except (NestExpError, OSError) as exc:
        err = exc if isinstance(exc, NestExpError) else RunError(f"dash server: {exc}")
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
