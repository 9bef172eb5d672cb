"""The QUIC/TCP connection-racing study (Chaudhary et al., docs/papers.md): sessions and the paper's session shares.

Reads run folders only (``experiments/racing_patterns.toml``,
``racing_firewall.toml``, and ``racing_chromium.toml`` /
``racing_chromium_queue.toml``: our ``chromium`` policy beside Chromium,
compared in :mod:`.agreement`). One *session* per run: the DASH app's racing
policy (``config.toml``), its *condition* (the bandwidth pattern: ``dh``,
``dl``, ``dvl``, ``real`` for a mobility trace or trace file, or the fixed
rate; ``+firewall`` when a ``[firewalls]`` rule limits (polices) or shapes,
``+blocked`` when it drops) and, from ``segments.csv`` and ``racing.csv``
(:mod:`.metrics`):

- ``rqvst``: the share of TCP bytes (Section III; Fig. 14);
- ``bitrate``, ``variation``: mean video bitrate and mean |change| between
  consecutive video segments (kbit/s; the paper's average bitrate and
  average bitrate variation), ``stall``: the session's stall time (s);
- ``switches``: how often the protocol carrying the requests changed (the
  policy's ``won`` events); ``proto_switches``: how often the protocol
  changed from one segment to the next, ``quic_segments``: the share of
  segments over QUIC (the segment timeline: the same for our player and the
  browser, whose ``won`` events are Chromium's own);
- the maximum cross-correlation of RQvsT(t) with B(t) and with S(t) over
  30 s windows, and its lag (Section VII, Fig. 9);
- the median RTT of the RTT probes per protocol (the ``dynamic`` policy's,
  Fig. 19a) and the policy's last decision.

The paper's comparisons of policies (Q_ENB vs Q_DIS, the modified vs the
original browser, dynamic vs the original; Fig. 14's ordering of the
patterns; Fig. 19a's probe RTTs) are claims judged per session pair in
:mod:`.claims`. What stays here (:func:`shares_table`) are the shares of one
policy's sessions the paper states (Fig. 14: RQvsT >= 40 %; Fig. 9: the
correlations and their lags): a description, with "too few" below
:data:`~nest_experiments.analysis.stats.MIN_REPS` sessions.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nest_experiments.analysis.markdown import number as fmt
from nest_experiments.analysis.report import Check, RunInput, ok
from nest_experiments.analysis.results import stall_at_end
from nest_experiments.analysis.stats import MIN_REPS
from nest_experiments.errors import ConfigError
from nest_experiments.rundir import QOE, RACING, SEGMENTS, RunFolder, read_manifest, run_dirs
from nest_experiments.rundir.rows import RacingRow
from nest_experiments.studies.base import Claim
from nest_experiments.studies.racing import metrics as rm
from nest_experiments.units import parse_time

EXPERIMENTS = ("racing_patterns", "racing_firewall", "racing_chromium", "racing_chromium_queue", "racing_chromium_long",
               "racing_firefox")
REPORT_FILE = "racing.md"
BROWSER = "chromium_browser"  # dash.js in Chromium over `race`: the browser's racing, from its NetLog
FIREFOX_BROWSER = "firefox_browser"  # dash.js in Firefox ESR over `race`: the protocols from Resource Timing
POLICY_ORDER = ("chromium", BROWSER, "firefox", FIREFOX_BROWSER, "quic_only", "dynamic", "tcp_only")
PATTERNS = ("dh", "dl", "dvl", "real")  # Fig. 14's scenarios (Real: the mobility traces)
PATTERN_OF_GENERATOR = {"dh": "dh", "dl": "dl", "dvl": "dvl", "hsdpa": "real", "fcc": "real"}
POOR = "dvl"  # the paper's "poor network"
RACING_SHARE = 0.4  # Fig. 14's "40% or more bytes are transferred over TCP"
MINIMAL_SHARE = 0.1  # "minimal presence of TCP traffic" (our reading)
CORRELATION = 0.55  # Fig. 9a: "about 50% of videos positively correlate with a 0.55 or higher coefficient"
MAX_LAG_S = 250.0  # Fig. 9b: "the lag values ... are distributed within 250sec"


@dataclass(frozen=True, kw_only=True)
class Session:
    run: str
    path: Path
    policy: str
    condition: str  # e.g. "dvl", "2mbit+firewall"
    pattern: str  # dh | dl | dvl | real | rate (a fixed rate)
    firewall: str  # "" | "firewall" (rate-limited) | "blocked"
    metrics: dict[str, float]
    series: dict[str, list[float]]  # rqvst, B, S per 30 s window
    probe_rtt: dict[str, float]  # protocol -> median probe RTT (s)
    decision: str  # the dynamic policy's last decision ("" without one)
    experiment: str = ""  # the sweep's ``[experiment] name``
    block: int = 1  # the repetition (the sweep's randomized complete block)
    timeline: tuple[tuple[str, int, str], ...] = ()  # (stream, index, quic | tcp) per segment (metrics.protocol_timeline)


def condition_of(config: dict[str, Any]) -> tuple[str, str, str]:
    """``(condition, pattern, firewall)`` of a run's resolved config."""
    bottleneck = (config.get("links") or {}).get("bottleneck") or {}
    forward = bottleneck.get("forward") or ({"rate": bottleneck["rate"]} if "rate" in bottleneck else {})
    trace = forward.get("trace")
    if isinstance(trace, dict) and "generator" in trace:
        pattern = PATTERN_OF_GENERATOR.get(str(trace["generator"]), str(trace["generator"]))
        label = pattern
    elif trace is not None:
        pattern = label = "real"
    else:
        pattern, label = "rate", str(forward.get("rate", "unshaped"))
    actions = {str(f.get("action", "limit")) for f in (config.get("firewalls") or {}).values() if isinstance(f, dict)}
    firewall = "blocked" if "drop" in actions else "firewall" if actions & {"limit", "shape"} else ""
    return (f"{label}+{firewall}" if firewall else label), pattern, firewall


