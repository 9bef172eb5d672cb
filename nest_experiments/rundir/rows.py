"""The row schemas of a run folder's player files (DESIGN.md §4): ``segments.csv``, ``abr_decisions.csv``,
``racing.csv`` and the DASH server's access log, their readers and their atomic writers.

Below :mod:`nest_experiments.rundir` and below ``dash``: the players (``dash``) write these rows and the analysis
reads them, each through the names here; this module imports nothing of either. Unknown values are ``None`` and
written as empty CSV cells (GPAC logs, for instance, carry no request times unless ``-log-utc`` was used).

``racing.csv`` holds every QUIC/TCP connection-racing event of a session, one row each, written by our player's
``race`` transport and read back from Chromium's NetLog in one schema (the events: :mod:`nest_experiments.dash.racing_log`).
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

# QUIC recovery (dash.http.recovery): one row per thinned metrics update or lost packet of a connection, run clock
QUIC_FIELDS = ("t", "side", "conn", "event", "cwnd", "bytes_in_flight", "ssthresh", "latest_rtt_ms", "min_rtt_ms",
               "smoothed_rtt_ms", "rtt_variance_ms", "packet_number", "lost_total", "pto_count")

# the server's access log: one row per response, times on the server's clock
ACCESS_LOG_FIELDS = ("t_arrival", "t_first_byte_sent", "t_last_byte_sent", "transport", "path", "status", "bytes",
                     "conn_id")


@dataclass(frozen=True, kw_only=True)
class SegmentRow:
    """One media segment: the DESIGN.md §4 ``segments.csv`` schema, in order."""

    stream: str  # "video" | "audio"
    index: int  # 0-based segment index
    level: int | None  # 0-based level in the ascending ladder
    bitrate_bps: int | None  # the representation's declared bandwidth
    bytes: int
    t_request: float | None
    t_first_byte: float | None
    t_last_byte: float | None
    buffer_s: float | None  # buffer of this stream right after the segment arrived
    stall_s: float = 0.0  # stall time that ended with this segment
    transport: str = ""


@dataclass(frozen=True, kw_only=True)
class DecisionRow:
    """One ABR choice: its inputs and output (``abr_decisions.csv``)."""

    t: float
    stream: str
    index: int
    algorithm: str
    buffer_s: float
    throughput_bps: float | None  # the algorithm's estimate (None: it used none)
    level: int
    bitrate_bps: int


SEGMENT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SegmentRow))
DECISION_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(DecisionRow))

RACING_EVENTS = ("job_started", "connected", "failed", "won", "broken", "backoff", "recovered", "idle_close",
                 "alt_svc", "probe_rtt", "decision", "stream_error", "stream_cancelled", "conn_closed", "stream_reset",
                 "job_delayed", "job_resumed", "bound", "close_frame")
RACING_PROTOCOLS = ("quic", "tcp", "")


@dataclass(frozen=True, kw_only=True)
class RacingRow:
    """One connection-racing event (``racing.csv``)."""

    t: float  # run clock, s
    event: str  # one of RACING_EVENTS
    protocol: str = ""  # quic | tcp | "" (an event of the origin, not of one protocol)
    conn_id: str = ""  # the connection (job) it concerns, where there is one
    value: float | None = None  # the event's number (see dash.racing_log)
    detail: str = ""

    def __post_init__(self) -> None:
        if self.event not in RACING_EVENTS:
            raise ValueError(f"racing event {self.event!r}: not one of {', '.join(RACING_EVENTS)}")
        if self.protocol not in RACING_PROTOCOLS:
            raise ValueError(f"racing protocol {self.protocol!r}: quic, tcp or empty")


RACING_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RacingRow))


def write_rows(path: Path, header: Sequence[str], rows: Iterable[tuple[object, ...]]) -> None:
    """Write a CSV of tuples to a temporary name in the same folder, then rename it (``None``: an empty cell)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(tuple("" if v is None else v for v in row) for row in rows)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_segments(path: Path, rows: Iterable[SegmentRow]) -> None:
    write_rows(path, SEGMENT_FIELDS, (astuple(r) for r in rows))


def write_decisions(path: Path, rows: Iterable[DecisionRow]) -> None:
    write_rows(path, DECISION_FIELDS, (astuple(r) for r in rows))


def write_racing(path: Path, rows: Iterable[RacingRow]) -> None:
    write_rows(path, RACING_FIELDS, (astuple(r) for r in rows))


def read_segments(path: Path) -> list[SegmentRow]:
    """Read a ``segments.csv`` back (empty cells -> None)."""
    with open(path, newline="") as f:
        return [_segment_from_csv(d) for d in csv.DictReader(f)]


def read_racing(path: Path) -> list[RacingRow]:
    with open(path, newline="") as f:
        return [
            RacingRow(t=float(d["t"]), event=d["event"], protocol=d["protocol"], conn_id=d["conn_id"],
                      value=float(d["value"]) if d["value"] else None, detail=d["detail"])
            for d in csv.DictReader(f)
        ]


def _float(d: dict[str, str], key: str) -> float | None:
    return float(d[key]) if d.get(key, "") != "" else None


def _int(d: dict[str, str], key: str) -> int | None:
    return int(d[key]) if d.get(key, "") != "" else None


def _segment_from_csv(d: dict[str, str]) -> SegmentRow:
    return SegmentRow(
        stream=d["stream"],
        index=int(d["index"]),
        level=_int(d, "level"),
        bitrate_bps=_int(d, "bitrate_bps"),
        bytes=int(d["bytes"]),
        t_request=_float(d, "t_request"),
        t_first_byte=_float(d, "t_first_byte"),
        t_last_byte=_float(d, "t_last_byte"),
        buffer_s=_float(d, "buffer_s"),
        stall_s=float(d.get("stall_s") or 0.0),
        transport=d.get("transport", ""),
    )
