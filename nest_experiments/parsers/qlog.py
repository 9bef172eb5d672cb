"""quic-go's qlog (JSON-SEQ, ``.sqlog``) -> ``quic.csv`` rows: one connection's loss recovery (pure).

quic-go writes a qlog per connection when asked: Caddy (its HTTP/3) into ``$QLOGDIR/<odcid>_server.sqlog``, every
event of the connection; the quic-go fetcher (``nest-h3get -qlog FILE``) only its recovery events. Records are
separated by the byte 0x1E. The first is the header: ``trace.vantage_point.type`` (client or server),
``trace.common_fields.group_id`` (the original destination connection ID) and ``reference_time.wall_clock_time``
(RFC 3339, the wall clock at the trace's start); each event's ``time`` is milliseconds after that on the monotonic
clock, its ``name`` ``category:event``. Kept, as :mod:`nest_experiments.dash.http.recovery` keeps aioquic's:

- ``recovery:metrics_updated`` with a ``congestion_window`` -> a ``metrics`` row (cwnd, bytes_in_flight, and the
  RTTs it carries: latest / min / smoothed RTT and rtt_variance, ms already), thinned to one per
  :data:`~nest_experiments.dash.http.recovery.MIN_GAP_S` per connection; quic-go logs no ssthresh (empty);
- ``recovery:metrics_updated`` with only ``pto_count`` (quic-go's PTOCountUpdated): the PTO count the next rows carry;
- ``recovery:packet_lost`` -> a ``lost`` row (the header's ``packet_number``), always kept, ``lost_total`` counting.

Times are moved onto the run clock with ``wall_t0`` (the wall clock at the run's t = 0, as for Caddy's access log).
A last record cut short (the process killed while writing) is dropped; a record before it that is not JSON is a
:class:`~nest_experiments.errors.RunError` naming the record.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from nest_experiments.dash.http.recovery import MIN_GAP_S
from nest_experiments.errors import RunError

RECORD_SEPARATOR = b"\x1e"
METRICS, PTO, LOST = "recovery:metrics_updated", "pto_count", "recovery:packet_lost"
_FRACTION = re.compile(r"(\.\d{6})\d+")  # Go's RFC 3339 carries ns; Python's fromisoformat takes us


def reference_wall(header: dict[str, Any]) -> float:
    """The header's reference time as seconds since the epoch."""
    text = str(header["trace"]["common_fields"]["reference_time"]["wall_clock_time"])
    return datetime.fromisoformat(_FRACTION.sub(r"\1", text).replace("Z", "+00:00")).timestamp()


def _ms(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def recovery_rows(data: bytes, *, wall_t0: float, side: str = "", what: str = "qlog") -> list[dict[str, Any]]:
    """The ``quic.csv`` rows (:data:`nest_experiments.rundir.rows.QUIC_FIELDS`) of one qlog's connection, in
    order; ``side`` defaults to the trace's vantage point. No header (an empty file): no rows."""
    records = [r for r in data.split(RECORD_SEPARATOR) if r.strip()]
    if not records:
        return []
    try:
        header = json.loads(records[0])
        base = reference_wall(header) - wall_t0
        trace = header["trace"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RunError(f"{what}: no qlog header in its first record ({exc})") from exc
    side = side or str((trace.get("vantage_point") or {}).get("type", ""))
    conn = str((trace.get("common_fields") or {}).get("group_id", ""))[:16]
    rows: list[dict[str, Any]] = []
    lost, pto, last_t = 0, 0, -float("inf")
    for number, raw in enumerate(records[1:], 2):
        if b'"recovery:' not in raw:  # most of a server's qlog: packets sent and received
            continue
        try:
            event = json.loads(raw)
        except ValueError as exc:
            if number == len(records):
                break  # cut short while written
            raise RunError(f"{what}, record {number}: not JSON ({exc})") from exc
        name, d = event.get("name"), event.get("data") or {}
        t = round(base + float(event.get("time", 0.0)) / 1e3, 4)
        if name == METRICS and "congestion_window" not in d:
            pto = int(d.get(PTO, pto))
            continue
        if name == LOST:
            lost += 1
        elif name != METRICS or t - last_t < MIN_GAP_S:
            continue
        last_t = t
        rows.append({"t": t, "side": side, "conn": conn, "event": "lost" if name == LOST else "metrics",
                     "cwnd": d.get("congestion_window"), "bytes_in_flight": d.get("bytes_in_flight"),
                     "ssthresh": None, "latest_rtt_ms": _ms(d.get("latest_rtt")), "min_rtt_ms": _ms(d.get("min_rtt")),
                     "smoothed_rtt_ms": _ms(d.get("smoothed_rtt")), "rtt_variance_ms": _ms(d.get("rtt_variance")),
                     "packet_number": (d.get("header") or {}).get("packet_number"), "lost_total": lost,
                     "pto_count": pto})
    return rows
