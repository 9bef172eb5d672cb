"""The ABR-over-QUIC-vs-TCP study (``abr-over-quic-vs-tcp.txt``): ABR x transport, Figs. 2-5 and section IV.

Reads run folders only (``experiments/abr_quic_tcp.toml``'s sweep). One
*session* per run: the DASH app's ABR and transport (``config.toml``), its
condition (the other swept keys, e.g. the trace: ``fcc-1``) and four
numbers from ``segments.csv``:

- ``bitrate``: mean declared bitrate of the video segments (kbit/s; Fig. 2);
- ``variation``: mean ``|R(n+1) - R(n)|`` over consecutive video segments,
  zero changes included (kbit/s; Fig. 3). The letter does not define its
  "average playback quality variation"; this is the smoothness term of its
  eq. (1) per chunk pair (Pensieve's "average quality variation"). Not the
  NeST report's switch count, which ignores the size of a change;
- ``rebuffer``: total stall time of the session, both streams (s; Fig. 4);
- ``qoe``: eq. (1) with linear ``q(R) = R`` in Mbit/s over the video
  segments, ``mu`` = 4.3, the session's stall time (Fig. 5;
  :func:`nest_experiments.dash.qoe.qoe_eq1`).

Sessions whose run had a CPU-saturated 1 s window (manifest
``cpu_saturated_windows``) are left out of the statistics and listed: the
emulation, not the transport, may have shaped them. Sessions that did not
play to the end (``qoe.json`` ``end_reason``) are kept (their stalls
happened) and flagged. Only each point's first repetition enters the U tests
(every condition counts once per cell); a point that ran more than once is an
A/A pair, and its spread (max - min over its repetitions, the largest over
all pairs) is the metric's *noise floor*: a TCP-vs-h3 difference (of the
medians) smaller than it is marked.

Per ABR and metric: two-sided Mann-Whitney U (TCP vs h3) and one-sided
"TCP better" (higher bitrate and QoE, lower variation and rebuffer) and "h3
better", with at least :data:`~nest_experiments.analysis.stats.MIN_REPS` sessions per
transport (else "too few"). The claim table checks every claim of section IV.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nest_experiments.analysis.markdown import number as fmt
from nest_experiments.analysis.report import Check, Row, RunInput, Sweep, flatten, ok
from nest_experiments.analysis.stats import MIN_REPS, fmt_p, mann_whitney
from nest_experiments.dash import qoe
from nest_experiments.rundir import QOE, SEGMENTS, RunFolder, read_manifest, run_dirs
from nest_experiments.studies.base import Claim

EXPERIMENT = "abr_quic_tcp"
TRANSPORTS = ("tcp", "h3")  # the letter's DASH/TCP and DASH/QUIC
ALPHA = 0.05
REPORT_FILE = "abr_quic.md"


@dataclass(frozen=True, kw_only=True)
class SessionMetric:
    key: str
    label: str
    unit: str
    higher_better: bool
    figure: int  # the letter's figure


METRICS = (
    SessionMetric(key="bitrate", label="average video bitrate", unit="kbit/s", higher_better=True, figure=2),
    SessionMetric(key="variation", label="quality variation", unit="kbit/s", higher_better=False, figure=3),
    SessionMetric(key="rebuffer", label="rebuffer time", unit="s", higher_better=False, figure=4),
    SessionMetric(key="qoe", label="QoE (eq. 1)", unit="", higher_better=True, figure=5),
)
BY_KEY = {m.key: m for m in METRICS}
# the letter's ABRs -> our registry (Pensieve: our learned ABR, nest_experiments/dash/learned; None: not in it)
PAPER_ABRS: tuple[tuple[str, str | None], ...] = (
    ("BOLA", "bola"), ("BB", "bba"), ("MPC-Fast", "mpc_fast"), ("MPC-Robust", "mpc_robust"), ("Pensieve", "pensieve"))
ABR_ORDER = ("bba", "bola", "mpc_fast", "mpc_robust", "throughput", "dynamic", "pensieve")


# ---------------------------------------------------------------- sessions


@dataclass(frozen=True, kw_only=True)
class Session:
    run: str
    path: Path
    abr: str
    transport: str
    condition: str  # the other swept keys' values, e.g. "fcc-1"
    repetition: int
    metrics: dict[str, float]
    complete: bool  # played to the end
    cpu_saturated: int  # 1 s windows

    @property
    def cell(self) -> tuple[str, str, str]:
        return (self.abr, self.transport, self.condition)


def session_metrics(rows: Sequence[Any]) -> dict[str, float]:
    """The four numbers of one session from its ``segments.csv`` rows (:class:`~nest_experiments.dash.records.SegmentRow`)."""
    video = qoe.by_stream(rows).get("video", [])
    rates = [float(r.bitrate_bps) for r in video if r.bitrate_bps is not None]
    if not rates:
        return {}
    stall = sum(r.stall_s for r in rows)
    changes = [abs(b - a) for a, b in zip(rates, rates[1:], strict=False)]
    return {"bitrate": statistics.fmean(rates) / 1e3, "variation": statistics.fmean(changes) / 1e3 if changes else 0.0,
            "rebuffer": stall, "qoe": qoe.qoe_eq1(rates, stall)}


def _dash_app(run_dir: Path) -> dict[str, Any]:
    apps = RunFolder(run_dir).config().get("apps", {})
    return next((a for a in apps.values() if isinstance(a, dict) and a.get("kind") == "dash"), {})


def _condition(point: dict[str, str]) -> str:
    keys = sorted(k for k in point if not k.endswith((".abr", ".transport")))
    return "-".join(point[k] for k in keys) or "-"


def _complete(run_dir: Path) -> bool:
    docs = RunFolder(run_dir).qoe() or {}
    return bool(docs) and all(isinstance(d, dict) and d.get("end_reason") == "ended" for d in docs.values())


def load_session(run_dir: Path) -> Session | None:
    """The session of a completed run folder (None: not completed, or no video segment)."""
    m = read_manifest(run_dir) or {}
    if m.get("status") != "completed" or not RunFolder(run_dir).has(SEGMENTS):
        return None
    metrics = session_metrics(RunFolder(run_dir).segments())
    if not metrics:
        return None
    app = _dash_app(run_dir)
    return Session(run=run_dir.name, path=run_dir, abr=str(app.get("abr", "grate")),
                   transport=str(app.get("transport", "tcp")), condition=_condition(flatten(m.get("point") or {})),
                   repetition=int(m.get("repetition", 1) or 1), metrics=metrics, complete=_complete(run_dir),
                   cpu_saturated=int(m.get("cpu_saturated_windows") or 0))


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


# ---------------------------------------------------------------- U tests


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """TCP vs h3 for one ABR and metric."""

    abr: str
    metric: SessionMetric
    tcp: tuple[float, ...]
    h3: tuple[float, ...]
    p_two: float | None  # None: fewer than MIN_REPS sessions on a side
    p_tcp_better: float | None
    p_h3_better: float | None
    noise: float | None  # the metric's A/A floor
    within_noise_pairs: int = 0  # conditions where |TCP - h3| < the floor
    pairs: int = 0  # conditions with both transports

    @property
    def diff(self) -> float | None:
        """median(TCP) - median(h3)."""
        if not self.tcp or not self.h3:
            return None
        return statistics.median(self.tcp) - statistics.median(self.h3)

    @property
    def within_noise(self) -> bool | None:
        if self.diff is None or self.noise is None:
            return None
        return abs(self.diff) < self.noise


def compare(sessions: Sequence[Session], abr: str, metric: SessionMetric,
            floor: dict[str, float] | None = None) -> Comparison:
    groups = {t: {s.condition: s.metrics[metric.key] for s in sessions if (s.abr, s.transport) == (abr, t)}
              for t in TRANSPORTS}
    tcp, h3 = tuple(groups["tcp"].values()), tuple(groups["h3"].values())
    better, worse = ("greater", "less") if metric.higher_better else ("less", "greater")
    noise = (floor or {}).get(metric.key)
    common = sorted(set(groups["tcp"]) & set(groups["h3"]))
    close = sum(1 for c in common if noise is not None and abs(groups["tcp"][c] - groups["h3"][c]) < noise)
    return Comparison(abr=abr, metric=metric, tcp=tcp, h3=h3, p_two=mann_whitney(tcp, h3, "two-sided"),
                      p_tcp_better=mann_whitney(tcp, h3, better), p_h3_better=mann_whitney(tcp, h3, worse),
                      noise=noise, within_noise_pairs=close, pairs=len(common))


def comparisons(sessions: Sequence[Session], floor: dict[str, float] | None = None) -> list[Comparison]:
    """Every ABR x metric over the usable sessions."""
    chosen = usable(sessions)
    return [compare(chosen, abr, m, floor) for abr in abrs(chosen) for m in METRICS]


# ---------------------------------------------------------------- the paper's claims


@dataclass(frozen=True, kw_only=True)
class PaperClaim:
    """One claim of section IV for one ABR: ``expect`` is ``tcp_better``, ``h3_better`` or ``insignificant``."""

    metric: str
    paper_abr: str
    abr: str | None  # ours; None: not in the registry
    expect: str
    text: str


def _claims_of(metric: str, expect: dict[str, str], texts: dict[str, str]) -> list[PaperClaim]:
    names = dict(PAPER_ABRS)
    return [PaperClaim(metric=metric, paper_abr=p, abr=names[p], expect=expect[p], text=texts[expect[p]])
            for p, _ in PAPER_ABRS if p in expect]


PAPER_CLAIMS: tuple[PaperClaim, ...] = tuple(
    _claims_of("bitrate", dict.fromkeys(("BOLA", "BB", "MPC-Fast", "MPC-Robust", "Pensieve"), "tcp_better"),
               {"tcp_better": "bitrate TCP > QUIC, p < 0.05 (IV-A, Fig. 2)"})
    + _claims_of("variation", {"BOLA": "insignificant", "MPC-Robust": "insignificant", "BB": "tcp_better",
                               "MPC-Fast": "h3_better", "Pensieve": "h3_better"},
                 {"insignificant": "variation TCP vs QUIC insignificant (IV-B, Fig. 3)",
                  "tcp_better": "variation more with QUIC, p < 0.05 (IV-B, Fig. 3)",
                  "h3_better": "variation less with QUIC, p < 0.05 (IV-B, Fig. 3)"})
    + _claims_of("rebuffer", {"BOLA": "tcp_better", "BB": "tcp_better", "MPC-Fast": "tcp_better",
                              "MPC-Robust": "insignificant", "Pensieve": "insignificant"},
                 {"tcp_better": "rebuffering more with QUIC, p < 0.05 (IV-C, Fig. 4)",
                  "insignificant": "rebuffering TCP vs QUIC insignificant (IV-C, Fig. 4)"})
    + _claims_of("qoe", {"BOLA": "tcp_better", "BB": "tcp_better", "MPC-Fast": "tcp_better",
                         "Pensieve": "tcp_better", "MPC-Robust": "insignificant"},
                 {"tcp_better": "QoE TCP better, p < 0.05 (IV-D, Fig. 5)",
                  "insignificant": "QoE TCP vs QUIC insignificant (IV-D, Fig. 5)"}))


def comparison_text(c: Comparison) -> str:
    unit = f" {c.metric.unit}" if c.metric.unit else ""
    tcp, h3 = (fmt(statistics.median(v)) + unit if v else "no session" for v in (c.tcp, c.h3))
    medians = f"TCP {tcp} vs h3 {h3} (medians, n={len(c.tcp)}/{len(c.h3)})"
    ps = f"p two-sided {fmt_p(c.p_two)}, TCP better {fmt_p(c.p_tcp_better)}, QUIC better {fmt_p(c.p_h3_better)}"
    noise = ""
    if c.within_noise is not None:
        noise = f"; |difference| {fmt(abs(c.diff or 0.0))} {'<' if c.within_noise else '>='} A/A noise {fmt(c.noise)}"
    return f"{medians}; {ps}{noise}"


def judge(claim: PaperClaim, c: Comparison | None) -> Claim:
    if claim.abr is None:
        return Claim(claim=f"{claim.paper_abr}: {claim.text}", ours="not run (not in the ABR registry)",
                     agree="not run")
    if c is None or not (c.tcp or c.h3):
        return Claim(claim=f"{claim.paper_abr}: {claim.text}", ours=f"no {claim.abr} session in this sweep",
                     agree="not run")
    ours = comparison_text(c)
    if c.p_two is None:
        return Claim(claim=f"{claim.paper_abr}: {claim.text}", ours=ours,
                     agree=f"too few sessions (n={len(c.tcp)}/{len(c.h3)}; >= {MIN_REPS} per transport needed)")
    if claim.expect == "insignificant":
        agree = c.p_two >= ALPHA
    else:
        p = c.p_tcp_better if claim.expect == "tcp_better" else c.p_h3_better
        agree = p is not None and p < ALPHA
    verdict = "yes" if agree else "no"
    if agree and claim.expect != "insignificant" and c.within_noise:
        verdict = "yes, but the difference is within the A/A noise floor"
    return Claim(claim=f"{claim.paper_abr}: {claim.text}", ours=ours, agree=verdict)


def claim_table(sessions: Sequence[Session]) -> list[Claim]:
    floor = noise_floor(aa_pairs(sessions))
    found = {(c.abr, c.metric.key): c for c in comparisons(sessions, floor)}
    return [judge(pc, found.get((pc.abr or "", pc.metric))) for pc in PAPER_CLAIMS]


def claims(sweep: Sweep, rows: Sequence[Row]) -> list[Claim]:
    """The study's claim table for the shared report (``report.md``)."""
    return claim_table(load_sessions(sweep.folder))


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
    comparisons: tuple[Comparison, ...]
    pairs: tuple[AaPair, ...]
    floor: dict[str, float] = field(default_factory=dict)
    claims: tuple[Claim, ...] = ()

    @property
    def excluded(self) -> list[Session]:
        return [s for s in self.sessions if s.cpu_saturated > 0]


def analyse(folder: Path) -> StudyReport:
    sessions = load_sessions(folder)
    pairs = aa_pairs(sessions)
    floor = noise_floor(pairs)
    return StudyReport(sessions=tuple(sessions), comparisons=tuple(comparisons(sessions, floor)), pairs=tuple(pairs),
                       floor=floor, claims=tuple(claim_table(sessions)))
