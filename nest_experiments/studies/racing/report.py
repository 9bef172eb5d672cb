"""The connection-racing study's own report: ``report/racing.md`` and its figures.

- Fig. 14: CCDF of RQvsT per pattern, one line per policy that races;
- Fig. 9: CCDFs of the maximum cross-correlation of RQvsT(t) with B(t) and
  S(t), and of its lag;
- Fig. 19a: the RTT probes' medians per protocol and condition (``dynamic``);
- per session (``timelines/<run>.png``): bytes per 30 s window over QUIC and
  TCP, B(t) and S(t), and the racing events (won, broken, idle close) as
  marks: the paper's Figs. 11-13 for our sessions.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nest_experiments.analysis import markdown as md  # noqa: E402
from nest_experiments.analysis.claims import Verdict, verdict_table  # noqa: E402
from nest_experiments.analysis.markdown import number as fmt  # noqa: E402
from nest_experiments.analysis.report_figures import save  # noqa: E402
from nest_experiments.rundir import RunFolder, write_atomic  # noqa: E402
from nest_experiments.studies.racing import agreement as ag  # noqa: E402
from nest_experiments.studies.racing import metrics as rm  # noqa: E402
from nest_experiments.studies.racing.sessions import (  # noqa: E402
    BROWSER,
    PATTERNS,
    REPORT_FILE,
    Session,
    conditions,
    load_sessions,
    policies,
    read_transfers,
    shares_table,
)

TIMELINES_DIR = "timelines"
STYLES = {"chromium": "-", "firefox": "-.", "quic_only": ":", "dynamic": "--", "tcp_only": (0, (1, 3))}
PATTERN_COLORS = {"dh": "#2ca02c", "dl": "#1f77b4", "dvl": "#d62728", "real": "#9467bd"}


def _ccdf_line(ax: plt.Axes, values: Sequence[float], **kw: object) -> None:
    points = rm.ccdf(values)
    if points:
        xs, ys = zip(*points, strict=True)
        ax.step(xs, ys, where="post", **kw)  # type: ignore[arg-type]


def fig14(sessions: Sequence[Session], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for policy in ("chromium", "firefox", "dynamic"):
        for pattern in PATTERNS:
            values = [s.metrics["rqvst"] for s in sessions
                      if s.policy == policy and s.pattern == pattern and not s.firewall and "rqvst" in s.metrics]
            if values:
                _ccdf_line(ax, values, color=PATTERN_COLORS[pattern], linestyle=STYLES[policy],
                           label=f"{pattern.upper()} {policy} (n={len(values)})")
    ax.set_xlabel("RQvsT: share of the session's bytes over TCP")
    ax.set_ylabel("P(RQvsT >= x)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Extent of connection racing per pattern (cf. paper Fig. 14)", fontsize=10)
    return save(fig, path)


def fig9(sessions: Sequence[Session], path: Path) -> Path:
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    enb = [s for s in sessions if s.policy == "chromium"]
    for name, color, what in (("B", "#d62728", "quality drop B"), ("S", "#1f77b4", "stall S")):
        corr = [s.metrics[f"corr_{name}"] for s in enb if f"corr_{name}" in s.metrics]
        lags = [s.metrics[f"lag_{name}"] for s in enb if f"lag_{name}" in s.metrics]
        _ccdf_line(a, corr, color=color, label=f"RQvsT vs {what} (n={len(corr)})")
        _ccdf_line(b, lags, color=color, label=f"lag, {what} (n={len(lags)})")
    a.set_xlabel("maximum cross-correlation coefficient")
    b.set_xlabel("lag of the maximum (s)")
    for ax in (a, b):
        ax.set_ylabel("CCDF")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:  # no chromium session, or each one's series constant (no coefficient)
            ax.text(0.5, 0.5, "no chromium session with a coefficient", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8)
    a.set_title("(a) correlation (cf. Fig. 9a)", fontsize=9)
    b.set_title("(b) lag (cf. Fig. 9b)", fontsize=9)
    return save(fig, path, footnote="Q_ENB (chromium) sessions; 30 s windows; sessions whose series are constant "
                                    "have no coefficient")


def fig19(sessions: Sequence[Session], path: Path) -> Path:
    probed = [s for s in sessions if s.probe_rtt]
    conds = conditions(probed)
    fig, ax = plt.subplots(figsize=(1.4 * max(3, len(conds)) + 1.5, 3.8))
    for j, (protocol, color) in enumerate((("quic", "#d62728"), ("tcp", "#1f77b4"))):
        for i, cond in enumerate(conds):
            vals = [s.probe_rtt[protocol] * 1e3 for s in probed if s.condition == cond and protocol in s.probe_rtt]
            ax.plot([i + (j - 0.5) * 0.3] * len(vals), vals, "o", color=color, ms=5)
        ax.plot([], [], "o", color=color, label=f"{protocol.upper()} probes (median per session)")
    ax.set_xticks(range(len(conds)), conds)
    ax.set_yscale("log")
    ax.set_ylabel("RTT (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("QUIC and TCP RTT probes per condition (cf. paper Fig. 19a)", fontsize=10)
    return save(fig, path)


def timeline(s: Session, path: Path) -> Path:
    rows = RunFolder(s.path).racing()
    transfers = read_transfers(s.path)
    n = len(s.series["rqvst"])
    quic, tcp = [0.0] * n, [0.0] * n
    for t in transfers:
        target = tcp if t.transport == rm.TCP else quic
        rm.spread(target, t.t_first_byte, t.t_last_byte, t.bytes / 1e3, rm.WINDOW_S)  # kB
    x = [(i + 0.5) * rm.WINDOW_S for i in range(n)]
    fig, (a, b) = plt.subplots(2, 1, figsize=(8.0, 4.8), sharex=True)
    a.bar(x, quic, width=rm.WINDOW_S * 0.9, color="#d62728", label="QUIC (kB)")
    a.bar(x, tcp, width=rm.WINDOW_S * 0.9, bottom=quic, color="#1f77b4", label="TCP (kB)")
    marks = {("won", "quic"): ("v", "#d62728", "QUIC won"), ("won", "tcp"): ("v", "#1f77b4", "TCP won"),
             ("broken", "quic"): ("x", "k", "QUIC broken"), ("idle_close", ""): ("|", "0.4", "idle close"),
             ("stream_error", ""): ("*", "orange", "stream error")}
    top = max([q + t for q, t in zip(quic, tcp, strict=True)] or [1.0]) or 1.0
    for (event, protocol), (marker, color, label) in marks.items():
        ts = [r.t for r in rows if r.event == event and (not protocol or r.protocol == protocol)]
        a.plot(ts, [top * 1.08] * len(ts), marker, color=color, linestyle="none", label=label)
    a.set_ylabel("kB per 30 s window")
    a.legend(fontsize=7, ncol=3)
    b.plot(x, s.series["B"], "-o", ms=3, color="#d62728", label="quality drop B(t) (level x s)")
    b.plot(x, s.series["S"], "-o", ms=3, color="#1f77b4", label="stall S(t) (s)")
    b.set_xlabel("time (s)")
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    a.set_title(f"{s.run}: {s.policy}, {s.condition}, RQvsT {fmt(s.metrics.get('rqvst'))} (cf. Figs. 11-13)",
                fontsize=9)
    return save(fig, path)


# ---------------------------------------------------------------- Markdown


PLAYER_KNOBS = ("request_timeout", "stream_timeout")  # player-side timeouts no browser has (issue 29)


def _player_knobs(sessions: Sequence[Session]) -> list[str]:
    """A line for the head when a session's policy ran with a player-side timeout (a knob Chromium lacks)."""
    used: dict[str, set[str]] = {}
    for s in sessions:
        for app in (RunFolder(s.path).config().get("apps") or {}).values():
            params = app.get("racing_params") if isinstance(app, dict) else None
            for knob in PLAYER_KNOBS:
                if isinstance(params, dict) and params.get(knob) not in (None, "0s", 0, "0"):
                    used.setdefault(f"{knob} = {params[knob]}", set()).add(s.policy)
    return [f"- **Not a browser mechanism:** {k} (policies {', '.join(sorted(v))}): our player cancels and asks "
            "again a request that takes longer; Chromium has no such timeout (issue 29)." for k, v in sorted(used.items())]


