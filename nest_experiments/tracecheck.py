"""How closely a trace-driven link followed its trace (reads a run folder only).

Per window (default 1 s) of a traced egress: the bits its leaf qdisc sent
(``qdisc.csv``'s ``sent_bytes`` of handle ``10:``, interpolated at the window
edges) against the bits the trace allowed (``rates.csv``'s schedule, by
``t_scheduled``: lateness counts against the link). A window is *busy* when
the leaf held a backlog at every sample in it: only then was the trace, not
the sender, what limited the link. Overall: delivered / trace over every
window, and the correlation of the two series. Drops outside the leaf: the
HTB root counts its children's drops too, so ``htb drops - leaf drops`` are
packets HTB itself dropped.

Bounds (:data:`MEAN_TOLERANCE`, :data:`WINDOW_TOLERANCE`) are issue 15's:
within 2% of the trace overall and 5% in each busy window. A window can only
hold whole packets, so a window's tolerance is at least
:data:`WINDOW_PACKETS` packets' worth (at 64 kbit/s one 1500-byte packet is
19% of a 1 s window).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path

from nest_experiments.rundir import read_csv

MEAN_TOLERANCE = 0.02
WINDOW_TOLERANCE = 0.05
WINDOW_PACKETS = 1.5
PACKET_BITS = 1514 * 8  # what HTB counts for a full-size packet on Ethernet (veth)


@dataclass(frozen=True, kw_only=True)
class Window:
    t: float
    trace_bps: float
    delivered_bps: float
    busy: bool

    @property
    def ratio(self) -> float:
        return self.delivered_bps / self.trace_bps if self.trace_bps > 0 else math.nan

    @property
    def tolerance(self) -> float:
        return max(WINDOW_TOLERANCE, WINDOW_PACKETS * PACKET_BITS / max(self.trace_bps, 1.0))

    @property
    def within(self) -> bool:
        return abs(self.ratio - 1) <= self.tolerance


@dataclass(frozen=True, kw_only=True)
class Fidelity:
    link: str
    direction: str
    node: str
    windows: tuple[Window, ...]
    htb_drops: int
    leaf_drops: int

    @property
    def mean_ratio(self) -> float:
        trace = sum(w.trace_bps for w in self.windows)
        return sum(w.delivered_bps for w in self.windows) / trace if trace else math.nan

    @property
    def correlation(self) -> float:
        return pearson([w.trace_bps for w in self.windows], [w.delivered_bps for w in self.windows])

    @property
    def busy(self) -> list[Window]:
        return [w for w in self.windows if w.busy]

    @property
    def drops_outside_leaf(self) -> int:
        return self.htb_drops - self.leaf_drops

    @property
    def ok(self) -> bool:
        return (abs(self.mean_ratio - 1) <= MEAN_TOLERANCE and all(w.within for w in self.busy)
                and self.drops_outside_leaf == 0)


def pearson(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return math.nan
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def trace_fidelity(run_dir: Path, *, start_s: float, end_s: float, window_s: float = 1.0) -> list[Fidelity]:
    """Every traced egress of the run, over whole windows in [start_s, end_s)."""
    rates = read_csv(run_dir / "rates.csv")
    qdisc = read_csv(run_dir / "qdisc.csv")
    out = []
    for link, direction, node in dict.fromkeys((r["link"], r["direction"], r["node"]) for r in rates):
        steps = sorted((float(r["t_scheduled"]), float(r["rate_bps"])) for r in rates
                       if (r["link"], r["node"]) == (link, node))
        rows = [r for r in qdisc if (r["link"], r["node"]) == (link, node)]
        leaf = sorted((float(r["t"]), float(r["sent_bytes"]) * 8, int(r["backlog_pkts"])) for r in rows
                      if r["handle"] == "10:")
        htb = [r for r in rows if r["kind"] == "htb"]
        edges = [start_s + i * window_s for i in range(int((end_s - start_s) / window_s + 1e-9) + 1)]
        windows = tuple(_window(a, b, steps, leaf) for a, b in zip(edges, edges[1:], strict=False))
        out.append(Fidelity(link=link, direction=direction, node=node, windows=windows,
                            htb_drops=max((int(r["drops"]) for r in htb), default=0),
                            leaf_drops=max((int(r["drops"]) for r in rows if r["handle"] == "10:"), default=0)))
    return out


def _window(a: float, b: float, steps: list[tuple[float, float]], leaf: list[tuple[float, float, int]]) -> Window:
    inside = [backlog for t, _, backlog in leaf if a <= t <= b]
    return Window(t=a, trace_bps=(_trace_bits(steps, b) - _trace_bits(steps, a)) / (b - a),
                  delivered_bps=(_sent_bits(leaf, b) - _sent_bits(leaf, a)) / (b - a),
                  busy=bool(inside) and min(inside) > 0)


def _trace_bits(steps: list[tuple[float, float]], t: float) -> float:
    """Bits the step schedule allows in [0, t)."""
    total = 0.0
    for (t0, rate), (t1, _) in zip(steps, steps[1:] + [(math.inf, 0.0)], strict=True):
        if t0 >= t:
            break
        total += rate * (min(t, t1) - t0)
    return total


def _sent_bits(leaf: list[tuple[float, float, int]], t: float) -> float:
    """The leaf's sent bits at time t, linearly between samples."""
    times = [s[0] for s in leaf]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return leaf[0][1]
    if i == len(leaf):
        return leaf[-1][1]
    (t0, b0, _), (t1, b1, _) = leaf[i - 1], leaf[i]
    return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else b1
