"""Figures from run folders (reads files only, through :mod:`nest_experiments.analysis.results`; never touches the network).

Link utilisation is measured at the qdisc: bytes the shaped egress sent in
the steady part of the run divided by what its rate allows. For a
trace-driven egress that is the integral of the rates actually applied
(``rates.csv``, by the time each change took effect) over the same two
samples, not ``links.json``'s ``rate_bps`` (the trace's first rate). iperf3
goodput (application payload) is reported beside it; it is lower by the
headers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pandas as pd

from nest_experiments.analysis.results import steady_window
from nest_experiments.analysis.tracecheck import step_bits
from nest_experiments.rundir import IPERF3_SUMMARY, RATES, RunFolder, read_manifest, run_dirs


@dataclass(frozen=True)
class EgressFigures:
    link: str
    node: str
    qdisc: str | None
    rate_bps: int | None  # a traced egress: the mean applied rate over the steady window
    utilization: float | None
    mean_backlog_pkts: float
    drops: int
    mean_delay_ms: float | None  # as the kernel reports it (PIE), per sample
    traced: bool = False
    ecn_marks: int | None = None  # packets the AQM marked CE instead of dropping (None: the kind counts none)


def egress_figures(run_dir: Path) -> list[EgressFigures]:
    q = RunFolder(run_dir).qdisc()
    t0, t1 = steady_window(run_dir)
    out = []
    for e in RunFolder(run_dir).egresses():
        if not e.get("sampled") or q.empty:
            continue
        rows = q[(q.node == e["node"]) & (q.dev == e["dev"])]
        leaf = rows[rows.handle == e["leaf_handle"]] if e.get("leaf_handle") else rows
        win = leaf[(leaf.t >= t0) & (leaf.t <= t1)].sort_values("t")
        rate = _mean_rate(applied_steps(run_dir, e["link"], e["node"]), win) if e.get("trace") else e.get("rate_bps")
        out.append(EgressFigures(
            link=e["link"], node=e["node"], qdisc=e.get("qdisc"), rate_bps=round(rate) if rate else None,
            utilization=_utilization(win, rate),
            mean_backlog_pkts=float(leaf.backlog_pkts.mean()) if len(leaf) else 0.0,
            drops=int(leaf.drops.max() - leaf.drops.min()) if len(leaf) else 0,
            mean_delay_ms=_mean_delay(win), traced=bool(e.get("trace")), ecn_marks=_ecn_marks(leaf),
        ))
    return out


def applied_steps(run_dir: Path, link: str, node: str) -> list[tuple[float, float]]:
    """A traced egress's rates as applied: (t the change took effect, rate_bps), from ``rates.csv``."""
    rows = RunFolder(run_dir).rows(RATES)
    return sorted((float(r["t"]), float(r["rate_bps"])) for r in rows if (r["link"], r["node"]) == (link, node))


def _mean_rate(steps: list[tuple[float, float]], win: pd.DataFrame) -> float | None:
    """The applied rate averaged over the window's first to last sample (None without rates or samples)."""
    if not steps or len(win) < 2:
        return None
    a, b = float(win.t.iloc[0]), float(win.t.iloc[-1])
    return (step_bits(steps, b) - step_bits(steps, a)) / (b - a) if b > a else None


def _utilization(win: pd.DataFrame, rate_bps: float | None) -> float | None:
    if not rate_bps or len(win) < 2:
        return None
    span = float(win.t.iloc[-1] - win.t.iloc[0])
    sent = float(win.sent_bytes.iloc[-1] - win.sent_bytes.iloc[0])
    return sent * 8 / span / rate_bps if span > 0 else None


def _ecn_marks(leaf: pd.DataFrame) -> int | None:
    """CE marks over the run (the counter's rise), None for a kind without the counter or an older run folder."""
    if "ecn_marks" not in leaf or leaf.ecn_marks.isna().all():
        return None
    marks = leaf.ecn_marks.dropna()
    return int(marks.max() - marks.min())


def _mean_delay(rows: pd.DataFrame) -> float | None:
    if "delay_ms" not in rows or rows.delay_ms.isna().all():
        return None
    return float(rows.delay_ms.mean())


def iperf3_goodput_bps(run_dir: Path) -> float | None:
    s = RunFolder(run_dir).frame(IPERF3_SUMMARY)
    if s is None:
        return None
    return float(s.receiver_bits_per_second.sum()) if len(s) else None


def qdisc_gaps(run_dir: Path) -> dict[str, float]:
    """First and last sample time and the largest gap between samples."""
    q = RunFolder(run_dir).qdisc()
    if q.empty:
        return {}
    ts = sorted(q.t.unique())
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    return {"first_t": ts[0], "last_t": ts[-1], "max_gap_s": max(gaps) if gaps else 0.0}


def print_summary(folder: Path, out: TextIO = sys.stderr) -> None:
    for run_dir in run_dirs(folder):
        m = read_manifest(run_dir) or {}
        if m.get("status") != "completed":
            print(f"{run_dir.name}: {m.get('status', '?')} {m.get('reason', '')}", file=out)
            continue
        goodput = iperf3_goodput_bps(run_dir)
        figures = egress_figures(run_dir)
        aqm_rates = [f.rate_bps for f in figures if f.rate_bps and f.mean_delay_ms is not None]
        for f in figures:
            util = f"{f.utilization:.3f}" if f.utilization is not None else "-"
            rate = f"{f.rate_bps / 1e6:g} Mbit/s" if f.rate_bps else "unshaped"
            rate = f"trace, {rate} mean applied" if f.traced and f.rate_bps else rate
            delay = f", {f.qdisc} delay {f.mean_delay_ms:.2f} ms" if f.mean_delay_ms is not None else ""
            marks = f", ECN marks {f.ecn_marks}" if f.ecn_marks else ""
            print(f"{run_dir.name}: {f.link} {f.node}->{f.qdisc} {rate}: utilization {util}, "
                  f"backlog {f.mean_backlog_pkts:.1f} pkts, drops {f.drops}{marks}{delay}", file=out)
        if goodput:
            # a ratio only where one bottleneck carries every iperf3 flow (one shaped egress with delay figures)
            share = f" ({goodput / aqm_rates[0]:.3f} of the bottleneck rate)" if len(aqm_rates) == 1 else ""
            print(f"{run_dir.name}: iperf3 goodput {goodput / 1e6:.2f} Mbit/s, all flows{share}", file=out)