def _head(sessions: Sequence[Session], folder: Path) -> list[str]:
    return [f"# QUIC/TCP connection racing: {folder.name}", "", *_player_knobs(sessions),
            "The paper of Chaudhary et al. (docs/papers.md) on this sweep "
            "(`nest_experiments/studies/racing/`: claims in `claims.py`, metrics in `metrics.py`).", "",
            f"- {len(sessions)} session(s) over the `race` transport.",
            "- RQvsT = TCP bytes / all bytes of the session's segments; per 30 s window RQvsT(t) (bytes spread over "
            "each transfer), B(t) = (e(q_prev) - e(q)) x the seconds the dropped quality played in the window "
            "(e: the level's rank from 1), S(t) = stall seconds; the maximum Pearson cross-correlation over lags of "
            "whole windows and its lag (positive: B or S follows RQvsT).",
            "- switches = changes of the protocol that carried the requests (`won` events of `racing.csv`); "
            "proto_switches = changes of the protocol from one segment to the next, quic_segments = the share of "
            "segments over QUIC (the segment timeline, alike for our player and the browser).",
            "- The paper's comparisons are judged per session pair (two policies, or two patterns, of one block: "
            "the same trace; `nest_experiments/studies/racing/claims.py`); its shares of sessions are described.",
            ""]


