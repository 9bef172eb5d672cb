"""A DASH run's timeline (``timeline.png``) and its stalls (``stalls.txt``): the player, the transport and the
queues on the run clock, one panel each, every stall shaded across all of them.

1. the buffer of each stream (level after each segment, drained at 1 s/s while playing) and the stalls;
2. each video segment as a bar from its request to its last byte at its level (a dot at the first byte);
3. the ABR's throughput estimate at each decision and the bitrate it chose (kbit/s);
4. each connection's congestion window at the sender and its smoothed RTT (ms, right axis): TCP's from
   ``subflows.csv``'s server rows (segments), QUIC's from ``quic.csv`` (kB, a cross per lost packet);
5. each bottleneck's queue: the delay of every captured packet (``qdelay.csv``), the kernel's own delay
   (``qdisc.csv``) and a tick per sample in which it dropped.

The stall lines come from :func:`nest_experiments.analysis.timeline.stall_summary`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from nest_experiments.analysis import timeline  # noqa: E402
from nest_experiments.rundir import (  # noqa: E402
    DECISIONS,
    QDELAY,
    QUIC,
    SEGMENTS,
    STALLS_TEXT,
    SUBFLOWS,
    TIMELINE_PLOT,
    RunFolder,
    write_atomic,
)

STREAM_STYLE = {"video": "C0", "audio": "C1"}


def timeline_files(run_dir: Path, save: object) -> list[Path]:
    """The timeline figure and the stall lines of a run with segments; none without. ``save(fig, path)`` writes
    the figure (``reports.plot``'s, atomic)."""
    folder = RunFolder(run_dir)
    segments = folder.frame(SEGMENTS)
    if segments is None or segments.empty:
        return []
    frames = {"qdisc": folder.qdisc(), "qdelay": folder.frame(QDELAY), "subflows": folder.frame(SUBFLOWS),
              "quic": folder.frame(QUIC)}
    stalls = timeline.stalls(segments, folder.qoe())
    lines = timeline.summaries(stalls, **frames)
    text = "\n".join(lines) + "\n" if lines else "no stall in this run\n"
    write_atomic(run_dir / STALLS_TEXT, text)
    fig = draw(run_dir, segments, folder.frame(DECISIONS), stalls, **frames)
    return [save(fig, run_dir / TIMELINE_PLOT), run_dir / STALLS_TEXT]  # type: ignore[operator]


def draw(run_dir: Path, segments: pd.DataFrame, decisions: pd.DataFrame | None, stalls: list[timeline.Stall], *,
         qdisc: pd.DataFrame, qdelay: pd.DataFrame | None, subflows: pd.DataFrame | None,
         quic: pd.DataFrame | None = None) -> plt.Figure:
    fig, axes = plt.subplots(5, 1, figsize=(10, 11), sharex=True,
                             gridspec_kw={"height_ratios": [1.1, 1, 1, 1, 1.2]})
    _buffer(axes[0], segments)
    _segments(axes[1], segments)
    _abr(axes[2], segments, decisions)
    _transport(axes[3], subflows, quic)
    _queues(axes[4], qdisc, qdelay)
    for ax in axes:
        for s in stalls:
            ax.axvspan(s.start, max(s.end, s.start + 0.05), color="red", alpha=0.15, lw=0)
    axes[0].set_title(f"{run_dir.parent.name} / {run_dir.name}: timeline ({len(stalls)} stall(s) shaded)")
    axes[-1].set_xlabel("time since run start (s, the run clock of every panel)")
    return fig


def _buffer(ax: Axes, segments: pd.DataFrame) -> None:
    for (app, stream), rows in segments.groupby([segments.get("app", pd.Series("", index=segments.index)).fillna(""),
                                                 "stream"]):
        rows = rows.dropna(subset=["t_last_byte", "buffer_s"]).sort_values("t_last_byte")
        ts, bs = rows["t_last_byte"].to_numpy(float), rows["buffer_s"].to_numpy(float)
        xs, ys = [], []
        for i, (t, b) in enumerate(zip(ts, bs, strict=True)):
            nxt = ts[i + 1] if i + 1 < len(ts) else t + b
            drained = min(b, max(0.0, nxt - t))
            xs += [t, t + drained, nxt]
            ys += [b, b - drained, b - drained]
        label = f"{app} {stream}".strip()
        ax.plot(xs, ys, lw=0.9, color=STREAM_STYLE.get(str(stream)), label=label)
    ax.set_ylabel("buffer (s)")
    ax.legend(fontsize=7, loc="upper right")


def _segments(ax: Axes, segments: pd.DataFrame) -> None:
    video = segments[segments["stream"] == "video"].dropna(subset=["t_request", "t_last_byte"])
    if video.empty:
        video = segments.dropna(subset=["t_request", "t_last_byte"])
    level = video["level"].fillna(-1)
    ax.hlines(level, video["t_request"], video["t_last_byte"], lw=3, color="C0", alpha=0.7)
    first = video.dropna(subset=["t_first_byte"])
    ax.plot(first["t_first_byte"], first["level"].fillna(-1), "k.", ms=2.5)
    ax.set_ylabel("video level\n(request → last byte)")
    if len(level):
        ax.set_yticks(sorted({int(x) for x in level}))


def _abr(ax: Axes, segments: pd.DataFrame, decisions: pd.DataFrame | None) -> None:
    video = segments[segments["stream"] == "video"].dropna(subset=["t_last_byte"])
    if "bitrate_bps" in video and video["bitrate_bps"].notna().any():
        ax.step(video["t_request"].fillna(video["t_last_byte"]), video["bitrate_bps"] / 1e3, where="post",
                color="C0", lw=1, label="chosen bitrate")
    if decisions is not None and not decisions.empty and "throughput_bps" in decisions:
        d = decisions[(decisions["stream"] == "video") & decisions["throughput_bps"].notna()]
        ax.plot(d["t"], d["throughput_bps"] / 1e3, "C2.-", ms=3, lw=0.8, label="ABR's throughput estimate")
    ax.set_ylabel("kbit/s")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right")


def _transport(ax: Axes, subflows: pd.DataFrame | None, quic: pd.DataFrame | None) -> None:
    tcp = subflows is not None and not subflows.empty and {"side", "cwnd"} <= set(subflows)
    has_quic = quic is not None and not quic.empty and "event" in quic
    if not tcp and not has_quic:
        ax.text(0.5, 0.5, "no sender-side samples (subflows.csv server rows, quic.csv)", ha="center", va="center",
                transform=ax.transAxes, fontsize=8)
        ax.set_ylabel("cwnd")
        return
    rtt_ax = ax.twinx()
    i = 0
    if tcp:
        assert subflows is not None
        for key, rows in subflows[subflows["side"] == "server"].groupby(["local_port", "remote", "remote_port"]):
            label = f"{rows['link'].fillna('').iloc[0] or 'TCP'} :{key[2]}"
            ax.plot(rows["t"], rows["cwnd"], lw=1, color=f"C{i % 10}", label=f"cwnd {label} (segments)")
            rtt_ax.plot(rows["t"], rows["rtt_ms"], lw=0.8, ls="--", color=f"C{i % 10}")
            i += 1
    if has_quic:
        assert quic is not None
        if "side" in quic and (quic["side"] == "server").any():  # the sender's (a player's own rows: the receiver's)
            quic = quic[quic["side"] == "server"]
        metrics = quic[quic["event"] == "metrics"]
        for conn, rows in metrics.groupby("conn"):
            ax.plot(rows["t"], rows["cwnd"] / 1e3, lw=1, color=f"C{i % 10}", label=f"cwnd QUIC {conn} (kB)")
            rtt_ax.plot(rows["t"], rows["smoothed_rtt_ms"], lw=0.8, ls="--", color=f"C{i % 10}")
            lost = quic[(quic["event"] == "lost") & (quic["conn"] == conn)]
            if len(lost):
                ax.plot(lost["t"], [0] * len(lost), "x", color=f"C{i % 10}", ms=4, label=f"lost QUIC {conn}")
            i += 1
    ax.set_ylabel("cwnd")
    rtt_ax.set_ylabel("srtt (ms, dashed)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", ncol=2)


def _queues(ax: Axes, qdisc: pd.DataFrame, qdelay: pd.DataFrame | None) -> None:
    i = 0
    if qdelay is not None and not qdelay.empty:
        for (node, dev), rows in qdelay.groupby(["node", "dev"]):
            ax.plot(rows["t"], rows["delay_ms"], ".", ms=1, alpha=0.4, color=f"C{i % 10}",
                    label=f"{node}->{dev} per packet")
            i += 1
    leaves = timeline.queues(qdisc)
    if not leaves.empty:
        for k, ((node, dev, kind), rows) in enumerate(leaves.groupby(["node", "dev", "kind"])):
            color = f"C{i % 10}"
            if "delay_ms" in rows and rows["delay_ms"].notna().any():
                ax.plot(rows["t"], rows["delay_ms"], lw=1, color=color, label=f"{node}->{dev} {kind} (kernel)")
            dropped = rows[rows["drops"].diff().fillna(0) > 0]
            if len(dropped):  # a tick per sample that dropped, in a row of its own at the panel's top
                ax.plot(dropped["t"], [0.97 - 0.04 * k] * len(dropped), "|", color=color, ms=5,
                        transform=ax.get_xaxis_transform(), label=f"{node}->{dev} dropped in sample")
            i += 1
    ax.set_ylabel("queue delay (ms)")
    has_delay = (qdelay is not None and not qdelay.empty) or (
        not leaves.empty and "delay_ms" in leaves and leaves["delay_ms"].notna().any())
    if not has_delay:  # a FIFO reports no delay of its own: the per-packet delay needs captures
        ax.set_ylim(0, 1)
        ax.text(0.5, 0.5, "no queue delay recorded (a FIFO has no kernel delay; [experiment] qdelay_links = [...] "
                "measures it per packet)", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    if qdelay is not None and len(qdelay) > 100:  # the start-up burst would flatten the rest: clip, and say so
        q = float(qdelay["delay_ms"].quantile(0.995))
        if q > 0 and float(qdelay["delay_ms"].max()) > 2 * q:
            ax.set_ylim(0, 1.6 * q)
            ax.set_ylabel("queue delay (ms;\nclipped at 1.6 x p99.5)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right", ncol=2)
