"""One DASH session's layers on the run clock, and what happened before each stall.

The player's rows (``segments.csv``: each segment's request, first and last byte, level, the buffer after it and
the stall it ended; ``abr_decisions.csv``: the ABR's throughput estimate), the transport's (``subflows.csv``: each
connection's sender state read at the server's end, ``side = server``: cwnd, smoothed RTT, retransmits; ``quic.csv``:
each QUIC connection's recovery at our server: cwnd, RTT, lost packets, PTOs) and the
queues' (``qdelay.csv``: the delay of each captured packet; ``qdisc.csv``: the kernel's delay and its cumulative
drops) all carry seconds on the run clock, so they line up without shifting. :func:`stalls` finds the stalls,
:func:`stall_summary` says in one line per stall what the queue and the transport did in the
:data:`LOOKBACK_S` seconds before it began; the figure is drawn by ``reports.plot``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

LOOKBACK_S = 5.0  # the window before a stall that its summary describes
NOT_QUEUES = ("htb", "netem")  # shapers and delay lines: not a queue a packet waits in for the AQM


@dataclass(frozen=True, kw_only=True)
class Stall:
    """One rebuffering of one DASH app: from ``start`` to ``end`` on the run clock; the segment whose arrival
    ended it (None for the stall the session stopped in)."""

    app: str
    start: float
    end: float
    stream: str = ""
    index: int | None = None
    level: int | None = None
    fetch_s: float | None = None  # that segment's request to last byte

    @property
    def duration_s(self) -> float:
        return self.end - self.start


def number(value: Any) -> float | None:
    """``value`` as a float, None when it is none or NaN (a CSV cell read by pandas or csv)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def stalls(segments: pd.DataFrame, qoe: Mapping[str, Any] | None = None) -> list[Stall]:
    """Every stall in ``segments`` (a row with ``stall_s`` > 0 ended one at its last byte) and, from ``qoe.json``'s
    apps, the one each session stopped in (``stall_at_end``), in time order."""
    out = []
    if not segments.empty and "stall_s" in segments:
        for row in segments[segments["stall_s"].fillna(0) > 0].itertuples(index=False):
            end = number(row.t_last_byte)
            if end is None:
                continue
            t_request = number(row.t_request)
            level = number(row.level)
            app = getattr(row, "app", "")
            out.append(Stall(app="" if pd.isna(app) else str(app), start=end - float(row.stall_s), end=end,
                             stream=str(row.stream), index=int(row.index), level=None if level is None else int(level),
                             fetch_s=None if t_request is None else end - t_request))
    for app, doc in (qoe or {}).items():
        at_end = doc.get("stall_at_end") if isinstance(doc, Mapping) else None
        if isinstance(at_end, Mapping) and number(at_end.get("t_start")) is not None:
            start = float(at_end["t_start"])
            out.append(Stall(app=str(app), start=start, end=start + float(at_end.get("duration_s") or 0.0),
                             stream=str(at_end.get("stream", ""))))
    return sorted(out, key=lambda s: (s.start, s.app))


def queues(qdisc: pd.DataFrame) -> pd.DataFrame:
    """The rows of the queues a packet waits in (no HTB shaper, no netem delay line); all rows if that is none."""
    if qdisc.empty or "kind" not in qdisc:
        return qdisc
    leaves = qdisc[~qdisc["kind"].isin(NOT_QUEUES)]
    return leaves if len(leaves) else qdisc


def _window(df: pd.DataFrame | None, t0: float, t1: float) -> pd.DataFrame:
    if df is None or df.empty or "t" not in df:
        return pd.DataFrame()
    return df[(df["t"] >= t0) & (df["t"] <= t1)]


def _queue_parts(stall: Stall, qdisc: pd.DataFrame | None, qdelay: pd.DataFrame | None) -> list[str]:
    t0, t1 = stall.start - LOOKBACK_S, stall.start
    parts = []
    delays = _window(qdelay, t0, t1)
    if not delays.empty:
        for (node, dev), rows in delays.groupby(["node", "dev"]):
            d = rows["delay_ms"].astype(float)
            parts.append(f"{node}->{dev} queue delay mean {d.mean():.1f} ms, max {d.max():.1f} ms "
                         f"({len(d)} packets)")
    if qdisc is not None and not qdisc.empty:
        for (node, dev, kind), rows in queues(qdisc).groupby(["node", "dev", "kind"]):
            before = rows[rows["t"] <= t0]
            inside = rows[(rows["t"] > t0) & (rows["t"] <= t1)]
            if inside.empty:
                continue
            base = before["drops"].iloc[-1] if len(before) else inside["drops"].iloc[0]
            drops = int(inside["drops"].iloc[-1] - base)
            has_delay = "delay_ms" in inside and inside["delay_ms"].notna().any() and (delays.empty or kind == "pie")
            if not drops and not has_delay:
                continue  # a queue that neither dropped nor reports a delay (the reverse path's FIFO) says nothing
            text = f"{node}->{dev} {kind}: {drops} drops"
            if has_delay:
                text += f", kernel delay mean {inside['delay_ms'].astype(float).mean():.1f} ms"
            parts.append(text)
    return parts


