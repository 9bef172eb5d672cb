"""The ABR x transport study's own report: ``report/abr_quic.md``, its box plots and estimate-vs-trace figures.

- the paper's claims as judged by the shared evaluator (``STUDY.verdicts``);
- Figs. 2-5 as box plots: one figure per metric, per ABR a TCP box and an h3
  box (the usable sessions of :func:`.metrics.usable`, each session a dot);
- the noise floor (A/A pairs) beside the equivalence claims' margins;
- per run, the ABR's throughput estimate at each video decision
  (``abr_decisions.csv`` ``throughput_bps``; BBA uses none) next to the rate
  the trace gave the link at that moment (``rates.csv``: the last change
  applied at or before the decision, on the run clock) and each video
  segment's throughput (``segments.csv``), in ``report/estimates/<run>.png``;
  over the sweep, estimate / trace per ABR and transport (a box plot).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nest_experiments.analysis import markdown as md  # noqa: E402
from nest_experiments.analysis.claims import Verdict, verdict_table  # noqa: E402
from nest_experiments.analysis.markdown import number as fmt  # noqa: E402
from nest_experiments.analysis.report_figures import save  # noqa: E402
from nest_experiments.rundir import DECISIONS, RATES, SEGMENTS, RunFolder, write_atomic  # noqa: E402
from nest_experiments.studies.abr_quic.claims import MARGINS  # noqa: E402
from nest_experiments.studies.abr_quic.metrics import (  # noqa: E402
    BY_KEY,
    METRICS,
    REPORT_FILE,
    TRANSPORTS,
    SessionMetric,
    StudyReport,
    abrs,
    analyse,
    usable,
)

COLORS = {"tcp": "#1f77b4", "h3": "#d62728"}
NAMES = {"tcp": "HTTP/1.1 over TCP", "h3": "HTTP/3 over QUIC"}
ESTIMATES_DIR = "estimates"


# ---------------------------------------------------------------- estimate vs trace (pure)


@dataclass(frozen=True, kw_only=True)
class EstimatePoint:
    t: float
    estimate_bps: float
    trace_bps: float | None  # None: before the first rate, or no rates.csv

    @property
    def ratio(self) -> float | None:
        return self.estimate_bps / self.trace_bps if self.trace_bps else None


def trace_schedule(rates: Sequence[dict[str, str]]) -> tuple[list[float], list[float], str]:
    """The applied rate steps (t, rate_bps) of the traced egress in ``rates.csv`` rows, and which egress.

    With several traced egresses, the one with the most changes (the others are named in the label).
    """
    keys: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in rates:
        keys.setdefault((r["link"], r["direction"]), []).append(r)
    if not keys:
        return [], [], ""
    chosen = max(keys, key=lambda k: len(keys[k]))
    rows = sorted(keys[chosen], key=lambda r: float(r["t"]))
    label = f"{chosen[0]} {chosen[1]}" + (f" (also traced: {len(keys) - 1} more)" if len(keys) > 1 else "")
    return [float(r["t"]) for r in rows], [float(r["rate_bps"]) for r in rows], label


def rate_at(times: Sequence[float], rates: Sequence[float], t: float) -> float | None:
    """The rate applied at time ``t``: the last change at or before it."""
    i = bisect.bisect_right(times, t) - 1
    return rates[i] if i >= 0 else None


def estimates(run_dir: Path, stream: str = "video") -> list[EstimatePoint]:
    """Each decision of ``stream`` that had an estimate, with the trace's rate at its time."""
    times, rates, _ = trace_schedule(RunFolder(run_dir).rows(RATES))
    out = []
    for d in RunFolder(run_dir).rows(DECISIONS):
        if d.get("stream") != stream or not d.get("throughput_bps"):
            continue
        t = float(d["t"])
        out.append(EstimatePoint(t=t, estimate_bps=float(d["throughput_bps"]), trace_bps=rate_at(times, rates, t)))
    return out


