"""The ABR-over-QUIC-vs-TCP study (Mondal & Chakraborty, docs/papers.md): ABR x transport, Figs. 2-5 and section IV.

Reads run folders only (``experiments/abr_quic_tcp.toml``'s sweep). One
*session* per run: its cells from the run's resolved config
(:func:`cell_of`: the DASH app's ABR and transport, the trace's family and
the trace itself, e.g. ``fcc-1``) and four numbers from ``segments.csv``
(:func:`session_metrics`):

- ``bitrate``: mean declared bitrate of the video segments (kbit/s; Fig. 2);
- ``variation``: mean ``|R(n+1) - R(n)|`` over consecutive video segments,
  zero changes included (kbit/s; Fig. 3). The letter does not define its
  "average playback quality variation"; this is the smoothness term of its
  eq. (1) per chunk pair (Pensieve's "average quality variation"). Not the
  NeST report's switch count, which ignores the size of a change;
- ``rebuffer``: total stall time of the session, both streams (s; Fig. 4);
- ``qoe``: eq. (1) with linear ``q(R) = R`` in Mbit/s over the video
  segments, ``mu`` = 4.3, the session's stall time (Fig. 5;
  :func:`nest_experiments.dash.core.qoe.qoe_eq1`).

The paper's claims are data (:mod:`.claims`), judged on the per-session
table (:func:`cell_of`, :func:`session_metrics`) by the shared evaluator
(``Study.verdicts``, :mod:`nest_experiments.analysis.decisions`: TCP and h3
paired by trace, CPU-saturated sessions left out and counted).
What this module adds for the study's own report: the sessions with their
flags (sessions that did not play to the end are kept, their stalls
happened, and flagged), the first session of each (ABR, transport, trace)
for the box plots, and the *noise floor*: a point that ran more than once on
one trace is an A/A pair, and its spread (max - min over its repetitions,
the largest over all pairs) per metric.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nest_experiments.analysis import decisions
from nest_experiments.analysis.claims import Value, Verdict
from nest_experiments.analysis.report import Check, RunInput, ok
from nest_experiments.dash.core import qoe
from nest_experiments.rundir import QOE, SEGMENTS, RunFolder, read_manifest, run_dirs

EXPERIMENT = "abr_quic_tcp"
TRANSPORTS = ("tcp", "h3")  # the letter's DASH/TCP and DASH/QUIC
REPORT_FILE = "abr_quic.md"


@dataclass(frozen=True, kw_only=True)
class SessionMetric:
    key: str
    label: str
    unit: str
    figure: int  # the letter's figure


METRICS = (
    SessionMetric(key="bitrate", label="average video bitrate", unit="kbit/s", figure=2),
    SessionMetric(key="variation", label="quality variation", unit="kbit/s", figure=3),
    SessionMetric(key="rebuffer", label="rebuffer time", unit="s", figure=4),
    SessionMetric(key="qoe", label="QoE (eq. 1)", unit="", figure=5),
)
BY_KEY = {m.key: m for m in METRICS}
ABR_ORDER = ("bba", "bola", "mpc_fast", "mpc_robust", "throughput", "dynamic", "pensieve")


# ---------------------------------------------------------------- sessions


@dataclass(frozen=True, kw_only=True)
class Session:
    run: str
    path: Path
    abr: str
    transport: str
    condition: str  # the trace, e.g. "fcc-1" (:func:`cell_of`)
    repetition: int
    metrics: dict[str, float]
    complete: bool  # played to the end
    cpu_saturated: int  # 1 s windows

    @property
    def cell(self) -> tuple[str, str, str]:
        return (self.abr, self.transport, self.condition)


def segment_metrics(rows: Sequence[Any]) -> dict[str, float]:
    """The four numbers of one session from its ``segments.csv`` rows (:class:`~nest_experiments.rundir.rows.SegmentRow`)."""
    video = qoe.by_stream(rows).get("video", [])
    rates = [float(r.bitrate_bps) for r in video if r.bitrate_bps is not None]
    if not rates:
        return {}
    stall = sum(r.stall_s for r in rows)
    changes = [abs(b - a) for a, b in zip(rates, rates[1:], strict=False)]
    return {"bitrate": statistics.fmean(rates) / 1e3, "variation": statistics.fmean(changes) / 1e3 if changes else 0.0,
            "rebuffer": stall, "qoe": qoe.qoe_eq1(rates, stall)}


def session_metrics(run: RunFolder) -> dict[str, float | None]:
    """The study's per-session metrics of a run folder (the claims' metrics; None without ``segments.csv``)."""
    found = segment_metrics(run.segments()) if run.has(SEGMENTS) else {}
    return {m.key: found.get(m.key) for m in METRICS}


def _dash_app(config: Mapping[str, Any]) -> Mapping[str, Any]:
    apps = config.get("apps") or {}
    return next((a for a in apps.values() if isinstance(a, dict) and a.get("kind") == "dash"), {})


def _trace(config: Mapping[str, Any]) -> tuple[str, str]:
    """(family, trace) of the first traced link direction: ``fcc``, ``fcc-3`` for a generator; a file's folder and
    name; ``-`` without a trace."""
    for link in (config.get("links") or {}).values():
        if not isinstance(link, dict):
            continue
        for table in (link.get("forward"), link.get("reverse"), link):
            trace = table.get("trace") if isinstance(table, dict) else None
            if isinstance(trace, dict) and "generator" in trace:
                return str(trace["generator"]), f"{trace['generator']}-{trace.get('seed', 1)}"
            if isinstance(trace, dict) and "file" in trace or isinstance(trace, str):
                path = Path(str(trace["file"] if isinstance(trace, dict) else trace))
                return path.parent.name or "file", path.name
            if trace is not None:
                return "schedule", "schedule"
    return "-", "-"


def cell_of(config: Mapping[str, Any]) -> dict[str, Value]:
    """A run's cells from its resolved config (a run folder's ``config.toml``, or a RunSpec's
    ``experiment.raw``): ``abr``, ``transport``, ``family`` (the trace generator) and ``trace`` (e.g. ``fcc-3``)."""
    app = _dash_app(config)
    family, trace = _trace(config)
    return {"abr": str(app.get("abr", "grate")), "transport": str(app.get("transport", "tcp")), "family": family,
            "trace": trace}


def _complete(run_dir: Path) -> bool:
    docs = RunFolder(run_dir).qoe() or {}
    return bool(docs) and all(isinstance(d, dict) and d.get("end_reason") == "ended" for d in docs.values())


def load_session(run_dir: Path) -> Session | None:
    """The session of a completed run folder (None: not completed, or no video segment)."""
    m = read_manifest(run_dir) or {}
    if m.get("status") != "completed" or not RunFolder(run_dir).has(SEGMENTS):
        return None
    metrics = segment_metrics(RunFolder(run_dir).segments())
    if not metrics:
        return None
    cell = cell_of(RunFolder(run_dir).config())
    return Session(run=run_dir.name, path=run_dir, abr=str(cell["abr"]), transport=str(cell["transport"]),
                   condition=str(cell["trace"]), repetition=int(m.get("repetition", 1) or 1), metrics=metrics,
                   complete=_complete(run_dir), cpu_saturated=decisions.saturated_windows(m))


def load_sessions(folder: Path) -> list[Session]:
    return [s for s in map(load_session, run_dirs(folder)) if s is not None]


def usable(sessions: Sequence[Session]) -> list[Session]:
    """What the statistics use: no CPU-saturated run, each point's first repetition only."""
    clean = [s for s in sessions if s.cpu_saturated == 0]
    first: dict[tuple[str, str, str], Session] = {}
    for s in sorted(clean, key=lambda s: s.repetition):
        first.setdefault(s.cell, s)
    return list(first.values())


