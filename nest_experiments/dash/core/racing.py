"""QUIC/TCP connection racing policies of the ``race`` transport (pure: no sockets, no clock of their own).

A :class:`Racer` is fed what the transport saw (an ``alt-svc`` header, a
connection that connected or failed, a request that failed, an RTT probe),
each with the run-clock time ``now``, and answers what to do next
(:meth:`Racer.plan`: which connection jobs to start for the next request).
Every event it is told or decides becomes a :class:`RacingRow` in
``racer.rows`` (``racing.csv``). The I/O side is :mod:`~nest_experiments.dash.http.race`.

Policies (``racing``):

``chromium``
    Chromium's alternative-service racing, mechanism by mechanism as
    Chromium's net/ code has it (each method names the source it follows;
    issue 29 holds the reading). Until a TCP response advertises
    ``alt-svc: h3``, requests go over TCP. Then a
    request without a QUIC connection starts the QUIC ("alternative") job at
    once and the TCP ("main") job after a delay (:meth:`Racer.main_job_delay`:
    none while an HTTP/2 connection is open, so the first race after
    ``alt-svc`` goes to TCP); once a QUIC handshake has completed (and QUIC
    was not recently broken), a new QUIC session serves at once in 0-RTT and
    there is no TCP job (:meth:`Racer.zero_rtt`); whichever connects first serves, and a QUIC job
    that loses goes on ("orphaned") and serves the next requests once
    connected. QUIC is marked broken (300 s, doubling, at most 2 days) only
    (A) when a QUIC job fails while the TCP job succeeded, or (B) when a
    request fails on QUIC before its response headers, is retried over TCP,
    and that retry completes. A request the player cancels
    (``stream_timeout``, ``request_timeout``) is no failure: its stream is
    reset and it is asked again on the same QUIC connection. A QUIC
    connection closes when it received nothing for ``idle_timeout_s`` or got
    no new ACK for 5 RTOs (:class:`QuicWatch`); that marks nothing by itself
    (a closed session that had worked *confirms* QUIC), only through (A) or
    (B) for the requests on it and the race after it.
``firefox``
    Firefox's alt-svc validation, then HTTP/3 with a backup connection. An
    ``h3`` alternative learnt from a response is used only once it is
    validated: for an https origin, by a connection to it that completes
    its handshake (AltSvcCache::UpdateAltServiceMapping starts that
    connection when it sees the header, a speculative connect;
    GetAltServiceMapping returns validated mappings only;
    netwerk/protocol/http/AlternateServices.cpp). Until then requests go to
    the origin's own route (the open HTTP/2 connection) and wait for
    nothing: the transport opens the validating QUIC connection beside them
    (:meth:`Racer.validating`). Once validated, a request with no QUIC
    connection open starts one and the TCP job after ``backup_delay_s``
    (100 ms); a QUIC failure (a failed QUIC job, a
    request failed on QUIC) puts the origin on the HTTP/3 excluded list
    until the player restarts (no back-off, no return). A request the player
    cancels is no failure: its stream is reset (``Http3Session::CloseStream``
    sends ``HTTP3_APP_ERROR_REQUEST_CANCELLED``) and nothing excludes HTTP/3;
    the exclusion comes from ``Http3Session::Shutdown`` only, on an error
    before the connection was up or a connection closed with an error
    (netwerk/protocol/http/Http3Session.cpp, ``ExcludeHttp2OrHttp3``). Firefox
    ESR 153 kept HTTP/3 after dash.js's abandonments behind the 64 kbit/s
    UDP shaper (``racing_firefox.toml``, session 17).
``quic_only``
    The paper's modified browser (Section IX): once ``alt-svc`` is known,
    QUIC only: no TCP job, no broken marking; a failed QUIC connection is
    simply opened again.
``tcp_only``
    QUIC disabled (the paper's Q_DIS browser): TCP only.
``dynamic``
    The paper's proposal (Section X-A): an RTT probe over each protocol every
    ``probe_interval_s``; after each round of probes, and when a QUIC
    stream error or timeout happens (the paper's event-driven trigger), the
    medians of the last ``probe_window`` probes of each protocol are
    compared: racing (``chromium`` behaviour) is allowed only when the QUIC
    median is at least ``rtt_ratio`` times the TCP one, else the session
    keeps to QUIC (``quic_only`` behaviour, and any broken mark is
    cleared). Until ``min_probes`` probes of each protocol are in, it
    behaves as ``chromium`` ("Till the point we don't have enough RTT
    samples to make a decision, we allow the browser to behave as it would
    have otherwise").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, fields
from typing import Any

from nest_experiments.errors import ConfigError
from nest_experiments.rundir.rows import RacingRow

POLICIES = ("chromium", "firefox", "quic_only", "tcp_only", "dynamic")


@dataclass(frozen=True, kw_only=True)
class RacingParams:
    """The numbers behind the policies; where the paper leaves one open, Chromium's (or Firefox's) default."""

    # The main (TCP) job's delay, QuicSessionPool::GetTimeDelayForWaitingJob() (net/quic/quic_session_pool.cc):
    # none until QUIC is known to work on the current network, nor while QUIC was recently broken; else 1.5 x
    # the smoothed RTT of the server's last QUIC session (its ServerNetworkStats, stored when a session goes
    # away: QuicSessionPool::ProcessGoingAwaySession), or kDefaultRTT = 300 ms without one; capped by
    # kMaxDelayTimeForMainJobSecs = 3 (net/http/http_stream_factory_job_controller.cc). None at all while an
    # HTTP/2 session to the origin is open (JobController::MaybeSetWaitTimeForMainJob,
    # delay_main_job_with_available_spdy_session = false in net/quic/quic_context.h since ~2023; 103: true).
    main_job_delay_s: float = 0.3
    main_job_srtt_factor: float = 1.5
    main_job_max_delay_s: float = 3.0
    # net/http/broken_alternative_services.cc: kDefaultBrokenAlternativeProtocolDelay = 300 s, doubled with
    # each breakage since QUIC was last confirmed (initial << min(count, kBrokenDelayMaxShift = 18)), at most
    # kMaxBrokenAlternativeProtocolDelay = 2 days (Chromium 103; a feature parameter since).
    broken_initial_s: float = 300.0
    broken_max_delay_s: float = 2 * 86400.0
    # QUIC's idle timeout: a QUIC connection that received no packet for this long closes
    # (QUIC_NETWORK_IDLE_TIMEOUT; QUICHE quic/core/quic_idle_network_detector.cc, re-armed by every received
    # packet): kIdleConnectionTimeout = 30 s (net/quic/quic_context.h) less the 1 s that
    # QuicConnection::SetNetworkTimeouts (quic/core/quic_connection.cc) takes off on the client; the paper:
    # "idle timeout duration (default 29 seconds)". An unused connection (QUIC or TCP) is closed after it too.
    idle_timeout_s: float = 29.0
    # With requests open, a QUIC connection that received nothing for kPingTimeoutSecs = 15 s sends a PING
    # (QUICHE quic/core/quic_constants.h; QuicSpdySession::ShouldKeepConnectionAlive,
    # quic/core/http/quic_spdy_session.cc: "True if there are open HTTP requests"): in flight, it arms the
    # blackhole detector on a silent path.
    ping_timeout_s: float = 15.0
    # QUICHE's blackhole detector (quic/core/quic_network_blackhole_detector.cc, QUIC_TOO_MANY_RTOS): no ACK
    # of a new packet for GetNetworkBlackholeDelay(num_rtos_for_blackhole_detection = 5) while packets are in
    # flight closes the connection (blackhole_delay below; flag quic_default_enable_5rto_blackhole_detection2).
    blackhole_rtos: int = 5
    # Chromium's QUIC handshake limit: kMaxTimeForCryptoHandshakeSecs = 10 (quic/core/quic_constants.h)
    quic_handshake_timeout_s: float = 10.0
    # Player knobs, not the browser's (0: off, the default): a QUIC request without a byte of its own for
    # stream_timeout_s, or not complete after request_timeout_s, is cancelled by the player and asked again,
    # as dash.js's fragmentRequestTimeout (20 s) and AbandonRequestsRule abandon a request (dash.js 5.2.1
    # src/core/Settings.js, src/streaming/rules/abr/AbandonRequestsRule.js). A cancel resets that stream only
    # (Chromium's QuicHttpStream::Close: stream_->Reset(QUIC_STREAM_CANCELLED), net/quic/quic_http_stream.cc)
    # and is no failure: nothing on that path marks QUIC broken (~HttpNetworkTransaction, issue 29); the
    # request is asked again on the same QUIC connection. Where TCP may not carry the request (quic_only,
    # dynamic deciding so) it is not cancelled: the stall is logged and it waits on.
    stream_timeout_s: float = 0.0
    request_timeout_s: float = 0.0
    # Firefox: network.http.http3.backup_timer_delay = 100 ms (the paper, Section IV)
    backup_delay_s: float = 0.1
    # dynamic (the paper, Section X-A): a probe every 15 s, medians over a sliding window of 10, X >= 3
    probe_interval_s: float = 15.0
    probe_window: int = 10
    min_probes: int = 10
    rtt_ratio: float = 3.0
    probe_timeout_s: float = 10.0  # a probe unanswered this long counts as an RTT of this much

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ConfigError(f.name, "must not be negative")
        for name in ("probe_window", "min_probes"):
            if getattr(self, name) < 1:
                raise ConfigError(name, "at least 1")
        if self.min_probes > self.probe_window:
            raise ConfigError("min_probes", f"{self.min_probes} exceeds probe_window ({self.probe_window})")


PARAM_NAMES = tuple(f.name for f in fields(RacingParams))
INT_PARAMS = ("blackhole_rtos", "probe_window", "min_probes")
BROKEN_MAX_SHIFT = 18  # kBrokenDelayMaxShift (net/http/broken_alternative_services.cc)

# QUICHE's retransmission constants (quic/core/quic_constants.h, quic/core/quic_sent_packet_manager.cc)
TAIL_LOSS_PROBES = 2  # kDefaultMaxTailLossProbes
MIN_TLP_S = 0.010  # kMinTailLossProbeTimeoutMs
MIN_RTO_S = 0.200  # kMinRetransmissionTimeMs
DEFAULT_RTO_S = 0.500  # kDefaultRetransmissionTimeMs: before an RTT sample
INITIAL_RTT_S = 0.100  # kInitialRttMs: SmoothedOrInitialRtt() before an RTT sample


def blackhole_delay(srtt_s: float | None, rttvar_s: float, rtos: int, *, multiple_in_flight: bool = False) -> float:
    """QUICHE's ``QuicSentPacketManager::GetNetworkBlackholeDelay(rtos)`` (quic/core/quic_sent_packet_manager.cc),
    ``GetNConsecutiveRetransmissionTimeoutDelay(kDefaultMaxTailLossProbes + rtos)``: two tail-loss probes of
    max(2 srtt, 10 ms) (of 1.5 srtt + 100 ms with a single packet in flight), then ``rtos`` doubling RTOs of
    max(srtt + 4 rttvar, 200 ms) (500 ms before an RTT sample): 2^rtos - 1 of them."""
    srtt = srtt_s or INITIAL_RTT_S
    tlp = max(2 * srtt, MIN_TLP_S if multiple_in_flight else 1.5 * srtt + MIN_RTO_S / 2)
    rto = max(srtt + 4 * rttvar_s, MIN_RTO_S) if srtt_s else DEFAULT_RTO_S
    return TAIL_LOSS_PROBES * tlp + (2**rtos - 1) * rto


@dataclass(frozen=True, kw_only=True)
class QuicSample:
    """What the transport read off one QUIC connection at one moment (run clock)."""

    last_rx: float  # when it last received a packet
    bytes_in_flight: int  # ack-eliciting bytes it sent and not yet saw acknowledged
    acked: int  # moves whenever an ACK acknowledges new packets (e.g. the largest acknowledged packet number)
    srtt_s: float | None = None  # None: no RTT sample yet (or the stack does not say)
    rttvar_s: float = 0.0
    multiple_in_flight: bool = False


@dataclass
class QuicWatch:
    """QUICHE's two detectors that close a QUIC connection on a silent path, for one connection (pure: fed
    :class:`QuicSample` s). Neither marks QUIC broken: the close reaches the racer as a connection that went
    away (:meth:`Racer.on_conn_closed`) and as errors of the requests on it."""

    params: RacingParams
    _armed_at: float | None = None  # the blackhole detection runs since (None: not armed)
    _delay_s: float = 0.0  # its delay, computed when it was (re)armed
    _acked: int | None = None
    _pinged: float = -math.inf  # the last keep-alive PING

    def check(self, now: float, s: QuicSample) -> str:
        """Why QUICHE would close the connection now (``QUIC_NETWORK_IDLE_TIMEOUT: ...`` or
        ``QUIC_TOO_MANY_RTOS: ...``), else ""."""
        idle = now - s.last_rx
        if idle >= self.params.idle_timeout_s:
            return f"QUIC_NETWORK_IDLE_TIMEOUT: no packet received for {idle:.1f} s"
        # QuicConnection (quic/core/quic_connection.cc): the detection starts with a packet in flight, restarts
        # on every ACK of new packets (OnForwardProgressMade), stops when nothing is in flight
        # (PostProcessAfterAckFrame). Left out: its clamp of the delay to >= the path-degrading delay + 2 PTOs
        # (a few PTOs: below 2 TLPs + 31 RTOs at the RTTs seen here)
        progress, self._acked = s.acked != self._acked, s.acked
        if s.bytes_in_flight <= 0:
            self._armed_at = None
        elif progress or self._armed_at is None:
            self._armed_at = now
            self._delay_s = blackhole_delay(s.srtt_s, s.rttvar_s, self.params.blackhole_rtos,
                                            multiple_in_flight=s.multiple_in_flight)
        elif now - self._armed_at >= self._delay_s:
            return (f"QUIC_TOO_MANY_RTOS: no new ACK for {now - self._armed_at:.1f} s "
                    f"({self.params.blackhole_rtos} RTOs at srtt {s.srtt_s or INITIAL_RTT_S:.3f} s)")
        return ""

    def ping_due(self, now: float, last_rx: float) -> bool:
        """A request is open and nothing came for ``ping_timeout_s`` (nor since the last PING): send a PING."""
        if now - max(last_rx, self._pinged) < self.params.ping_timeout_s:
            return False
        self._pinged = now
        return True


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Connection jobs for a request that has no usable connection."""

    quic: bool  # start (or keep waiting for) a QUIC job
    tcp_delay_s: float | None  # start the TCP job this long after the QUIC job (0: at once); None: no TCP job


