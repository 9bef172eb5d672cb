"""A sweep's run folders as data (``results/<experiment>/<run>/``, DESIGN.md §4), read through
:class:`nest_experiments.rundir.RunFolder`.

The public API is :func:`load`::

    from nest_experiments import results
    r = results.load("results/pie_dumbbell")
    r.metrics.merge(r.runs, on="run").groupby(["links.bottleneck.forward.qdisc.kind", "metric"]).value.mean()

It returns tidy pandas frames built from the run folders alone (:class:`Results`): ``runs`` (one row per run: its
swept values, one column per swept key, and the manifest's fields), ``metrics`` (one row per run and metric: the
report's per-run numbers, with their units), and one frame per file a run writes (:data:`TABLES`: ``segments``,
``qdisc``, ``qdelay``, ``iperf3``, ``sipp``, ``racing``, ``cpu``, ``qoe``, ...; read when first used), each row with
its run's name (``run``), repetition and swept keys. The functions below that read one run folder (the steady
window, the AQM egresses, the DASH metrics, the queue delays) are the ones the report and the figures use
(:mod:`nest_experiments.analysis`, :mod:`nest_experiments.analysis.report`): one reader. Reads files only; never touches
the network.

- Every metric key ends in its unit (``video.avg_bitrate_kbps``, ``video.app_rtt_ms``, ``qdelay_ms.<egress>.<source>``;
  :func:`unit_of`); a count or a score has none (``video.switches``, ``video.qoe``). These names are results format
  :data:`RESULTS_FORMAT` (2, issue 54); format 1 named kbit/s ``_bps`` and ms ``_s`` (:func:`metric_v2` maps them).
- A run's *point* (its swept keys, without the repetition) is flattened to dotted keys.
- DASH metrics per stream come from :func:`nest_experiments.dash.core.qoe.summarize` on ``segments.csv``; queue delays
  are means over the steady window (:func:`steady_window`) of the kernel's ``delay_ms`` (``qdisc.csv``) and of each
  measured method (``qdelay.csv``) on every egress that carries the run's AQM.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from nest_experiments.config.qdiscs import fifo_kinds
from nest_experiments.dash.core import qoe
from nest_experiments.rundir import (
    ACCESS,
    CPU,
    CPU_PROCS,
    DECISIONS,
    FIREWALL,
    HTTPERF,
    IPERF3,
    IPERF3_SUMMARY,
    LINKS,
    MANIFEST,
    OBJECTS,
    QDELAY,
    QDISC,
    QOE,
    QUIC,
    RACING,
    RATES,
    SEGMENTS,
    SIPP,
    SUBFLOWS,
    WIRE,
    RunFolder,
    read_manifest,
)
from nest_experiments.rundir import run_dirs as run_dirs  # re-exported: a sweep's run folders

STEADY_SKIP_S = 2.0  # slow start and the first queue fill are not the steady state
BIN_S = 1.0  # queue-delay time grid
# what a run's qdisc rows may name that is no AQM: the shapers, the kernel's default, the leaf kinds declared aqm = false
NOT_AQM = frozenset({"pfifo_fast", "htb", "netem", "tbf", *fifo_kinds()})
STREAMS = ("video", "audio")


# ---------------------------------------------------------------- run folders


def steady_window(run_dir: Path) -> tuple[float, float]:
    """From the traffic's start + :data:`STEADY_SKIP_S` to its end - 1 s (run clock)."""
    m = read_manifest(run_dir) or {}
    start = float(m.get("traffic_start_t", 0.0)) + STEADY_SKIP_S
    end = float(m.get("traffic_end_t", m.get("duration_s", 0.0)))
    return start, max(start, end - 1.0)


