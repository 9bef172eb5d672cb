"""QoE figures from ``segments.csv`` rows (definitions: DESIGN.md §4).

Per stream (``video``, ``audio``) and per session (both):

- ``avg_bitrate_bps``: mean declared bitrate of the segments;
- ``switches``: level changes between consecutive segments of a stream (the
  first choice is not a switch); the session sums the streams;
- ``avg_throughput_bps``: mean over segments of ``8 bytes / (t_last_byte - t_first_byte)``;
- ``avg_buffer_s``: mean buffer right after each segment arrived;
- ``stall_count`` / ``stall_s``: stalls, attributed to the stream whose
  segment ended them (``stall_s`` column), plus a stall still going on when
  the session stopped (:class:`EndStall`, ``qoe.json``'s ``stall_at_end``;
  no segment ended it), on the stream that ran empty; the session sums them;
- ``startup_delay_s``: session only (given, or derived: the first time every
  stream had ``threshold_s`` buffered, minus the first request);
- ``app_rtt_s``: mean ``t_last_byte - t_request``;
  ``app_jitter_s``: mean ``|RTT(i) - RTT(i-1)|`` over consecutive segments of a stream;
  ``response_latency_s``: mean ``t_first_byte - t_request``;
- ``qoe``: eq. (1) of the ABR paper with linear ``q(R) = R`` in Mbit/s:
  ``sum q(R_n) - 4.3 x stall_s - sum |q(R_n+1) - q(R_n)|`` (``REBUF_PENALTY``
  4.3 and smoothness weight 1 from the Pensieve/MPC code). Per stream with the
  stream's own stall time, so that the streams' QoE add up to the session's.

Values that the rows do not carry (``None``, e.g. GPAC logs without times)
are skipped; a figure with no values at all is ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nest_experiments.rundir.rows import SegmentRow

REBUFFER_PENALTY = 4.3
SMOOTH_PENALTY = 1.0


@dataclass(frozen=True, kw_only=True)
class QoeSummary:
    """The QoE figures of one stream or of the session."""

    segments: int
    avg_bitrate_bps: float | None
    switches: int
    avg_throughput_bps: float | None
    avg_buffer_s: float | None
    stall_count: int
    stall_s: float
    startup_delay_s: float | None
    app_rtt_s: float | None
    app_jitter_s: float | None
    response_latency_s: float | None
    qoe: float


@dataclass(frozen=True, kw_only=True)
class EndStall:
    """A stall that no segment ended: the session stopped (duration limit, SIGTERM) while it went on."""

    stream: str  # the stream whose buffer ran empty
    t_start: float
    duration_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"stream": self.stream, "t_start": self.t_start, "duration_s": self.duration_s}

    @classmethod
    def from_dict(cls, d: Any) -> EndStall | None:
        """``qoe.json``'s ``stall_at_end`` (None, absent or malformed: no stall at the end)."""
        try:
            return cls(stream=str(d["stream"]), t_start=float(d["t_start"]), duration_s=float(d["duration_s"]))
        except (TypeError, KeyError, ValueError):
            return None


def mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def qoe_eq1(bitrates_bps: Sequence[float], stall_s: float, *, mu: float = REBUFFER_PENALTY) -> float:
    """ABR paper eq. (1), linear q(R) = R in Mbit/s."""
    q = [b / 1e6 for b in bitrates_bps]
    smooth = sum(abs(b - a) for a, b in zip(q, q[1:], strict=False))
    return sum(q) - mu * stall_s - SMOOTH_PENALTY * smooth


def rtt_s(row: SegmentRow) -> float | None:
    if row.t_last_byte is None or row.t_request is None:
        return None
    return row.t_last_byte - row.t_request


def response_latency_s(row: SegmentRow) -> float | None:
    if row.t_first_byte is None or row.t_request is None:
        return None
    return row.t_first_byte - row.t_request


def throughput_bps(row: SegmentRow) -> float | None:
    if row.t_last_byte is None or row.t_first_byte is None or row.t_last_byte <= row.t_first_byte:
        return None
    return 8 * row.bytes / (row.t_last_byte - row.t_first_byte)


def switches(rows: Sequence[SegmentRow]) -> int:
    """Level changes between consecutive segments of one stream (rows in index order)."""
    levels = [r.level for r in rows if r.level is not None]
    return sum(1 for a, b in zip(levels, levels[1:], strict=False) if a != b)


def jitter_s(rows: Sequence[SegmentRow]) -> list[float]:
    """``|RTT(i) - RTT(i-1)|`` for consecutive segments of one stream."""
    rtts = [rtt_s(r) for r in rows]
    return [abs(b - a) for a, b in zip(rtts, rtts[1:], strict=False) if a is not None and b is not None]


def by_stream(rows: Iterable[SegmentRow]) -> dict[str, list[SegmentRow]]:
    """Rows grouped by stream, each group in segment-index order."""
    groups: dict[str, list[SegmentRow]] = {}
    for row in rows:
        groups.setdefault(row.stream, []).append(row)
    return {k: sorted(v, key=lambda r: r.index) for k, v in groups.items()}