@dataclass
class _Broken:
    """Chromium's BrokenAlternativeServices for the origin's h3 alternative."""

    until: float = 0.0  # QUIC is not tried before this time
    count: int = 0  # breakages since QUIC was last confirmed (the back-off's exponent; > 0: "recently broken")
    marked: bool = False


@dataclass
class Racer:
    """One origin's racing state under ``policy``."""

    policy: str
    params: RacingParams = field(default_factory=RacingParams)
    rows: list[RacingRow] = field(default_factory=list)
    alt_svc: str = ""  # the h3 alternative advertised ("" : none yet)
    srtt_s: float | None = None  # the smoothed RTT of the last QUIC session that went away (ServerNetworkStats)
    quic_worked: bool = False  # a QUIC connection completed its handshake (is_quic_known_to_work_on_current_network)
    racing_allowed: bool | None = None  # dynamic: the last decision (None: none yet)
    _broken: _Broken = field(default_factory=_Broken)
    _tcp_up: bool = False  # a TCP connection is open (the main job succeeds at once)
    _alt_failed: tuple[str, str] | None = None  # (conn_id, reason): a QUIC job failed, the TCP job not done yet
    _excluded: bool = False  # firefox: on the HTTP/3 excluded list
    _probes: dict[str, list[float]] = field(default_factory=lambda: {"quic": [], "tcp": []})
    _last_probe: float | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError("", f"racing policy {self.policy!r}: one of {', '.join(POLICIES)}")

    def _log(self, now: float, event: str, protocol: str = "", *, value: float | None = None,
             detail: str = "", conn_id: str = "") -> None:
        self.rows.append(RacingRow(t=now, event=event, protocol=protocol, conn_id=conn_id, value=value, detail=detail))

    # ------------------------------------------------------------ what the transport saw

    def on_alt_svc(self, now: float, header: str) -> None:
        """A TCP response's ``alt-svc`` header; an ``h3`` alternative is learnt the first time."""
        if self.alt_svc or h3_port(header) is None:
            return
        self.alt_svc = header
        self._log(now, "alt_svc", "tcp", detail=header)

    def on_job_started(self, now: float, protocol: str, conn_id: str) -> None:
        self._log(now, "job_started", protocol, conn_id=conn_id)

    def on_connected(self, now: float, protocol: str, conn_id: str, handshake_s: float) -> None:
        """A connection job succeeded. TCP: the main job succeeded, so a QUIC job that failed in this race
        marks QUIC broken now (path A). QUIC: QUIC is known to work on this network (it is *confirmed*, and the
        back-off count restarts, only when a session goes away: :meth:`on_conn_closed`)."""
        self._log(now, "connected", protocol, conn_id=conn_id, value=handshake_s)
        if protocol == "tcp":
            self._tcp_up = True
            if self._alt_failed is not None:
                quic_id, reason = self._alt_failed
                self._alt_failed = None
                self._mark(now, quic_id, f"{reason} (QUIC job failed, TCP job succeeded)")
        else:
            self.quic_worked = True

    def on_won(self, now: float, protocol: str, conn_id: str) -> None:
        self._log(now, "won", protocol, conn_id=conn_id)

    def on_idle_close(self, now: float, protocol: str, conn_id: str, idle_s: float,
                      srtt_s: float | None = None) -> None:
        """An unused connection was closed after ``idle_timeout_s``; a QUIC one goes away as any other."""
        self._log(now, "idle_close", protocol, conn_id=conn_id, value=idle_s)
        self._went_away(now, protocol, conn_id, srtt_s)

    def on_conn_closed(self, now: float, protocol: str, conn_id: str, reason: str,
                       srtt_s: float | None = None) -> None:
        """An open connection closed under requests (a QUIC detector fired, the peer closed it, a TCP error).

        Marks nothing (``QuicChromiumClientSession::OnConnectionClosed`` only records and cancels the
        requests, net/quic/quic_chromium_client_session.cc); the requests on it come as :meth:`on_stream_error`.
        """
        self._log(now, "conn_closed", protocol, conn_id=conn_id, value=srtt_s, detail=reason)
        self._went_away(now, protocol, conn_id, srtt_s)

    def _went_away(self, now: float, protocol: str, conn_id: str, srtt_s: float | None) -> None:
        """QuicSessionPool::ProcessGoingAwaySession (net/quic/quic_session_pool.cc): a QUIC session that had
        completed its handshake goes away: unless QUIC is marked broken, it *confirms* QUIC
        (ConfirmAlternativeService: the back-off count and "recently broken" are cleared) and stores its srtt
        (the next main-job delay)."""
        if protocol == "tcp":
            self._tcp_up = False
            return
        if self._broken.marked and now < self._broken.until:
            return  # "Do nothing if QUIC is currently marked as broken."
        if srtt_s:
            self.srtt_s = srtt_s
        if self._broken.count or self._broken.marked:
            self._broken = _Broken()
            self._log(now, "recovered", "quic", conn_id=conn_id, detail="confirmed: a QUIC session went away")

    def on_job_failed(self, now: float, protocol: str, conn_id: str, reason: str) -> None:
        """A connection attempt failed (handshake timeout, refused, ...).

        ``chromium``: a failed QUIC job marks QUIC broken once the TCP job of the race succeeded (path A:
        JobController::MaybeReportBrokenAlternativeService, net/http/http_stream_factory_job_controller.cc:
        "No brokenness to report if the main job fails"), also when the QUIC job went on orphaned.
        """
        self._log(now, "failed", protocol, conn_id=conn_id, detail=reason)
        if protocol == "tcp":
            self._tcp_up, self._alt_failed = False, None
            return
        if self._trouble(now, reason, conn_id) != "chromium":
            return
        if self._tcp_up:
            self._mark(now, conn_id, f"{reason} (QUIC job failed, TCP job succeeded)")
        else:
            self._alt_failed = (conn_id, reason)

    def on_stream_cancelled(self, now: float, conn_id: str, reason: str) -> None:
        """The player cancelled a QUIC request (``stream_timeout``, ``request_timeout``): its stream is reset
        and the request asked again on the same connection. ``chromium``: no failure, nothing marked
        (QuicHttpStream::Close, ~HttpNetworkTransaction: no MarkAlternativeService* on that path);
        ``dynamic``: the paper's trigger (a timeout) compares the probes; ``firefox``: no failure either (the
        stream's CancelFetch, Http3Session::CloseStream: nothing excludes HTTP/3)."""
        self._log(now, "stream_cancelled", "quic", conn_id=conn_id, detail=reason)
        self._trouble(now, reason, conn_id, exclude=False)

    def on_stream_error(self, now: float, protocol: str, conn_id: str, reason: str, *,
                        headers: bool = False, cause: str = "closed") -> bool:
        """A request failed on an open connection; ``cause`` (QUIC): ``reset`` (the server reset its stream, the
        connection is up), ``error`` (the peer closed the connection with an error code), ``closed`` (closed
        otherwise: with NO_ERROR, by a detector of ours, a TCP error).

        Returns True when the request is to be retried over TCP with QUIC off for it, and
        :meth:`on_tcp_retry_done` told when that retry completes:

        - ``chromium``: any QUIC error before the response headers (path B: HttpNetworkTransaction::
          HandleIOError, kQuicProtocolError with retry_without_alt_svc_on_quic_errors = true,
          net/http/http_network_transaction.cc);
        - ``firefox``: a stream reset before the response (Http3Session's ResetOrStopSendingRecvd closes the
          stream with NS_ERROR_NET_RESET, and nsHttpTransaction::Restart takes the direct route: TCP, for that
          request), nothing excluded; only a connection closed with an error code excludes HTTP/3
          (Http3Session::Shutdown: NS_ERROR_NET_HTTP3_PROTOCOL_ERROR -> ExcludeHttp3; an idle timeout or
          NO_ERROR does not, docs/racing_chromium_mechanism.md §10).

        Otherwise the request just fails: the player asks again (a new request: a new race if no QUIC
        connection is left).
        """
        self._log(now, "stream_error", protocol, conn_id=conn_id,
                  detail=f"{reason} ({'after' if headers else 'before'} the response headers)")
        if protocol != "quic":
            return False
        mode = self._trouble(now, reason, conn_id, exclude=cause == "error")
        if mode == "firefox":
            return cause == "reset" and not headers
        return mode == "chromium" and not headers

    def on_stream_stalled(self, now: float, conn_id: str, why: str) -> bool:
        """A QUIC request stalled past a player timeout where TCP may not carry it (``quic_only``, ``dynamic``
        deciding so): logged; ``dynamic`` compares the probes again. True: keep waiting (TCP still not allowed)."""
        self._log(now, "stream_error", "quic", conn_id=conn_id, detail=f"stream {why}: kept waiting (TCP not allowed)")
        self._trouble(now, why, conn_id)
        return not self.tcp_allowed()

    def on_tcp_retry_done(self, now: float, conn_id: str, reason: str) -> None:
        """The TCP retry of a request that failed on QUIC before its headers completed: QUIC is marked broken
        (HttpNetworkTransaction::DoReadBodyComplete: "If the retry succeeds, then the alternative service will
        be marked as broken then")."""
        if self._mode() == "chromium":
            self._mark(now, conn_id, f"{reason} (QUIC error before the headers, the TCP retry succeeded)")

    def on_probe(self, now: float, protocol: str, rtt_s: float, detail: str = "") -> None:
        """One RTT probe (dynamic); the window keeps the last ``probe_window``."""
        self._log(now, "probe_rtt", protocol, value=rtt_s, detail=detail)
        window = self._probes[protocol]
        window.append(rtt_s)
        del window[: -self.params.probe_window]

    def on_probe_round(self, now: float) -> None:
        """Both protocols were probed (dynamic): compare the windows again once each holds ``min_probes``;
        a decision is logged when it changes (the stream-error trigger logs each one)."""
        if self.policy != "dynamic" or self.rtt_ratio() is None:
            return
        before = self.racing_allowed
        ratio = self.rtt_ratio()
        assert ratio is not None
        if before is None or (ratio >= self.params.rtt_ratio) != before:
            self._decide(now)

    def probe_due(self, now: float) -> bool:
        """Should a probe round start now (dynamic only, once the h3 alternative is known)?"""
        if self.policy != "dynamic" or not self.alt_svc:
            return False
        if self._last_probe is not None and now - self._last_probe < self.params.probe_interval_s:
            return False
        self._last_probe = now
        return True

    # ------------------------------------------------------------ decisions

    def quic_usable(self, now: float) -> bool:
        """May a request use (or a job open) QUIC now?"""
        if not self.alt_svc or self.policy == "tcp_only":
            return False
        if self._mode() == "quic_only":
            return True
        if self.policy == "firefox":
            return not self._excluded
        if self._broken.marked and now >= self._broken.until:
            self._broken.marked = False  # the back-off expired: QUIC is tried again (still "recently broken")
        return not self._broken.marked

    def tcp_allowed(self) -> bool:
        """May a request go over TCP? Not once QUIC is known under ``quic_only`` (or ``dynamic`` deciding so)."""
        return not (self.alt_svc and self._mode() == "quic_only")

    def plan(self, now: float, *, tcp_open: bool = False) -> Plan:
        """The jobs for a request that finds no usable open QUIC connection (``tcp_open``: an HTTP/2 one is)."""
        if not self.quic_usable(now):
            return Plan(quic=False, tcp_delay_s=0.0)
        mode = self._mode()
        if mode == "quic_only":
            return Plan(quic=True, tcp_delay_s=None)
        if mode == "firefox":
            if self.validating(now):  # not validated yet: the origin's route, the validation runs beside
                return Plan(quic=False, tcp_delay_s=0.0)
            return Plan(quic=True, tcp_delay_s=self.params.backup_delay_s)
        if self.zero_rtt():
            return Plan(quic=True, tcp_delay_s=None)
        return Plan(quic=True, tcp_delay_s=0.0 if tcp_open else self.main_job_delay())

    def validating(self, now: float) -> bool:
        """``firefox``: the h3 alternative is known but not validated (no QUIC connection has completed its
        handshake): requests take the origin's route while the transport opens a QUIC connection beside them
        to validate it (AltSvcCache::UpdateAltServiceMapping's speculative connect). A validation that fails
        excludes HTTP/3 (:meth:`on_job_failed`), so this ends either way."""
        return self.policy == "firefox" and self.quic_usable(now) and not self.quic_worked

    def zero_rtt(self) -> bool:
        """``chromium``: a new QUIC session serves the request at once, before its handshake completes (0-RTT),
        and the TCP job never runs, when Chromium holds the server's crypto config from an earlier handshake
        (``quic_worked``) and QUIC was not recently broken. QuicSessionAttempt::DoCreateSession
        (net/quic/quic_session_attempt.cc): require_confirmation = was_alternative_service_recently_broken;
        QuicChromiumClientSession::CryptoConnect returns OK when !require_confirmation and the 0-RTT keys are
        set, so QuicSessionPool::RequestSession hands the alternative job its session synchronously. The main
        job was blocked when the jobs were created (JobController::DoCreateJobs: main_job_is_blocked_) and is
        resumed only when the alternative job's connection is pending (MaybeResumeMainJob from
        OnConnectionInitialized with rv != OK), so it is deleted unresumed (OnStreamReady -> BindJob ->
        OrphanUnboundJob), even with an HTTP/2 session open (Chromium 156, NetLog: the MPD bound to the new
        QUIC session 1 ms after its job started, 41 ms before the handshake completed, with the page's H2
        session open; docs/racing_chromium_mechanism.md section 9.4). A QUIC job that fails here, with a TCP
        connection open, marks QUIC broken at once (:meth:`on_job_failed`: the request failed on QUIC and its
        retry over TCP, path B, completes), else when the TCP job of the next race succeeds (path A); the next
        race is an ordinary one (``_alt_failed``)."""
        return self._mode() == "chromium" and self.quic_worked and not self._broken.count \
            and self._alt_failed is None

    def main_job_delay(self) -> float:
        """Chromium's wait before the TCP job when no HTTP/2 session is open (see :class:`RacingParams`): 0
        until QUIC worked here and while it was recently broken, else 1.5 x the last closed session's srtt
        (300 ms without one), at most 3 s."""
        p = self.params
        if not self.quic_worked or self._broken.count:
            return 0.0
        return min(p.main_job_srtt_factor * self.srtt_s if self.srtt_s else p.main_job_delay_s,
                   p.main_job_max_delay_s)

    def rtt_ratio(self) -> float | None:
        """Median QUIC probe RTT / median TCP probe RTT over the window; None with too few probes."""
        q, t = self._probes["quic"], self._probes["tcp"]
        if min(len(q), len(t)) < self.params.min_probes:
            return None
        tcp = statistics.median(t)
        return float("inf") if tcp <= 0 else statistics.median(q) / tcp

    def _mode(self) -> str:
        """The policy in force: ``dynamic`` acts as ``chromium`` or ``quic_only`` by its last decision."""
        if self.policy != "dynamic":
            return self.policy
        return "quic_only" if self.racing_allowed is False else "chromium"

    def _decide(self, now: float) -> None:
        """dynamic: compare the probes (after a probe round, or on a QUIC error or timeout) and log the decision."""
        ratio = self.rtt_ratio()
        if ratio is None:
            self._log(now, "decision", detail="race (too few probes)")
            return
        self.racing_allowed = ratio >= self.params.rtt_ratio
        self._log(now, "decision", detail="race" if self.racing_allowed else "quic_only", value=ratio)
        if not self.racing_allowed and self._broken.marked:
            self._broken = _Broken()
            self._log(now, "recovered", "quic", detail="racing not allowed: QUIC only")

    def _trouble(self, now: float, reason: str, conn_id: str, *, exclude: bool = True) -> str:
        """A QUIC job failed, a QUIC request failed or was cancelled: ``dynamic`` decides again (the paper's
        event-driven trigger), ``firefox`` excludes QUIC (``exclude``: a failure that Firefox excludes on, not a
        cancel or a reset stream); returns the mode in force after it."""
        if self.policy == "dynamic":
            self._decide(now)
        mode = self._mode()
        if mode == "firefox" and exclude and not self._excluded:
            self._excluded = True
            self._log(now, "broken", "quic", conn_id=conn_id, detail=f"excluded until restart: {reason}")
        return mode

    def _mark(self, now: float, conn_id: str, reason: str) -> None:
        """MarkAlternativeServiceBroken (net/http/broken_alternative_services.cc): no QUIC job for
        300 s << min(count, 18), at most 2 days; a second mark while marked changes nothing."""
        b = self._broken
        if b.marked and now < b.until:
            return
        p = self.params
        delay = min(p.broken_initial_s * 2 ** min(b.count, BROKEN_MAX_SHIFT), p.broken_max_delay_s)
        b.marked, b.until, b.count = True, now + delay, b.count + 1
        self._log(now, "broken", "quic", conn_id=conn_id, detail=reason)
        self._log(now, "backoff", "quic", conn_id=conn_id, value=delay)


def h3_port(header: str) -> int | None:
    """The port of the first ``h3`` alternative of an ``alt-svc`` value (``h3=":443"; ma=86400``), else None.

    Only alternatives on the same host (``":port"``) are taken: the player
    races to the origin it knows.
    """
    for entry in header.split(","):
        proto, _, rest = entry.strip().partition("=")
        if proto.strip() != "h3":
            continue
        authority = rest.split(";", 1)[0].strip().strip('"')
        host, _, port = authority.rpartition(":")
        if host == "" and port.isdigit() and 0 < int(port) < 65536:
            return int(port)
    return None


def params_from(values: dict[str, float]) -> RacingParams:
    """:class:`RacingParams` from ``{name: number}`` (the client's ``--racing-params``); ConfigError names the key."""
    unknown = sorted(set(values) - set(PARAM_NAMES))
    if unknown:
        raise ConfigError(unknown[0], f"unknown racing parameter; known: {', '.join(PARAM_NAMES)}")
    kwargs: dict[str, Any] = {k: int(v) if k in INT_PARAMS else float(v) for k, v in values.items()}
    return RacingParams(**kwargs)