# ---------------------------------------------------------------- metrics


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One number per run: ``key`` in :attr:`RunResult.metrics`, shown as ``label`` in ``unit``."""

    key: str
    label: str
    unit: str
    figure: int | None = None  # the study paper's figure number (a study sets it)
    plot: bool = True  # a bar chart of its own
    egress: str | None = None  # queue-delay metrics: where
    source: str | None = None  # queue-delay metrics: "kernel" or the qdelay.csv method


# Every metric key ends in its unit (issue 54): ``_kbps`` kbit/s, ``_ms`` ms, ``_s`` s; a count (``switches``) or a
# score (``qoe``) has none. The values keep the report's units (kbit/s, ms), in which the claims' margins read.
UNIT_SUFFIXES = (("_kbps", "kbit/s"), ("_mbps", "Mbit/s"), ("_bps", "bit/s"), ("_ms", "ms"), ("_s", "s"),
                 ("_pct", "%"))
# the results format: 1 until issue 54 (``avg_bitrate_bps`` held kbit/s, ``app_rtt_s`` ms, ``qdelay.*`` had no
# unit), 2 since (:func:`metric_v2`); an evidence folder records the format of its tables (``evidence.json``)
RESULTS_FORMAT = 2
_V1_FIELDS = {"avg_bitrate_bps": "avg_bitrate_kbps", "avg_throughput_bps": "avg_throughput_kbps",
              "app_rtt_s": "app_rtt_ms", "app_jitter_s": "app_jitter_ms", "response_latency_s": "response_latency_ms"}
_V1_HEADS = {"qdelay": "qdelay_ms", "qdelay_kernel": "qdelay_kernel_ms"}  # results' and the NeST study's delays


def metric_v2(key: str) -> str:
    """A format-1 metric key (:data:`RESULTS_FORMAT`) under its format-2 name; any other key as it is."""
    head, dot, rest = key.partition(".")
    if head in _V1_HEADS and dot:
        return f"{_V1_HEADS[head]}.{rest}"
    if head in (*STREAMS, "session") and rest in _V1_FIELDS:
        return f"{head}.{_V1_FIELDS[rest]}"
    return key


def unit_of(key: str) -> str:
    """The unit a metric key's suffix names (its first dotted part for a per-egress key), "" without one."""
    head, _, rest = key.partition(".")
    for name in (rest, head) if head in (*STREAMS, "session") else (head, rest):
        for suffix, unit in UNIT_SUFFIXES:
            if name.endswith(suffix):
                return unit
    return ""


# QoeSummary field (s, bit/s), metric name (its true unit), label, unit, scale from the field to the unit
_STREAM_FIELDS: tuple[tuple[str, str, str, str, float], ...] = (
    ("switches", "switches", "bitrate switches", "count", 1.0),
    ("avg_bitrate_bps", "avg_bitrate_kbps", "average bitrate", "kbit/s", 1e-3),
    ("avg_throughput_bps", "avg_throughput_kbps", "average throughput", "kbit/s", 1e-3),
    ("avg_buffer_s", "avg_buffer_s", "average playback buffer", "s", 1.0),
    ("app_rtt_s", "app_rtt_ms", "average application RTT", "ms", 1e3),
    ("app_jitter_s", "app_jitter_ms", "average application jitter", "ms", 1e3),
    ("response_latency_s", "response_latency_ms", "average response latency (TTFB)", "ms", 1e3),
    ("qoe", "qoe", "QoE (eq. 1)", "score", 1.0),
    ("stall_s", "stall_s", "stall time", "s", 1.0),
)
DASH_METRICS: tuple[Metric, ...] = tuple(
    Metric(key=f"{s}.{name}", label=f"{s} {label}", unit=unit)
    for s in STREAMS for f, name, label, unit, _ in _STREAM_FIELDS if f != "stall_s"
) + (Metric(key="session.stall_s", label="session stall time", unit="s", plot=False),
     Metric(key="session.qoe", label="session QoE (eq. 1)", unit="score", plot=False))


def delay_metric(egress: str, source: str) -> Metric:
    """Mean queue delay on one egress from one source (``kernel`` or a ``qdelay.csv`` method), in ms."""
    what = "as the kernel reports it" if source == "kernel" else f"measured ({source})"
    return Metric(key=f"qdelay_ms.{egress}.{source}", label=f"mean queue delay {egress}, {what}", unit="ms",
                  plot=False, egress=egress, source=source)