def abrs(sessions: Sequence[Session]) -> list[str]:
    rank = {a: i for i, a in enumerate(ABR_ORDER)}
    return sorted({s.abr for s in sessions}, key=lambda a: (rank.get(a, len(rank)), a))


# ---------------------------------------------------------------- noise floor


@dataclass(frozen=True, kw_only=True)
class AaPair:
    """The repetitions of one point: how far identical runs differ."""

    cell: tuple[str, str, str]
    runs: tuple[str, ...]
    spread: dict[str, float]  # metric -> max - min


def aa_pairs(sessions: Sequence[Session]) -> list[AaPair]:
    cells: dict[tuple[str, str, str], list[Session]] = {}
    for s in sessions:
        if s.cpu_saturated == 0:
            cells.setdefault(s.cell, []).append(s)
    out = []
    for cell, group in sorted(cells.items()):
        if len(group) < 2:
            continue
        spread = {m.key: max(s.metrics[m.key] for s in group) - min(s.metrics[m.key] for s in group) for m in METRICS}
        out.append(AaPair(cell=cell, runs=tuple(sorted(s.run for s in group)), spread=spread))
    return out


def noise_floor(pairs: Sequence[AaPair]) -> dict[str, float]:
    """Per metric, the largest A/A spread (empty without an A/A pair)."""
    return {m.key: max(p.spread[m.key] for p in pairs) for m in METRICS} if pairs else {}


# ---------------------------------------------------------------- checks


def run_checks(run: RunInput) -> list[Check]:
    """Each run: the session played to the end; the origin was Caddy whatever the transport."""
    d = run.run_dir
    out = [Check(name="session played to the end", subject=QOE, status=ok(_complete(d)),
                 detail="end_reason 'ended'" if _complete(d) else "the player did not reach the end (qoe.json)")]
    versions = (read_manifest(d) or {}).get("versions") or {}
    servers = sorted({str(v) for k, v in versions.items() if k.endswith(".http_server")})
    out.append(Check(name="origin is Caddy", subject="manifest versions", detail=", ".join(servers) or "not recorded",
                     status=ok(bool(servers) and all(s.startswith("caddy") for s in servers))))
    return out


@dataclass(frozen=True, kw_only=True)
class StudyReport:
    """Everything :mod:`.report` writes, computed once."""

    sessions: tuple[Session, ...]
    pairs: tuple[AaPair, ...]
    floor: dict[str, float] = field(default_factory=dict)
    verdicts: tuple[Verdict, ...] = ()
    sequential: bool = False  # the sweep ran until decided

    @property
    def excluded(self) -> list[Session]:
        return [s for s in self.sessions if s.cpu_saturated > 0]


def analyse(folder: Path, verdicts: Sequence[Verdict] = ()) -> StudyReport:
    """The sessions, A/A pairs and noise floor of the sweep in ``folder``, with its claims' ``verdicts``
    (``abr_quic.STUDY.verdicts(folder)``)."""
    sessions = load_sessions(folder)
    pairs = aa_pairs(sessions)
    return StudyReport(sessions=tuple(sessions), pairs=tuple(pairs), floor=noise_floor(pairs),
                       verdicts=tuple(verdicts), sequential=decisions.is_sequential(folder))
