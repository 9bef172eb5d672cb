"""A sweep's results as numbers: per-run metrics, cells, statistics, sanity checks.

Pure: reads run folders (DESIGN.md §4) only, never touches the network.
:mod:`nest_experiments.report_md` writes them as Markdown and
:mod:`nest_experiments.report_figures` draws them.

- A run's *point* (its swept keys, without the repetition) is flattened to
  dotted keys. The AQM of a run is the value of every key ending in
  ``qdisc.kind`` (several keys with one value count once); its target the
  value of every key ending in ``qdisc.target``; the other keys are its
  *context*. Without a swept kind, the AQM is the non-FIFO qdisc of the
  run's egresses (``links.json``).
- A *cell* is (context, target, AQM): the repetitions of one point.
- DASH metrics per stream come from :func:`nest_experiments.dash.qoe.summarize`
  on ``segments.csv``; queue delays are means over the steady window
  (:func:`nest_experiments.analysis.steady_window`) of the kernel's
  ``delay_ms`` (``qdisc.csv``) and of each measured method (``qdelay.csv``)
  on every egress that carries the run's AQM.
- Estimates: mean and a 95% confidence interval with Student's t over
  repetitions; comparisons: two-sided Mann-Whitney U. Fewer than
  :data:`MIN_REPS` values in a group: no interval and no p-value.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import tomllib
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from nest_experiments import topology
from nest_experiments.analysis import run_dirs, steady_window
from nest_experiments.dash import qoe
from nest_experiments.dash.records import read_segments
from nest_experiments.errors import NestExpError
from nest_experiments.rundir import read_manifest
from nest_experiments.units import parse_time

MIN_REPS = 4
CONFIDENCE = 0.95
TOO_FEW = "too few repetitions"
BIN_S = 1.0  # queue-delay time grid
NOT_AQM = frozenset({"pfifo", "bfifo", "pfifo_fast", "htb", "netem", "tbf"})
PIE_DELAY_BAND = (0.5, 2.0)  # kernel-reported mean / target
MIN_BOTTLENECK_SHARE = 0.10
MIN_SIPP_SUCCESS = 0.90
MIN_HTTPERF_REPLY = 0.90
STREAMS = ("video", "audio")


# ---------------------------------------------------------------- metrics


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One number per run: ``key`` in :attr:`RunResult.metrics`, shown as ``label`` in ``unit``."""

    key: str
    label: str
    unit: str
    figure: int | None = None  # the NeST paper's figure number
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
)
_SCALE = {f: scale for f, _, _, scale in _STREAM_FIELDS}
PAPER_FIGURES = {
    "video.switches": 2, "video.avg_bitrate_bps": 3, "video.avg_throughput_bps": 4, "video.avg_buffer_s": 5,
    "video.app_rtt_s": 6, "video.app_jitter_s": 7, "audio.avg_throughput_bps": 8, "audio.avg_buffer_s": 9,
    "audio.app_rtt_s": 10, "audio.app_jitter_s": 11,
}
DASH_METRICS: tuple[Metric, ...] = tuple(
    Metric(key=f"{s}.{f}", label=f"{s} {label}", unit=unit, figure=PAPER_FIGURES.get(f"{s}.{f}"))
    for s in STREAMS for f, label, unit, _ in _STREAM_FIELDS
) + (Metric(key="session.stall_s", label="session stall time", unit="s", plot=False),)


def delay_metric(egress: str, source: str) -> Metric:
    """Mean queue delay on one egress from one source (``kernel`` or a ``qdelay.csv`` method)."""
    what = "as the kernel reports it" if source == "kernel" else f"measured ({source})"
    return Metric(key=f"qdelay.{egress}.{source}", label=f"mean queue delay {egress}, {what}", unit="ms", plot=False,
                  egress=egress, source=source)


# ---------------------------------------------------------------- run folders


