"""Figures of a sweep report (PNG, matplotlib Agg); a study adds its paper's figure numbers.

- one bar chart per DASH metric and stream: the mean per target, one bar per
  AQM, error bars = 95% CI over repetitions (none where n < MIN_REPS, and the
  bar says ``n=...``); the title names the paper's figure when the metric has one;
- one queue-delay figure per AQM egress (the NeST paper's Figs. 12-13: one per bottleneck):
  one panel per AQM, one line per target and source (kernel: dashed;
  measured: solid), mean over repetitions on a 1 s grid with a band.

Colors: an AQM keeps its color in every bar chart (PIE blue, FQ-PIE orange);
a target keeps its color in every queue-delay panel.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nest_experiments.report import Metric, Profile, Row, Sweep, target_ms  # noqa: E402

AQM_NAMES = {"pie": "PIE", "fq_pie": "FQ-PIE", "codel": "CoDel", "fq_codel": "FQ-CoDel", "cake": "CAKE"}
AQM_COLORS = {"pie": "#1f77b4", "fq_pie": "#ff7f0e"}
OTHER_COLORS = ("#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
TARGET_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")
DPI = 150


def aqm_name(aqm: str) -> str:
    return "+".join(AQM_NAMES.get(a, a) for a in aqm.split("+"))


def aqm_color(aqm: str, aqms: Sequence[str]) -> str:
    if aqm in AQM_COLORS:
        return AQM_COLORS[aqm]
    others = [a for a in aqms if a not in AQM_COLORS]
    return OTHER_COLORS[others.index(aqm) % len(OTHER_COLORS)] if aqm in others else "#000000"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower() or "x"


def context_text(context: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in context)


def metric_file(metric: Metric, context: tuple[tuple[str, str], ...]) -> str:
    stem = f"fig{metric.figure:02d}_{slug(metric.key)}" if metric.figure else slug(metric.key)
    return f"{stem}_{slug(context_text(context))}.png" if context else f"{stem}.png"


def delay_file(egress: str, context: tuple[tuple[str, str], ...]) -> str:
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
                written[name] = bar_chart(mine, metric, sweep.aqms, context, out_dir / name)
    for context in sweep.contexts:
        for egress in sorted({p.egress for p in profiles if p.context == context}):
            profs = [p for p in profiles if p.egress == egress and p.context == context]
            name = delay_file(egress, context)
            written[name] = delay_figure(profs, egress, sweep.aqms, sweep.targets, context, out_dir / name,
                                         reference=delay_reference)
    return written


def bar_chart(rows: Sequence[Row], metric: Metric, aqms: Sequence[str], context: tuple[tuple[str, str], ...],
              path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    width = 0.8 / max(1, len(aqms))
    for i, aqm in enumerate(aqms):
        xs: list[float] = []
        means: list[float] = []
        errs: tuple[list[float], list[float]] = ([], [])
        ns: list[int] = []
        for x, row in enumerate(rows):
            est = row.estimates.get(aqm)
            if est is None or est.mean is None:
                continue
            xs.append(x + (i - (len(aqms) - 1) / 2) * width)
            means.append(est.mean)
            errs[0].append(est.mean - est.low if est.low is not None else 0.0)
            errs[1].append(est.high - est.mean if est.high is not None else 0.0)
            ns.append(est.n)
        bars = ax.bar(xs, means, width, yerr=errs, capsize=4, color=aqm_color(aqm, aqms), label=aqm_name(aqm),
                      edgecolor="black", linewidth=0.5)
        for bar, n in zip(bars, ns, strict=True):
            ax.annotate(f"n={n}", (bar.get_x() + bar.get_width() / 2, 0), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)), [r.target for r in rows])
    ax.set_xlabel("target queue delay")
    ax.set_ylabel(f"{metric.label} ({metric.unit})")
    paper = f" (cf. paper Fig. {metric.figure})" if metric.figure else ""
    title = f"{metric.label[0].upper()}{metric.label[1:]}{paper}"
    ax.set_title(title + (f"\n{context_text(context)}" if context else ""), fontsize=10)
    ax.legend(title="AQM", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.text(1.0, -0.16, "error bars: 95% CI over repetitions (none where n < 4)", transform=ax.transAxes,
            ha="right", fontsize=7, color="0.35")
    return save(fig, path)


def delay_figure(profiles: Sequence[Profile], egress: str, aqms: Sequence[str], targets: Sequence[str],
                 context: tuple[tuple[str, str], ...], path: Path, *, reference: str = "") -> Path:
    panels = [a for a in aqms if any(p.aqm == a for p in profiles)]
    lines = max(sum(1 for p in profiles if p.aqm == a) for a in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 3.6 + 0.17 * lines), sharey=True,
                             squeeze=False)
    for ax, aqm in zip(axes[0], panels, strict=True):
        for p in (p for p in profiles if p.aqm == aqm):
            color = TARGET_COLORS[targets.index(p.target) % len(TARGET_COLORS)] if p.target in targets else "black"
            style = {"kernel": "--", "capture-pie-style": "-."}.get(p.source, "-")
            ax.plot(p.t, p.mean, style, color=color, lw=1.2,
                    label=f"target {p.target}, {_source(p.source)}; n={p.runs}, band: {p.band}")
            ax.fill_between(p.t, p.low, p.high, color=color, alpha=0.15, lw=0)
        for target in {p.target for p in profiles if p.aqm == aqm}:
            ms = target_ms(target)
            if ms is not None:
                ax.axhline(ms, color=TARGET_COLORS[targets.index(target) % len(TARGET_COLORS)], lw=0.8, ls=":")
        ax.set_title(aqm_name(aqm), fontsize=10)
        ax.set_xlabel("time since run start (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    axes[0][0].set_ylabel("queue delay (ms)")
    fig.suptitle(f"Queue delay on {egress}{reference} (dotted: target)"
                 + (f"\n{context_text(context)}" if context else ""), fontsize=10)
    return save(fig, path)


def _source(source: str) -> str:
    if source == "kernel":
        return "kernel (qdisc.csv, dashed)"
    return f"measured: {source} (qdelay.csv{', dash-dot' if source == 'capture-pie-style' else ''})"


def save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=DPI)
    plt.close(fig)
    tmp.replace(path)
    return path