@dataclass(frozen=True, kw_only=True)
class AqmEgress:
    """A queue that carries the run's AQM (one direction of a link), as ``links.json`` records it (not
    :class:`nest_experiments.net.Egress`, the live interface the runner configures)."""

    link: str
    node: str
    peer: str
    dev: str
    kind: str
    target_ms: float | None
    leaf_handle: str | None

    @property
    def name(self) -> str:
        return f"{self.link} {self.node}->{self.peer}"


@dataclass(frozen=True, kw_only=True)
class Series:
    """Queue delay of one run on one egress, averaged per :data:`BIN_S` bin (``t``: bin centres)."""

    egress: str
    source: str  # "kernel" or the qdelay.csv method
    t: tuple[float, ...]
    delay_ms: tuple[float, ...]


def flatten_point(point: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A point as dotted keys with their values.

    ``{"a.qdisc": {"kind": "pie"}}`` -> ``{"a.qdisc.kind": "pie"}``; an axis
    that sets several keys together (``"a.kind, b.kind": "pie"``) gives each.
    """
    out: dict[str, Any] = {}
    for joined, value in point.items():
        for key in (k.strip() for k in str(joined).split(",")):
            full = f"{prefix}{key}"
            if isinstance(value, dict):
                out.update(flatten_point(value, f"{full}."))
            else:
                out[full] = value
    return out


def flatten(point: dict[str, Any]) -> dict[str, str]:
    """:func:`flatten_point` with string values (the report's cells)."""
    return {k: str(v) for k, v in flatten_point(point).items()}


def raw_egresses(run_dir: Path, notes: list[str]) -> list[dict[str, Any]]:
    folder = RunFolder(run_dir)
    if not folder.has(LINKS):
        notes.append(f"{LINKS} absent: no queue figures, no bottleneck checks")
        return []
    return folder.egresses()


def aqm_egresses(raw: Sequence[dict[str, Any]], point: dict[str, str]) -> list[AqmEgress]:
    """Egresses with the swept qdisc kind (without one: every non-FIFO qdisc)."""
    swept = {v for k, v in point.items() if k.endswith("qdisc.kind")}
    chosen = [e for e in raw if e.get("qdisc") and (e["qdisc"] in swept if swept else e["qdisc"] not in NOT_AQM)]
    return [egress_from(e) for e in chosen]


def bottleneck_links(raw: Sequence[dict[str, Any]], egs: Sequence[AqmEgress]) -> list[str]:
    """Links that carry the AQM; without an AQM, the shaped links."""
    return sorted({e.link for e in egs} or {str(e["link"]) for e in raw if e.get("rate_bps")})


def egress_from(e: dict[str, Any]) -> AqmEgress:
    target = (e.get("qdisc_params") or {}).get("target")
    return AqmEgress(link=str(e["link"]), node=str(e["node"]), peer=str(e.get("peer", "?")), dev=str(e["dev"]),
                  kind=str(e["qdisc"]), target_ms=float(target) * 1e3 if target is not None else None,
                  leaf_handle=e.get("leaf_handle"))


def stall_at_end(run_dir: Path, app: str) -> qoe.EndStall | None:
    """The stall the DASH app ``app`` was in when it stopped (``qoe.json``; its only app when ``app`` is "")."""
    docs = RunFolder(run_dir).qoe()
    if docs is None:
        return None
    doc = docs.get(app) if app else next(iter(docs.values()), None) if len(docs) == 1 else None
    return qoe.EndStall.from_dict(doc.get("stall_at_end")) if isinstance(doc, dict) else None


def dash_metrics(run_dir: Path, notes: list[str]) -> dict[str, float]:
    """Per-stream QoE of the run's DASH session (the first app when there are several)."""
    folder = RunFolder(run_dir)
    if not folder.has(SEGMENTS):
        notes.append(f"{SEGMENTS} absent: no DASH metrics")
        return {}
    rows = folder.segments()
    apps = [d.get("app") or "" for d in folder.rows(SEGMENTS)]
    names = sorted(set(apps))
    if len(names) > 1:
        notes.append(f"{SEGMENTS} holds {len(names)} DASH apps ({', '.join(names)}): metrics of {names[0]!r}")
    rows = [r for r, a in zip(rows, apps, strict=True) if a == names[0]] if names else rows
    if not rows:
        notes.append(f"{SEGMENTS} has no rows: no DASH metrics")
        return {}
    out: dict[str, float] = {}
    for stream, summary in qoe.summarize(rows, stall_at_end=stall_at_end(run_dir, names[0] if names else "")).items():
        for f, name, _, _, scale in _STREAM_FIELDS:
            value = getattr(summary, f)
            if value is not None:
                out[f"{stream}.{name}"] = float(value) * scale
    return out


# ---------------------------------------------------------------- queue delay


def queue_delays(run_dir: Path, egs: Sequence[AqmEgress], window: tuple[float, float],
                 notes: list[str]) -> tuple[list[Series], dict[Metric, float]]:
    """Binned series and steady-window means of every AQM egress, kernel and measured."""
    series: list[Series] = []
    means: dict[Metric, float] = {}
    for source, rows in _delay_sources(run_dir, egs, notes):
        eg, src = source
        rows = rows.dropna(subset=["delay_ms"])
        if rows.empty:
            continue
        series.append(_binned(eg, src, rows))
        steady = rows[(rows.t >= window[0]) & (rows.t <= window[1])]
        if len(steady):
            means[delay_metric(eg, src)] = float(steady.delay_ms.mean())
    return series, means


def _delay_sources(run_dir: Path, egs: Sequence[AqmEgress],
                   notes: list[str]) -> Iterable[tuple[tuple[str, str], pd.DataFrame]]:
    if not egs:
        return
    q = RunFolder(run_dir).frame(QDISC)
    d = RunFolder(run_dir).frame(QDELAY)
    if q is None:
        notes.append(f"{QDISC} absent: no kernel queue delay")
    if d is None:
        notes.append(f"{QDELAY} absent: no measured queue delay")
    for e in egs:
        if q is not None and {"node", "dev", "delay_ms", "t"} <= set(q.columns):
            yield (e.name, "kernel"), _egress_rows(q, e)
        if d is not None and {"node", "dev", "delay_ms", "t"} <= set(d.columns):
            rows = d[(d.node == e.node) & (d.dev == e.dev)]
            methods = rows["method"].fillna("capture") if "method" in rows else pd.Series("capture", index=rows.index)
            for method in sorted(methods.unique()):
                yield (e.name, str(method)), rows[methods == method]


def _egress_rows(q: pd.DataFrame, e: AqmEgress) -> pd.DataFrame:
    rows = q[(q.node == e.node) & (q.dev == e.dev)]
    if e.leaf_handle and "handle" in rows:
        return rows[rows.handle == e.leaf_handle]
    return rows[rows.kind == e.kind] if "kind" in rows else rows


def _binned(egress: str, source: str, rows: pd.DataFrame) -> Series:
    centres = (rows.t // BIN_S) * BIN_S + BIN_S / 2
    per_bin = rows.delay_ms.groupby(centres).mean()
    return Series(egress=egress, source=source, t=tuple(float(t) for t in per_bin.index),
                  delay_ms=tuple(float(v) for v in per_bin.values))


# ---------------------------------------------------------------- the public API


@dataclass(frozen=True, kw_only=True)
class Table:
    """One run-folder file as a :class:`Results` frame: ``name`` (the attribute), ``file``, what a row is, and the
    unit of each numeric column whose name does not end in its unit (``_s``, ``_ms``, ``_bps``, ``_bytes``,
    ``_pct``: seconds, milliseconds, bit/s, bytes, percent)."""

    name: str
    file: str
    doc: str
    units: tuple[tuple[str, str], ...] = ()


_T = "s, run clock"
TABLES: dict[str, Table] = {t.name: t for t in (
    Table(name="segments", file=SEGMENTS, doc="one row per media segment the player fetched (DESIGN.md §4)",
          units=(("t_request", _T), ("t_first_byte", _T), ("t_last_byte", _T), ("level", "0-based level"))),
    Table(name="qdisc", file=QDISC, doc="one row per qdisc per sample (the kernel's counters)",
          units=(("t", _T), ("backlog_pkts", "packets"), ("drops", "packets, cumulative"),
                 ("sent_pkts", "packets, cumulative"), ("overlimits", "cumulative"), ("prob", "0-1 (PIE)"),
                 ("ecn_marks", "packets CE-marked, cumulative (AQMs that count them; empty otherwise)"))),
    Table(name="qdelay", file=QDELAY, doc="one row per packet: its queue delay measured from captures",
          units=(("t", _T),)),
    Table(name="iperf3", file=IPERF3, doc="one row per iperf3 flow per 1 s interval",
          units=(("t", _T), ("bits_per_second", "bit/s"), ("retransmits", "segments"), ("snd_cwnd", "bytes"))),
    Table(name="iperf3_summary", file=IPERF3_SUMMARY, doc="one row per iperf3 flow: its totals",
          units=(("bytes", "bytes"), ("seconds", "s"), ("bits_per_second", "bit/s, sender"),
                 ("receiver_bits_per_second", "bit/s"), ("retransmits", "segments"))),
    Table(name="sipp", file=SIPP, doc="one row per SIPp app: calls and response times",
          units=(("rate_cps", "calls/s"), ("call_rate_cps", "calls/s"), ("success_ratio", "0-1"))),
    Table(name="httperf", file=HTTPERF, doc="one row per httperf app: requests, replies, times, errors",
          units=(("rate_target", "requests/s"), ("request_rate", "requests/s"), ("reply_rate_avg", "replies/s"),
                 ("reply_rate_min", "replies/s"), ("reply_rate_max", "replies/s"), ("reply_ratio", "0-1"),
                 ("reply_content_bytes", "bytes per reply"), ("cpu_throttled_ratio", "0-1"),
                 ("select_wait_us", "microseconds"))),
    Table(name="racing", file=RACING, doc="one row per QUIC/TCP racing event (dash.racing_log)",
          units=(("t", _T), ("value", "s (handshake, back-off, idle, RTT) or a ratio (decision)"))),
    Table(name="firewall", file=FIREWALL, doc="one row per firewall and direction: packets/bytes matched, dropped",
          units=(("matched_pkts", "packets"), ("dropped_pkts", "packets"))),
    Table(name="wire", file=WIRE, doc="one row per captured link, direction and protocol: packets and bytes",
          units=(("packets", "packets"),)),
    Table(name="objects", file=OBJECTS, doc="one row per downloaded object (kind = \"objects\")",
          units=(("size", "bytes"), ("bytes", "bytes"), ("t_request", _T), ("t_first_byte", _T),
                 ("t_last_byte", _T))),
    Table(name="cpu", file=CPU, doc="one row per 1 s window: the machine's busy share",
          units=(("t", "s, run clock: the window's end"), ("busy", "0-1 of all CPUs"))),
    Table(name="cpu_procs", file=CPU_PROCS, doc="one row per 1 s window and process of the run that used >= 5 % "
          "of one CPU in it (and the window's busiest): comm, app (\"runner\", an app, or empty)",
          units=(("t", "s, run clock: the window's end"), ("share", "CPUs (0-1 of one CPU; threads add up)"))),
    Table(name="rates", file=RATES, doc="one row per HTB rate change of a trace-driven link",
          units=(("t", _T), ("t_scheduled", "s, the trace's time"))),
    Table(name="subflows", file=SUBFLOWS, doc="one row per MPTCP subflow (or TCP connection) per sample and end "
          "(side: client, or server: the sender's tcp_info, from ss through inet_diag)",
          units=(("t", _T), ("bytes_received", "bytes"), ("bytes_sent", "bytes"), ("bytes_acked", "bytes"),
                 ("bytes_retrans", "bytes"), ("rtt_ms", "ms, smoothed"), ("rttvar_ms", "ms"),
                 ("cwnd", "segments"), ("ssthresh", "segments"), ("pacing_rate_bps", "bit/s"),
                 ("delivery_rate_bps", "bit/s"), ("retrans_total", "segments, cumulative"),
                 ("lost", "segments, now"), ("unacked", "segments, now"),
                 ("ecn", "ECN negotiated (bool)"), ("ecnseen", "a CE mark seen (bool)"))),
    Table(name="quic", file=QUIC, doc="one row per QUIC recovery event of our server's connections (dash.http.recovery)",
          units=(("t", _T), ("cwnd", "bytes"), ("bytes_in_flight", "bytes"), ("ssthresh", "bytes"),
                 ("latest_rtt_ms", "ms"), ("min_rtt_ms", "ms"), ("smoothed_rtt_ms", "ms"), ("rtt_variance_ms", "ms"),
                 ("lost_total", "packets, cumulative per connection"), ("pto_count", "consecutive PTOs"))),
    Table(name="access", file=ACCESS, doc="one row per response of the DASH server (its access log)",
          units=(("t_arrival", "s, the server's clock"), ("t_first_byte_sent", "s, the server's clock"),
                 ("t_last_byte_sent", "s, the server's clock"), ("bytes", "bytes"))),
    Table(name="abr_decisions", file=DECISIONS, doc="one row per ABR decision: its inputs and the level chosen",
          units=(("t", _T),)),
    Table(name="qoe", file=QOE, doc="one row per DASH app and stream (video, audio, session): qoe.json's summary",
          units=(("qoe", "score (ABR paper eq. 1)"), ("segments", "count"), ("stall_count", "count"),
                 ("stalls", "count, whole session"), ("ended_at", _T))),
)}


@dataclass(frozen=True, kw_only=True)
class Results:
    """A sweep (or one run) as tidy frames; every frame has a ``run`` column (the run folder's name).

    Besides ``runs`` and ``metrics``, one frame per file a run writes (:data:`TABLES`; read when first used): the
    rows of that file of every completed run, each with ``run``, ``repetition`` and the run's swept keys (``swept``)
    in front. A file no run wrote gives an empty frame with those columns."""

    folder: Path
    runs: pd.DataFrame  # one row per run: run, status, reason, the swept keys (see swept), the manifest's fields
    metrics: pd.DataFrame  # run, metric, value, unit (completed runs)
    swept: tuple[str, ...]  # the columns of runs that are swept keys (dotted, e.g. links.bottleneck.qdisc.kind)
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False, compare=False)

    def table(self, name: str) -> pd.DataFrame:
        """The frame of :data:`TABLES` ``name`` (e.g. ``"iperf3"``)."""
        if name not in TABLES:
            from nest_experiments.errors import NestExpError

            raise NestExpError(f"results table {name!r}: not one of {', '.join(TABLES)}")
        if name not in self._cache:
            self._cache[name] = self._read(TABLES[name])
        return self._cache[name]

    @staticmethod
    def units(name: str) -> dict[str, str]:
        """Units of table ``name``'s columns that do not end in their unit."""
        return dict(TABLES[name].units)

    def _read(self, t: Table) -> pd.DataFrame:
        front = ["run", "repetition", *self.swept]
        done = self.runs[self.runs.status == "completed"] if "status" in self.runs else self.runs.iloc[:0]
        frames = []
        for _, r in done.iterrows():
            d = self.folder if self.folder.name == r["run"] and (self.folder / MANIFEST).exists() \
                else self.folder / str(r["run"])
            frame = _qoe_frame(d) if t.file == QOE else _frame(d, t.file)
            if frame.empty:
                continue
            frame = frame.drop(columns=[c for c in front if c in frame.columns])
            for i, col in enumerate(front):
                frame.insert(i, col, r.get(col))
            frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=front)

    @property
    def segments(self) -> pd.DataFrame:
        """``segments.csv``: one row per media segment (stream, index, level, bitrate_bps, bytes, t_request,
        t_first_byte, t_last_byte, buffer_s, stall_s, transport, app)."""
        return self.table("segments")

    @property
    def qdisc(self) -> pd.DataFrame:
        """``qdisc.csv``: one row per qdisc per sample (t, node, dev, link, kind, handle, parent, backlog_bytes,
        backlog_pkts, drops, overlimits, sent_pkts, sent_bytes, delay_ms (the kernel's, where it reports one),
        prob (PIE's drop probability))."""
        return self.table("qdisc")

    @property
    def qdelay(self) -> pd.DataFrame:
        """``qdelay.csv``: per packet, its queue delay measured from captures (t, node, dev, delay_ms, method)."""
        return self.table("qdelay")

    @property
    def iperf3(self) -> pd.DataFrame:
        """``iperf3.csv``: per flow and 1 s interval (t, flow, src, dst, bits_per_second, retransmits, snd_cwnd in
        bytes, rtt_ms)."""
        return self.table("iperf3")

    @property
    def iperf3_summary(self) -> pd.DataFrame:
        """``iperf3_summary.csv``: per flow (flow, src, dst, bytes, seconds, bits_per_second, retransmits,
        mean_rtt_ms, receiver_bits_per_second)."""
        return self.table("iperf3_summary")

    @property
    def sipp(self) -> pd.DataFrame:
        """``sipp.csv``: per SIPp app, calls planned/attempted/successful/failed, success_ratio, response times
        (``_ms``), retransmissions, failures by cause, RTP packets."""
        return self.table("sipp")

    @property
    def httperf(self) -> pd.DataFrame:
        """``httperf.csv``: per httperf app, request and reply rates (per s), replies, reply/transfer/connection
        times (``_ms``), status and error counts, its CPU cap and throttling."""
        return self.table("httperf")

    @property
    def racing(self) -> pd.DataFrame:
        """``racing.csv``: per racing event (t, event, protocol, conn_id, value, detail, app)."""
        return self.table("racing")

    @property
    def firewall(self) -> pd.DataFrame:
        """``firewall.csv``: per firewall and direction (firewall, router, direction, proto, port, action,
        rate_bps, matched_pkts, matched_bytes, dropped_pkts, dropped_bytes)."""
        return self.table("firewall")

    @property
    def wire(self) -> pd.DataFrame:
        """``wire.csv``: per captured link, direction and protocol (packets, frame_bytes, ip_bytes,
        l4_header_bytes, l4_payload_bytes)."""
        return self.table("wire")

    @property
    def objects(self) -> pd.DataFrame:
        """``objects.csv``: per downloaded object (session, stream, index, path, size in bytes, status, bytes,
        t_request, t_first_byte, t_last_byte, throughput_bps, latency_s, transport, app)."""
        return self.table("objects")

    @property
    def cpu(self) -> pd.DataFrame:
        """``cpu.csv``: per 1 s window (t: its end, busy: the share of all CPUs, 0-1)."""
        return self.table("cpu")

    @property
    def cpu_procs(self) -> pd.DataFrame:
        """``cpu_procs.csv``: per 1 s window and busy process of the run (t, pid, comm, app, share of one CPU)."""
        return self.table("cpu_procs")

    @property
    def rates(self) -> pd.DataFrame:
        """``rates.csv``: per HTB rate change of a trace-driven link (t, t_scheduled, link, direction, node,
        rate_bps)."""
        return self.table("rates")

    @property
    def quic(self) -> pd.DataFrame:
        """``quic.csv``: per QUIC recovery event of our server's connections (t, side, conn, event: metrics or lost,
        cwnd, bytes_in_flight, ssthresh, latest / min / smoothed RTT and its variance in ms, packet_number,
        lost_total, pto_count, app)."""
        return self.table("quic")

    @property
    def subflows(self) -> pd.DataFrame:
        """``subflows.csv``: per TCP socket (an MPTCP subflow or a TCP connection) of a DASH app per sample and end
        (t, app, side, local, local_port, remote, remote_port, link, client_link, mptcp, its byte counters, rtt_ms
        and the socket's congestion state: cwnd, ssthresh, rttvar_ms, pacing_rate_bps, delivery_rate_bps,
        retrans_total, lost, unacked, ecn, ecnseen)."""
        return self.table("subflows")

    @property
    def access(self) -> pd.DataFrame:
        """``access.csv``: per response of the DASH server (t_arrival, t_first_byte_sent, t_last_byte_sent on the
        server's clock, transport, path, status, bytes, conn_id, app)."""
        return self.table("access")

    @property
    def abr_decisions(self) -> pd.DataFrame:
        """``abr_decisions.csv``: per ABR decision (t, stream, index, algorithm, buffer_s, throughput_bps (the
        algorithm's estimate), level, bitrate_bps, app)."""
        return self.table("abr_decisions")

    @property
    def qoe(self) -> pd.DataFrame:
        """``qoe.json``: per DASH app and stream (``video``, ``audio``, ``session``): the app's transport, client,
        end_reason, ended_at, stalls, and the stream's summary (segments, avg_bitrate_bps, switches,
        avg_throughput_bps, avg_buffer_s, stall_count, stall_s, startup_delay_s, app_rtt_s, app_jitter_s,
        response_latency_s, qoe)."""
        return self.table("qoe")


def _qoe_frame(run_dir: Path) -> pd.DataFrame:
    docs = RunFolder(run_dir).qoe() or {}
    rows = []
    for app, doc in docs.items():
        if not isinstance(doc, dict):
            continue
        head = {"app": app, **{k: doc.get(k) for k in ("transport", "client", "end_reason", "ended_at", "stalls")}}
        for stream, summary in (doc.get("qoe") or {}).items():
            if isinstance(summary, dict):
                rows.append({**head, "stream": stream, **summary})
    return pd.DataFrame(rows)


def load(folder: str | Path) -> Results:
    """Every run folder below ``folder`` (or ``folder`` itself when it is a run folder) as :class:`Results`."""
    folder = Path(folder)
    dirs = run_dirs(folder)
    if not dirs:
        from nest_experiments.errors import NestExpError

        raise NestExpError(f"{folder}: no run folder (a folder with manifest.json) here")
    rows, swept = [], {}
    metrics = []
    for d in dirs:
        manifest = read_manifest(d) or {"status": "unknown (no readable manifest.json)"}
        point = flatten_point(manifest.get("point") or {})
        swept.update(dict.fromkeys(point))
        rows.append({"run": d.name, **point, **manifest_fields(manifest)})
        if manifest.get("status") == "completed":
            metrics += [{"run": d.name, "metric": k, "value": v, "unit": u} for k, (v, u) in run_metrics(d).items()]
    return Results(folder=folder, runs=pd.DataFrame(rows), swept=tuple(swept),
                   metrics=pd.DataFrame(metrics, columns=["run", "metric", "value", "unit"]))


MANIFEST_SKIP = frozenset({"point", "warnings"})


def manifest_fields(manifest: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The manifest's fields as columns: nested tables as dotted keys (``cluster.scheduler``), lists joined with
    `` | ``, the warnings as their count (``n_warnings``); ``point`` is left to the swept columns."""
    out: dict[str, Any] = {} if prefix else {"n_warnings": len(manifest.get("warnings") or [])}
    for key, value in manifest.items():
        if not prefix and key in MANIFEST_SKIP:
            continue
        if isinstance(value, dict):
            out.update(manifest_fields(value, f"{prefix}{key}."))
        elif isinstance(value, list):
            out[f"{prefix}{key}"] = " | ".join(map(str, value))
        else:
            out[f"{prefix}{key}"] = value
    return out


def run_metrics(run_dir: Path) -> dict[str, tuple[float, str]]:
    """The report's per-run numbers of a completed run: metric key -> (value, unit)."""
    m = read_manifest(run_dir) or {}
    notes: list[str] = []
    units = {metric.key: metric.unit for metric in DASH_METRICS}
    out = {k: (v, units.get(k, unit_of(k))) for k, v in dash_metrics(run_dir, notes).items()}
    egs = aqm_egresses(raw_egresses(run_dir, notes), flatten(m.get("point") or {}))
    _, delays = queue_delays(run_dir, egs, steady_window(run_dir), notes)
    out.update({metric.key: (value, metric.unit) for metric, value in delays.items()})
    return out


def _frame(run_dir: Path, name: str) -> pd.DataFrame:
    frame = RunFolder(run_dir).frame(name)
    return frame if frame is not None else pd.DataFrame()


