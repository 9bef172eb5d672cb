"""The ``race`` transport: QUIC/TCP connection racing to one origin (the I/O side of :mod:`~nest_experiments.dash.core.racing`).

TCP is HTTP/2 over TLS (what a browser's main job opens to an https origin;
one connection, requests multiplexed); QUIC is HTTP/3 on the port an
``alt-svc: h3=":PORT"`` header of a TCP response advertised. A
:class:`~nest_experiments.dash.core.racing.Racer` decides; this module opens,
races, closes and probes connections as it says, and tells it what
happened. Every result's ``transport`` is the protocol that carried it:
``tcp`` or ``h3``. A request that fails is asked again: a QUIC request the
player cancelled on the same QUIC connection (where the policy keeps
QUIC), one that failed on QUIC before its response headers over TCP
(``chromium``: Chromium's retry without alt-svc), any other over whatever
the policy picks next (a new race if no connection is left); the player
never sees a failure unless the TCP side itself fails three times in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

from nest_experiments.dash.core.fetch import ABANDONED, Fetcher, FetchResult
from nest_experiments.dash.core.racing import QuicSample, QuicWatch, Racer, h3_port
from nest_experiments.dash.http.transports import FetcherOptions, H2Fetcher, H3Fetcher
from nest_experiments.errors import RunError

LABEL = {"tcp": "tcp", "quic": "h3"}  # the segments log's ``transport`` per protocol
TCP_ATTEMPTS = 3  # consecutive TCP failures before a request fails
QUIC_RETRY_PAUSE_S = 1.0  # quic_only: pause between QUIC attempts that failed at once
WATCH_S = 0.25  # how often a QUIC request's connection is checked (detectors, player timeouts)


class _Cancelled(Exception):
    """The player cancelled a QUIC request (a player timeout): its stream was reset, the connection kept."""


class _QuicFailed(Exception):
    """A QUIC request failed: its stream reset by the server, or its connection closed."""

    def __init__(self, reason: str, *, headers: bool, cause: str) -> None:
        super().__init__(reason)
        self.headers = headers  # had its response headers come?
        self.cause = cause  # reset | error | closed (racing.Racer.on_stream_error)


@dataclass
class _Conn:
    protocol: str  # quic | tcp
    conn_id: str
    fetcher: H2Fetcher | H3Fetcher
    last_used: float
    inflight: int = 0
    h3: Any = None  # QUIC: the connection's protocol (requests, cancels, what it received)
    watch: QuicWatch | None = None  # QUIC: QUICHE's idle and blackhole detectors
    lost: str = ""  # why it closed under requests ("": open)


def quic_sample(h3: Any) -> QuicSample:
    """What QUICHE's detectors look at, read off a QUIC connection (:class:`QuicSample`).

    aioquic: its loss recovery (in flight, largest acknowledged packet per
    space, srtt, rttvar). qh3: its core's bytes in flight, srtt and
    outstanding packets: how many left that list (acknowledged, or lost
    because later ones were) counts the ACKs of new packets (its ACK-only
    packets stay listed long after); its rttvar is not exposed: srtt / 2
    (RFC 9002's value after the first sample). Anything else: nothing in
    flight (the idle detector only).
    """
    quic = getattr(h3, "_quic", None)
    loss, core = getattr(quic, "_loss", None), getattr(quic, "_core", None)
    if loss is not None:
        flying = sum(1 for space in loss.spaces for pkt in space.sent_packets.values() if pkt.in_flight)
        return QuicSample(last_rx=h3.last_rx, bytes_in_flight=loss.bytes_in_flight,
                          acked=sum(space.largest_acked_packet for space in loss.spaces),
                          srtt_s=loss._rtt_smoothed if loss._rtt_initialized else None, rttvar_s=loss._rtt_variance,
                          multiple_in_flight=flying > 1)
    if core is not None:
        outstanding = [pn for pn, *_ in core.outstanding_application_packets]
        srtt = core.smoothed_rtt
        gone = max(outstanding) + 1 - len(outstanding) if outstanding else -1  # packet numbers only grow
        return QuicSample(last_rx=h3.last_rx, bytes_in_flight=core.bytes_in_flight, acked=gone, srtt_s=srtt,
                          rttvar_s=(srtt or 0.0) / 2, multiple_in_flight=core.bytes_in_flight > 1500)
    return QuicSample(last_rx=h3.last_rx, bytes_in_flight=0, acked=0)


class RaceFetcher(Fetcher):
    """Fetches over whichever of QUIC and TCP the racer's policy picks."""

    def __init__(self, *, host: str, port: int, racer: Racer, opts: FetcherOptions) -> None:
        self.host, self.tcp_port, self.racer, self.opts = host, port, racer, opts
        self.quic_opts = dataclasses.replace(opts, connect_timeout=racer.params.quic_handshake_timeout_s)
        self.quic_port: int | None = None
        self.conns: dict[str, _Conn] = {}
        self.serving = ""  # the protocol of the last request
        self._jobs: dict[str, asyncio.Future[_Conn]] = {}
        self._ids = itertools.count(1)
        self._pings = itertools.count(1)  # keep-alive PING ids
        self._lock = asyncio.Lock()
        self._probe_task: asyncio.Task[None] | None = None
        self._probe_conns: dict[str, H2Fetcher | H3Fetcher] = {}
        self._tcp_failures, self._tcp_error = 0, ""  # consecutive failed TCP connection jobs

    # ------------------------------------------------------------ requests

    async def fetch(self, stream: str, path: str) -> FetchResult:
        tcp_failures = 0
        while True:
            conn = await self._acquire()
            try:
                served = await self._attempt(conn, stream, path)
            except RunError:  # over TCP
                tcp_failures += 1
                if tcp_failures >= TCP_ATTEMPTS:
                    raise
                continue
            if served is not None:
                conn, result = served
                self._learn(result)
                return dataclasses.replace(result, transport=LABEL[conn.protocol])

    async def _attempt(self, conn: _Conn, stream: str, path: str) -> tuple[_Conn, FetchResult] | None:
        """One try of a request on ``conn`` (and its TCP retry); None: ask again; RunError: TCP failed."""
        conn.inflight += 1
        try:
            if conn.protocol == "quic":
                return conn, await self._fetch_quic(conn, path)
            try:
                return conn, await conn.fetcher.fetch(stream, path)
            except RunError as exc:
                self._lost(conn, str(exc))
                raise
        except _Cancelled as exc:  # asked again: on the same QUIC connection where the policy keeps QUIC
            self.racer.on_stream_cancelled(self.opts.clock(), conn.conn_id, str(exc))
            return None
        except asyncio.CancelledError as exc:  # the player abandoned it (dash.js's rule): its stream is reset
            if conn.protocol == "quic" and exc.args and exc.args[0] == ABANDONED:
                self.racer.on_stream_cancelled(self.opts.clock(), conn.conn_id, ABANDONED)
            raise
        except _QuicFailed as exc:
            if not self.racer.on_stream_error(self.opts.clock(), "quic", conn.conn_id, str(exc),
                                              headers=exc.headers, cause=exc.cause):
                return None  # asked again (a new race if its connection is gone)
            reason = str(exc)
        finally:
            conn.inflight -= 1
            conn.last_used = self.opts.clock()
        return await self._retry_over_tcp(stream, path, conn.conn_id, reason)

    async def _fetch_quic(self, conn: _Conn, path: str) -> FetchResult:
        """A request over QUIC, watched every ``WATCH_S``.

        - QUICHE's detectors on its connection (:class:`QuicWatch`: no packet
          received for ``idle_timeout_s``; no new ACK for 5 RTOs, with a PING
          after ``ping_timeout_s`` of silence so that something is in flight):
          either closes the connection, and every request on it fails
          (:class:`_QuicFailed`), with or without its headers;
        - the player's ``stream_timeout`` / ``request_timeout``: the request
          is cancelled, its stream reset (:class:`_Cancelled`), unless TCP may
          not carry it (``quic_only``, ``dynamic`` deciding so): then the
          stall is logged and it waits on.
        """
        clock, h3 = self.opts.clock, conn.h3
        p = h3.request(conn.fetcher.authority, path)
        t_start = stalled = clock()
        waited = False  # request_timeout passed and it waits on
        try:
            while True:
                await asyncio.wait({p.done}, timeout=WATCH_S)
                headers = p.ex.t_first is not None
                if p.done.done():
                    exc = p.done.exception()
                    if exc is None:
                        return p.ex.result("h3")
                    cause = "reset"
                    if h3.terminated:
                        self._close(conn, h3.terminated)
                        cause = "error" if h3.terminated_code else "closed"
                    raise _QuicFailed(f"h3 {self.host}:{self.quic_port}{path}: {exc}", headers=headers, cause=cause)
                now = clock()
                if not conn.lost:
                    self._watch(conn, now)
                if conn.lost:  # our detectors closed it
                    raise _QuicFailed(f"h3 {self.host}:{self.quic_port}{path}: {conn.lost}", headers=headers,
                                      cause="closed")
                why = self._player_timeout(p.ex.t_last, t_start, stalled, now, waited)
                if why and not self._keep_waiting(conn, why):
                    raise _Cancelled(f"h3 {self.host}:{self.quic_port}{path}: {why}")
                if why:
                    stalled, waited = now, waited or "request_timeout" in why
        finally:
            h3.cancel(p)  # QUIC_STREAM_CANCELLED for an unfinished request; nothing for a finished one

    def _player_timeout(self, t_last: float | None, t_start: float, stalled: float, now: float,
                        waited: bool) -> str:
        """Why the player would cancel the request now ("": it would not)."""
        p = self.racer.params
        if p.stream_timeout_s and now - max(t_last or t_start, stalled) >= p.stream_timeout_s:
            return f"without a byte for {p.stream_timeout_s:g} s (stream_timeout)"
        if p.request_timeout_s and not waited and now - t_start >= p.request_timeout_s:
            return f"not complete after {p.request_timeout_s:g} s (request_timeout)"
        return ""

    def _keep_waiting(self, conn: _Conn, why: str) -> bool:
        """A player timeout passed: cancel (False) unless TCP may not carry the request (``quic_only``,
        ``dynamic`` deciding so): asking again on the same connection would only queue the same bytes behind
        the ones on their way, so it waits on; under ``dynamic`` the stall is the event that makes it compare
        the probes again (it may now allow racing, and the request is cancelled)."""
        if self.racer.tcp_allowed():
            return False
        return self.racer.on_stream_stalled(self.opts.clock(), conn.conn_id, why)

    def _watch(self, conn: _Conn, now: float) -> None:
        """QUICHE's detectors on ``conn`` (a request is open): a keep-alive PING when due; closed when one fires."""
        assert conn.watch is not None
        sample = quic_sample(conn.h3)
        if conn.watch.ping_due(now, sample.last_rx):  # a PING frame, not waited for (QUICHE's keep-alive)
            with contextlib.suppress(Exception):
                conn.h3._quic.send_ping(next(self._pings))
                conn.h3.transmit()
        reason = conn.watch.check(now, sample)
        if reason:
            self._close(conn, reason)

    def _close(self, conn: _Conn, reason: str) -> None:
        """A QUIC connection closed under requests (a detector fired, the peer closed it): closed here, the
        racer told once (it marks nothing by itself)."""
        if conn.lost:
            return
        conn.lost = reason
        if self.conns.get(conn.protocol) is conn:
            del self.conns[conn.protocol]
        srtt = quic_sample(conn.h3).srtt_s
        asyncio.get_running_loop().create_task(conn.fetcher.close())
        self.racer.on_conn_closed(self.opts.clock(), conn.protocol, conn.conn_id, reason, srtt)

    async def _retry_over_tcp(self, stream: str, path: str, quic_id: str, reason: str) -> tuple[_Conn, FetchResult]:
        """Chromium's path B: the request failed on QUIC before its headers: asked again over TCP with QUIC
        off for it (HttpNetworkTransaction::HandleIOError, ResetConnectionAndRequestForResend); QUIC is marked
        broken once that retry completes (DoReadBodyComplete). Firefox: its stream was reset before the
        response, the transaction restarts on the direct route (nothing marked). RunError: the retry failed
        (nothing marked)."""
        async with self._lock:
            conn = await self._job("tcp")
            self._serve(conn)
        conn.inflight += 1
        try:
            result = await conn.fetcher.fetch(stream, path)
        except RunError as exc:
            self._lost(conn, str(exc))
            raise
        finally:
            conn.inflight -= 1
            conn.last_used = self.opts.clock()
        self.racer.on_tcp_retry_done(self.opts.clock(), quic_id, reason)
        return conn, result

    def _learn(self, result: FetchResult) -> None:
        port = h3_port(result.alt_svc) if result.alt_svc else None
        if port is not None and self.quic_port is None:
            self.quic_port = port
            self.racer.on_alt_svc(self.opts.clock(), result.alt_svc)
            if self.racer.validating(self.opts.clock()):
                self._job("quic")  # firefox: the alternative's validation, beside the requests (Racer.validating)
            self._start_probes()

    def _lost(self, conn: _Conn, reason: str) -> None:
        """A request failed on the TCP connection ``conn``: close it and tell the racer."""
        if self.conns.get(conn.protocol) is conn:
            del self.conns[conn.protocol]
        asyncio.get_running_loop().create_task(conn.fetcher.close())
        self.racer.on_stream_error(self.opts.clock(), conn.protocol, conn.conn_id, reason)

    async def _acquire(self) -> _Conn:
        """The connection for the next request: an open usable one, else the winner of a race."""
        async with self._lock:
            while True:
                now = self.opts.clock()
                self._close_idle(now)
                conn = self._usable(now)
                if conn is None:
                    conn = await self._race()
                if self._tcp_failures >= TCP_ATTEMPTS:
                    raise RunError(f"race {self.host}:{self.tcp_port}: {TCP_ATTEMPTS} TCP connections failed "
                                   f"(the last: {self._tcp_error})")
                if conn is not None:
                    self._serve(conn)
                    return conn

    def _serve(self, conn: _Conn) -> None:
        """``conn`` carries the next request: a ``won`` row when the protocol changes."""
        if conn.protocol != self.serving:
            self.serving = conn.protocol
            self.racer.on_won(self.opts.clock(), conn.protocol, conn.conn_id)

    def _usable(self, now: float) -> _Conn | None:
        quic = self.conns.get("quic")
        if quic is not None and self.racer.quic_usable(now):
            return quic
        if not self.racer.tcp_allowed():
            return None  # QUIC only: wait for a QUIC connection
        if quic is None and "quic" not in self._jobs and self.racer.quic_usable(now):
            return None  # an open TCP connection does not stop a new race for QUIC
        return self.conns.get("tcp")

    def _close_idle(self, now: float) -> None:
        for protocol, conn in list(self.conns.items()):
            idle = now - conn.last_used
            if conn.inflight == 0 and idle >= self.racer.params.idle_timeout_s:
                del self.conns[protocol]
                srtt = quic_sample(conn.h3).srtt_s if conn.h3 is not None else None
                asyncio.get_running_loop().create_task(conn.fetcher.close())
                self.racer.on_idle_close(now, protocol, conn.conn_id, idle, srtt)

    # ------------------------------------------------------------ races

    async def _race(self) -> _Conn | None:
        """Run the racer's plan; None: nothing connected (the caller asks again)."""
        plan = self.racer.plan(self.opts.clock(), tcp_open="tcp" in self.conns)
        quic = self._job("quic") if plan.quic and self.quic_port is not None else None
        if plan.tcp_delay_s is None:  # QUIC only
            assert quic is not None
            await asyncio.wait({quic})
            exc = quic.exception()
            if exc is not None and not isinstance(exc, RunError):
                raise exc
            if exc is not None:
                await asyncio.sleep(QUIC_RETRY_PAUSE_S)
                return None
            return quic.result()
        if quic is not None and plan.tcp_delay_s > 0:
            with contextlib.suppress(TimeoutError, RunError):
                return await asyncio.wait_for(asyncio.shield(quic), plan.tcp_delay_s)
        tcp = self._job("tcp")
        pending = {t for t in (quic, tcp) if t is not None}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is None:
                    return task.result()  # a QUIC job still connecting goes on (orphaned)
                if not isinstance(exc, RunError):
                    raise exc  # not a network failure: a bug, not a lost race
        return None

    def _job(self, protocol: str) -> asyncio.Future[_Conn]:
        """The connection job of ``protocol``: an open connection at once, a running job, or a new one."""
        if protocol in self.conns:
            future: asyncio.Future[_Conn] = asyncio.get_running_loop().create_future()
            future.set_result(self.conns[protocol])
            return future
        if protocol not in self._jobs:
            conn_id = f"{protocol}-{next(self._ids)}"
            self.racer.on_job_started(self.opts.clock(), protocol, conn_id)
            task = asyncio.get_running_loop().create_task(self._connect(protocol, conn_id))
            self._jobs[protocol] = task
            task.add_done_callback(lambda t: self._job_done(protocol, t))
        return self._jobs[protocol]

    async def _connect(self, protocol: str, conn_id: str) -> _Conn:
        clock = self.opts.clock
        t0 = clock()
        try:
            fetcher: H2Fetcher | H3Fetcher
            h3: Any = None
            if protocol == "quic":
                assert self.quic_port is not None
                fetcher = await H3Fetcher.open(self.host, self.quic_port, self.quic_opts)
                h3 = fetcher.protocol
            else:
                fetcher = await H2Fetcher.open(self.host, self.tcp_port, self.opts)
        except RunError as exc:
            self.racer.on_job_failed(clock(), protocol, conn_id, str(exc))
            if protocol == "tcp":
                self._tcp_failures, self._tcp_error = self._tcp_failures + 1, str(exc)
            raise
        if protocol == "tcp":
            self._tcp_failures = 0
        self.racer.on_connected(clock(), protocol, conn_id, clock() - t0)
        return _Conn(protocol=protocol, conn_id=conn_id, fetcher=fetcher, last_used=clock(), h3=h3,
                     watch=QuicWatch(params=self.racer.params) if h3 is not None else None)

    def _job_done(self, protocol: str, task: asyncio.Future[_Conn]) -> None:
        self._jobs.pop(protocol, None)
        if task.cancelled() or task.exception() is not None:
            return
        conn = task.result()
        old = self.conns.get(protocol)
        if old is not None and old is not conn:
            asyncio.get_running_loop().create_task(old.fetcher.close())
        self.conns[protocol] = conn

    # ------------------------------------------------------------ RTT probes (dynamic)

    def _start_probes(self) -> None:
        if self.racer.policy == "dynamic" and self._probe_task is None:
            self._probe_task = asyncio.get_running_loop().create_task(self._probe_loop())

    async def _probe_loop(self) -> None:
        while True:
            if self.racer.probe_due(self.opts.clock()):
                await asyncio.gather(self._probe("quic"), self._probe("tcp"))
                self.racer.on_probe_round(self.opts.clock())
            await asyncio.sleep(0.5)

    async def _probe(self, protocol: str) -> None:
        """One RTT probe over a connection of its own (QUIC PING / HTTP/2 PING), to the same server."""
        clock, timeout = self.opts.clock, self.racer.params.probe_timeout_s
        t0 = clock()
        try:
            async with asyncio.timeout(timeout):
                conn = self._probe_conns.get(protocol)
                if conn is None:
                    conn = await self._open_probe(protocol)
                t0 = clock()
                await conn.ping()
            self.racer.on_probe(clock(), protocol, clock() - t0)
        except (TimeoutError, RunError, OSError) as exc:
            stale = self._probe_conns.pop(protocol, None)
            if stale is not None:
                await stale.close()
            self.racer.on_probe(clock(), protocol, timeout, detail=f"failed: {exc or 'timeout'}")

    async def _open_probe(self, protocol: str) -> H2Fetcher | H3Fetcher:
        assert self.quic_port is not None
        conn: H2Fetcher | H3Fetcher
        if protocol == "quic":
            conn = await H3Fetcher.open(self.host, self.quic_port, self.quic_opts)
        else:
            conn = await H2Fetcher.open(self.host, self.tcp_port, self.opts)
        self._probe_conns[protocol] = conn
        return conn

    async def close(self) -> None:
        if self._probe_task is not None:
            self._probe_task.cancel()
        for task in list(self._jobs.values()):
            task.cancel()
        for conn in [*self.conns.values()]:
            await conn.fetcher.close()
        for probe in self._probe_conns.values():
            await probe.close()
        self.conns.clear()
        self._probe_conns.clear()