def policy_of(config: dict[str, Any]) -> str | None:
    apps = config.get("apps") or {}
    app = next((a for a in apps.values() if isinstance(a, dict) and a.get("kind") == "dash"), None)
    if app is None or app.get("transport") != "race":
        return None
    if app.get("player") == "dashjs":
        return BROWSER  # Chromium's own racing: the reference for our `chromium`
    if app.get("player") == "firefox":
        return FIREFOX_BROWSER  # Firefox's own racing: the reference for our `firefox`
    return str(app.get("racing", "chromium"))


def read_transfers(run_dir: Path) -> list[rm.Transfer]:
    return [rm.Transfer(stream=r.stream, index=r.index, level=r.level or 0, bytes=r.bytes,
                        t_first_byte=r.t_first_byte or 0.0, t_last_byte=r.t_last_byte or 0.0, stall_s=r.stall_s,
                        transport=r.transport, bitrate_bps=float(r.bitrate_bps or 0))
            for r in RunFolder(run_dir).segments()]


def _duration(config: dict[str, Any]) -> float | None:
    try:
        return parse_time("experiment.duration", (config.get("experiment") or {}).get("duration"))
    except (ConfigError, TypeError, ValueError):
        return None


def _segment_s(run_dir: Path) -> float:
    from nest_experiments.dash.content import media

    app = next((a for a in (RunFolder(run_dir).config().get("apps") or {}).values()
                if isinstance(a, dict) and a.get("kind") == "dash"), {})
    try:
        return media.load_ladder(str(app.get("ladder", "youtube_racing"))).segment_duration_s
    except Exception:  # an unknown ladder in an old folder: the study's default
        return 5.0