MECHANISM_EVENTS = ("failed", "broken", "recovered", "idle_close", "conn_closed", "stream_error", "stream_cancelled",
                    "stream_reset", "job_delayed", "close_frame")


def _mechanism(sessions: Sequence[Session]) -> list[str]:
    """What Chromium did, from each browser session's NetLog (its ``racing.csv``): the lines that show whether and
    why it left QUIC (docs/racing_chromium_mechanism.md)."""
    browser = [s for s in sessions if s.policy == BROWSER]
    if not browser:
        return []
    lines = ["## What Chromium did (its NetLog)", "",
             "Per browser session: the QUIC sessions it opened, the requests bound to each, and every NetLog event "
             "that could take it off QUIC (failed handshakes, broken marks, closes, cancels and resets, the "
             "main-job delay), from `racing.csv` (`nest_experiments/dash/players/netlog.py`; the mechanism: "
             "`docs/racing_chromium_mechanism.md`).", ""]
    for s in sorted(browser, key=lambda s: (s.condition, s.block, s.run)):
        rows = RunFolder(s.path).racing()
        quic = sorted({r.conn_id for r in rows if r.event == "connected" and r.protocol == "quic"})
        bound = [r for r in rows if r.event == "bound"]
        per = ", ".join(f"{c}: {sum(r.conn_id == c for r in bound)}" for c in quic)
        tcp = sum(r.protocol == "tcp" for r in bound)
        events = [r for r in rows if r.event in MECHANISM_EVENTS]
        lines.append(f"- `{s.run}` ({s.condition}): {len(quic)} QUIC session(s) ({per or 'none'}); {len(bound)} "
                     f"requests bound, {tcp} of them over TCP; broken marks: "
                     f"{sum(r.event == 'broken' for r in rows)}")
        lines += [f"  - {fmt(r.t)} s `{r.event}` {r.protocol} {r.conn_id}{': ' + r.detail if r.detail else ''}"
                  for r in events]
    return [*lines, ""]


def _agreement(sessions: Sequence[Session]) -> list[str]:
    """Our ``chromium`` beside the browser, per condition (:mod:`.agreement`)."""
    found = ag.pairs(sessions)
    if not found:
        return []
    header = ["ours", "experiment", "condition", "pairs", *(f"{m.label} ({m.text})" for m in ag.MARGINS), "verdict"]
    lines = []
    for c in ag.by_condition(found):
        cells = []
        for m in ag.MARGINS:
            ours, browser = c.medians[m.metric]
            ok, n = c.within[m.metric]
            shown = fmt(ours) if m.at_least else f"{fmt(ours)} / {fmt(browser)}"
            cells.append(f"{shown} ({ok}/{n} in)")
        lines.append([c.policy, c.experiment, c.condition, str(len(c.pairs)), *cells, c.verdict])
    per_pair = [[p.condition, str(p.block), p.ours.run, p.browser.run,
                 *(("yes" if w else "no" if w is not None else "-") for w in p.within().values())] for p in found]
    return ["## Our policies beside the browsers, session by session", "",
            "A pair: our player with the `chromium` (`firefox`) policy and dash.js in Chromium (Firefox ESR) over "
            "`race`, in one block under "
            "one condition (`experiments/racing_chromium.toml`). Medians ours / Chromium's, and how many pairs are "
            "within the margin (fixed before the runs: `nest_experiments/studies/racing/agreement.py`); a condition "
            "agrees when every pair is within every margin. The equivalence claims above pool the conditions "
            "(an exact paired test needs >= 5 pairs to decide one condition).", "",
            *md.table(header, lines), "",
            *md.table(["condition", "block", "ours", "the browser", *(m.metric for m in ag.MARGINS)], per_pair), ""]


