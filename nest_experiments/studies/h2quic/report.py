"""The HTTP/2-QUIC evaluation's own report: ``report/h2quic.md`` with its figures (from :mod:`.h2quic`).

- Figure 1: protocol overhead (%) per representation, one line per protocol
  (both directions solid, the forward direction alone dashed);
- Table 2 and Figures 2-3: link utilization per protocol and RTT; over the
  bandwidth for h3 (the blog's Fig. 2 shows SPDY over QUIC) and at the
  highest RTT per protocol (Fig. 3);
- Figures 4-7: per adaptation run, the available bandwidth (``rates.csv``),
  the measured bandwidth (the ABR's estimate) and the selected bitrate over
  time (``adaptation/<run>.png``); the blog's Figs. 4-6 are SPDY over QUIC
  at RTT 0/50/150 ms (ours: h3) and Fig. 7 HTTP/1.1 over QUIC at 150 ms (we
  have no HTTP/1.1 over QUIC: the nearest is HTTP/1.1 over TCP);
- Figure 8: the average media throughput per protocol and RTT, and the
  trajectory's mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nest_experiments.analysis import markdown as md  # noqa: E402
from nest_experiments.analysis.claims import Verdict, verdict_table  # noqa: E402
from nest_experiments.analysis.report_figures import save  # noqa: E402
from nest_experiments.rundir import DECISIONS, RATES, RunFolder, write_atomic  # noqa: E402
from nest_experiments.studies.h2quic.metrics import (  # noqa: E402
    NAMES,
    PROTOCOLS,
    REPORT_FILE,
    Adaptation,
    Overhead,
    RunInfo,
    adaptations,
    kbit,
    load_runs,
    media_cells,
    overhead_cells,
    overheads,
    pct,
    threshold_table,
    trace_steps,
    utilization_cells,
    utilization_table,
)

COLORS = {"tcp": "#1f77b4", "h2": "#2ca02c", "h3": "#d62728"}
RTT_COLORS = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b")
ADAPTATION_DIR = "adaptation"


# ---------------------------------------------------------------- figures


def overhead_figure(points: Sequence[Overhead], path: Path) -> Path:
    both, fwd = overhead_cells(points), overhead_cells(points, forward=True)
    rates = sorted({x for _, x in both})
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for p in PROTOCOLS:
        xs = [i for i, r in enumerate(rates) if (p, r) in both]
        if not xs:
            continue
        ax.plot(xs, [100 * both[(p, rates[i])] for i in xs], "o-", color=COLORS[p], label=f"{NAMES[p]} (both ways)")
        ax.plot(xs, [100 * fwd[(p, rates[i])] for i in xs], "x--", color=COLORS[p], alpha=0.7,
                label=f"{NAMES[p]} (media direction)")
    ax.axhline(10, color="grey", lw=0.8, ls=":")
    ax.set_xticks(range(len(rates)), [kbit(r) for r in rates], rotation=45)
    ax.set_xlabel("representation (kbit/s)")
    ax.set_ylabel("protocol overhead (%)")
    ax.set_ylim(bottom=0)
    ax.set_title("Protocol overhead per representation (cf. the blog's Figure 1)")
    ax.legend(fontsize=7, ncols=2)
    return save(fig, path, footnote="bytes on the bottleneck (Ethernet header included) / media payload - 1; "
                                    "mean over repetitions")


def utilization_figure(cells: dict[tuple[str, float, float], float], path: Path, *, protocol: str | None = None,
                       rtt: float | None = None) -> Path:
    """Utilization over the bandwidth: one protocol, a line per RTT (Fig. 2) or one RTT, a line per protocol (3)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    if protocol is not None:
        rtts = sorted({r for p, r, _ in cells if p == protocol})
        series = [(f"RTT {r:g} ms", RTT_COLORS[i % len(RTT_COLORS)], [(b, u) for (p, q, b), u in cells.items()
                                                                       if p == protocol and q == r])
                  for i, r in enumerate(rtts)]
        title = f"Link utilization of {NAMES.get(protocol, protocol)} (cf. the blog's Figure 2)"
    else:
        series = [(NAMES[p], COLORS[p], [(b, u) for (q, r, b), u in cells.items() if q == p and r == rtt])
                  for p in PROTOCOLS]
        title = f"Link utilization at RTT {rtt:g} ms (cf. the blog's Figure 3)"
    for label, color, pts in series:
        if pts:
            pts.sort()
            ax.plot([b / 1e3 for b, _ in pts], [100 * u for _, u in pts], "o-", color=color, label=label)
    ax.axhline(87, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("available bandwidth = representation bitrate (kbit/s)")
    ax.set_ylabel("link utilization (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save(fig, path, footnote="effective throughput (video payload / fetch time) / bottleneck rate")


def adaptation_figure(run: RunInfo, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 3.8))
    times, rates = trace_steps(RunFolder(run.path).rows(RATES))
    if times:
        end = max([times[-1]] + [s.t_last_byte or 0.0 for s in run.video])
        ax.step([*times, end], [r / 1e6 for r in [*rates, rates[-1]]], where="post", color="black",
                label="available bandwidth")
    est = [(float(d["t"]), float(d["throughput_bps"])) for d in RunFolder(run.path).rows(DECISIONS)
           if d.get("stream") == "video" and d.get("throughput_bps")]
    if est:
        ax.plot([t for t, _ in est], [b / 1e6 for _, b in est], ".-", color="#1f77b4", label="measured bandwidth")
    sel = [(s.t_request, s.bitrate_bps) for s in run.video if s.t_request is not None and s.bitrate_bps]
    if sel:
        ax.step([t for t, _ in sel], [(b or 0) / 1e6 for _, b in sel], where="post", color="#d62728",
                label="selected bitrate")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("Mbit/s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{NAMES.get(run.protocol, run.protocol)}, RTT {run.rtt_ms:g} ms ({run.run})")
    ax.legend(fontsize=8, loc="upper right")
    return save(fig, path)


def media_figure(points: Sequence[Adaptation], path: Path) -> Path:
    cells = media_cells(points)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for p in PROTOCOLS:
        pts = sorted((r, v) for (q, r), v in cells.items() if q == p)
        if pts:
            ax.plot([r for r, _ in pts], [v / 1e6 for _, v in pts], "o-", color=COLORS[p], label=NAMES[p])
    avail = [a.available_bps for a in points if a.available_bps]
    if avail:
        ax.axhline(sum(avail) / len(avail) / 1e6, color="black", lw=1, label="trajectory mean (available)")
    ax.axhline(2, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("RTT (ms)")
    ax.set_ylabel("average media throughput (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax.set_title("Average media throughput (cf. the blog's Figure 8)")
    ax.legend(fontsize=8)
    return save(fig, path)


# ---------------------------------------------------------------- markdown


def _overhead_md(points: Sequence[Overhead], figures: dict[str, Path]) -> list[str]:
    if not points:
        return []
    both, fwd = overhead_cells(points), overhead_cells(points, forward=True)
    protos = [p for p in PROTOCOLS if any(q == p for q, _ in both)]
    rates = sorted({x for _, x in both})
    n = {k: sum(1 for o in points if (o.run.protocol, float(o.run.bitrate_bps or 0)) == k) for k in both}
    lines = [[kbit(r), *(f"{pct(both[(p, r)], 2)} ({pct(fwd[(p, r)], 2)}), n={n[(p, r)]}" if (p, r) in both else "-"
                         for p in protos)] for r in rates]
    parts = ["## Protocol overhead (Figure 1)", "",
             "Bytes on the bottleneck in both directions (in brackets: the media direction alone) over the media "
             "payload, minus 1; mean over the repetitions (n).", "",
             *md.table(["representation (kbit/s)", *(NAMES[p] for p in protos)], lines)]
    split = []
    for p in protos:
        mine = [o for o in points if o.run.protocol == p]
        hdr = sum(o.headers for o in mine) / len(mine)
        above = sum(o.above_transport for o in mine) / len(mine)
        rev = sum(o.reverse_bytes / o.payload_bytes for o in mine) / len(mine)
        split.append([NAMES[p], pct(hdr, 2), pct(above, 2), pct(rev, 2)])
    parts += ["Where the extra bytes are (mean over the representations, % of the payload):", "",
              *md.table(["protocol", "Ethernet + IP + TCP/UDP headers", "above TCP/UDP (TLS/QUIC, HTTP, handshakes, "
                       "MPD, retransmissions)", "reverse direction (requests, ACKs)"], split)]
    if "fig01_overhead.png" in figures:
        parts += ["![protocol overhead](fig01_overhead.png)", ""]
    return parts


def _utilization_md(runs: Sequence[RunInfo], figures: dict[str, Path]) -> list[str]:
    cells = utilization_cells(runs)
    if not cells:
        return []
    table = utilization_table(cells)
    rtts = sorted({r for _, r in table})
    protos = [p for p in PROTOCOLS if any(q == p for q, _ in table)]
    lines = [[NAMES[p], *(pct(table.get((p, r))) for r in rtts)] for p in protos]
    detail = [[NAMES[p], f"{r:g}", kbit(b), pct(u)] for (p, r, b), u in cells.items()]
    parts = ["## Link utilization (Table 2, Figures 2-3)", "",
             "Effective throughput (video payload / time from the first request to the last byte) / the bottleneck's "
             "rate, which equals the representation's bitrate; mean over the bandwidths:", "",
             *md.table(["protocol", *(f"RTT {r:g} ms" for r in rtts)], lines)]
    parts += [f"![{name}]({name})\n" for name in sorted(figures) if name.startswith(("fig02", "fig03"))]
    parts += ["Per bandwidth:", "", *md.table(["protocol", "RTT (ms)", "bandwidth (kbit/s)", "utilization"], detail)]
    return parts


def _adaptation_md(points: Sequence[Adaptation], figures: dict[str, Path]) -> list[str]:
    if not points:
        return []
    cells = media_cells(points)
    rtts = sorted({r for _, r in cells})
    protos = [p for p in PROTOCOLS if any(q == p for q, _ in cells)]
    lines = [[NAMES[p], *(f"{cells[(p, r)] / 1e6:.2f}" if (p, r) in cells else "-" for r in rtts)] for p in protos]
    runs = [[a.run.run, a.run.protocol, f"{a.run.rtt_ms:g}", f"{a.media_bps / 1e6:.2f}",
             f"{a.available_bps / 1e6:.2f}" if a.available_bps else "-", f"{a.stall_s:.1f}"] for a in points]
    parts = ["## Adaptation (Figures 4-8)", "",
             "Average media throughput (Mbit/s: media bits received / media seconds received) per protocol and RTT:",
             "", *md.table(["protocol", *(f"RTT {r:g} ms" for r in rtts)], lines)]
    if "fig08_media_throughput.png" in figures:
        parts += ["![average media throughput](fig08_media_throughput.png)", ""]
    parts += ["Per run (available = the trajectory's mean over the session):", "",
              *md.table(["run", "protocol", "RTT (ms)", "media (Mbit/s)", "available (Mbit/s)", "stalls (s)"], runs)]
    parts += ["Available bandwidth, measured bandwidth and selected bitrate over time (the blog's Figs. 4-6: SPDY "
              "over QUIC at RTT 0/50/150 ms, ours h3; its Fig. 7: HTTP/1.1 over QUIC at 150 ms, ours HTTP/1.1 over "
              "TCP):", ""]
    parts += [f"![{name}]({name})\n" for name in sorted(figures) if name.startswith(ADAPTATION_DIR)]
    return parts


def render(folder: Path, runs: Sequence[RunInfo], figures: dict[str, Path],
           verdicts: Sequence[Verdict] = ()) -> str:
    thresholds = threshold_table(folder)
    head = [f"# The HTTP/2-QUIC DASH evaluation: {folder.name}", "",
            f"{len(runs)} completed runs of this study in `{folder}`. Protocols: " +
            ", ".join(f"`{p}` = {NAMES[p]}" for p in PROTOCOLS) + " (the DASH app's `transport`).", ""]
    if verdicts:
        head += ["## The blog's comparisons, judged per session", "",
                 "One number per session (run), paired by block and the cell the design repeats (representation, "
                 "bandwidth, RTT or protocol); a claim across the RTT counts the VM's sessions only; \"alike\": the "
                 "CI inside the stated margin (the method: the shared report.md).", "", verdict_table(verdicts)]
    head += ["## The blog's thresholds (cell means)", "",
             "Absolute numbers the blog states, against the mean of each cell over its sessions: a description, "
             "not a test.", "", *md.table(["paper", "ours", "within?"],
                                           [[c.claim, c.ours, c.agree] for c in thresholds])]
    body = (_overhead_md(overheads(runs), figures) + _utilization_md(runs, figures)
            + _adaptation_md(adaptations(runs), figures))
    return "\n".join(head + body).rstrip() + "\n"


def write_report(folder: Path, out_dir: Path, *, figures: bool = True, verdicts: Sequence[Verdict] = ()) -> list[Path]:
    """``out_dir/h2quic.md`` with its figures and the claims' ``verdicts`` (``Study.verdicts``); returns what was
    written."""
    runs = load_runs(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs: dict[str, Path] = {}
    if figures:
        over = overheads(runs)
        if over:
            pngs["fig01_overhead.png"] = overhead_figure(over, out_dir / "fig01_overhead.png")
        cells = utilization_cells(runs)
        if cells:
            protos = {p for p, _, _ in cells}
            shown = "h3" if "h3" in protos else sorted(protos)[0]
            pngs[f"fig02_utilization_{shown}.png"] = utilization_figure(
                cells, out_dir / f"fig02_utilization_{shown}.png", protocol=shown)
            top = max(r for _, r, _ in cells)
            pngs[f"fig03_utilization_rtt{top:g}.png"] = utilization_figure(
                cells, out_dir / f"fig03_utilization_rtt{top:g}.png", rtt=top)
        adapt = adaptations(runs)
        if adapt:
            pngs["fig08_media_throughput.png"] = media_figure(adapt, out_dir / "fig08_media_throughput.png")
            (out_dir / ADAPTATION_DIR).mkdir(exist_ok=True)
            for a in sorted(adapt, key=lambda a: (a.run.protocol, a.run.rtt_ms, a.run.run)):
                name = f"{ADAPTATION_DIR}/{a.run.protocol}_rtt{a.run.rtt_ms:g}_{a.run.run}.png"
                pngs[name] = adaptation_figure(a.run, out_dir / name)
    write_atomic(out_dir / REPORT_FILE, render(folder, runs, pngs, verdicts))
    return [out_dir / REPORT_FILE, *pngs.values()]