def implied_stalls(rows: Iterable[SegmentRow], *, segment_s: float, threshold_s: float = 1.0) -> list[tuple[float, float]]:
    """The stalls ``(start, end)`` that the segments' arrival times imply, without the player's accounting.

    Media segment ``i`` (every stream: one segment duration ``segment_s`` for
    all) covers ``[i, i + 1) x segment_s`` and is there once the last of its
    streams' ``t_last_byte`` has passed. Playback starts, and resumes after a
    stall, once the media up to ``position + threshold_s`` is there (DESIGN.md
    §4), and runs in real time; a stall starts when it reaches a segment that
    is not there yet. Only the leading indexes that every stream has, with
    times, are used.
    """
    arrived = _arrivals(by_stream(rows))
    if not arrived:
        return []

    def ready_at(position_s: float) -> float:
        last = math.ceil((position_s + threshold_s) / segment_s - 1e-9) - 1
        return arrived[min(len(arrived) - 1, max(last, 0))]

    t, position, stalls = ready_at(0.0), 0.0, []
    for i in range(1, len(arrived)):
        due = t + i * segment_s - position  # when playback reaches segment i
        if arrived[i] > due:
            t, position = ready_at(i * segment_s), i * segment_s
            stalls.append((due, t))
    return stalls


def _arrivals(groups: dict[str, list[SegmentRow]]) -> list[float]:
    """Time by which segments ``0..i`` of every stream had arrived, for each leading index ``i``."""
    per_stream = [{r.index: r.t_last_byte for r in group if r.t_last_byte is not None} for group in groups.values()]
    out: list[float] = []
    while per_stream and all(len(out) in times for times in per_stream):
        latest = max(times[len(out)] for times in per_stream)
        out.append(max(latest, out[-1]) if out else latest)
    return out


def stream_summary(rows: Sequence[SegmentRow]) -> QoeSummary:
    """QoE figures of one stream's rows (index order)."""
    stall = sum(r.stall_s for r in rows)
    rates = [r.bitrate_bps for r in rows if r.bitrate_bps is not None]
    return QoeSummary(
        segments=len(rows),
        avg_bitrate_bps=mean(rates),
        switches=switches(rows),
        avg_throughput_bps=mean(throughput_bps(r) for r in rows),
        avg_buffer_s=mean(r.buffer_s for r in rows),
        stall_count=sum(1 for r in rows if r.stall_s > 0),
        stall_s=stall,
        startup_delay_s=None,
        app_rtt_s=mean(rtt_s(r) for r in rows),
        app_jitter_s=mean(jitter_s(rows)),
        response_latency_s=mean(response_latency_s(r) for r in rows),
        qoe=qoe_eq1(rates, stall),
    )


def summarize(
    rows: Iterable[SegmentRow], *, startup_delay_s: float | None = None, threshold_s: float = 1.0,
    stall_at_end: EndStall | None = None,
) -> dict[str, QoeSummary]:
    """``{"video": ..., "audio": ..., "session": ...}`` (streams that have rows)."""
    groups = by_stream(rows)
    result = {name: stream_summary(group) for name, group in groups.items()}
    if stall_at_end is not None and stall_at_end.duration_s > 0 and result:
        name = stall_at_end.stream if stall_at_end.stream in result else next(iter(result))
        result[name] = _with_stall(result[name], stall_at_end.duration_s)
    every = [r for group in groups.values() for r in group]
    startup = startup_delay_s if startup_delay_s is not None else derive_startup_delay_s(groups, threshold_s)
    result["session"] = _session(result, every, groups, startup)
    return result


def _with_stall(s: QoeSummary, stall_s: float) -> QoeSummary:
    return replace(s, stall_count=s.stall_count + 1, stall_s=s.stall_s + stall_s,
                   qoe=s.qoe - REBUFFER_PENALTY * stall_s)


def _session(
    streams: dict[str, QoeSummary], every: list[SegmentRow], groups: dict[str, list[SegmentRow]], startup: float | None
) -> QoeSummary:
    return QoeSummary(
        segments=len(every),
        avg_bitrate_bps=mean(r.bitrate_bps for r in every),
        switches=sum(s.switches for s in streams.values()),
        avg_throughput_bps=mean(throughput_bps(r) for r in every),
        avg_buffer_s=mean(r.buffer_s for r in every),
        stall_count=sum(s.stall_count for s in streams.values()),
        stall_s=sum(s.stall_s for s in streams.values()),
        startup_delay_s=startup,
        app_rtt_s=mean(rtt_s(r) for r in every),
        app_jitter_s=mean(j for group in groups.values() for j in jitter_s(group)),
        response_latency_s=mean(response_latency_s(r) for r in every),
        qoe=sum(s.qoe for s in streams.values()),
    )


def derive_startup_delay_s(groups: dict[str, list[SegmentRow]], threshold_s: float = 1.0) -> float | None:
    """First time every stream had ``threshold_s`` buffered, minus the first request.

    Before playback starts, a stream's ``buffer_s`` is the media it has
    downloaded, so the first row reaching the threshold marks its readiness.
    """
    requests = [r.t_request for group in groups.values() for r in group if r.t_request is not None]
    ready = []
    for group in groups.values():
        times = [r.t_last_byte for r in group if r.buffer_s is not None and r.buffer_s >= threshold_s - 1e-9]
        if not times or times[0] is None:
            return None
        ready.append(times[0])
    if not requests or not ready:
        return None
    return max(t for t in ready if t is not None) - min(requests)
