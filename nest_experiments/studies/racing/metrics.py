"""The connection-racing paper's session metrics (pure: rows in, numbers out).

- :func:`rqvst`: RQvsT = TCP bytes / all bytes of a session (Section III:
  ``RQvs.T_v = T_v / (T_v + Q_v)``), from the segments' ``transport``;
- :func:`rqvst_series`: the same per window, each segment's bytes spread
  evenly over its transfer (``t_first_byte`` .. ``t_last_byte``); a window
  without a byte counts 0 (no TCP byte);
- :func:`playback`: when each video segment played, from arrivals alone:
  segment ``i`` starts at ``max(its arrival, the end of segment i-1)``;
- :func:`quality_drop_series`: B(t) per window (Section VI-A / VII):
  ``(e(q_prev) - e(q)) x`` the time within the window that the quality
  stayed dropped, where ``e`` is the level's rank from 1 (144p -> 1 ...)
  and ``q_prev`` the quality before the last switch (a rise counts 0);
- :func:`stall_series`: S(t) per window, the stall seconds within it (each
  stall ends when the segment that ended it arrived, ``stall_s`` before; a
  stall the session stopped in counts up to the stop);
- :func:`max_cross_correlation`: the normalised cross-correlation of two
  window series over lags (eq. 1 and 2, Fig. 9): the largest coefficient
  and its lag (s; positive: the second series follows the first);
- :func:`ccdf`: a complementary CDF (Fig. 14);
- :func:`switches`: how often the protocol that carried the requests changed
  (``won`` rows of ``racing.csv`` with another protocol than the last);
- :func:`protocol_timeline`: which protocol carried each segment, in the
  order their first bytes came (the timeline our ``chromium`` policy and
  Chromium are compared on, segment by segment); :func:`quic_share`, the
  share of segments over QUIC; :func:`switches` of it: the protocol switches
  along the segments.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

WINDOW_S = 30.0  # the paper's "sample window size of 30 (seconds)"
TCP = "tcp"


@dataclass(frozen=True, kw_only=True)
class Transfer:
    """What the metrics need of one segment (``segments.csv``)."""

    stream: str
    index: int
    level: int
    bytes: int
    t_first_byte: float
    t_last_byte: float
    stall_s: float
    transport: str
    bitrate_bps: float = 0.0  # the level's declared bitrate


def rqvst(segments: Sequence[Transfer]) -> float | None:
    """TCP bytes / all bytes of the session; None without a byte."""
    total = sum(s.bytes for s in segments)
    return None if total == 0 else sum(s.bytes for s in segments if s.transport == TCP) / total


def n_windows(t_end: float, window_s: float = WINDOW_S) -> int:
    return max(1, math.ceil(t_end / window_s))


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def spread(values: list[float], t0: float, t1: float, amount: float, window_s: float) -> None:
    """Add ``amount`` spread evenly over [t0, t1] into the windows of ``values`` (all of it at t0 if t1 <= t0)."""
    if t1 <= t0:
        values[min(len(values) - 1, max(0, int(t0 // window_s)))] += amount
        return
    for w in range(max(0, int(t0 // window_s)), min(len(values), int(t1 // window_s) + 1)):
        values[w] += amount * _overlap(t0, t1, w * window_s, (w + 1) * window_s) / (t1 - t0)


def rqvst_series(segments: Sequence[Transfer], t_end: float, window_s: float = WINDOW_S) -> list[float]:
    """RQvsT per window (0 where no byte arrived)."""
    n = n_windows(t_end, window_s)
    tcp, total = [0.0] * n, [0.0] * n
    for s in segments:
        spread(total, s.t_first_byte, s.t_last_byte, s.bytes, window_s)
        if s.transport == TCP:
            spread(tcp, s.t_first_byte, s.t_last_byte, s.bytes, window_s)
    return [t / a if a > 0 else 0.0 for t, a in zip(tcp, total, strict=True)]


def playback(video: Sequence[Transfer], segment_s: float) -> list[tuple[float, float, int]]:
    """``(start, end, level)`` of each video segment's playback, in index order."""
    out: list[tuple[float, float, int]] = []
    end = -math.inf
    for s in sorted(video, key=lambda s: s.index):
        start = max(s.t_last_byte, end)
        end = start + segment_s
        out.append((start, end, s.level))
    return out


