"""How closely a trace-driven link followed its trace (reads a run folder only).

Per window (about 1 s) of a traced egress: the bits its leaf qdisc sent
against the bits the trace allowed, both over exactly the same two instants.
A window runs from one qdisc sample to another (``qdisc.csv``'s
``sent_bytes`` of handle ``10:`` at its ``t``): its edges are the samples
nearest to ``start_s``, ``start_s + window_s``, ... and the trace
(``rates.csv``'s schedule, by ``t_scheduled``: lateness counts against the
link) is integrated over [t of the first sample, t of the second]. A late
or missing sample makes a window longer or shorter, never wrong: the
counter is not interpolated between samples. (Interpolating a counter that
moves in whole packets put up to one packet of error on each edge, with
opposite signs in the two windows that share it: at 128 kbit/s a +13.5%
window next to a -14.4% one.) With the edges on samples, a window is off
by less than one packet (the one HTB has started at each edge). A window is
*busy* when the leaf held a backlog at every sample in it: only then was
the trace, not the sender, what limited the link. Overall: delivered /
trace over every window, and the correlation of the two series. Drops
outside the leaf: the HTB root counts its children's drops too, so ``htb
drops - leaf drops`` are packets HTB itself dropped.

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

from nest_experiments.rundir import QDISC, RATES, RunFolder, read_csv

MEAN_TOLERANCE = 0.02
WINDOW_TOLERANCE = 0.05
WINDOW_PACKETS = 1.5
PACKET_BITS = 1514 * 8  # what HTB counts for a full-size packet on Ethernet (veth)


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One qdisc sample of the leaf: when, its sent counter (bits), its backlog."""

    t: float
    sent_bits: float
    backlog_pkts: int


@dataclass(frozen=True, kw_only=True)
class Window:
    t: float  # the sample that starts it
    t_end: float  # the sample that ends it
    trace_bps: float
    delivered_bps: float
    busy: bool

    @property
    def span_s(self) -> float:
        return self.t_end - self.t

    @property
    def ratio(self) -> float:
        return self.delivered_bps / self.trace_bps if self.trace_bps > 0 else math.nan

    @property
    def tolerance(self) -> float:
        return max(WINDOW_TOLERANCE, WINDOW_PACKETS * PACKET_BITS / max(self.trace_bps * self.span_s, 1.0))

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
        trace = sum(w.trace_bps * w.span_s for w in self.windows)
        return sum(w.delivered_bps * w.span_s for w in self.windows) / trace if trace else math.nan

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
    """Every traced egress of the run, over windows between the samples nearest to ``start_s + k * window_s``."""
    folder = RunFolder(run_dir)
    rates = read_csv(folder.file(RATES))
    qdisc = read_csv(folder.file(QDISC))
    out = []
    for link, direction, node in dict.fromkeys((r["link"], r["direction"], r["node"]) for r in rates):
        steps = sorted((float(r["t_scheduled"]), float(r["rate_bps"])) for r in rates
                       if (r["link"], r["node"]) == (link, node))
        rows = [r for r in qdisc if (r["link"], r["node"]) == (link, node)]
        leaf = [Sample(t=float(r["t"]), sent_bits=float(r["sent_bytes"]) * 8, backlog_pkts=int(r["backlog_pkts"]))
                for r in rows if r["handle"] == "10:"]
        htb = [r for r in rows if r["kind"] == "htb"]
        out.append(Fidelity(link=link, direction=direction, node=node,
                            windows=windows(steps, leaf, start_s=start_s, end_s=end_s, window_s=window_s),
                            htb_drops=max((int(r["drops"]) for r in htb), default=0),
                            leaf_drops=max((int(r["drops"]) for r in rows if r["handle"] == "10:"), default=0)))
    return out


def windows(steps: list[tuple[float, float]], samples: list[Sample], *, start_s: float, end_s: float,
            window_s: float = 1.0) -> tuple[Window, ...]:
    """Delivered vs trace between consecutive edge samples (the samples nearest to each nominal edge)."""
    samples = sorted(samples, key=lambda s: s.t)
    n = int((end_s - start_s) / window_s + 1e-9)
    edges = list(dict.fromkeys(i for i in (_nearest(samples, start_s + k * window_s) for k in range(n + 1))
                               if i is not None))
    return tuple(_window(steps, samples[i:j + 1]) for i, j in zip(edges, edges[1:], strict=False)
                 if samples[j].t > samples[i].t)


def _nearest(samples: list[Sample], t: float) -> int | None:
    """Index of the sample nearest to ``t`` (the earlier on a tie), None without samples."""
    i = bisect.bisect_left([s.t for s in samples], t)
    near = [k for k in (i - 1, i) if 0 <= k < len(samples)]
    return min(near, key=lambda k: abs(samples[k].t - t)) if near else None


def _window(steps: list[tuple[float, float]], inside: list[Sample]) -> Window:
    """``inside``: the samples from the window's first to its last, both included."""
    a, b = inside[0], inside[-1]
    span = b.t - a.t
    return Window(t=a.t, t_end=b.t, trace_bps=(step_bits(steps, b.t) - step_bits(steps, a.t)) / span,
                  delivered_bps=(b.sent_bits - a.sent_bits) / span, busy=min(s.backlog_pkts for s in inside) > 0)


def step_bits(steps: list[tuple[float, float]], t: float) -> float:
    """Bits a step schedule ``[(t_from, rate_bps)]`` (sorted) allows in [0, t)."""
    total = 0.0
    for (t0, rate), (t1, _) in zip(steps, steps[1:] + [(math.inf, 0.0)], strict=True):
        if t0 >= t:
            break
        total += rate * (min(t, t1) - t0)
    return total
