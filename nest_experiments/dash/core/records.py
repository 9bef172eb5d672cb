"""Rows the DASH code produces: ``segments.csv`` (DESIGN.md §4) and ABR decisions.

Unknown values are ``None`` and written as empty CSV cells (GPAC logs, for
instance, carry no request times unless ``-log-utc`` was used).
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

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
    """One ABR choice: its inputs and output (``abr.csv``)."""

    t: float
    stream: str
    index: int
    algorithm: str
    buffer_s: float
    throughput_bps: float | None  # the algorithm's estimate (None: it used none)
    level: int
    bitrate_bps: int


ABANDON = "abandon"  # DecisionRow.algorithm of a switch that abandoned a request (dash.js's AbandonRequestsRule)
TIMEOUT = "timeout"  # DecisionRow.algorithm of a request cancelled by dash.js's XHR timeout (same level again)


def abandoned(decisions: Sequence[DecisionRow]) -> int:
    """How many requests a session abandoned."""
    return sum(d.algorithm == ABANDON for d in decisions)


SEGMENT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SegmentRow))
DECISION_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(DecisionRow))


def write_csv(path: Path, header: Sequence[str], rows: Iterable[tuple[object, ...]]) -> None:
    """Write a CSV to a temporary name in the same folder, then rename it."""
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
    write_csv(path, SEGMENT_FIELDS, (astuple(r) for r in rows))


def write_decisions(path: Path, rows: Iterable[DecisionRow]) -> None:
    write_csv(path, DECISION_FIELDS, (astuple(r) for r in rows))


def read_segments(path: Path) -> list[SegmentRow]:
    """Read a ``segments.csv`` back (empty cells -> None)."""
    with open(path, newline="") as f:
        return [_segment_from_csv(d) for d in csv.DictReader(f)]


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