def session_numbers(transfers: Sequence[rm.Transfer], rows: Sequence[RacingRow], *, segment_s: float,
                    t_end: float, open_stall: tuple[float, float] | None = None,
                    ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """A session's numbers and window series from its segments and racing events (pure); ``open_stall``:
    (start, seconds) of the stall the session stopped in (``qoe.json``'s ``stall_at_end``)."""
    video = sorted((t for t in transfers if t.stream == "video"), key=lambda t: t.index)
    bitrates = [v.bitrate_bps / 1e3 for v in video]
    series = {"rqvst": rm.rqvst_series(transfers, t_end), "B": rm.quality_drop_series(video, segment_s, t_end),
              "S": rm.stall_series(transfers, t_end, open_stall=open_stall)}
    metrics: dict[str, float] = {"stall": sum(t.stall_s for t in transfers) + (open_stall[1] if open_stall else 0.0),
                                 "switches": float(rm.switches([r.protocol for r in rows if r.event == "won"]))}
    timeline = rm.protocol_timeline(transfers)
    metrics["proto_switches"] = float(rm.switches([p for _, _, p in timeline]))
    for key, value in (("rqvst", rm.rqvst(transfers)), ("bitrate", rm.mean_bitrate(bitrates)),
                       ("variation", rm.mean_variation(bitrates)), ("quic_segments", rm.quic_share(transfers))):
        if value is not None:
            metrics[key] = value
    for name in ("B", "S"):
        best = rm.max_cross_correlation(series["rqvst"], series[name])
        if best is not None:
            metrics[f"corr_{name}"], metrics[f"lag_{name}"] = best
    return metrics, series


def load_session(run_dir: Path) -> Session | None:
    """The session of a completed ``race`` run (None: another transport, not completed, no segment)."""
    m = read_manifest(run_dir) or {}
    config = RunFolder(run_dir).config()
    policy = policy_of(config)
    if policy is None or m.get("status") != "completed" or not RunFolder(run_dir).has(SEGMENTS):
        return None
    transfers = read_transfers(run_dir)
    if not transfers:
        return None
    rows = RunFolder(run_dir).racing()
    duration = _duration(config) or max(t.t_last_byte for t in transfers)
    app = next((name for name, a in (config.get("apps") or {}).items() if isinstance(a, dict) and a.get("kind") == "dash"), "")
    end = stall_at_end(run_dir, app)
    metrics, series = session_numbers(transfers, rows, segment_s=_segment_s(run_dir), t_end=duration,
                                      open_stall=None if end is None else (end.t_start, end.duration_s))
    condition, pattern, firewall = condition_of(config)
    probes = {p: statistics.median(v) for p in ("quic", "tcp")
              if (v := [r.value for r in rows if r.event == "probe_rtt" and r.protocol == p and r.value is not None])}
    decisions = [r.detail for r in rows if r.event == "decision"]
    return Session(run=run_dir.name, path=run_dir, policy=policy, condition=condition, pattern=pattern,
                   firewall=firewall, metrics=metrics, series=series, probe_rtt=probes,
                   decision=decisions[-1] if decisions else "",
                   experiment=str((config.get("experiment") or {}).get("name", "")),
                   block=int(m.get("repetition") or 1), timeline=tuple(rm.protocol_timeline(transfers)))


def load_sessions(folder: Path) -> list[Session]:
    return [s for s in map(load_session, run_dirs(folder)) if s is not None]


def policies(sessions: Sequence[Session]) -> list[str]:
    rank = {p: i for i, p in enumerate(POLICY_ORDER)}
    return sorted({s.policy for s in sessions}, key=lambda p: (rank.get(p, len(rank)), p))


def conditions(sessions: Sequence[Session]) -> list[str]:
    rank = {p: i for i, p in enumerate(PATTERNS)}
    return sorted({s.condition for s in sessions}, key=lambda c: (rank.get(c.split("+")[0], len(rank)), c))


# ---------------------------------------------------------------- the paper's session shares (a description)


def _share_text(values: Sequence[float], threshold: float, what: str) -> str:
    share = rm.share_at_least(values, threshold)
    return "no session" if share is None else f"{share:.0%} of {len(values)} sessions {what}"


def _enough(n: int) -> str | None:
    return None if n >= MIN_REPS else f"too few sessions (n={n}; >= {MIN_REPS} needed)"


def fig14_claims(sessions: Sequence[Session]) -> list[Claim]:
    enb = [s for s in sessions if s.policy == "chromium" and not s.firewall]
    rq = {p: [s.metrics["rqvst"] for s in enb if s.pattern == p and "rqvst" in s.metrics] for p in PATTERNS}
    out = []
    dh = rq["dh"]
    minimal = [v for v in dh if v < MINIMAL_SHARE]
    ours = f"{len(minimal)} of {len(dh)} DH sessions with RQvsT < {MINIMAL_SHARE:.0%}" if dh else "no DH session"
    agree = _enough(len(dh)) or ("yes" if len(minimal) >= 0.8 * len(dh) else "no")
    out.append(Claim(claim="Fig. 14: DH: minimal TCP traffic for 80% of the Q_ENB sessions", ours=ours,
                     agree=agree if dh else "not run"))
    paper = {"dl": "20%", "dvl": "40%", "real": "70%"}
    dh_share = rm.share_at_least(dh, RACING_SHARE)
    for p in ("dl", "dvl", "real"):
        share = rm.share_at_least(rq[p], RACING_SHARE)
        text = _share_text(rq[p], RACING_SHARE, f"with RQvsT >= {RACING_SHARE:.0%}")
        if share is None or dh_share is None:
            agree = "not run"
        else:
            agree = _enough(len(rq[p])) or ("yes" if share > dh_share else "no")
            text += f" (DH: {dh_share:.0%})"
        out.append(Claim(claim=f"Fig. 14: {p.upper()}: >= 40% of the bytes over TCP in {paper[p]} of the sessions "
                               "(more racing than DH)", ours=text, agree=agree))
    return out


def fig9_claims(sessions: Sequence[Session]) -> list[Claim]:
    enb = [s for s in sessions if s.policy == "chromium"]
    out = []
    for name, what in (("B", "quality drop B(t)"), ("S", "stall S(t)")):
        corr = [s.metrics[f"corr_{name}"] for s in enb if f"corr_{name}" in s.metrics]
        lags = [abs(s.metrics[f"lag_{name}"]) for s in enb if f"lag_{name}" in s.metrics]
        share = rm.share_at_least(corr, CORRELATION)
        ours = (f"{share:.0%} of {len(corr)} sessions with a coefficient >= {CORRELATION} "
                f"(median {fmt(statistics.median(corr))}); {len(enb) - len(corr)} without a defined correlation "
                "(a constant series)") if corr else f"no defined correlation in {len(enb)} Q_ENB session(s)"
        agree = "not run" if not corr else _enough(len(corr)) or ("yes" if (share or 0) >= 0.4 else "no")
        out.append(Claim(claim=f"Fig. 9a: RQvsT(t) vs {what}: about 50% of the sessions correlate positively with "
                               f">= {CORRELATION}", ours=ours, agree=agree))
        lag_ours = f"max |lag| {fmt(max(lags))} s over {len(lags)} sessions" if lags else "no lag"
        lag_agree = "not run" if not lags else _enough(len(lags)) or ("yes" if max(lags) <= MAX_LAG_S else "no")
        out.append(Claim(claim=f"Fig. 9b: the lag of the maximum ({what}) is within {MAX_LAG_S:g} s", ours=lag_ours,
                         agree=lag_agree))
    return out


def shares_table(sessions: Sequence[Session]) -> list[Claim]:
    """The shares of sessions the paper states (Figs. 14 and 9), on the sweep's sessions."""
    return fig14_claims(sessions) + fig9_claims(sessions)


# ---------------------------------------------------------------- checks and the study


def run_checks(run: RunInput) -> list[Check]:
    """Each run: the player raced (``racing.csv``) and played a segment; its qoe.json says how it ended."""
    d = RunFolder(run.run_dir)
    rows = d.racing()
    try:
        ended = {a: doc.get("end_reason") for a, doc in (d.qoe() or {}).items()}
    except AttributeError:
        ended = {}
    return [Check(name="racing events logged", subject=RACING, status=ok(bool(rows)),
                  detail=f"{len(rows)} events" if rows else f"no {RACING} rows"),
            Check(name="session ended", subject=QOE, status=ok(bool(ended)),
                  detail=", ".join(f"{a}: {r}" for a, r in ended.items()) or f"no {QOE}")]