@dataclass(frozen=True, kw_only=True)
class Egress:
    """A queue that carries the run's AQM (one direction of a link)."""

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


@dataclass(frozen=True, kw_only=True)
class Check:
    """One sanity check on one run (or cell): ``status`` is ``pass`` or ``fail``."""

    name: str
    subject: str
    status: str
    detail: str
    value: float | None = None  # the figure checked, in ``unit`` (for ranges over a cell)
    unit: str = ""


@dataclass(frozen=True, kw_only=True)
class RunResult:
    name: str
    path: Path
    status: str
    reason: str = ""
    repetition: int = 0
    point: dict[str, str] = field(default_factory=dict)
    aqm: str = "-"
    target: str = "-"
    context: tuple[tuple[str, str], ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)
    delay_metrics: tuple[Metric, ...] = ()
    series: tuple[Series, ...] = ()
    egresses: tuple[Egress, ...] = ()
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()  # missing files and other gaps in the data
    warnings: tuple[str, ...] = ()
    cpu: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def flatten(point: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A point as dotted keys with string values.

    ``{"a.qdisc": {"kind": "pie"}}`` -> ``{"a.qdisc.kind": "pie"}``; an axis
    that sets several keys together (``"a.kind, b.kind": "pie"``) gives each.
    """
    out: dict[str, str] = {}
    for joined, value in point.items():
        for key in (k.strip() for k in str(joined).split(",")):
            full = f"{prefix}{key}"
            if isinstance(value, dict):
                out.update(flatten(value, f"{full}."))
            else:
                out[full] = str(value)
    return out


def _joined(point: dict[str, str], suffix: str) -> str | None:
    values = sorted({v for k, v in point.items() if k.endswith(suffix)})
    return "+".join(values) if values else None


def load_run(run_dir: Path) -> RunResult:
    """Everything the report needs from one run folder; missing files become notes."""
    m = read_manifest(run_dir) or {}
    status = str(m.get("status", "unknown (no readable manifest.json)"))
    base = RunResult(name=run_dir.name, path=run_dir, status=status, reason=str(m.get("reason", "")),
                     repetition=int(m.get("repetition", 0) or 0), point=flatten(m.get("point") or {}),
                     warnings=tuple(str(w) for w in m.get("warnings") or ()),
                     cpu={k: v for k, v in m.items() if k.startswith(("cpu_", "host_"))})
    if status != "completed":
        return base
    try:
        return _completed_run(run_dir, base)
    except (OSError, ValueError, KeyError, TypeError, pd.errors.ParserError) as exc:
        return replace(base, status="completed, unreadable", reason=f"{type(exc).__name__}: {exc}")


def _completed_run(run_dir: Path, base: RunResult) -> RunResult:
    notes: list[str] = []
    raw = _raw_egresses(run_dir, notes)
    egs = _aqm_egresses(raw, base.point)
    kinds = sorted({e.kind for e in egs})
    aqm = _joined(base.point, "qdisc.kind") or ("+".join(kinds) if kinds else "-")
    target = _joined(base.point, "qdisc.target") or _egress_target(egs)
    context = tuple(sorted((k, v) for k, v in base.point.items()
                           if not k.endswith("qdisc.kind") and not k.endswith("qdisc.target")))
    metrics = dash_metrics(run_dir, notes)
    window = steady_window(run_dir)
    series, delay_means = queue_delays(run_dir, egs, window, notes)
    metrics.update({m.key: v for m, v in delay_means.items()})
    checks = sanity_checks(run_dir, egs, bottleneck_links(raw, egs), delay_means)
    return replace(base, aqm=aqm, target=target, context=context, metrics=metrics, delay_metrics=tuple(delay_means),
                   series=tuple(series), egresses=tuple(egs), checks=tuple(checks), notes=tuple(notes))


def _egress_target(egs: Sequence[Egress]) -> str:
    targets = sorted({e.target_ms for e in egs if e.target_ms is not None})
    return "+".join(f"{t:g}ms" for t in targets) if targets else "-"


def _raw_egresses(run_dir: Path, notes: list[str]) -> list[dict[str, Any]]:
    path = run_dir / "links.json"
    if not path.exists():
        notes.append("links.json absent: no queue figures, no bottleneck checks")
        return []
    return list(json.loads(path.read_text()).get("egresses", []))


def _aqm_egresses(raw: Sequence[dict[str, Any]], point: dict[str, str]) -> list[Egress]:
    """Egresses with the swept qdisc kind (without one: every non-FIFO qdisc)."""
    swept = {v for k, v in point.items() if k.endswith("qdisc.kind")}
    chosen = [e for e in raw if e.get("qdisc") and (e["qdisc"] in swept if swept else e["qdisc"] not in NOT_AQM)]
    return [_egress(e) for e in chosen]


def bottleneck_links(raw: Sequence[dict[str, Any]], egs: Sequence[Egress]) -> list[str]:
    """Links that carry the AQM; without an AQM, the shaped links."""
    return sorted({e.link for e in egs} or {str(e["link"]) for e in raw if e.get("rate_bps")})


def _egress(e: dict[str, Any]) -> Egress:
    target = (e.get("qdisc_params") or {}).get("target")
    return Egress(link=str(e["link"]), node=str(e["node"]), peer=str(e.get("peer", "?")), dev=str(e["dev"]),
                  kind=str(e["qdisc"]), target_ms=float(target) * 1e3 if target is not None else None,
                  leaf_handle=e.get("leaf_handle"))


def dash_metrics(run_dir: Path, notes: list[str]) -> dict[str, float]:
    """Per-stream QoE of the run's DASH session (the first app when there are several)."""
    path = run_dir / "segments.csv"
    if not path.exists():
        notes.append("segments.csv absent: no DASH metrics")
        return {}
    rows = read_segments(path)
    with path.open(newline="") as fh:
        apps = [d.get("app") or "" for d in csv.DictReader(fh)]
    names = sorted(set(apps))
    if len(names) > 1:
        notes.append(f"segments.csv holds {len(names)} DASH apps ({', '.join(names)}): metrics of {names[0]!r}")
    rows = [r for r, a in zip(rows, apps, strict=True) if a == names[0]] if names else rows
    if not rows:
        notes.append("segments.csv has no rows: no DASH metrics")
        return {}
    out: dict[str, float] = {}
    for stream, summary in qoe.summarize(rows).items():
        for f, scale in (*_SCALE.items(), ("stall_s", 1.0)):
            value = getattr(summary, f)
            if value is not None:
                out[f"{stream}.{f}"] = float(value) * scale
    return out


# ---------------------------------------------------------------- queue delay


def _read_csv(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def queue_delays(run_dir: Path, egs: Sequence[Egress], window: tuple[float, float],
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


def _delay_sources(run_dir: Path, egs: Sequence[Egress],
                   notes: list[str]) -> Iterable[tuple[tuple[str, str], pd.DataFrame]]:
    if not egs:
        return
    q = _read_csv(run_dir / "qdisc.csv")
    d = _read_csv(run_dir / "qdelay.csv")
    if q is None:
        notes.append("qdisc.csv absent: no kernel queue delay")
    if d is None:
        notes.append("qdelay.csv absent: no measured queue delay")
    for e in egs:
        if q is not None and {"node", "dev", "delay_ms", "t"} <= set(q.columns):
            yield (e.name, "kernel"), _egress_rows(q, e)
        if d is not None and {"node", "dev", "delay_ms", "t"} <= set(d.columns):
            rows = d[(d.node == e.node) & (d.dev == e.dev)]
            methods = rows["method"].fillna("capture") if "method" in rows else pd.Series("capture", index=rows.index)
            for method in sorted(methods.unique()):
                yield (e.name, str(method)), rows[methods == method]


def _egress_rows(q: pd.DataFrame, e: Egress) -> pd.DataFrame:
    rows = q[(q.node == e.node) & (q.dev == e.dev)]
    if e.leaf_handle and "handle" in rows:
        return rows[rows.handle == e.leaf_handle]
    return rows[rows.kind == e.kind] if "kind" in rows else rows


def _binned(egress: str, source: str, rows: pd.DataFrame) -> Series:
    centres = (rows.t // BIN_S) * BIN_S + BIN_S / 2
    per_bin = rows.delay_ms.groupby(centres).mean()
    return Series(egress=egress, source=source, t=tuple(float(t) for t in per_bin.index),
                  delay_ms=tuple(float(v) for v in per_bin.values))


# ---------------------------------------------------------------- sanity checks


def _ok(passed: bool) -> str:
    return "pass" if passed else "fail"


def _app_kinds(run_dir: Path) -> set[str]:
    try:
        data = tomllib.loads((run_dir / "config.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return set()
    return {str(a.get("kind")) for a in (data.get("apps") or {}).values() if isinstance(a, dict)}


def sanity_checks(run_dir: Path, egs: Sequence[Egress], bottlenecks: Sequence[str],
                  delay_means: dict[Metric, float]) -> list[Check]:
    """The acceptance checks of one run (a check on an app the experiment lacks is left out)."""
    kinds = _app_kinds(run_dir)
    checks = _pie_checks(egs, delay_means) + _fq_pie_checks(egs, delay_means)
    if "dash" in kinds or (run_dir / "segments.csv").exists():
        checks += _dash_split_checks(run_dir, bottlenecks)
    checks += _iperf3_checks(run_dir, "iperf3" in kinds)
    checks += _sipp_checks(run_dir, "sipp" in kinds)
    checks += _httperf_checks(run_dir, "httperf" in kinds)
    return checks


def _pie_checks(egs: Sequence[Egress], means: dict[Metric, float]) -> list[Check]:
    out = []
    lo, hi = PIE_DELAY_BAND
    for e in (e for e in egs if e.kind == "pie"):
        mean = means.get(delay_metric(e.name, "kernel"))
        if e.target_ms is None or mean is None:
            why = "no target recorded in links.json" if e.target_ms is None else "no kernel delay_ms samples"
            out.append(Check(name="PIE kernel delay / target", subject=e.name, status="fail", detail=why))
            continue
        ratio = mean / e.target_ms
        out.append(Check(name="PIE kernel delay / target", subject=e.name, status=_ok(lo <= ratio <= hi),
                         detail=f"mean {mean:.2f} ms, target {e.target_ms:g} ms ({ratio:.2f}x; "
                                f"pass within {lo:g}x-{hi:g}x)", value=ratio, unit="x target"))
    return out


def _fq_pie_checks(egs: Sequence[Egress], means: dict[Metric, float]) -> list[Check]:
    out = []
    for e in (e for e in egs if e.kind == "fq_pie"):
        measured = {str(m.source): v for m, v in means.items() if m.egress == e.name and m.source != "kernel"}
        detail = ", ".join(f"{src}: mean {v:.2f} ms" for src, v in sorted(measured.items()))
        out.append(Check(name="FQ-PIE measured delay series", subject=e.name, status=_ok(bool(measured)),
                         detail=detail or "no qdelay.csv samples for this egress in the steady window",
                         value=min(measured.values()) if measured else None, unit="ms mean measured delay"))
    return out


def _dash_split_checks(run_dir: Path, links: Sequence[str]) -> list[Check]:
    name = "DASH bytes per bottleneck"
    sub = _read_csv(run_dir / "subflows.csv")
    if not links:
        return []
    if sub is None or sub.empty:
        why = "subflows.csv absent" if sub is None else "subflows.csv has no rows"
        return [Check(name=name, subject=link, status="fail", detail=why) for link in links]
    per_link = _bytes_per_bottleneck(run_dir, sub, links)
    total = sum(per_link.values())
    out = []
    for link in links:
        share = per_link.get(link, 0.0) / total if total else 0.0
        hint = _mptcp_hint(run_dir) if share < MIN_BOTTLENECK_SHARE else ""
        out.append(Check(name=name, subject=link, status=_ok(share >= MIN_BOTTLENECK_SHARE),
                         detail=f"{share:.1%} of {total / 1e6:.2f} MB (pass >= {MIN_BOTTLENECK_SHARE:.0%}){hint}",
                         value=100 * share, unit="% of the DASH bytes"))
    unmapped = per_link.get("", 0.0)
    if unmapped:
        out.append(Check(name=name, subject="(no bottleneck)", status="fail",
                         detail=f"{unmapped / 1e6:.2f} MB on subflows not mapped to an AQM bottleneck"))
    return out


def _mptcp_hint(run_dir: Path) -> str:
    """What the players' kernels counted (``mptcp.json``): connections, ADD_ADDRs received, joins answered."""
    try:
        apps = json.loads((run_dir / "mptcp.json").read_text())
    except (OSError, ValueError):
        return ""
    parts = []
    for app in apps.values():
        player = app.get("counters", {}).get(app.get("client"), {})
        parts.append(f"player's kernel: {player.get('MPCapableSYNACKRX', 0)} connections, "
                     f"{player.get('AddAddr', 0)} ADD_ADDRs received, {player.get('MPJoinSynAckRx', 0)} joins answered")
    return f"; {'; '.join(parts)} (mptcp.json)" if parts else ""


def _bytes_per_bottleneck(run_dir: Path, sub: pd.DataFrame, links: Sequence[str]) -> dict[str, float]:
    """Bytes of each subflow (the last sample of its counters), summed per bottleneck link."""
    counters = [c for c in ("bytes_received", "bytes_sent") if c in sub]
    keys = [c for c in ("app", "local", "local_port", "remote", "remote_port", "link") if c in sub]
    last = sub.fillna({"link": ""}).groupby(keys)[counters].max().reset_index()
    last["total"] = last[counters].sum(axis=1)
    mapping = _link_to_bottleneck(run_dir, links)
    out: dict[str, float] = {}
    for access, total in last.groupby("link")["total"].sum().items():
        bn = mapping.get(str(access), "")
        out[bn] = out.get(bn, 0.0) + float(total)
    return out


def _link_to_bottleneck(run_dir: Path, links: Sequence[str]) -> dict[str, str]:
    """Client access link -> the AQM bottleneck sharing its far end (``h2_r1`` -> ``bn1``)."""
    mapping = {link: link for link in links}
    try:
        name = tomllib.loads((run_dir / "config.toml").read_text())["experiment"]["topology"]
        spec = topology.load("experiment.topology", str(name))
    except (OSError, KeyError, tomllib.TOMLDecodeError, NestExpError):
        return mapping
    by_name = {lk.name: lk for lk in spec.links}
    for access in spec.links:
        if access.name in mapping:
            continue
        near = [bn for bn in links if bn in by_name and {access.a, access.b} & {by_name[bn].a, by_name[bn].b}]
        if len(near) == 1:
            mapping[access.name] = near[0]
    return mapping


def _missing(name: str, file: str) -> list[Check]:
    return [Check(name=name, subject="-", status="fail", detail=f"{file} absent although the experiment has the app")]


def _iperf3_checks(run_dir: Path, expected: bool) -> list[Check]:
    s = _read_csv(run_dir / "iperf3_summary.csv")
    if s is None:
        return _missing("iperf3 flow moved data", "iperf3_summary.csv") if expected else []
    if s.empty:
        return [Check(name="iperf3 flow moved data", subject="-", status="fail", detail="no flow in the summary")]
    out = []
    for _, r in s.iterrows():
        moved = float(r.get("bytes", 0) or 0)
        rx = r.get("receiver_bits_per_second")
        detail = f"{moved / 1e6:.2f} MB sent" + (f", {float(rx) / 1e6:.2f} Mbit/s received" if pd.notna(rx) else "")
        out.append(Check(name="iperf3 flow moved data", subject=str(r.get("flow", "?")), status=_ok(moved > 0),
                         detail=detail, value=moved / 1e6, unit="MB per flow"))
    return out


def _ratio_checks(run_dir: Path, expected: bool, *, file: str, name: str, part: str, whole: str, minimum: float,
                  detail: str, unit: str) -> list[Check]:
    """One check per row of an app's CSV: ``part / whole >= minimum`` (e.g. calls succeeded / attempted)."""
    s = _read_csv(run_dir / file)
    if s is None:
        return _missing(name, file) if expected else []
    out = []
    for _, r in s.iterrows():
        num, den = float(r.get(part, 0) or 0), float(r.get(whole, 0) or 0)
        ratio = num / den if den else 0.0
        out.append(Check(name=name, subject=f"{r.get('app', '?')} {r.get('src', '')}->{r.get('dst', '')}",
                         status=_ok(den > 0 and ratio >= minimum),
                         detail=detail.format(num=num, den=den) + f" ({ratio:.1%}; pass >= {minimum:.0%})",
                         value=100 * ratio, unit=unit))
    return out or [Check(name=name, subject="-", status="fail", detail=f"{file} has no rows")]


def _sipp_checks(run_dir: Path, expected: bool) -> list[Check]:
    return _ratio_checks(run_dir, expected, file="sipp.csv", name="SIPp calls succeeded", part="calls_successful",
                         whole="calls_attempted", minimum=MIN_SIPP_SUCCESS, detail="{num:.0f}/{den:.0f} calls",
                         unit="% of calls succeeded")


def _httperf_checks(run_dir: Path, expected: bool) -> list[Check]:
    return _ratio_checks(run_dir, expected, file="httperf.csv", name="httperf reply rate", part="reply_rate_avg",
                         whole="request_rate", minimum=MIN_HTTPERF_REPLY,
                         detail="{num:.2f} replies/s for {den:.2f} requests/s", unit="% of the request rate")


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Mean of ``n`` values and its 95% confidence interval (``None`` when n < MIN_REPS)."""

    n: int
    mean: float | None
    low: float | None = None
    high: float | None = None

    @property
    def enough(self) -> bool:
        return self.n >= MIN_REPS


def _present(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def estimate(values: Iterable[float | None]) -> Estimate:
    """Mean and Student-t 95% CI over repetitions (no CI below :data:`MIN_REPS`)."""
    xs = _present(values)
    if not xs:
        return Estimate(n=0, mean=None)
    mean = float(np.mean(xs))
    if len(xs) < MIN_REPS:
        return Estimate(n=len(xs), mean=mean)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(xs) - 1) * stats.sem(xs))
    return Estimate(n=len(xs), mean=mean, low=mean - half, high=mean + half)


def mann_whitney_p(a: Iterable[float | None], b: Iterable[float | None]) -> float | None:
    """Two-sided Mann-Whitney U p-value; ``None`` when either group has fewer than MIN_REPS values."""
    xa, xb = _present(a), _present(b)
    if len(xa) < MIN_REPS or len(xb) < MIN_REPS:
        return None
    if len(set(xa) | set(xb)) == 1:
        return 1.0  # every value equal: no evidence of a difference (scipy would divide by zero)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.mannwhitneyu(xa, xb, alternative="two-sided").pvalue)


# ---------------------------------------------------------------- the sweep


CellKey = tuple[tuple[tuple[str, str], ...], str, str]  # context, target, aqm


@dataclass(frozen=True, kw_only=True)
class Row:
    """One line of the comparison table: a metric at one (context, target), every AQM."""

    metric: Metric
    context: tuple[tuple[str, str], ...]
    target: str
    estimates: dict[str, Estimate]  # aqm -> estimate
    p_values: dict[tuple[str, str], float | None]  # (aqm a, aqm b) -> p


@dataclass(frozen=True, kw_only=True)
class Sweep:
    folder: Path
    runs: tuple[RunResult, ...]

    @property
    def completed(self) -> list[RunResult]:
        return [r for r in self.runs if r.completed]

    @property
    def excluded(self) -> list[RunResult]:
        return [r for r in self.runs if not r.completed]

    @property
    def aqms(self) -> list[str]:
        return order_aqms({r.aqm for r in self.completed})

    @property
    def targets(self) -> list[str]:
        return order_targets({r.target for r in self.completed})

    @property
    def contexts(self) -> list[tuple[tuple[str, str], ...]]:
        return sorted({r.context for r in self.completed})

    @property
    def metrics(self) -> list[Metric]:
        """DASH metrics any run has, then every queue-delay metric, in a stable order."""
        present = {k for r in self.completed for k in r.metrics}
        delays = {m.key: m for r in self.completed for m in r.delay_metrics}
        return [m for m in DASH_METRICS if m.key in present] + [delays[k] for k in sorted(delays)]

    def cell(self, context: tuple[tuple[str, str], ...], target: str, aqm: str) -> list[RunResult]:
        return [r for r in self.completed if (r.context, r.target, r.aqm) == (context, target, aqm)]

    def pairs(self) -> list[tuple[str, str]]:
        return list(itertools.combinations(self.aqms, 2))


def load_sweep(folder: Path) -> Sweep:
    dirs = run_dirs(folder)
    if not dirs:
        raise NestExpError(f"{folder}: no run folder (a folder with manifest.json) here")
    return Sweep(folder=folder, runs=tuple(load_run(d) for d in dirs))


def order_aqms(aqms: Iterable[str]) -> list[str]:
    """PIE first, then FQ-PIE, then the rest by name."""
    rank = {"pie": 0, "fq_pie": 1}
    return sorted(aqms, key=lambda a: (rank.get(a, 2), a))


def order_targets(targets: Iterable[str]) -> list[str]:
    """By duration when every part reads as one (``5ms`` < ``10ms``), else by name."""
    def key(t: str) -> tuple[int, float, str]:
        try:
            return (0, sum(parse_time("target", p) for p in t.split("+")), t)
        except NestExpError:
            return (1, 0.0, t)
    return sorted(targets, key=key)


def target_ms(target: str) -> float | None:
    try:
        return parse_time("target", target) * 1e3
    except NestExpError:
        return None


def table(sweep: Sweep) -> list[Row]:
    rows = []
    for metric in sweep.metrics:
        for context in sweep.contexts:
            for target in sweep.targets:
                values = {a: [r.metrics.get(metric.key) for r in sweep.cell(context, target, a)] for a in sweep.aqms}
                if not any(_present(v) for v in values.values()):
                    continue
                rows.append(Row(metric=metric, context=context, target=target,
                                estimates={a: estimate(v) for a, v in values.items()},
                                p_values={(a, b): mann_whitney_p(values[a], values[b]) for a, b in sweep.pairs()}))
    return rows


# ---------------------------------------------------------------- per-cell summaries


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Queue delay over time of one cell on one egress from one source: mean and band over repetitions."""

    egress: str
    source: str
    aqm: str
    target: str
    context: tuple[tuple[str, str], ...]
    t: tuple[float, ...]
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    runs: int
    band: str  # "95% CI" or "min-max"


def profiles(sweep: Sweep) -> list[Profile]:
    out = []
    for context in sweep.contexts:
        for target in sweep.targets:
            for aqm in sweep.aqms:
                runs = sweep.cell(context, target, aqm)
                ids = sorted({(s.egress, s.source) for r in runs for s in r.series})
                out += [_profile(runs, eg, src, aqm=aqm, target=target, context=context) for eg, src in ids]
    return out


def _profile(runs: Sequence[RunResult], egress: str, source: str, *, aqm: str, target: str,
             context: tuple[tuple[str, str], ...]) -> Profile:
    per_bin: dict[float, list[float]] = {}
    count = 0
    for r in runs:
        for s in (s for s in r.series if (s.egress, s.source) == (egress, source)):
            count += 1
            for t, v in zip(s.t, s.delay_ms, strict=True):
                per_bin.setdefault(t, []).append(v)
    ts = sorted(per_bin)
    ests = [estimate(per_bin[t]) for t in ts]
    ci = count >= MIN_REPS
    low = [e.low if ci and e.low is not None else min(per_bin[t]) for t, e in zip(ts, ests, strict=True)]
    high = [e.high if ci and e.high is not None else max(per_bin[t]) for t, e in zip(ts, ests, strict=True)]
    return Profile(egress=egress, source=source, aqm=aqm, target=target, context=context, t=tuple(ts),
                   mean=tuple(float(e.mean or 0.0) for e in ests), low=tuple(low), high=tuple(high),
                   runs=count, band="95% CI" if ci else "min-max")


@dataclass(frozen=True, kw_only=True)
class CellCheck:
    """A sanity check summed over a cell's runs."""

    context: tuple[tuple[str, str], ...]
    target: str
    aqm: str
    name: str
    passed: int
    total: int
    detail: str

    @property
    def status(self) -> str:
        return _ok(self.total > 0 and self.passed == self.total)


def cell_checks(sweep: Sweep) -> list[CellCheck]:
    out = []
    for context in sweep.contexts:
        for target in sweep.targets:
            for aqm in sweep.aqms:
                runs = sweep.cell(context, target, aqm)
                names = list(dict.fromkeys(c.name for r in runs for c in r.checks))
                out += [_cell_check(runs, name, context=context, target=target, aqm=aqm) for name in names]
                out += _pie_cell_checks(runs, context=context, target=target, aqm=aqm)
    return out


def _cell_check(runs: Sequence[RunResult], name: str, *, context: tuple[tuple[str, str], ...], target: str,
                aqm: str) -> CellCheck:
    checks = [c for r in runs for c in r.checks if c.name == name]
    failed = sorted({r.name for r in runs for c in r.checks if c.name == name and c.status != "pass"})
    values = [c.value for c in checks if c.value is not None]
    parts = [f"{min(values):.3g}-{max(values):.3g} {checks[0].unit}"] if values else []
    parts += [f"failed in {', '.join(failed)}"] if failed else []
    detail = "; ".join(parts)
    return CellCheck(context=context, target=target, aqm=aqm, name=name, total=len(checks),
                     passed=sum(c.status == "pass" for c in checks), detail=detail)


def _pie_cell_checks(runs: Sequence[RunResult], *, context: tuple[tuple[str, str], ...], target: str,
                     aqm: str) -> list[CellCheck]:
    """PIE's kernel delay averaged over the cell's repetitions, against the target (per egress)."""
    out = []
    lo, hi = PIE_DELAY_BAND
    egs = {e.name: e for r in runs for e in r.egresses if e.kind == "pie"}
    for name, e in sorted(egs.items()):
        means = [r.metrics.get(delay_metric(name, "kernel").key) for r in runs]
        est = estimate(means)
        if est.mean is None or e.target_ms is None:
            out.append(CellCheck(context=context, target=target, aqm=aqm, name=f"PIE mean kernel delay / target, {name}",
                                 passed=0, total=1, detail="no kernel delay or no target"))
            continue
        ratio = est.mean / e.target_ms
        out.append(CellCheck(context=context, target=target, aqm=aqm, name=f"PIE mean kernel delay / target, {name}",
                             passed=int(lo <= ratio <= hi), total=1,
                             detail=f"{est.mean:.2f} ms over {est.n} run(s) vs {e.target_ms:g} ms ({ratio:.2f}x)"))
    return out
