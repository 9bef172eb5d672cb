"""The "under the hood" study (Under the hood, docs/papers.md): objects, DASH segments, two parallel streams.

Reads run folders only, of three experiments (``experiments/under_hood_*.toml``):

- ``under_hood_objects``: ``objects.csv`` of sequential download sessions
  (Fig. 6): per object, throughput = bytes / (last - first byte) and response
  latency = first byte - request, TCP vs h3;
- ``under_hood_dash``: ``segments.csv`` of DASH sessions (Fig. 7; Fig. 9b): the
  same two numbers per segment, video and audio apart, TCP vs h3, per origin
  implementation (``http_server``: ``caddy`` = quic-go, ``nest`` = aioquic);
- ``under_hood_parallel``: ``objects.csv`` of two parallel streams (Fig. 8), per
  pause time: per-stream throughput and latency, and the fairness between the
  two streams of a session (Jain's index of their mean throughputs, and
  min/max).

Every sample is one object or segment. Here they are *described*: the
study's own report draws their CDFs and tabulates medians and upper quartiles
of the objects or segments of all sessions of a cell, pooled (one
distribution, not a test: the objects of one session are not independent
samples). The paper's claims are judged per session in :mod:`.claims`. For
the description, a sample whose request-to-last-byte span overlaps a
CPU-saturated 1 s window of its run (``cpu.csv`` busy >= 95%) is left out and
counted (the claims leave out such sessions whole).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nest_experiments import rundir
from nest_experiments.analysis.report import Check, RunInput, ok
from nest_experiments.analysis.stats import quantile
from nest_experiments.rundir import CPU, SATURATED, SEGMENTS, RunFolder, experiment_name, read_manifest, run_dirs
from nest_experiments.units import parse_time

OBJECTS, DASH, PARALLEL = "under_hood_objects", "under_hood_dash", "under_hood_parallel"
TRANSPORTS = ("tcp", "h3")
SERVERS = {"caddy": "Caddy (quic-go)", "nest": "our server (aioquic)", "webfs": "webfsd (HTTP/1.1 over TCP)"}
REPORT_FILE = "under_hood.md"


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when equal, 1/n when one takes everything."""
    if not values or not any(values):
        return None
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


# ---------------------------------------------------------------- samples


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One object or segment of one run."""

    run: str
    transport: str
    server: str  # the origin: "caddy" | "nest"
    stream: str  # objects: "objects", "s1", "s2"; segments: "video", "audio"
    session: str
    pause_s: float | None  # objects: the pause of the run's design (its minimum); segments: None
    throughput_bps: float | None
    latency_s: float
    t_request: float = 0.0  # run clock
    t_last_byte: float = 0.0


def app_of(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The run's objects or DASH app table ({} when it has none)."""
    apps = config.get("apps") or {}
    return next((a for a in apps.values() if isinstance(a, Mapping) and a.get("kind") in ("objects", "dash")), {})


def pause_of(app: Mapping[str, Any]) -> float | None:
    value = app.get("pause", "500ms")
    first = value[0] if isinstance(value, list) and value else value
    try:
        return parse_time("pause", first)
    except Exception:  # noqa: BLE001  (a config we did not write: no pause axis)
        return None


