"""``racing.csv``: every QUIC/TCP connection-racing event of a session, one row each.

Written by our player's ``race`` transport (its policies: ``chromium``,
``firefox``, ``quic_only``, ``tcp_only``, ``dynamic``) and read back from
Chromium's NetLog for the browser reference, in one schema so that the two
can be put side by side. Times are on the run clock (s).

Events (``event``):

- ``job_started``: a connection attempt began (``protocol`` quic | tcp);
- ``connected``: its handshake completed (``value``: handshake time, s);
- ``failed``: it failed (``detail``: why: handshake timeout, reset, ...);
- ``won``: it was chosen to carry requests (the race's winner);
- ``broken``: QUIC marked broken for the origin (``detail``: the reason);
- ``backoff``: QUIC will not be tried before ``value`` s from now;
- ``recovered``: QUIC is no longer marked broken;
- ``idle_close``: an idle connection was closed (``value``: idle time, s);
- ``alt_svc``: an ``alt-svc`` header advertised h3 (``detail``: its value);
- ``probe_rtt``: one RTT probe (``value``: RTT, s) over ``protocol``;
- ``decision``: a policy's decision (``detail``: e.g. ``race`` | ``tcp_only``;
  ``value``: the ratio behind it, where there is one);
- ``stream_error``: a request failed on a connection (``detail``: the error
  and whether the response headers had come);
- ``stream_cancelled``: the player cancelled a QUIC request (its stream
  reset, the connection kept: ``detail``: why);
- ``conn_closed``: an open connection closed under requests (``detail``:
  why, e.g. ``QUIC_TOO_MANY_RTOS``; ``value``: its smoothed RTT, s, where
  known).

Read from Chromium's NetLog only (:mod:`~nest_experiments.dash.players.netlog`), the evidence of its
mechanism (docs/racing_chromium_mechanism.md):

- ``stream_reset``: the server reset a QUIC stream (``detail``: its error
  code, and whether the player had cancelled that stream first);
- ``job_delayed`` / ``job_resumed``: the TCP (main) job held back for QUIC
  (``value``: the delay, s);
- ``bound``: a request bound to a connection (``protocol``, ``conn_id``: the
  QUIC session or the job; ``detail``: the URL's path);
- ``close_frame``: a QUIC CONNECTION_CLOSE frame sent or received
  (``detail``: who, the error and its details).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from nest_experiments.dash.core.records import write_csv

EVENTS = ("job_started", "connected", "failed", "won", "broken", "backoff", "recovered", "idle_close", "alt_svc",
          "probe_rtt", "decision", "stream_error", "stream_cancelled", "conn_closed", "stream_reset", "job_delayed",
          "job_resumed", "bound", "close_frame")
PROTOCOLS = ("quic", "tcp", "")


@dataclass(frozen=True, kw_only=True)
class RacingRow:
    t: float  # run clock, s
    event: str  # one of EVENTS
    protocol: str = ""  # quic | tcp | "" (an event of the origin, not of one protocol)
    conn_id: str = ""  # the connection (job) it concerns, where there is one
    value: float | None = None  # the event's number (see the module's doc)
    detail: str = ""

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise ValueError(f"racing event {self.event!r}: not one of {', '.join(EVENTS)}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"racing protocol {self.protocol!r}: quic, tcp or empty")


RACING_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RacingRow))


def write_racing(path: Path, rows: Iterable[RacingRow]) -> None:
    write_csv(path, RACING_FIELDS, (astuple(r) for r in rows))


def read_racing(path: Path) -> list[RacingRow]:
    with open(path, newline="") as f:
        return [
            RacingRow(t=float(d["t"]), event=d["event"], protocol=d["protocol"], conn_id=d["conn_id"],
                      value=float(d["value"]) if d["value"] else None, detail=d["detail"])
            for d in csv.DictReader(f)
        ]
