"""The "under the hood" study's own report: ``report/under_hood.md`` and its CDF figures.

- objects (Fig. 6): CDFs of per-object throughput and response latency, TCP vs h3;
- DASH (Fig. 7, Fig. 9b): per origin implementation, CDFs of segment throughput
  and response latency, video and audio apart, TCP vs h3;
- two parallel streams (Fig. 8): per pause time, CDFs of latency; median
  latency and throughput by pause per transport (IQR bars); Jain's index of the
  two streams per session.

Every figure comes with its numbers (medians, q75, n of the objects or segments
of all sessions pooled: a description of one distribution per transport, not a
test), and the paper's claims judged per session (:mod:`.claims`: one number per
session, sessions paired by block).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from nest_experiments.analysis import decisions  # noqa: E402
from nest_experiments.analysis import markdown as md  # noqa: E402
from nest_experiments.analysis.claims import in_families, verdict_table  # noqa: E402
from nest_experiments.analysis.report_figures import save  # noqa: E402
from nest_experiments.analysis.stats import quantile  # noqa: E402
from nest_experiments.rundir import write_atomic  # noqa: E402
from nest_experiments.studies.under_hood import claims as uc  # noqa: E402
from nest_experiments.studies.under_hood import metrics as uh  # noqa: E402

COLORS = {"tcp": "#1f77b4", "h3": "#d62728"}
NAMES = {"tcp": "HTTP/1.1 over TCP", "h3": "HTTP/3 over QUIC"}
STYLES = {"video": "-", "audio": "--", "objects": "-", "s1": "-", "s2": "--"}
METRICS = (("throughput_bps", "throughput (Mbit/s)", 1e-6), ("latency_s", "response latency (ms)", 1e3))


def cdf(ax: Axes, xs: Sequence[float], *, label: str, color: str, style: str = "-") -> None:
    ys = sorted(xs)
    if ys:
        ax.step(ys, [(i + 1) / len(ys) for i in range(len(ys))], where="post", label=f"{label} (n={len(ys)})",
                color=color, linestyle=style)


def _panel(ax: Axes, samples: Sequence[uh.Sample], metric: str, streams: Sequence[str], **match: object) -> None:
    _, label, scale = next(m for m in METRICS if m[0] == metric)
    for t in uh.TRANSPORTS:
        for st in streams:
            xs = [v * scale for v in uh.values(samples, metric, transport=t, **({"stream": st} if st else {}), **match)]
            cdf(ax, xs, label=f"{NAMES[t]}{' ' + st if st else ''}", color=COLORS[t], style=STYLES.get(st, "-"))
    ax.set_xlabel(label)
    ax.set_ylabel("CDF")
    if metric == "latency_s":
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def cdf_figure(samples: Sequence[uh.Sample], path: Path, *, title: str, streams: Sequence[str] = ("",),
               **match: object) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (metric, _, _) in zip(axes, METRICS, strict=True):
        _panel(ax, samples, metric, streams, **match)
    fig.suptitle(title, fontsize=10)
    return save(fig, path, footnote="throughput = bytes / (last - first byte); latency = first byte - request")


def by_pause_figure(samples: Sequence[uh.Sample], fair: Sequence[uh.Fairness], path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    ps = uh.pauses(samples)
    for ax, (metric, label, scale) in zip(axes[:2], METRICS, strict=True):
        for t in uh.TRANSPORTS:
            groups = [[v * scale for v in uh.values(samples, metric, transport=t, pause_s=p)] for p in ps]
            kept = [(p, g) for p, g in zip(ps, groups, strict=True) if g]
            meds = [quantile(g, 0.5) for _, g in kept]
            err = [[m - quantile(g, 0.25) for m, (_, g) in zip(meds, kept, strict=True)],
                   [quantile(g, 0.75) - m for m, (_, g) in zip(meds, kept, strict=True)]]
            ax.errorbar([p for p, _ in kept], meds, yerr=err, marker="o", capsize=3, color=COLORS[t], label=NAMES[t])
        ax.set(xscale="log", xlabel="pause between requests (s)", ylabel=f"median {label}, IQR")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for t in uh.TRANSPORTS:
        for attr, marker, what in (("jain", "o", "session means"), ("concurrent_jain", "x", "while both download")):
            pts = [(f.pause_s, getattr(f, attr)) for f in fair if f.transport == t and getattr(f, attr) is not None
                   and f.pause_s]
            axes[2].scatter([p for p, _ in pts], [j for _, j in pts], color=COLORS[t], marker=marker, alpha=0.7,
                            label=f"{NAMES[t]}: {what}")
    axes[2].set(xscale="log", xlabel="pause between requests (s)", ylabel="Jain's index of the 2 streams",
                ylim=(0.45, 1.02))
    axes[2].grid(alpha=0.3)
    axes[2].legend(fontsize=7)
    for ax in axes:  # the pauses themselves as ticks (log scale's minor labels overlap)
        ax.set_xticks(ps, [f"{p:g}" for p in ps])
        ax.minorticks_off()
    fig.suptitle("two parallel streams: two TCP connections vs one QUIC connection", fontsize=10)
    return save(fig, path, footnote="per session: Jain's index of the two streams' mean object throughput (o), and of "
                                    "concurrent objects' throughputs, weighted by their overlap (x)")


# ---------------------------------------------------------------- markdown


def comparison_rows(cs: Sequence[uh.Comparison]) -> list[list[str]]:
    return [[c.what, c.metric.split("_")[0], f"{c.a_name} / {c.b_name}",
             f"{uh.fmt_value(c.metric, c.median('a'))} / {uh.fmt_value(c.metric, c.median('b'))}",
             f"{uh.fmt_value(c.metric, c.q75('a'))} / {uh.fmt_value(c.metric, c.q75('b'))}", f"{len(c.a)} / {len(c.b)}"]
            for c in cs]


COMPARISON_HEAD = ("what", "metric", "a / b", "median a / b (all sessions pooled)", "q75 a / b", "n objects a / b")
POOLED = ("The tables describe the objects or segments of all sessions of a cell pooled (one distribution per "
          "transport): not a test, as the objects of one session are not independent. The claims below compare "
          "sessions.")


def _objects_md(samples: Sequence[uh.Sample], out_dir: Path, pngs: list[Path]) -> list[str]:
    pngs.append(cdf_figure(samples, out_dir / "objects_cdf.png", title="object downloads (Fig. 6)"))
    cs = [uh.compare(samples, "objects", m, a={"transport": "tcp"}, b={"transport": "h3"}) for m, _, _ in METRICS]
    return ["## Object downloads (Fig. 6)", "", f"![objects]({pngs[-1].name})", "",
            *md.table(COMPARISON_HEAD, comparison_rows(cs))]


def _dash_md(samples: Sequence[uh.Sample], out_dir: Path, pngs: list[Path]) -> list[str]:
    out = ["## DASH segments (Fig. 7, Fig. 9b)", ""]
    for server in sorted({s.server for s in samples}):
        who = uh.SERVERS.get(server, server)
        pngs.append(cdf_figure(samples, out_dir / f"dash_cdf_{server}.png", streams=("video", "audio"),
                               title=f"DASH segments from {who}", server=server))
        cs = uh.dash_comparisons(samples, server)
        out += [f"### {who}", "", f"![dash {server}]({pngs[-1].name})", "",
                *md.table(COMPARISON_HEAD, comparison_rows([replace_what(c, k) for k, c in cs.items()]))]
    return out


def replace_what(c: uh.Comparison, key: str) -> uh.Comparison:
    labels = {"video_tp": "video", "video_lat": "video", "all_lat": "video + audio", "audio_lat": "audio",
              "tcp_av": "on tcp", "h3_av": "on h3"}
    return uh.Comparison(what=labels.get(key, key), metric=c.metric, a_name=c.a_name, b_name=c.b_name, a=c.a, b=c.b)


def _parallel_md(samples: Sequence[uh.Sample], out_dir: Path, pngs: list[Path]) -> list[str]:
    fair = uh.fairness(samples)
    pngs.append(by_pause_figure(samples, fair, out_dir / "parallel_by_pause.png"))
    out = ["## Two parallel streams (Fig. 8)", "", f"![by pause]({pngs[-1].name})", ""]
    cs = [c for p in uh.pauses(samples) for c in uh.parallel_comparisons(samples, p)]
    out += md.table(COMPARISON_HEAD, comparison_rows(cs))
    for p in uh.pauses(samples):
        pngs.append(cdf_figure(samples, out_dir / f"parallel_cdf_pause_{p:g}s.png", streams=("s1", "s2"),
                               title=f"two parallel streams, pause {p:g} s", pause_s=p))
        out += [f"![pause {p:g} s]({pngs[-1].name})", ""]
    out += ["### Fairness between the two streams", "",
            "Jain's index of the streams' mean object throughput over the session, their min / max, and Jain's "
            "index of the rates of objects of the two streams while both downloaded (weighted by the overlap).", "",
            *md.table(("session", "transport", "pause", "mean throughput per stream", "Jain's index", "min / max",
                     "Jain while both download", "overlap"),
                    [[f.session, f.transport, f"{f.pause_s:g} s" if f.pause_s is not None else "-",
                      ", ".join(f"{m / 1e6:.3g} Mbit/s" for m in f.means_bps), _num(f.jain, 3), _num(f.ratio, 2),
                      _num(f.concurrent_jain, 3), f"{f.overlap_s:.1f} s"] for f in fair])]
    return out


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


SECTIONS = {uh.OBJECTS: _objects_md, uh.DASH: _dash_md, uh.PARALLEL: _parallel_md}


def claims_md(folder: Path, experiment: str) -> list[str]:
    """The paper's claims on ``experiment``, judged per session on the sweep in ``folder`` (read as that
    experiment: another sweep's sessions, e.g. the ABR study's, count as its)."""
    sessions = decisions.session_table(folder, cell_of=uc.cell_of, metrics=uc.session_metrics)
    if not sessions.empty:
        sessions = sessions.assign(experiment=experiment)
    claims = in_families("under_hood", uc.PAPER_CLAIMS,
                         [c for c in uc.PAPER_CLAIMS if c.conditions.get("experiment") == experiment])
    verdicts = decisions.judge_folder(claims, sessions, folder)
    if not verdicts:
        return []
    return ["## The paper's claims, judged per session", "",
            "One number per session (its objects' or segments' median or upper quartile, or Jain's index), TCP vs "
            "QUIC paired by block (the same objects, or the same trace and ABR); CPU-saturated sessions left out "
            "(the method: the shared report.md).", "", verdict_table(verdicts)]


def write_report(folder: Path, out_dir: Path, *, experiment: str | None = None) -> list[Path]:
    """``out_dir/under_hood.md`` with its figures; returns what was written. ``experiment``: read the folder as
    that one of :data:`SECTIONS` (e.g. the ABR study's runs as ``under_hood_dash``); default: its name."""
    exp = experiment or uh.experiment_of(folder)
    loaded = uh.load(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs: list[Path] = []
    lines = [f"# Under the hood: {exp}", "",
             f"{loaded.runs} runs with data, {len(loaded.samples)} samples (objects or segments).", ""]
    if loaded.excluded:
        lines += [f"Left out, overlapping a CPU-saturated 1 s window (`cpu.csv`): {'; '.join(loaded.excluded)} "
                  "samples.", ""]
    section = SECTIONS.get(exp)
    if section is not None and loaded.samples:
        lines += [POOLED, ""] + section(loaded.samples, out_dir, pngs)
        lines += claims_md(folder, exp)
    write_atomic(out_dir / uh.REPORT_FILE, "\n".join(lines) + "\n")
    return [out_dir / uh.REPORT_FILE, *pngs]


def main(argv: list[str] | None = None) -> int:
    """``python -m nest_experiments.studies.under_hood.report FOLDER --as dash``: this report on another sweep's
    run folders (e.g. ``results/abr_quic_tcp``, whose ``segments.csv`` are DASH sessions over tcp and h3)."""
    p = argparse.ArgumentParser(prog="python -m nest_experiments.studies.under_hood.report")
    p.add_argument("folder", type=Path)
    p.add_argument("--as", dest="kind", choices=("objects", "dash", "parallel"), default="dash")
    p.add_argument("--out", type=Path, help="report folder (default: FOLDER/report/under_hood)")
    a = p.parse_args(argv)
    out = a.out or a.folder / "report" / "under_hood"
    for path in write_report(a.folder, out, experiment=f"under_hood_{a.kind}"):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