def _float(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def _object_samples(run_dir: Path, app: Mapping[str, Any]) -> list[Sample]:
    pause, server = pause_of(app), str(app.get("http_server", "caddy"))
    return [Sample(run=run_dir.name, transport=r["transport"], server=server, stream=r["stream"],
                   session=f"{run_dir.name}/{r['session']}", pause_s=pause,
                   throughput_bps=_float(r["throughput_bps"]), latency_s=float(r["latency_s"]),
                   t_request=float(r["t_request"]), t_last_byte=float(r["t_last_byte"]))
            for r in RunFolder(run_dir).rows(rundir.OBJECTS)]


def segment_sample(run: str, server: str, row: dict[str, str]) -> Sample | None:
    """A ``segments.csv`` row as a sample (None: no first-byte time, e.g. GPAC's log)."""
    t_req, t_first, t_last = (_float(row.get(k)) for k in ("t_request", "t_first_byte", "t_last_byte"))
    if t_req is None or t_first is None or t_last is None:
        return None
    span = t_last - t_first
    return Sample(run=run, transport=row.get("transport", ""), server=server, stream=row["stream"], session=run,
                  pause_s=None, throughput_bps=8 * int(row["bytes"]) / span if span > 0 else None,
                  latency_s=t_first - t_req, t_request=t_req, t_last_byte=t_last)


def server_of(app: Mapping[str, Any]) -> str:
    """The origin a dash app's table in a run's ``config.toml`` served its transport with: ``http_server`` as a
    name, or its entry for the app's transport (a table of transport -> name, as the ABR letter's split)."""
    value = app.get("http_server", "nest")
    if isinstance(value, Mapping):
        return str(value.get(str(app.get("transport", "tcp")), "nest"))
    return str(value)


def _segment_samples(run_dir: Path, app: Mapping[str, Any]) -> list[Sample]:
    server = server_of(app)
    out = (segment_sample(run_dir.name, server, r) for r in RunFolder(run_dir).rows(SEGMENTS))
    return [s for s in out if s is not None]


@dataclass(frozen=True, kw_only=True)
class Loaded:
    samples: tuple[Sample, ...]
    excluded: tuple[str, ...]  # per run: how many samples a CPU-saturated second left out
    runs: int  # completed runs with data


def saturated_seconds(run_dir: Path) -> list[float]:
    """End times of the run's CPU-saturated 1 s windows (``cpu.csv``; each covers (t - 1, t])."""
    return [float(r["t"]) for r in RunFolder(run_dir).rows(CPU) if float(r["busy"]) >= SATURATED]


def clean(samples: Sequence[Sample], saturated: Sequence[float]) -> list[Sample]:
    """The samples whose [request, last byte] overlaps no saturated window (t - 1, t]."""
    return [s for s in samples if not any(t - 1 < s.t_last_byte and s.t_request < t for t in saturated)]


def run_samples(run_dir: Path) -> list[Sample] | None:
    app = app_of(RunFolder(run_dir).config())
    if RunFolder(run_dir).has(rundir.OBJECTS):
        return _object_samples(run_dir, app)
    if RunFolder(run_dir).has(SEGMENTS):
        return _segment_samples(run_dir, app)
    return None


def load(folder: Path) -> Loaded:
    samples: list[Sample] = []
    excluded, runs = [], 0
    for run_dir in run_dirs(folder):
        if (read_manifest(run_dir) or {}).get("status") != "completed":
            continue
        found = run_samples(run_dir)
        if found is None:
            continue
        kept = clean(found, saturated_seconds(run_dir))
        if len(kept) < len(found):
            excluded.append(f"{run_dir.name}: {len(found) - len(kept)} of {len(found)}")
        samples += kept
        runs += 1
    return Loaded(samples=tuple(samples), excluded=tuple(excluded), runs=runs)


# ---------------------------------------------------------------- description (pure)


def values(samples: Sequence[Sample], metric: str, **match: Any) -> tuple[float, ...]:
    """``metric`` (``throughput_bps`` | ``latency_s``) of the samples whose fields equal ``match``."""
    out = []
    for s in samples:
        if all(getattr(s, k) == v for k, v in match.items()):
            v = getattr(s, metric)
            if v is not None:
                out.append(float(v))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """``a`` vs ``b`` (e.g. tcp vs h3) on one metric: the pooled objects or segments of their sessions, described
    (one distribution per side; the claims compare sessions, :mod:`.claims`)."""

    what: str
    metric: str
    a_name: str
    b_name: str
    a: tuple[float, ...]
    b: tuple[float, ...]

    def median(self, side: str) -> float | None:
        xs = self.a if side == "a" else self.b
        return statistics.median(xs) if xs else None

    def q75(self, side: str) -> float | None:
        xs = self.a if side == "a" else self.b
        return quantile(xs, 0.75) if xs else None


def compare(samples: Sequence[Sample], what: str, metric: str, *, a: dict[str, Any], b: dict[str, Any],
            names: tuple[str, str] = TRANSPORTS) -> Comparison:
    return Comparison(what=what, metric=metric, a_name=names[0], b_name=names[1], a=values(samples, metric, **a),
                      b=values(samples, metric, **b))


def fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1e6:.3g} Mbit/s" if metric == "throughput_bps" else f"{v * 1e3:.3g} ms"


