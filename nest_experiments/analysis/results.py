"""A sweep's run folders as data (``results/<experiment>/<run>/``, DESIGN.md §4), read through
:class:`nest_experiments.rundir.RunFolder`.

The public API is :func:`load`::

    from nest_experiments import results
    r = results.load("results/pie_dumbbell")
    r.metrics.merge(r.runs, on="run").groupby(["links.bottleneck.forward.qdisc.kind", "metric"]).value.mean()

It returns tidy pandas frames built from the run folders alone (:class:`Results`): ``runs`` (one row per run: its
swept values, one column per swept key, and the manifest's fields), ``metrics`` (one row per run and metric: the
report's per-run numbers, with their units), ``segments`` (every ``segments.csv`` row) and ``qdisc`` (every
``qdisc.csv`` row), each row with its run's name (``run``). The functions below that read one run folder (the steady
window, the AQM egresses, the DASH metrics, the queue delays) are the ones the report and the figures use
(:mod:`nest_experiments.analysis`, :mod:`nest_experiments.analysis.report`): one reader. Reads files only; never touches
the network.

- A run's *point* (its swept keys, without the repetition) is flattened to dotted keys.
- DASH metrics per stream come from :func:`nest_experiments.dash.qoe.summarize` on ``segments.csv``; queue delays
  are means over the steady window (:func:`steady_window`) of the kernel's ``delay_ms`` (``qdisc.csv``) and of each
  measured method (``qdelay.csv``) on every egress that carries the run's AQM.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from nest_experiments.dash import qoe
from nest_experiments.rundir import LINKS, QDELAY, QDISC, SEGMENTS, RunFolder, read_manifest
from nest_experiments.rundir import run_dirs as run_dirs  # re-exported: a sweep's run folders

STEADY_SKIP_S = 2.0  # slow start and the first queue fill are not the steady state
BIN_S = 1.0  # queue-delay time grid
NOT_AQM = frozenset({"pfifo", "bfifo", "pfifo_fast", "htb", "netem", "tbf"})
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


# QoeSummary field, label, unit, scale to the unit
_STREAM_FIELDS: tuple[tuple[str, str, str, float], ...] = (
    ("switches", "bitrate switches", "count", 1.0),
    ("avg_bitrate_bps", "average bitrate", "kbit/s", 1e-3),
    ("avg_throughput_bps", "average throughput", "kbit/s", 1e-3),
    ("avg_buffer_s", "average playback buffer", "s", 1.0),
    ("app_rtt_s", "average application RTT", "ms", 1e3),
    ("app_jitter_s", "average application jitter", "ms", 1e3),
    ("response_latency_s", "average response latency (TTFB)", "ms", 1e3),
    ("qoe", "QoE (eq. 1)", "score", 1.0),
)
_SCALE = {f: scale for f, _, _, scale in _STREAM_FIELDS}
DASH_METRICS: tuple[Metric, ...] = tuple(
    Metric(key=f"{s}.{f}", label=f"{s} {label}", unit=unit)
    for s in STREAMS for f, label, unit, _ in _STREAM_FIELDS
) + (Metric(key="session.stall_s", label="session stall time", unit="s", plot=False),
     Metric(key="session.qoe", label="session QoE (eq. 1)", unit="score", plot=False))


def delay_metric(egress: str, source: str) -> Metric:
    """Mean queue delay on one egress from one source (``kernel`` or a ``qdelay.csv`` method)."""
    what = "as the kernel reports it" if source == "kernel" else f"measured ({source})"
    return Metric(key=f"qdelay.{egress}.{source}", label=f"mean queue delay {egress}, {what}", unit="ms", plot=False,
                  egress=egress, source=source)


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
        for f, scale in (*_SCALE.items(), ("stall_s", 1.0)):
            value = getattr(summary, f)
            if value is not None:
                out[f"{stream}.{f}"] = float(value) * scale
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
class Results:
    """A sweep (or one run) as tidy frames; every frame has a ``run`` column (the run folder's name)."""

    folder: Path
    runs: pd.DataFrame  # one row per run: run, status, reason, the swept keys (see swept), the manifest's fields
    metrics: pd.DataFrame  # run, metric, value, unit (completed runs)
    segments: pd.DataFrame  # run + segments.csv's columns (completed runs)
    qdisc: pd.DataFrame  # run + qdisc.csv's columns (completed runs)
    swept: tuple[str, ...]  # the columns of runs that are swept keys (dotted, e.g. links.bottleneck.qdisc.kind)


def load(folder: str | Path) -> Results:
    """Every run folder below ``folder`` (or ``folder`` itself when it is a run folder) as :class:`Results`."""
    folder = Path(folder)
    dirs = run_dirs(folder)
    if not dirs:
        from nest_experiments.errors import NestExpError

        raise NestExpError(f"{folder}: no run folder (a folder with manifest.json) here")
    rows, swept = [], {}
    metrics, segments, qdisc = [], [], []
    for d in dirs:
        manifest = read_manifest(d) or {"status": "unknown (no readable manifest.json)"}
        point = flatten_point(manifest.get("point") or {})
        swept.update(dict.fromkeys(point))
        rows.append({"run": d.name, **point, **manifest_fields(manifest)})
        if manifest.get("status") == "completed":
            metrics += [{"run": d.name, "metric": k, "value": v, "unit": u} for k, (v, u) in run_metrics(d).items()]
            segments.append(_with_run(_frame(d, SEGMENTS), d.name))
            qdisc.append(_with_run(_frame(d, QDISC), d.name))
    return Results(folder=folder, runs=pd.DataFrame(rows), swept=tuple(swept),
                   metrics=pd.DataFrame(metrics, columns=["run", "metric", "value", "unit"]),
                   segments=_concat(segments), qdisc=_concat(qdisc))


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
    out = {k: (v, units.get(k, "s" if k.endswith("stall_s") else "")) for k, v in dash_metrics(run_dir, notes).items()}
    egs = aqm_egresses(raw_egresses(run_dir, notes), flatten(m.get("point") or {}))
    _, delays = queue_delays(run_dir, egs, steady_window(run_dir), notes)
    out.update({metric.key: (value, metric.unit) for metric, value in delays.items()})
    return out


def _frame(run_dir: Path, name: str) -> pd.DataFrame:
    frame = RunFolder(run_dir).frame(name)
    return frame if frame is not None else pd.DataFrame()


def _with_run(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    if not frame.empty:
        frame.insert(0, "run", name)
    return frame


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run"])
