"""QUIC/TCP connection racing policies of the ``race`` transport (pure: no sockets, no clock of their own).

A :class:`Racer` is fed what the transport saw (an ``alt-svc`` header, a
connection that connected or failed, a request that failed, an RTT probe),
each with the run-clock time ``now``, and answers what to do next
(:meth:`Racer.plan`: which connection jobs to start for the next request).
Every event it is told or decides becomes a :class:`RacingRow` in
``racer.rows`` (``racing.csv``). The I/O side is :mod:`.race`.

Policies (``racing``):

``chromium``
    Chromium's alternative-service racing. Until a TCP response advertises
    ``alt-svc: h3``, requests go over TCP. Then a request without a usable
    QUIC connection starts the QUIC ("alternative") job at once and the TCP
    ("main") job after a delay (none until QUIC has worked, see
    :class:`RacingParams`; an open TCP connection is ready at once, so the
    first race after ``alt-svc`` goes to TCP); whichever connects first serves. A QUIC job
    that is still connecting when TCP wins goes on ("orphaned"): when it
    connects, later requests use it. QUIC is marked broken when a QUIC job
    fails (handshake failure) or a QUIC connection fails under a request (too
    many RTOs, network idle timeout): no QUIC job before the back-off
    expires, which doubles with every breakage. An idle connection is closed
    after ``idle_timeout_s`` and the next request races again.
``firefox``
    Firefox's HTTP/3 with a backup connection: the TCP job after
    ``backup_delay_s`` (100 ms); a QUIC failure puts the origin on the HTTP/3
    excluded list until the player restarts (no back-off, no return).
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

import statistics
from dataclasses import dataclass, field, fields
from typing import Any

from nest_experiments.dash.racing_log import RacingRow

POLICIES = ("chromium", "firefox", "quic_only", "tcp_only", "dynamic")


@dataclass(frozen=True, kw_only=True)
class RacingParams:
    """The numbers behind the policies; where the paper leaves one open, Chromium's (or Firefox's) default."""

    # Chromium delays the main (TCP) job by QuicSessionPool::GetTimeDelayForWaitingJob()
    # (net/quic/quic_session_pool.cc): no delay until QUIC is known to work on the current network, nor
    # when QUIC was recently broken; else 1.5 x the server's smoothed RTT from an earlier QUIC session, or
    # kDefaultRTT = 300 ms without one; capped by kMaxDelayTimeForMainJobSecs = 3
    # (net/http/http_stream_factory_job_controller.cc; the paper: "within 3 seconds (based upon the RTT value)").
    main_job_delay_s: float = 0.3
    main_job_srtt_factor: float = 1.5
    main_job_max_delay_s: float = 3.0
    # net/http/broken_alternative_services.cc: kDefaultBrokenAlternativeProtocolDelay = 300 s, "subsequent
    # failures result in exponential (base 2) backoff", the shift limited by kBrokenDelayMaxShift = 9 (~2 days).
    broken_initial_s: float = 300.0
    broken_max_shift: int = 9
    # the paper (Section IV): "idle timeout duration (default 29 seconds)"
    idle_timeout_s: float = 29.0
    # Chromium's QUIC handshake limit: kMaxTimeForCryptoHandshakeSecs = 10 (quic/core/quic_constants.h)
    quic_handshake_timeout_s: float = 10.0
    # Nothing received for this long on a QUIC connection with a request pending fails the connection: it
    # stands for QUIC_TOO_MANY_RTOS and QUIC_NETWORK_IDLE_TIMEOUT, which a Python QUIC stack does not raise
    # (5 RTOs from 200 ms, doubling: 0.2 + 0.4 + 0.8 + 1.6 + 3.2 = 6.2 s).
    quic_stall_timeout_s: float = 6.2
    # A QUIC request without a byte of its own for this long is cancelled by the player (QUIC_STREAM_CANCELLED,
    # one of the errors the paper logged, Section VIII-B) and retried: a stream error, which marks QUIC broken
    # under chromium. 0: never (a browser alone has no such timeout; a player such as YouTube's abandons
    # requests that stall: the experiment files set one segment's duration). Where TCP may not carry the
    # request (quic_only, dynamic deciding so) it is not cancelled: the stall is logged and it waits on.
    stream_timeout_s: float = 0.0
    # A QUIC request not complete after this long is abandoned by the player and asked again, as dash.js's
    # AbandonRequestsRule abandons a segment whose download would take more than abandonDurationMultiplier =
    # 1.8 segment durations (dash.js 5.2.1 settings): QUIC_STREAM_CANCELLED, a stream error like the above,
    # with the same exception where TCP may not carry the request. It catches what stream_timeout does not: a
    # request whose bytes trickle in behind a full queue. 0: never; the racing experiments set 1.8 segments.
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
                raise ValueError(f"{f.name}: must not be negative")
        for name in ("probe_window", "min_probes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: at least 1")
        if self.min_probes > self.probe_window:
            raise ValueError(f"min_probes: {self.min_probes} exceeds probe_window ({self.probe_window})")


PARAM_NAMES = tuple(f.name for f in fields(RacingParams))
INT_PARAMS = ("broken_max_shift", "probe_window", "min_probes")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Connection jobs for a request that has no usable connection."""

    quic: bool  # start (or keep waiting for) a QUIC job
    tcp_delay_s: float | None  # start the TCP job this long after the QUIC job (0: at once); None: no TCP job


