"""Chromium's NetLog (``--log-net-log``) -> ``racing.csv`` rows and the protocol of each request. Pure.

The reference for our ``chromium`` racing policy: what Chromium itself did
towards one origin (``host:port``), in the schema of
:mod:`~nest_experiments.dash.core.racing_log`. Event names come from the log's own constants
(``logEventTypes``, ``logEventPhase``, ``quicError``), times are
``time + timeTickOffset`` (ms since the epoch), moved onto the run clock by
``to_run`` (seconds since the epoch -> run clock).

Rows (Chromium 156's net stack: ``HttpStreamFactory::JobController`` starts a
``main`` job (TCP: HTTP/2 or HTTP/1.1 over TLS) and, once an ``alt-svc`` is
known, an ``alternative`` job (QUIC) for each request; a job may use an
existing connection):

- ``alt_svc``: the first ``HTTP_STREAM_JOB_CONTROLLER_ALT_SVC_FOUND`` (and
  each new value); ``broken`` when it first says ``is_broken`` (Chromium
  marked QUIC broken for the origin), ``recovered`` when it says so no more;
  the NetLog holds no back-off time, so there is no ``backoff`` row;
- ``job_started`` / ``connected`` / ``failed`` per connection: a QUIC
  session (``QUIC_SESSION`` begin, ``QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE``;
  closed before that: failed, ``detail`` the QUIC error) and a TCP
  connection (``TCP_CONNECT`` begin; connected when its TLS handshake
  (``SSL_CONNECT``) ended, failed on a net error); ``value`` of connected:
  the handshake time, s; ``conn_id`` ``quic<source id>`` / ``tcp<source id>``;
- ``idle_close``: a QUIC session closed by its idle timeout
  (``QUIC_NETWORK_IDLE_TIMEOUT``); ``conn_closed``: a QUIC session closed on
  another error after its handshake (``detail``: the error, e.g.
  ``QUIC_TOO_MANY_RTOS``), except the browser closing everything at exit
  (``net_error`` -3, ERR_ABORTED);
- ``stream_cancelled``: the page cancelled a request on a QUIC session
  (``QUIC_SESSION_RST_STREAM_FRAME_SENT`` with QUIC_STREAM_CANCELLED: an
  aborted or timed-out XHR, dash.js's AbandonRequestsRule);
- ``stream_error``: a request to the origin failed with
  ERR_QUIC_PROTOCOL_ERROR before its headers and was restarted without
  alt-svc (``HTTP_TRANSACTION_RESTART_AFTER_ERROR``, net_error -356:
  Chromium's retry over TCP, after which it marks QUIC broken);
- ``won``: per request whose controller started both jobs, the job bound to
  it (``protocol`` quic | tcp, ``conn_id`` ``job<source id>``);
- the evidence of the mechanism (docs/racing_chromium_mechanism.md §6):
  ``stream_cancelled`` above; ``stream_error`` also for a stream the client
  reset with another code than QUIC_STREAM_CANCELLED
  (``QUIC_SESSION_RST_STREAM_FRAME_SENT``); ``stream_reset``: the server
  reset a stream (``..._RST_STREAM_FRAME_RECEIVED``; after the client's own
  cancel of it, quic-go's answer to STOP_SENDING, says so); ``job_delayed`` /
  ``job_resumed``: the main (TCP) job held back for QUIC
  (``HTTP_STREAM_JOB_DELAYED`` / ``..._RESUMED``, ``value`` the delay, s);
  ``bound``: each request to the origin and what carried it
  (``HTTP_STREAM_REQUEST_BOUND_TO_QUIC_SESSION``: ``quic<session>``; or
  ``HTTP_STREAM_REQUEST_BOUND_TO_JOB``: ``job<id>``, quic or tcp by the job;
  ``detail`` the URL's path); ``close_frame``: a CONNECTION_CLOSE frame
  (``QUIC_SESSION_CONNECTION_CLOSE_FRAME_SENT`` / ``_RECEIVED``; ``detail``
  who, the QUIC error, its details).

Names of error codes come from the log's constants (``quicError``,
``quicRstStreamError``).

:func:`request_protocols`: per request to the origin, quic or tcp (a request
bound to a QUIC session, or to a job that uses QUIC, is quic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from nest_experiments.rundir.rows import RacingRow

ERR_ABORTED = -3
ERR_QUIC_PROTOCOL_ERROR = -356
QUIC_STREAM_CANCELLED = 6  # quic::QuicRstStreamErrorCode
IDLE_TIMEOUT = "QUIC_NETWORK_IDLE_TIMEOUT"


@dataclass(frozen=True, kw_only=True)
class Event:
    t_ms: float  # ms since the epoch
    name: str
    phase: str  # BEGIN | END | NONE
    source: int
    params: Mapping[str, Any]


def events(doc: Mapping[str, Any]) -> Iterator[Event]:
    """The log's events with their names and wall times."""
    consts = doc["constants"]
    names = {v: k for k, v in consts["logEventTypes"].items()}
    phases = {v: k.removeprefix("PHASE_") for k, v in consts["logEventPhase"].items()}
    offset = float(consts["timeTickOffset"])
    for e in doc.get("events", []):
        yield Event(t_ms=float(e["time"]) + offset, name=names.get(e["type"], "?"), phase=phases.get(e["phase"], "?"),
                    source=int(e["source"]["id"]), params=e.get("params") or {})