def quality_drop_series(video: Sequence[Transfer], segment_s: float, t_end: float,
                        window_s: float = WINDOW_S) -> list[float]:
    """B(t): per window, sum of (e(q_prev) - e(q)) x the seconds the dropped quality q played in it."""
    n = n_windows(t_end, window_s)
    out = [0.0] * n
    current: int | None = None
    depth = 0  # e(q_prev) - e(q) of the last switch (0 after a rise)
    for start, end, level in playback(video, segment_s):
        if current is not None and level != current:
            depth = max(0, current - level)
        current = level
        if depth:
            for w in range(n):
                out[w] += depth * _overlap(start, end, w * window_s, (w + 1) * window_s)
    return out


def stall_series(segments: Sequence[Transfer], t_end: float, window_s: float = WINDOW_S,
                 open_stall: tuple[float, float] | None = None) -> list[float]:
    """S(t): the stall seconds in each window (a stall ends at the arrival of the segment that ended it;
    ``open_stall``: (start, seconds) of the stall the session stopped in, which no segment ended)."""
    n = n_windows(t_end, window_s)
    out = [0.0] * n
    spans = [(s.t_last_byte - s.stall_s, s.t_last_byte) for s in segments if s.stall_s > 0]
    if open_stall is not None and open_stall[1] > 0:
        spans.append((open_stall[0], open_stall[0] + open_stall[1]))
    for t0, t1 in spans:
        for w in range(n):
            out[w] += _overlap(t0, t1, w * window_s, (w + 1) * window_s)
    return out


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    if len(x) < 3 or statistics.pstdev(x) == 0 or statistics.pstdev(y) == 0:
        return None
    return statistics.correlation(x, y)


def max_cross_correlation(x: Sequence[float], y: Sequence[float], *, window_s: float = WINDOW_S,
                          max_lag: int | None = None) -> tuple[float, float] | None:
    """The largest Pearson coefficient of ``x(t)`` with ``y(t + lag)`` over lags of whole windows, and that
    lag in seconds; at least 3 overlapping windows per lag; None where no lag has two varying series."""
    n = min(len(x), len(y))
    lags = range(-(n - 3), n - 2) if max_lag is None else range(-max_lag, max_lag + 1)
    best: tuple[float, float] | None = None
    for lag in lags:
        xs = x[max(0, -lag): n - max(0, lag)]
        ys = y[max(0, lag): n - max(0, -lag)]
        r = _pearson(xs, ys)
        if r is not None and (best is None or r > best[0] or (r == best[0] and abs(lag) * window_s < abs(best[1]))):
            best = (r, lag * window_s)
    return best


def ccdf(values: Sequence[float]) -> list[tuple[float, float]]:
    """``(x, P(X >= x))`` at each distinct value, ascending."""
    xs = sorted(values)
    n = len(xs)
    out: list[tuple[float, float]] = []
    for i, v in enumerate(xs):
        if i == 0 or v != xs[i - 1]:
            out.append((v, (n - i) / n))
    return out


def share_at_least(values: Sequence[float], threshold: float) -> float | None:
    """The fraction of ``values`` >= ``threshold`` (None when empty)."""
    return None if not values else sum(v >= threshold for v in values) / len(values)


def switches(won_protocols: Sequence[str]) -> int:
    """Protocol changes in the sequence of race winners (the first winner is not a switch)."""
    return sum(1 for a, b in zip(won_protocols, won_protocols[1:], strict=False) if a != b)


def mean_bitrate(video: Sequence[float]) -> float | None:
    return statistics.fmean(video) if video else None


def mean_variation(video: Sequence[float]) -> float | None:
    """Mean |R(n+1) - R(n)| over consecutive video segments (zero changes included)."""
    if len(video) < 2:
        return 0.0 if video else None
    return statistics.fmean(abs(b - a) for a, b in zip(video, video[1:], strict=False))


def protocol_timeline(segments: Sequence[Transfer]) -> list[tuple[str, int, str]]:
    """``(stream, index, quic | tcp)`` of every segment, in the order their first bytes came."""
    ordered = sorted(segments, key=lambda s: (s.t_first_byte, s.stream, s.index))
    return [(s.stream, s.index, TCP if s.transport == TCP else "quic") for s in ordered]


def quic_share(segments: Sequence[Transfer]) -> float | None:
    """The share of the session's segments carried by QUIC; None without a segment."""
    timeline = protocol_timeline(segments)
    return None if not timeline else sum(p == "quic" for _, _, p in timeline) / len(timeline)