@dataclass
class _Broken:
    until: float = 0.0  # QUIC is not tried before this time
    count: int = 0  # breakages since QUIC last worked (the back-off's exponent)
    marked: bool = False


@dataclass
class Racer:
    """One origin's racing state under ``policy``."""

    policy: str
    params: RacingParams = field(default_factory=RacingParams)
    rows: list[RacingRow] = field(default_factory=list)
    alt_svc: str = ""  # the h3 alternative advertised ("" : none yet)
    srtt_s: float | None = None  # the last QUIC handshake time (Chromium's cached server RTT)
    racing_allowed: bool | None = None  # dynamic: the last decision (None: none yet)
    _broken: _Broken = field(default_factory=_Broken)
    _excluded: bool = False  # firefox: on the HTTP/3 excluded list
    _probes: dict[str, list[float]] = field(default_factory=lambda: {"quic": [], "tcp": []})
    _last_probe: float | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"racing policy {self.policy!r}: one of {', '.join(POLICIES)}")

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
        self._log(now, "connected", protocol, conn_id=conn_id, value=handshake_s)
        if protocol != "quic":
            return
        self.srtt_s = handshake_s
        if self._broken.count or self._broken.marked:  # Chromium confirms the alternative: the back-off restarts
            self._broken = _Broken()
            self._log(now, "recovered", "quic", conn_id=conn_id)

    def on_won(self, now: float, protocol: str, conn_id: str) -> None:
        self._log(now, "won", protocol, conn_id=conn_id)

    def on_idle_close(self, now: float, protocol: str, conn_id: str, idle_s: float) -> None:
        self._log(now, "idle_close", protocol, conn_id=conn_id, value=idle_s)

    def on_job_failed(self, now: float, protocol: str, conn_id: str, reason: str) -> None:
        """A connection attempt failed (handshake timeout, refused, ...)."""
        self._log(now, "failed", protocol, conn_id=conn_id, detail=reason)
        if protocol == "quic":
            self._quic_failed(now, reason, conn_id)

    def on_stream_error(self, now: float, protocol: str, conn_id: str, reason: str) -> None:
        """A request failed on an open connection (reset, too many RTOs, idle timeout, ...)."""
        self._log(now, "stream_error", protocol, conn_id=conn_id, detail=reason)
        if protocol == "quic":
            self._quic_failed(now, reason, conn_id)

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
            self._broken.marked = False  # the back-off expired: the next request tries QUIC again
        return not self._broken.marked

    def tcp_allowed(self) -> bool:
        """May a request go over TCP? Not once QUIC is known under ``quic_only`` (or ``dynamic`` deciding so)."""
        return not (self.alt_svc and self._mode() == "quic_only")

    def plan(self, now: float) -> Plan:
        """The jobs for a request that finds no usable open connection."""
        if not self.quic_usable(now):
            return Plan(quic=False, tcp_delay_s=0.0)
        mode = self._mode()
        if mode == "quic_only":
            return Plan(quic=True, tcp_delay_s=None)
        if mode == "firefox":
            return Plan(quic=True, tcp_delay_s=self.params.backup_delay_s)
        return Plan(quic=True, tcp_delay_s=self.main_job_delay())

    def main_job_delay(self) -> float:
        """Chromium's wait before the TCP job: 0 before QUIC ever worked here and after a breakage (until a
        QUIC connection confirms it again), else from the last QUIC handshake time (see :class:`RacingParams`)."""
        p = self.params
        if self.srtt_s is None or self._broken.count:
            return 0.0
        return min(p.main_job_srtt_factor * self.srtt_s if self.srtt_s > 0 else p.main_job_delay_s,
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

    def _quic_failed(self, now: float, reason: str, conn_id: str) -> None:
        if self.policy == "dynamic":
            self._decide(now)
        mode = self._mode()
        if mode == "firefox":
            if not self._excluded:
                self._excluded = True
                self._log(now, "broken", "quic", conn_id=conn_id, detail=f"excluded until restart: {reason}")
        elif mode == "chromium" and not self._broken.marked:
            b = self._broken
            delay = self.params.broken_initial_s * 2 ** min(b.count, self.params.broken_max_shift)
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
    """:class:`RacingParams` from ``{name: number}`` (the client's ``--racing-params``); ValueError names the key."""
    unknown = sorted(set(values) - set(PARAM_NAMES))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown racing parameter; known: {', '.join(PARAM_NAMES)}")
    kwargs: dict[str, Any] = {k: int(v) if k in INT_PARAMS else float(v) for k, v in values.items()}
    return RacingParams(**kwargs)
