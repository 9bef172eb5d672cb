"""The ``race`` transport: QUIC/TCP connection racing to one origin (the I/O side of :mod:`.racing`).

TCP is HTTP/2 over TLS (what a browser's main job opens to an https origin;
one connection, requests multiplexed); QUIC is HTTP/3 on the port an
``alt-svc: h3=":PORT"`` header of a TCP response advertised. A
:class:`~nest_experiments.dash.racing.Racer` decides; this module opens,
races, closes and probes connections as it says, and tells it what
happened. Every result's ``transport`` is the protocol that carried it:
``tcp`` or ``h3``. Requests that fail are retried (a new race); the player
never sees a failure unless the TCP side itself fails three times in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
from dataclasses import dataclass

from nest_experiments.dash.fetch import Fetcher, FetchResult
from nest_experiments.dash.racing import Racer, h3_port
from nest_experiments.dash.transports import FetcherOptions, H2Fetcher, H3Fetcher
from nest_experiments.errors import RunError

LABEL = {"tcp": "tcp", "quic": "h3"}  # the segments log's ``transport`` per protocol
TCP_ATTEMPTS = 3  # consecutive TCP failures before a request fails
QUIC_RETRY_PAUSE_S = 1.0  # quic_only: pause between QUIC attempts that failed at once


@dataclass
class _Conn:
    protocol: str  # quic | tcp
    conn_id: str
    fetcher: H2Fetcher | H3Fetcher
    last_used: float
    inflight: int = 0


class RaceFetcher(Fetcher):
    """Fetches over whichever of QUIC and TCP the racer's policy picks."""

    def __init__(self, *, host: str, port: int, racer: Racer, opts: FetcherOptions) -> None:
        self.host, self.tcp_port, self.racer, self.opts = host, port, racer, opts
        p = racer.params
        self.quic_opts = dataclasses.replace(opts, connect_timeout=p.quic_handshake_timeout_s,
                                             idle_timeout=p.stream_timeout_s or opts.idle_timeout,
                                             keep_waiting=self._keep_waiting if p.stream_timeout_s else None)
        self.quic_port: int | None = None
        self.conns: dict[str, _Conn] = {}
        self.serving = ""  # the protocol of the last request
        self._jobs: dict[str, asyncio.Future[_Conn]] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._probe_task: asyncio.Task[None] | None = None
        self._probe_conns: dict[str, H2Fetcher | H3Fetcher] = {}
        self._tcp_failures, self._tcp_error = 0, ""  # consecutive failed TCP connection jobs

    # ------------------------------------------------------------ requests

    async def fetch(self, stream: str, path: str) -> FetchResult:
        tcp_failures = 0
        while True:
            conn = await self._acquire()
            conn.inflight += 1
            try:
                if conn.protocol == "quic":
                    result = await self._fetch_quic(conn, stream, path)
                else:
                    result = await conn.fetcher.fetch(stream, path)
            except RunError as exc:
                if conn.protocol == "quic" and isinstance(exc.__cause__, TimeoutError) and \
                        (self.racer.params.stream_timeout_s or self.racer.params.request_timeout_s):
                    # this stream stalled or took too long: cancelled (not the connection) and asked again
                    self.racer.on_stream_error(self.opts.clock(), "quic", conn.conn_id, f"stream cancelled: {exc}")
                    continue
                self._lost(conn, str(exc))
                tcp_failures += conn.protocol == "tcp"
                if tcp_failures >= TCP_ATTEMPTS:
                    raise
                continue
            finally:
                conn.inflight -= 1
                conn.last_used = self.opts.clock()
            self._learn(result)
            return dataclasses.replace(result, transport=LABEL[conn.protocol])

    async def _fetch_quic(self, conn: _Conn, stream: str, path: str) -> FetchResult:
        """A request over QUIC, failed when the connection receives nothing for ``quic_stall_timeout_s``.

        Connection-wide, like QUIC's own RTO count: a request queued behind
        other streams' data is not failed while the connection makes progress.
        """
        stall, t_start = self.racer.params.quic_stall_timeout_s, self.opts.clock()
        deadline, waiting = self.racer.params.request_timeout_s, False
        task = asyncio.ensure_future(conn.fetcher.fetch(stream, path))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=min(0.5, stall))
                if done:
                    return task.result()
                now = self.opts.clock()
                last_rx = getattr(getattr(conn.fetcher, "protocol", None), "last_rx", math.inf)
                idle = now - max(last_rx, t_start)
                if idle >= stall:
                    raise RunError(f"h3 {self.host}:{self.quic_port}: nothing received for {idle:.1f} s "
                                   f"(too many RTOs: quic_stall_timeout {stall:g} s)")
                if deadline and now - t_start >= deadline and not waiting:
                    waiting = self._keep_waiting(f"not complete after {deadline:g} s (request_timeout)")
                    if not waiting:
                        raise RunError(f"h3 {self.host}:{self.quic_port}{path}: not complete after "
                                       f"{now - t_start:.1f} s (request_timeout {deadline:g} s)") from TimeoutError()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, RunError):
                    await task

    def _keep_waiting(self, why: str = "") -> bool:
        """A QUIC request got no byte for ``stream_timeout`` (or is not complete after ``request_timeout``):
        cancel it (False: the fetch loop asks again, over a race), unless TCP may not carry it (``quic_only``,
        ``dynamic`` deciding so): asking again on the same connection would only queue the same bytes behind
        the ones on their way, so it waits on; under ``dynamic`` the stall is the event that makes it compare
        the probes again (it may now allow racing)."""
        if self.racer.tcp_allowed():
            return False
        quic = self.conns.get("quic")
        why = why or f"without a byte for {self.racer.params.stream_timeout_s:g} s"
        self.racer.on_stream_error(self.opts.clock(), "quic", quic.conn_id if quic else "",
                                   f"stream {why}: kept waiting (TCP not allowed)")
        return not self.racer.tcp_allowed()

    def _learn(self, result: FetchResult) -> None:
        port = h3_port(result.alt_svc) if result.alt_svc else None
        if port is not None and self.quic_port is None:
            self.quic_port = port
            self.racer.on_alt_svc(self.opts.clock(), result.alt_svc)
            self._start_probes()

    def _lost(self, conn: _Conn, reason: str) -> None:
        """A request failed on ``conn``: close it and tell the racer (QUIC may be marked broken)."""
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
                    if conn.protocol != self.serving:
                        self.serving = conn.protocol
                        self.racer.on_won(self.opts.clock(), conn.protocol, conn.conn_id)
                    return conn

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
                asyncio.get_running_loop().create_task(conn.fetcher.close())
                self.racer.on_idle_close(now, protocol, conn.conn_id, idle)

    # ------------------------------------------------------------ races

    async def _race(self) -> _Conn | None:
        """Run the racer's plan; None: nothing connected (the caller asks again)."""
        plan = self.racer.plan(self.opts.clock())
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
            if protocol == "quic":
                assert self.quic_port is not None
                fetcher = await H3Fetcher.open(self.host, self.quic_port, self.quic_opts)
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
        return _Conn(protocol=protocol, conn_id=conn_id, fetcher=fetcher, last_used=clock())

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
