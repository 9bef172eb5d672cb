"""Figures of a sweep report (PNG, matplotlib Agg); a study adds its paper's figure numbers.

The study's axes (:mod:`nest_experiments.analysis.axes`) name the groups and the bars; the NeST paper's (the
AQM at each target) read:

- one bar chart per DASH metric and stream: the mean per target, one bar per
  AQM, error bars = 95% CI over repetitions (none where n < MIN_REPS, and the
  bar says ``n=...``); the title names the paper's figure when the metric has one;
- one queue-delay figure per AQM egress (the NeST paper's Figs. 12-13: one per bottleneck):
  one panel per target, one line per AQM and source (kernel: dashed;
  measured: solid), mean over repetitions on a 1 s grid with a band, the
  target a dotted line; the y axis spans the steady window (the start-up
  spike, up to 100x the target, is shaded and marked as clipped).

Colors: a compared value keeps its color in every figure (PIE blue, FQ-PIE orange).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from nest_experiments.analysis.axes import AQM_AT_TARGET, Axis, Context, target_ms  # noqa: E402
from nest_experiments.analysis.axes import Axes as ReportAxes  # noqa: E402
from nest_experiments.analysis.report import Metric, Profile, Row, Sweep  # noqa: E402

OTHER_COLORS = ("#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
DPI = 150
SOURCE_STYLES = {"kernel": "--", "capture-pie-style": "-."}  # measured (capture): solid
BAR_NOTE = "error bars: 95% CI over repetitions (none where n < 4)"
DELAY_NOTE = ("mean over repetitions on a 1 s grid; band: 95% CI (min-max where n < 4); shaded: start-up "
              "(before traffic start + 2 s), left out of the y range")


def color(value: str, values: Sequence[str], axis: Axis) -> str:
    """The axis's color of ``value``; the others take the palette in the order of ``values``."""
    if value in axis.colors:
        return axis.colors[value]
    others = [v for v in values if v not in axis.colors]
    return OTHER_COLORS[others.index(value) % len(OTHER_COLORS)] if value in others else "#000000"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower() or "x"


def context_text(context: Context) -> str:
    return ", ".join(f"{k} = {v}" for k, v in context)


def metric_file(metric: Metric, context: Context) -> str:
    stem = f"fig{metric.figure:02d}_{slug(metric.key)}" if metric.figure else slug(metric.key)
    return f"{stem}_{slug(context_text(context))}.png" if context else f"{stem}.png"


def delay_file(egress: str, context: Context) -> str:
    stem = f"qdelay_{slug(egress)}"
    return f"{stem}_{slug(context_text(context))}.png" if context else f"{stem}.png"