@dataclass
class _State:
    rows: list[RacingRow] = field(default_factory=list)
    controllers: set[int] = field(default_factory=set)  # ours
    jobs: dict[int, tuple[int, bool]] = field(default_factory=dict)  # job -> (controller, using QUIC)
    started: dict[str, float] = field(default_factory=dict)  # conn_id -> start (run s)
    connected: set[str] = field(default_factory=set)
    closed: set[str] = field(default_factory=set)
    net_errors: dict[str, int] = field(default_factory=dict)  # conn_id -> net_error of QUIC_SESSION_CLOSE_ON_ERROR
    requests: dict[int, str] = field(default_factory=dict)  # URL requests to the origin -> URL path
    bound: dict[int, int] = field(default_factory=dict)  # request -> the index of its ``bound`` row
    all_jobs: dict[int, bool] = field(default_factory=dict)  # any job -> using QUIC
    cancelled: set[tuple[str, int]] = field(default_factory=set)  # (conn_id, stream id) the client cancelled
    alt_svc: str | None = None
    broken: bool = False


def racing_rows(doc: Mapping[str, Any], origin: str, *, to_run: Callable[[float], float],
                quic_errors: Mapping[int, str] | None = None) -> list[RacingRow]:
    """``racing.csv`` rows of what Chromium did towards ``origin`` (``host:port``)."""
    consts = doc["constants"]
    errors = quic_errors or {v: k for k, v in consts.get("quicError", {}).items()}
    rst_errors = {QUIC_STREAM_CANCELLED: "QUIC_STREAM_CANCELLED",
                  **{v: k for k, v in consts.get("quicRstStreamError", {}).items()}}
    st = _State()
    for e in events(doc):
        t = to_run(e.t_ms / 1000)
        _controller(st, e, t, origin)
        _request(st, e, t, origin)
        _quic(st, e, t, origin, errors)
        _frames(st, e, t, errors, rst_errors)
        _tcp(st, e, t, origin)
    return st.rows


def _request(st: _State, e: Event, t: float, origin: str) -> None:
    """Path B: a request restarted without alt-svc after ERR_QUIC_PROTOCOL_ERROR before its headers
    (HttpNetworkTransaction::HandleIOError, net/http/http_network_transaction.cc)."""
    prefix = f"https://{origin}"
    if e.name == "URL_REQUEST_START_JOB" and e.phase == "BEGIN":
        if str(e.params.get("url", "")).startswith(f"{prefix}/"):
            st.requests[e.source] = str(e.params["url"]).removeprefix(prefix)
    elif e.name == "HTTP_STREAM_JOB" and e.phase == "BEGIN":
        st.all_jobs[e.source] = bool(e.params.get("using_quic"))
    elif e.name == "HTTP_STREAM_REQUEST_BOUND_TO_JOB" and e.source in st.requests and e.source not in st.bound:
        dep = int((e.params.get("source_dependency") or {}).get("id", -1))
        st.bound[e.source] = len(st.rows)  # a restarted request is bound again: its first binding is the one raced
        st.rows.append(RacingRow(t=t, event="bound", protocol="quic" if st.all_jobs.get(dep) else "tcp",
                                 conn_id=f"job{dep}", detail=st.requests[e.source]))
    elif e.name == "HTTP_STREAM_REQUEST_BOUND_TO_QUIC_SESSION" and e.source in st.requests:
        session = f"quic{int((e.params.get('source_dependency') or {}).get('id', -1))}"
        i = st.bound.get(e.source)
        if i is None:
            st.bound[e.source] = len(st.rows)
            st.rows.append(RacingRow(t=t, event="bound", protocol="quic", conn_id=session,
                                     detail=st.requests[e.source]))
        elif st.rows[i].protocol == "quic" and st.rows[i].conn_id.startswith("job"):  # its QUIC job's session
            st.rows[i] = replace(st.rows[i], conn_id=session)
    elif e.name == "HTTP_TRANSACTION_RESTART_AFTER_ERROR" and e.source in st.requests:
        if int(e.params.get("net_error", 0)) == ERR_QUIC_PROTOCOL_ERROR:
            st.rows.append(RacingRow(t=t, event="stream_error", protocol="quic", conn_id=f"request{e.source}",
                                     detail="ERR_QUIC_PROTOCOL_ERROR before the response headers: "
                                            "restarted without alt-svc"))


