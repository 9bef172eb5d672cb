"""QUIC's side of the timeline: aioquic's own recovery events, as rows on the run clock (``quic.csv``).

aioquic logs its loss recovery through its qlog interface (``QuicConfiguration.quic_logger``): category
``recovery``, ``metrics_updated`` (cwnd, bytes in flight, ssthresh, and with each RTT sample latest / min /
smoothed RTT and its variance) and ``packet_lost`` (each lost packet's number). :func:`recovery_logger` is a
``quic_logger`` whose traces are the library's own (``aioquic.quic.logger.QuicLoggerTrace``: every ``encode_*`` the
connection calls works as in a qlog) but keep only those events, thinned to one ``metrics`` row per connection per
:data:`MIN_GAP_S` (a lost packet and the RTT sample after a gap are always kept), written as they come; no qlog
JSON of every packet is held in memory or written.

A loss timeout (PTO) is not an event in aioquic's qlog; it shows as ``pto_count`` rising, read off the connection's
recovery when each row is written (``QuicPacketRecovery._pto_count``, aioquic 1.7.2 as pinned).
Our player over ``h3_client = "aioquic"`` writes the receiver's side the same way (``side`` client, its rows named
by the connection's first destination CID). qh3 keeps its recovery in Rust and logs none of it (its ``QuicConnectionCore`` exposes only a summary): its
connections have no rows. The Go programs' rows come from quic-go's own qlog (:mod:`nest_experiments.parsers.qlog`:
Caddy's through ``QLOGDIR``, the quic-go fetcher's through ``nest-h3get -qlog``), thinned by the same
:data:`MIN_GAP_S`.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path
from typing import IO, Any

from nest_experiments.rundir.rows import QUIC_FIELDS

MIN_GAP_S = 0.05  # at most 20 metrics rows per connection per second (~4,000 in a 200 s session)


class RecoverySink:
    """``quic.csv`` rows of one process (``side``: client or server), times on the run clock (``t0``:
    ``time.monotonic()`` at the run's t = 0). Written to ``FILE.partial``, each row flushed (the run reads it while
    the server still runs, as the access log), renamed to ``FILE`` on close."""

    def __init__(self, path: Path, *, side: str, t0: float) -> None:
        self.side, self.t0, self.path = side, t0, path
        self._fh: IO[str] = open(partial(path), "w", newline="")  # noqa: SIM115
        self._writer = csv.DictWriter(self._fh, fieldnames=list(QUIC_FIELDS), extrasaction="ignore")
        self._writer.writeheader()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def write(self, row: dict[str, Any]) -> None:
        if self._fh.closed:
            return
        self._writer.writerow({"side": self.side, **row})
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
            os.replace(partial(self.path), self.path)


def partial(path: Path) -> Path:
    """Where a sink writes until it closes."""
    return path.with_name(path.name + ".partial")


def _ms(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)  # aioquic's encode_time: ms already


def recovery_logger(sink: RecoverySink) -> Any:
    """A ``quic_logger`` for aioquic's ``QuicConfiguration`` writing each connection's recovery into ``sink``."""
    from aioquic.quic.logger import QuicLoggerTrace

    class _Trace(QuicLoggerTrace):  # type: ignore[misc]
        def __init__(self, *, is_client: bool, odcid: bytes) -> None:
            super().__init__(is_client=is_client, odcid=odcid)
            self.conn = odcid.hex()[:16]
            self.last_t = -float("inf")
            self.lost = 0
            self.recovery: Any = None  # the connection's QuicPacketRecovery, for pto_count (set by bind)

        def log_event(self, *, category: str, event: str, data: dict[str, Any]) -> None:
            if category != "recovery" or event not in ("metrics_updated", "packet_lost"):
                return
            t = sink.now()
            if event == "packet_lost":
                self.lost += 1
            elif t - self.last_t < MIN_GAP_S:
                return
            self.last_t = t
            pto = getattr(self.recovery, "_pto_count", None)
            sink.write({"t": round(t, 4), "conn": self.conn, "event": "lost" if event == "packet_lost" else "metrics",
                        "cwnd": data.get("cwnd"), "bytes_in_flight": data.get("bytes_in_flight"),
                        "ssthresh": data.get("ssthresh"), "latest_rtt_ms": _ms(data.get("latest_rtt")),
                        "min_rtt_ms": _ms(data.get("min_rtt")), "smoothed_rtt_ms": _ms(data.get("smoothed_rtt")),
                        "rtt_variance_ms": _ms(data.get("rtt_variance")), "packet_number": data.get("packet_number"),
                        "lost_total": self.lost, "pto_count": pto})

    class _Logger:
        def __init__(self) -> None:
            self.traces: list[_Trace] = []

        def start_trace(self, is_client: bool, odcid: bytes) -> _Trace:
            trace = _Trace(is_client=is_client, odcid=odcid)
            self.traces.append(trace)
            return trace

        def end_trace(self, trace: _Trace) -> None:
            if trace in self.traces:
                self.traces.remove(trace)

    return _Logger()


def bind(connection: Any, conn: str | None = None) -> None:
    """Point the connection's trace at its recovery (for ``pto_count``) and, with ``conn``, name its rows as the
    access log names the connection: call once the ``QuicConnection`` exists."""
    trace = getattr(connection, "_quic_logger", None)
    if trace is not None and hasattr(trace, "recovery"):
        trace.recovery = getattr(connection, "_loss", None)
        if conn is not None:
            trace.conn = conn