def dash_comparisons(samples: Sequence[Sample], server: str) -> dict[str, Comparison]:
    """tcp vs h3 on one origin: video throughput and latency, all segments' latency, audio's latency; and per
    transport, video (a) vs audio (b) latency."""
    def tv(metric: str, **m: Any) -> Comparison:
        return compare(samples, server, metric, a={"transport": "tcp", "server": server, **m},
                       b={"transport": "h3", "server": server, **m})

    return {"video_tp": tv("throughput_bps", stream="video"), "video_lat": tv("latency_s", stream="video"),
            "all_lat": tv("latency_s"), "audio_lat": tv("latency_s", stream="audio"),
            **{f"{t}_av": compare(samples, server, "latency_s", a={"transport": t, "server": server, "stream": "video"},
                                  b={"transport": t, "server": server, "stream": "audio"}, names=("video", "audio"))
               for t in TRANSPORTS}}


def pauses(samples: Sequence[Sample]) -> list[float]:
    return sorted({s.pause_s for s in samples if s.pause_s is not None})


def parallel_comparisons(samples: Sequence[Sample], pause: float) -> tuple[Comparison, Comparison]:
    tp = compare(samples, f"pause {pause:g} s", "throughput_bps", a={"transport": "tcp", "pause_s": pause},
                 b={"transport": "h3", "pause_s": pause})
    lat = compare(samples, f"pause {pause:g} s", "latency_s", a={"transport": "tcp", "pause_s": pause},
                  b={"transport": "h3", "pause_s": pause})
    return tp, lat


# ---------------------------------------------------------------- fairness (parallel)


@dataclass(frozen=True, kw_only=True)
class Fairness:
    """The two (or more) streams of one session: mean throughput each, Jain's index, min/max."""

    session: str
    transport: str
    pause_s: float | None
    means_bps: tuple[float, ...]

    @property
    def jain(self) -> float | None:
        return jain_index(self.means_bps)

    concurrent_jain: float | None = None  # while both streams download (overlap_jain)
    overlap_s: float = 0.0  # how long they did

    @property
    def ratio(self) -> float | None:
        return min(self.means_bps) / max(self.means_bps) if self.means_bps and max(self.means_bps) > 0 else None


def overlap_jain(group: Sequence[Sample]) -> tuple[float | None, float]:
    """Jain's index of two streams' rates while both download, weighted by how long: every pair of objects of
    different streams whose first-to-last-byte spans overlap, each object's rate its throughput. Returns the
    index and the overlapping time."""
    spans = [(s.stream, s.t_request + s.latency_s, s.t_last_byte, s.throughput_bps) for s in group if s.throughput_bps]
    total = weighted = 0.0
    for i, (st_a, a0, a1, ra) in enumerate(spans):
        for st_b, b0, b1, rb in spans[i + 1:]:
            both = min(a1, b1) - max(a0, b0)
            if st_a != st_b and both > 0:
                total += both
                weighted += both * (jain_index([ra or 0.0, rb or 0.0]) or 0.0)
    return (weighted / total if total else None), total


def fairness(samples: Sequence[Sample]) -> list[Fairness]:
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.session, []).append(s)
    out = []
    for session, group in sorted(groups.items()):
        streams = sorted({s.stream for s in group})
        if len(streams) < 2:
            continue
        means = tuple(statistics.fmean(values(group, "throughput_bps", stream=st) or (0.0,)) for st in streams)
        jain, both = overlap_jain(group)
        out.append(Fairness(session=session, transport=group[0].transport, pause_s=group[0].pause_s, means_bps=means,
                            concurrent_jain=jain, overlap_s=both))
    return out


# ---------------------------------------------------------------- the study


def experiment_of(folder: Path) -> str:
    return experiment_name(folder)


def run_checks(run: RunInput) -> list[Check]:
    """Every planned object arrived (objects), or the session played to the end (DASH)."""
    m = read_manifest(run.run_dir) or {}
    short = [w for w in m.get("warnings") or [] if "objects downloaded" in w or "did not reach the end" in w]
    return [Check(name="every object / segment downloaded", subject="manifest warnings", status=ok(not short),
                  detail="; ".join(short) or "no missing object or segment")]