def _controller(st: _State, e: Event, t: float, origin: str) -> None:
    p = e.params
    if e.name == "HTTP_STREAM_JOB_CONTROLLER" and e.phase == "BEGIN":
        if str(p.get("url", "")).startswith(f"https://{origin}/"):
            st.controllers.add(e.source)
    elif e.name == "HTTP_STREAM_JOB" and e.phase == "BEGIN" and p.get("type") in ("main", "alternative"):
        controller = int((p.get("source_dependency") or {}).get("id", -1))
        if controller in st.controllers:
            st.jobs[e.source] = (controller, bool(p.get("using_quic")))
    elif e.name == "HTTP_STREAM_JOB_CONTROLLER_ALT_SVC_FOUND" and e.source in st.controllers:
        _alt_svc(st, t, str(p.get("alt_svc", "")).split(", expires")[0], bool(p.get("is_broken")))
    elif e.name in ("HTTP_STREAM_JOB_DELAYED", "HTTP_STREAM_JOB_RESUMED") and \
            (e.source in st.controllers or e.source in st.jobs):  # JobController::ResumeMainJobLater / ResumeMainJob
        delay = p.get("delay", p.get("delay_ms"))
        st.rows.append(RacingRow(t=t, event="job_delayed" if e.name.endswith("DELAYED") else "job_resumed",
                                 protocol="tcp", conn_id=f"controller{e.source}" if e.source in st.controllers
                                 else f"job{e.source}", value=None if delay is None else float(delay) / 1000))
    elif e.name == "HTTP_STREAM_JOB_BOUND_TO_REQUEST" and e.source in st.jobs:
        controller, quic = st.jobs[e.source]
        if sum(c == controller for c, _ in st.jobs.values()) >= 2:  # a race: both jobs were started
            st.rows.append(RacingRow(t=t, event="won", protocol="quic" if quic else "tcp", conn_id=f"job{e.source}"))


def _alt_svc(st: _State, t: float, value: str, broken: bool) -> None:
    if value != st.alt_svc:
        st.rows.append(RacingRow(t=t, event="alt_svc", detail=value))
        st.alt_svc = value
    if broken != st.broken:
        st.rows.append(RacingRow(t=t, event="broken" if broken else "recovered", protocol="quic",
                                 detail="alt-svc marked broken" if broken else ""))
        st.broken = broken


def _quic(st: _State, e: Event, t: float, origin: str, errors: Mapping[int, str]) -> None:
    conn = f"quic{e.source}"
    p = e.params
    if e.name == "QUIC_SESSION" and e.phase == "BEGIN":
        if f"{p.get('host')}:{p.get('port')}" == origin:
            st.started[conn] = t
            st.rows.append(RacingRow(t=t, event="job_started", protocol="quic", conn_id=conn))
    elif conn not in st.started:
        return
    elif e.name == "QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE" and conn not in st.connected:
        st.connected.add(conn)
        st.rows.append(RacingRow(t=t, event="connected", protocol="quic", conn_id=conn, value=t - st.started[conn]))
    elif e.name == "QUIC_SESSION_CLOSE_ON_ERROR":
        st.net_errors[conn] = int(p.get("net_error", 0))
    elif e.name == "QUIC_SESSION_CLOSED" and conn not in st.closed:
        st.closed.add(conn)
        error = errors.get(int(p.get("quic_error", 0)), str(p.get("quic_error", "")))
        detail = f"{error}{' (from peer)' if p.get('from_peer') else ''}: {p.get('details', '')}".rstrip(": ")
        if conn not in st.connected:
            st.rows.append(RacingRow(t=t, event="failed", protocol="quic", conn_id=conn, detail=detail))
        elif error == IDLE_TIMEOUT:
            st.rows.append(RacingRow(t=t, event="idle_close", protocol="quic", conn_id=conn, detail=detail))
        elif st.net_errors.get(conn) != ERR_ABORTED:
            st.rows.append(RacingRow(t=t, event="conn_closed", protocol="quic", conn_id=conn, detail=detail))


