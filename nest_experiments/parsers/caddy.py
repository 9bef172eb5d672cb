"""Caddy's JSON access log -> rows of our DASH server's access log (pure).

Caddy 2.6 writes one JSON object per response (logger ``http.log.access...``,
message ``handled request``) when its handler returns::

    {"level":"info","ts":1795506443.128375,"logger":"http.log.access.dash","msg":"handled request",
     "request":{"remote_ip":"10.0.1.1","remote_port":"36180","proto":"HTTP/3.0","method":"GET",
                "uri":"/seg.m4s","tls":{...}},"duration":2.003261214,"size":20000000,"status":200,...}

``ts`` is the wall clock (seconds since the epoch) when the entry was
written, ``duration`` the seconds from the request's arrival to then, and
``size`` the body bytes written. Each row has the columns of
:data:`nest_experiments.rundir.rows.ACCESS_LOG_FIELDS`: ``t_arrival`` =
``ts - duration`` and ``t_last_byte_sent`` = ``ts`` (the last body byte handed
to the connection: the kernel's socket for TCP, quic-go's stream buffer for
QUIC), both minus ``wall_t0`` (the wall clock at the run's t = 0); Caddy logs
no time of its first byte, so ``t_first_byte_sent`` is empty. ``transport``
is ``h3``, ``h2``, ``https`` (HTTP/1.1 over TLS) or ``tcp``; ``conn_id`` names
the client's address and port, the same for every request of a connection.
"""

from __future__ import annotations

import json
from typing import Any

from nest_experiments.errors import RunError
from nest_experiments.rundir.rows import ACCESS_LOG_FIELDS

FIELDS = ACCESS_LOG_FIELDS
_PROTOCOLS = {"HTTP/3.0": "h3", "HTTP/3": "h3", "HTTP/2.0": "h2", "HTTP/2": "h2"}


def transport_of(request: dict[str, Any]) -> str:
    """Our transport name for a request's ``proto`` (and whether it came over TLS)."""
    proto = str(request.get("proto", ""))
    if proto in _PROTOCOLS:
        return _PROTOCOLS[proto]
    return "https" if request.get("tls") else "tcp"


def access_row(entry: dict[str, Any], *, wall_t0: float) -> dict[str, Any]:
    """One access-log entry as a row (times on the run clock, 6 decimals like our server's log)."""
    request = entry["request"]
    t_end = float(entry["ts"]) - wall_t0
    host = request.get("remote_ip", "")
    host = f"[{host}]" if ":" in host else host
    return {
        "t_arrival": f"{t_end - float(entry['duration']):.6f}",
        "t_first_byte_sent": "",
        "t_last_byte_sent": f"{t_end:.6f}",
        "transport": transport_of(request),
        "path": request["uri"],
        "status": int(entry["status"]),
        "bytes": int(entry["size"]),
        "conn_id": f"{transport_of(request)}-{host}:{request.get('remote_port', '')}",
    }


def access_rows(text: str, *, wall_t0: float, what: str = "caddy access log") -> list[dict[str, Any]]:
    """Every ``handled request`` entry of ``text``, in the order written; other lines are skipped.

    A line that is not JSON, or an entry without its fields, is a :class:`RunError` naming the line.
    A last line cut short (Caddy killed while writing) is dropped.
    """
    rows = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            if number == len(lines) and not text.endswith("\n"):
                break
            raise RunError(f"{what}, line {number}: not JSON ({exc})") from exc
        if not isinstance(entry, dict) or entry.get("msg") != "handled request":
            continue
        try:
            rows.append(access_row(entry, wall_t0=wall_t0))
        except (KeyError, TypeError, ValueError) as exc:
            raise RunError(f"{what}, line {number}: entry without {exc}") from exc
    return rows