def median_ratio(points: Sequence[EstimatePoint]) -> float | None:
    ratios = [p.ratio for p in points if p.ratio is not None]
    return statistics.median(ratios) if ratios else None


# ---------------------------------------------------------------- figures


def box_plot(report: StudyReport, metric: SessionMetric, path: Path) -> Path:
    chosen = usable(report.sessions)
    names = abrs(chosen)
    fig, ax = plt.subplots(figsize=(1.3 * max(3, len(names)) + 1.5, 4.0))
    for j, transport in enumerate(TRANSPORTS):
        data = [[s.metrics[metric.key] for s in chosen if (s.abr, s.transport) == (a, transport)] for a in names]
        pos = [i + (j - 0.5) * 0.36 for i in range(len(names))]
        present = [(p, d) for p, d in zip(pos, data, strict=True) if d]
        if present:
            box = ax.boxplot([d for _, d in present], positions=[p for p, _ in present], widths=0.3,
                             patch_artist=True, showfliers=False)
            for patch in box["boxes"]:
                patch.set(facecolor=COLORS[transport], alpha=0.35)
        for p, d in present:
            ax.plot([p] * len(d), d, "o", ms=3, color=COLORS[transport])
        ax.plot([], [], "s", color=COLORS[transport], alpha=0.5, label=NAMES[transport])
    ax.set_xticks(range(len(names)), names)
    unit = f" ({metric.unit})" if metric.unit else ""
    ax.set_ylabel(f"{metric.label}{unit}")
    ax.set_title(f"{metric.label[0].upper()}{metric.label[1:]} per ABR and transport (cf. paper Fig. {metric.figure})",
                 fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.text(1.0, -0.14, "boxes: quartiles and median over sessions (one per trace); dots: sessions",
            transform=ax.transAxes, ha="right", fontsize=7, color="0.35")
    return save(fig, path)


def estimate_figure(run_dir: Path, path: Path) -> Path:
    times, rates, label = trace_schedule(RunFolder(run_dir).rows(RATES))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    points = estimates(run_dir)
    segs = [r for r in RunFolder(run_dir).rows(SEGMENTS) if r.get("stream") == "video" and r.get("t_last_byte")
            and r.get("t_first_byte") and float(r["t_last_byte"]) > float(r["t_first_byte"])]
    if times:
        end = max([times[-1], *(p.t for p in points), *(float(r["t_last_byte"]) for r in segs)])
        ax.step([*times, end], [r / 1e6 for r in (*rates, rates[-1])], where="post", color="0.4", lw=1,
                label=f"trace rate applied ({label}, rates.csv)")
    ax.plot([p.t for p in points], [p.estimate_bps / 1e6 for p in points], "o-", ms=4, color="#d62728",
            label="ABR's throughput estimate at each video decision")
    ax.plot([float(r["t_last_byte"]) for r in segs],
            [8 * int(r["bytes"]) / (float(r["t_last_byte"]) - float(r["t_first_byte"])) / 1e6 for r in segs],
            "x", ms=5, color="#1f77b4", label="video segment throughput (bytes / first-to-last byte)")
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("Mbit/s")
    ax.set_title(f"{run_dir.name}: estimate vs trace" + ("" if points else " (this ABR uses no estimate)"),
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return save(fig, path)


def ratio_figure(report: StudyReport, path: Path) -> Path:
    chosen = usable(report.sessions)
    names = [a for a in abrs(chosen) if any(estimates(s.path) for s in chosen if s.abr == a)]
    fig, ax = plt.subplots(figsize=(1.3 * max(3, len(names)) + 1.5, 3.8))
    for j, transport in enumerate(TRANSPORTS):
        for i, abr in enumerate(names):
            ratios = [p.ratio for s in chosen if (s.abr, s.transport) == (abr, transport)
                      for p in estimates(s.path) if p.ratio is not None]
            if ratios:
                box = ax.boxplot([ratios], positions=[i + (j - 0.5) * 0.36], widths=0.3, patch_artist=True,
                                 showfliers=False)
                box["boxes"][0].set(facecolor=COLORS[transport], alpha=0.35)
        ax.plot([], [], "s", color=COLORS[transport], alpha=0.5, label=NAMES[transport])
    ax.axhline(1.0, color="0.3", lw=0.8, ls=":")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("estimate / trace rate at the decision")
    ax.set_title("ABR throughput estimate vs the trace's rate (1 = exact; BBA uses no estimate)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


# ---------------------------------------------------------------- Markdown


def _head(report: StudyReport, folder: Path) -> list[str]:
    excluded = report.excluded
    incomplete = [s for s in report.sessions if not s.complete]
    return [
        f"# ABR x transport: {folder.name}", "",
        "The letter of Mondal & Chakraborty (docs/papers.md; section IV, Figs. 2-5) on this sweep "
        "(`nest_experiments/studies/abr_quic/`).", "",
        f"- {len(report.sessions)} session(s); {len(excluded)} left out of the statistics because their run had a "
        f"CPU-saturated 1 s window; {len(incomplete)} did not play to the end (kept, flagged below).",
        "- Per session: average video bitrate (kbit/s); quality variation = mean |bitrate change| between "
        "consecutive video segments, zero changes included (kbit/s; the smoothness term of eq. (1) per chunk pair: "
        "the letter does not define its variation); rebuffer time = the session's total stall time (s); QoE = "
        "eq. (1) with q(R) = R in Mbit/s over the video segments, mu = 4.3, the session's stall time.",
        "- The paper's claims (`nest_experiments/studies/abr_quic/claims.py`), judged by the shared evaluator: per "
        "ABR, TCP vs h3 on the same trace (paired; pairs within a trace family, the families pooled): Wilcoxon "
        "signed-rank test, Hodges-Lehmann effect with the CI that inverts it; \"insignificant\" claims are "
        "equivalence claims (TOST, agreeing only when the CI lies inside the stated margin), and a directional claim "
        "also contradicts when its CI lies below its margin (no difference of the claimed size); CPU-saturated sessions "
        "are left out and counted. " + ("The sweep ran until decided: alpha spent over the looks."
                                        if report.sequential else "One fixed-size analysis at alpha = 0.05."),
        "- Noise floor: the largest spread between repetitions of one point on one trace (A/A pairs), beside the "
        "equivalence claims' margins.", ""]


def _sessions(report: StudyReport) -> list[str]:
    chosen = usable(report.sessions)
    lines = []
    for abr in abrs(chosen):
        for t in TRANSPORTS:
            group = [s for s in chosen if (s.abr, s.transport) == (abr, t)]
            if group:
                lines.append([abr, t, str(len(group)),
                              *[fmt(statistics.median(s.metrics[m.key] for s in group)) for m in METRICS]])
    header = ["ABR", "transport", "sessions", *[f"median {m.label}{f' ({m.unit})' if m.unit else ''}" for m in METRICS]]
    return ["## Sessions per ABR and transport", "", *md.table(header, lines)]


def _margin(key: str) -> str:
    if key not in MARGINS:
        return "-"
    margin, relative = MARGINS[key]
    return f"{margin:.0%} of h3's median" if relative else f"{fmt(margin)} {BY_KEY[key].unit}".rstrip()


def _noise(report: StudyReport) -> list[str]:
    out = ["## Noise floor (A/A pairs)", ""]
    lines = [["/".join(p.cell), ", ".join(p.runs), *[fmt(p.spread[m.key]) for m in METRICS]] for p in report.pairs]
    if lines:
        lines.append(["**floor (largest)**", "", *[fmt(report.floor.get(m.key)) for m in METRICS]])
    else:
        out += ["No point ran more than once on one trace (`[sweep_repeat]`): no noise floor.", ""]
    lines.append(["*equivalence claims' margin*", "", *[_margin(m.key) for m in METRICS]])
    return out + md.table(["point (ABR/transport/trace)", "runs", *[m.label for m in METRICS]], lines)


def _claims(report: StudyReport) -> list[str]:
    counts = {k: sum(v.verdict == k for v in report.verdicts) for k in dict.fromkeys(v.verdict for v in report.verdicts)}
    return ["## The paper's claims (section IV), judged", "",
            "Verdicts: " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "none") + ".", "",
            verdict_table(report.verdicts)]


def _estimates(report: StudyReport, figures: dict[str, Path]) -> list[str]:
    out = ["## Throughput estimate vs the trace", "",
           "The estimate is what the ABR decided on (`abr_decisions.csv` `throughput_bps`): dash.js's rules "
           "(`throughput`, `bola`, `dynamic`) log their average after the 0.9 safety factor, MPC the harmonic mean of "
           "the last 5 request rates (MPC-Robust: divided by 1 + the largest recent error), BBA none. The trace rate is "
           "the link's (`rates.csv`, applied at or before the decision), shared by video and audio and counting "
           "headers: a ratio somewhat below 1 is expected; what differs between TCP and h3 is the point.", ""]
    if "estimate_ratio.png" in figures:
        out += ["![estimate / trace](estimate_ratio.png)", ""]
    lines = []
    for s in sorted(report.sessions, key=lambda s: s.run):
        points = estimates(s.path)
        over = sum(1 for p in points if p.ratio is not None and p.ratio > 1)
        name = f"{ESTIMATES_DIR}/{s.run}.png"
        lines.append([s.run, str(len(points)), fmt(median_ratio(points)),
                      f"{over}/{len(points)}" if points else "-", f"[figure]({name})" if name in figures else "-"])
    return out + md.table(["run", "decisions with an estimate", "median estimate / trace", "estimate > trace",
                         "estimate vs trace over time"], lines)


def _flags(report: StudyReport) -> list[str]:
    out = ["## Flagged sessions", ""]
    lines = [[s.run, str(s.cpu_saturated), "yes" if s.complete else "**no**",
              "left out (CPU)" if s.cpu_saturated else "used" if s in usable(report.sessions)
              else "A/A copy: in the claims (averaged into its trace's pair), not the box plots"]
             for s in report.sessions if s.cpu_saturated or not s.complete]
    return out + (md.table(["run", "CPU-saturated 1 s windows", "played to the end", "used"], lines) if lines
                  else ["None: no CPU-saturated run, every session played to the end.", ""])


def render(report: StudyReport, folder: Path, figures: dict[str, Path]) -> str:
    figs = [f"![{m.label}](fig{m.figure:02d}_{m.key}.png)\n" for m in METRICS if f"fig{m.figure:02d}_{m.key}.png" in figures]
    parts = _head(report, folder) + _claims(report) + ["## Figures 2-5", "", *figs] + _sessions(report)
    parts += _noise(report) + _estimates(report, figures) + _flags(report)
    return "\n".join(parts).rstrip() + "\n"


def write_report(folder: Path, out_dir: Path, *, verdicts: Sequence[Verdict] = (), figures: bool = True) -> list[Path]:
    """``out_dir/abr_quic.md`` with its figures and the claims' ``verdicts`` (``abr_quic.STUDY.verdicts``); returns
    what was written."""
    report = analyse(folder, verdicts)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs: dict[str, Path] = {}
    if figures and report.sessions:
        for m in METRICS:
            name = f"fig{m.figure:02d}_{m.key}.png"
            pngs[name] = box_plot(report, m, out_dir / name)
        pngs["estimate_ratio.png"] = ratio_figure(report, out_dir / "estimate_ratio.png")
        (out_dir / ESTIMATES_DIR).mkdir(exist_ok=True)
        for s in report.sessions:
            name = f"{ESTIMATES_DIR}/{s.run}.png"
            pngs[name] = estimate_figure(s.path, out_dir / name)
    write_atomic(out_dir / REPORT_FILE, render(report, folder, pngs))
    return [out_dir / REPORT_FILE, *pngs.values()]


__all__ = ["estimates", "rate_at", "trace_schedule", "write_report"]