def sweep_figures(sweep: Sweep, rows: Sequence[Row], profiles: Sequence[Profile], out_dir: Path, *,
                  delay_reference: str = "") -> dict[str, Path]:
    """Every figure of the report; keys: ``metric file name`` -> path (see :func:`metric_file`).

    ``delay_reference`` follows the queue-delay title (e.g. `` (cf. paper Figs. 12-13)``).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for metric in (m for m in sweep.metrics if m.plot):
        for context in sweep.contexts:
            mine = [r for r in rows if r.metric.key == metric.key and r.context == context]
            if mine:
                name = metric_file(metric, context)
                written[name] = bar_chart(mine, metric, sweep.compared, context, out_dir / name, axes=sweep.axes)
    for context in sweep.contexts:
        for egress in sorted({p.egress for p in profiles if p.context == context}):
            profs = [p for p in profiles if p.egress == egress and p.context == context]
            name = delay_file(egress, context)
            written[name] = delay_figure(profs, egress, sweep.compared, sweep.ats, context, out_dir / name,
                                         reference=delay_reference, axes=sweep.axes)
    return written


def bar_chart(rows: Sequence[Row], metric: Metric, values: Sequence[str], context: Context,
              path: Path, *, axes: ReportAxes = AQM_AT_TARGET) -> Path:
    return save(draw_bars(rows, metric, values, context, axes=axes), path, footnote=BAR_NOTE)


def draw_bars(rows: Sequence[Row], metric: Metric, values: Sequence[str],
              context: Context, *, axes: ReportAxes = AQM_AT_TARGET) -> Figure:
    """One group of bars per value of the at axis (a target), one bar per compared value (an AQM); headroom
    above the bars for the legend."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    width = 0.8 / max(1, len(values))
    for i, value in enumerate(values):
        xs: list[float] = []
        means: list[float] = []
        errs: tuple[list[float], list[float]] = ([], [])
        ns: list[int] = []
        for x, row in enumerate(rows):
            est = row.estimates.get(value)
            if est is None or est.mean is None:
                continue
            xs.append(x + (i - (len(values) - 1) / 2) * width)
            means.append(est.mean)
            errs[0].append(est.mean - est.low if est.low is not None else 0.0)
            errs[1].append(est.high - est.mean if est.high is not None else 0.0)
            ns.append(est.n)
        bars = ax.bar(xs, means, width, yerr=errs, capsize=4, color=color(value, values, axes.compared),
                      label=axes.compared.label(value), edgecolor="black", linewidth=0.5)
        for bar, n in zip(bars, ns, strict=True):
            ax.annotate(f"n={n}", (bar.get_x() + bar.get_width() / 2, 0), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7, color="white" if value in axes.compared.colors else "black")
    ax.set_xticks(range(len(rows)), [r.at for r in rows])
    ax.set_xlabel(axes.at.title or axes.at.name)
    ax.set_ylabel(f"{metric.label} ({metric.unit})")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.18 * (high - low))  # room for the legend above the tallest bar
    paper = f" (cf. paper Fig. {metric.figure})" if metric.figure else ""
    title = f"{metric.label[0].upper()}{metric.label[1:]}{paper}"
    ax.set_title(title + (f"\n{context_text(context)}" if context else ""), fontsize=10)
    ax.legend(title=axes.compared.name, fontsize=8, title_fontsize=8, loc="upper center", ncol=max(1, len(values)),
              frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.axhline(0, color="black", lw=0.6)
    return fig


def delay_figure(profiles: Sequence[Profile], egress: str, values: Sequence[str], ats: Sequence[str],
                 context: Context, path: Path, *, reference: str = "", axes: ReportAxes = AQM_AT_TARGET) -> Path:
    fig = draw_delay(profiles, egress, values, ats, context, reference=reference, axes=axes)
    return save(fig, path, footnote=DELAY_NOTE, legend_rows=_legend_rows(fig))


def draw_delay(profiles: Sequence[Profile], egress: str, values: Sequence[str], ats: Sequence[str],
               context: Context, *, reference: str = "", axes: ReportAxes = AQM_AT_TARGET) -> Figure:
    """One panel per value of the at axis (a target): each compared value (an AQM) and source a line (band over
    repetitions), the at value a dotted line when it reads as a time (a target).

    The y axis spans the steady window (:func:`steady_top`); the start-up
    before it is shaded, and a peak above the axis is marked as clipped.
    """
    have = {p.at for p in profiles}
    panels = [t for t in ats if t in have] + axes.at.order(have - set(ats))
    fig, grid = plt.subplots(1, len(panels), figsize=(1.0 + 4.3 * len(panels), 4.0), squeeze=False)
    for ax, at in zip(grid[0], panels, strict=True):
        _delay_panel(ax, [p for p in profiles if p.at == at], at, values, axes)
    grid[0][0].set_ylabel("queue delay (ms)")
    handles: dict[str, Any] = {}
    for ax in grid[0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(3, len(handles)), fontsize=7,
               frameon=False, bbox_to_anchor=(0.5, 0.03))
    fig.suptitle(f"Queue delay on {egress}{reference}" + (f"\n{context_text(context)}" if context else ""),
                 fontsize=10)
    return fig


def _delay_panel(ax: Axes, profiles: Sequence[Profile], at: str, values: Sequence[str], axes: ReportAxes) -> None:
    order = {v: i for i, v in enumerate(values)}
    for p in sorted(profiles, key=lambda p: (order.get(p.compared, len(order)), p.source != "kernel", p.source)):
        line = color(p.compared, values, axes.compared)
        ax.plot(p.t, p.mean, SOURCE_STYLES.get(p.source, "-"), color=line, lw=1.3,
                label=f"{axes.compared.label(p.compared)}, {_source(p.source)}")
        ax.fill_between(p.t, p.low, p.high, color=line, alpha=0.15, lw=0)
    ms = target_ms(at)
    if ms is not None:
        ax.axhline(ms, color="black", lw=1.0, ls=":", label=axes.at.name)
    top, peak, peak_t = steady_top(profiles, ms)
    ax.set_ylim(0, top)
    start = max((p.steady[0] for p in profiles if p.steady), default=None)
    if start is not None:
        ax.axvspan(min(min(p.t) for p in profiles if p.t) - 0.5, start, color="0.9", lw=0, zorder=0)
    runs = ", ".join(f"{axes.compared.label(v)} n={n}" for v, n in dict.fromkeys((p.compared, p.runs) for p in profiles))
    title = f"{axes.at.name} {at} ({runs})"
    if peak > top:
        ax.plot([peak_t], [top], marker="^", color="0.25", ms=6, clip_on=False, zorder=5)
        title += f"\n^ start-up peak {peak:.0f} ms at {peak_t:.1f} s, clipped"
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("time since run start (s)")
    ax.grid(alpha=0.3)


def steady_top(profiles: Sequence[Profile], target: float | None) -> tuple[float, float, float]:
    """The y axis top that shows the steady window (its highest band, and the target, plus 20%), and the
    highest point over the whole run (value, time) to mark when it is clipped."""
    steady = [h for p in profiles for t, h in zip(p.t, p.high, strict=True) if p.steady is None
              or p.steady[0] <= t <= p.steady[1]]
    everything = [(h, t) for p in profiles for t, h in zip(p.t, p.high, strict=True)]
    peak, peak_t = max(everything, key=lambda ht: (ht[0], -ht[1]), default=(0.0, 0.0))  # the first time at the peak
    top = max([*steady, *([target] if target is not None else [])], default=peak) * 1.2
    return (top if top > 0 else 1.0), peak, peak_t


def _source(source: str) -> str:
    if source == "kernel":
        return "kernel (qdisc.csv)"
    return f"measured: {source} (qdelay.csv)"


def _legend_rows(fig: Figure) -> int:
    legend = fig.legends[0] if fig.legends else None
    return math.ceil(len(legend.get_texts()) / 3) if legend else 0


def layout(fig: Figure, *, footnote: str = "", legend_rows: int = 0) -> None:
    """Tight layout with room at the bottom for a figure legend of ``legend_rows`` and the footnote."""
    bottom = (0.045 if footnote else 0.0) + 0.045 * legend_rows + (0.03 if legend_rows else 0.0)
    fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0))
    if footnote:
        fig.text(0.99, 0.01, footnote, ha="right", va="bottom", fontsize=7, color="0.35")


def save(fig: Figure, path: Path, *, footnote: str = "", legend_rows: int = 0) -> Path:
    """Lay out (:func:`layout`), write atomically, close."""
    layout(fig, footnote=footnote, legend_rows=legend_rows)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=DPI)
    plt.close(fig)
    tmp.replace(path)
    return path