def _transport_parts(stall: Stall, subflows: pd.DataFrame | None) -> list[str]:
    t0, t1 = stall.start - LOOKBACK_S, stall.start
    if subflows is None or subflows.empty or not {"side", "cwnd", "retrans_total"} <= set(subflows):
        return []  # a folder from before the sender's state was sampled
    own = subflows[subflows["side"] == "server"]
    if "app" in own:
        own = own[own["app"] == stall.app]
    keys = ["local", "local_port", "remote", "remote_port"]
    parts = []
    for key, rows in _window(own, t0, t1).groupby(keys):
        same = (own[keys] == pd.Series(dict(zip(keys, key, strict=True)))).all(axis=1)
        earlier = own[same & (own["t"] < rows["t"].min())]["retrans_total"].dropna()
        retx = rows["retrans_total"].dropna()
        cwnd = rows["cwnd"].dropna().astype(int)
        rtt = rows["rtt_ms"].dropna().astype(float)
        text = f"{rows['link'].fillna('').iloc[0] or 'connection'} :{key[1]}: cwnd "
        text += f"{cwnd.iloc[0]}->{cwnd.iloc[-1]} segments (min {cwnd.min()})" if len(cwnd) else "unknown"
        if len(rtt):
            text += f", srtt max {rtt.max():.0f} ms"
        if len(retx):
            base = earlier.iloc[-1] if len(earlier) else retx.iloc[0]
            text += f", {int(retx.iloc[-1] - base)} retransmits"
        parts.append(text)
    return parts


def _quic_parts(stall: Stall, quic: pd.DataFrame | None) -> list[str]:
    t0, t1 = stall.start - LOOKBACK_S, stall.start
    if quic is None or quic.empty or "event" not in quic:
        return []
    own = quic[quic["side"] == "server"] if "side" in quic else quic
    if "app" in own:
        own = own[own["app"] == stall.app]
    parts = []
    for conn, rows in _window(own, t0, t1).groupby("conn"):
        earlier = own[(own["conn"] == conn) & (own["t"] < rows["t"].min())]
        metrics = rows[rows["event"] == "metrics"]
        cwnd = metrics["cwnd"].dropna().astype(float)
        rtt = metrics["smoothed_rtt_ms"].dropna().astype(float) if "smoothed_rtt_ms" in metrics else pd.Series()
        text = f"QUIC {conn}: cwnd "
        text += f"{cwnd.iloc[0] / 1e3:.1f}->{cwnd.iloc[-1] / 1e3:.1f} kB (min {cwnd.min() / 1e3:.1f})" if len(cwnd) \
            else "unknown"
        if len(rtt):
            text += f", srtt max {rtt.max():.0f} ms"
        lost_before = int(earlier["lost_total"].max()) if len(earlier) and earlier["lost_total"].notna().any() else 0
        text += f", {int(rows['lost_total'].max()) - lost_before} packets lost"
        pto = rows["pto_count"].dropna() if "pto_count" in rows else pd.Series()
        if len(pto) and pto.max() > 0:
            text += f", PTO count up to {int(pto.max())}"
        parts.append(text)
    return parts


def stall_summary(stall: Stall, *, qdisc: pd.DataFrame | None = None, qdelay: pd.DataFrame | None = None,
                  subflows: pd.DataFrame | None = None, quic: pd.DataFrame | None = None) -> str:
    """One line: the stall (when, how long, the segment that ended it and how long it took) and, in the
    :data:`LOOKBACK_S` seconds before it began, each bottleneck's queue (per-packet delay, drops) and each of the
    app's connections at the sender (TCP: cwnd, smoothed RTT, retransmits; QUIC: cwnd, smoothed RTT, packets lost,
    PTOs)."""
    head = f"{stall.app}: stall {stall.duration_s:.2f} s at {stall.start:.1f}-{stall.end:.1f} s"
    if stall.index is None:
        head += " (the session stopped in it)"
    else:
        level = "?" if stall.level is None else str(stall.level)
        took = "" if stall.fetch_s is None else f", fetched in {stall.fetch_s:.2f} s"
        head += f" (ended by {stall.stream} segment {stall.index} at level {level}{took})"
    parts = _queue_parts(stall, qdisc, qdelay) + _transport_parts(stall, subflows) + _quic_parts(stall, quic)
    before = "; ".join(parts) if parts else "no queue or transport samples"
    return f"{head}; in the {LOOKBACK_S:g} s before: {before}"


def summaries(stall_list: Sequence[Stall], **frames: pd.DataFrame | None) -> list[str]:
    return [stall_summary(s, **frames) for s in stall_list]