def _sessions_table(sessions: Sequence[Session]) -> list[str]:
    lines = []
    for s in sorted(sessions, key=lambda s: (s.condition, s.policy, s.run)):
        m = s.metrics
        probes = "/".join(fmt(s.probe_rtt[p] * 1e3) if p in s.probe_rtt else "-" for p in ("quic", "tcp"))
        lines.append([s.run, s.policy, s.condition, fmt(m.get("rqvst")), fmt(m.get("switches")),
                      fmt(m.get("bitrate")), fmt(m.get("variation")), fmt(m.get("stall")),
                      f"{fmt(m.get('corr_B'))} @ {fmt(m.get('lag_B'))} s", f"{fmt(m.get('corr_S'))} @ {fmt(m.get('lag_S'))} s",
                      probes, s.decision or "-"])
    header = ["run", "policy", "condition", "RQvsT", "switches", "bitrate (kbit/s)", "variation (kbit/s)", "stall (s)",
              "max corr B @ lag", "max corr S @ lag", "probe RTT QUIC/TCP (ms)", "last decision"]
    return ["## Sessions", "", *md.table(header, lines)]


def _per_cell(sessions: Sequence[Session]) -> list[str]:
    lines = []
    for cond in conditions(sessions):
        for policy in policies(sessions):
            group = [s for s in sessions if (s.condition, s.policy) == (cond, policy)]
            if not group:
                continue
            med = [fmt(statistics.median(vals)) if (vals := [s.metrics[k] for s in group if k in s.metrics]) else "-"
                   for k in ("rqvst", "switches", "bitrate", "stall")]
            lines.append([cond, policy, str(len(group)), *med])
    return ["## Medians per condition and policy", "",
            *md.table(["condition", "policy", "sessions", "RQvsT", "switches", "bitrate (kbit/s)", "stall (s)"], lines)]


def render(sessions: Sequence[Session], folder: Path, figures: dict[str, Path],
           verdicts: Sequence[Verdict] = ()) -> str:
    parts = _head(sessions, folder) + _mechanism(sessions)
    if verdicts:
        parts += ["## The paper's comparisons, judged per session pair", "",
                  "One number per session; a pair is two sessions of one block under the same pattern or firewall "
                  "condition (the method: the shared report.md).", "", verdict_table(verdicts)]
    parts += _agreement(sessions)
    parts += ["## The paper's shares of sessions (a description)", "",
              *md.table(["paper", "ours", "as the paper?"], [[c.claim, c.ours, c.agree] for c in shares_table(sessions)])]
    for name, alt in (("fig14_rqvst_ccdf.png", "Fig. 14"), ("fig09_crosscorr.png", "Fig. 9"),
                      ("fig19_probe_rtt.png", "Fig. 19a")):
        if name in figures:
            parts += [f"![{alt}]({name})", ""]
    parts += _per_cell(sessions) + _sessions_table(sessions)
    timelines = [f"- [{s.run}]({TIMELINES_DIR}/{s.run}.png)" for s in sessions
                 if f"{TIMELINES_DIR}/{s.run}.png" in figures]
    if timelines:
        parts += ["## Per-session timelines (bytes per protocol, B(t), S(t), racing events)", "", *timelines, ""]
    return "\n".join(parts).rstrip() + "\n"


def write_report(folder: Path, out_dir: Path, *, figures: bool = True, verdicts: Sequence[Verdict] = ()) -> list[Path]:
    """``out_dir/racing.md`` with its figures and the claims' ``verdicts`` (``Study.verdicts``); returns what was
    written."""
    sessions = load_sessions(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs: dict[str, Path] = {}
    if figures and sessions:
        pngs["fig14_rqvst_ccdf.png"] = fig14(sessions, out_dir / "fig14_rqvst_ccdf.png")
        pngs["fig09_crosscorr.png"] = fig9(sessions, out_dir / "fig09_crosscorr.png")
        if any(s.probe_rtt for s in sessions):
            pngs["fig19_probe_rtt.png"] = fig19(sessions, out_dir / "fig19_probe_rtt.png")
        (out_dir / TIMELINES_DIR).mkdir(exist_ok=True)
        for s in sessions:
            name = f"{TIMELINES_DIR}/{s.run}.png"
            pngs[name] = timeline(s, out_dir / name)
    write_atomic(out_dir / REPORT_FILE, render(sessions, folder, pngs, verdicts))
    return [out_dir / REPORT_FILE, *pngs.values()]