def _frames(st: _State, e: Event, t: float, errors: Mapping[int, str], rst_errors: Mapping[int, str]) -> None:
    """RST_STREAM (RESET_STREAM) and CONNECTION_CLOSE frames of our QUIC sessions (QuicConnectionLogger)."""
    conn = f"quic{e.source}"
    if conn not in st.started:
        return
    p = e.params
    if e.name.startswith("QUIC_SESSION_RST_STREAM_FRAME_"):
        code = int(p.get("quic_rst_stream_error", -1))
        stream = int(p.get("stream_id", -1))
        h3 = f" (HTTP/3 0x{int(p['ietf_error_code']):x})" if "ietf_error_code" in p else ""
        what = f"{rst_errors.get(code, str(code))}{h3} on stream {stream}"
        if e.name.endswith("_SENT"):
            if (conn, stream) in st.cancelled:  # the same frame again: a retransmission (its packet was not acked)
                return
            st.cancelled.add((conn, stream))
            event = "stream_cancelled" if code == QUIC_STREAM_CANCELLED else "stream_error"  # QuicHttpStream::Close
            st.rows.append(RacingRow(t=t, event=event, protocol="quic", conn_id=conn,
                                     detail=what if event == "stream_cancelled" else f"RST_STREAM sent: {what}"))
        elif e.name.endswith("_RECEIVED"):
            after = " (after our cancel of it)" if (conn, stream) in st.cancelled else ""
            st.rows.append(RacingRow(t=t, event="stream_reset", protocol="quic", conn_id=conn, detail=what + after))
    elif e.name.startswith("QUIC_SESSION_CONNECTION_CLOSE_FRAME_"):
        who = "sent" if e.name.endswith("_SENT") else "received"
        error = errors.get(int(p.get("quic_error", -1)), str(p.get("quic_error", "")))
        st.rows.append(RacingRow(t=t, event="close_frame", protocol="quic", conn_id=conn,
                                 detail=f"{who}: {error}: {p.get('details', '')}".rstrip(": ")))


def _tcp(st: _State, e: Event, t: float, origin: str) -> None:
    conn = f"tcp{e.source}"
    p = e.params
    if e.name == "TCP_CONNECT" and e.phase == "BEGIN":
        if origin in p.get("address_list", []):
            st.started[conn] = t
            st.rows.append(RacingRow(t=t, event="job_started", protocol="tcp", conn_id=conn))
    elif conn not in st.started or conn in st.connected:
        return
    elif e.name in ("TCP_CONNECT", "SSL_CONNECT") and e.phase == "END" and p.get("net_error"):
        st.connected.add(conn)  # done with it
        st.rows.append(RacingRow(t=t, event="failed", protocol="tcp", conn_id=conn,
                                 detail=f"{e.name} net_error {p['net_error']}"))
    elif e.name == "SSL_CONNECT" and e.phase == "END":
        st.connected.add(conn)
        st.rows.append(RacingRow(t=t, event="connected", protocol="tcp", conn_id=conn, value=t - st.started[conn]))


def request_protocols(doc: Mapping[str, Any], origin: str) -> list[tuple[str, str]]:
    """(url, quic | tcp) of every request to ``origin`` that got a stream, in the order they started."""
    urls: dict[int, str] = {}
    jobs: dict[int, bool] = {}
    out: dict[int, str] = {}
    for e in events(doc):
        p = e.params
        if e.name == "URL_REQUEST_START_JOB" and e.phase == "BEGIN" and str(p.get("url", "")).startswith(
                f"https://{origin}/"):
            urls[e.source] = str(p["url"])
        elif e.name == "HTTP_STREAM_JOB" and e.phase == "BEGIN":
            jobs[e.source] = bool(p.get("using_quic"))
        elif e.source in urls and e.source not in out:
            if e.name == "HTTP_STREAM_REQUEST_BOUND_TO_QUIC_SESSION":
                out[e.source] = "quic"
            elif e.name == "HTTP_STREAM_REQUEST_BOUND_TO_JOB":
                job = int((p.get("source_dependency") or {}).get("id", -1))
                out[e.source] = "quic" if jobs.get(job) else "tcp"
    return [(urls[s], out[s]) for s in urls if s in out]
