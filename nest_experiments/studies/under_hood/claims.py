"""The under-the-hood paper's claims as data, judged per *session* (one run: one session of one transport).

The paper's Figs. 6-9 are CDFs of objects / segments pooled over sessions;
testing those samples as if independent overstates the evidence (the objects
of one session share its connection, its trace and its CPU). Here each run is
one session and gives one number per metric (:func:`session_metrics`): the
median and the upper quartile (q75) of its objects' or segments' response
latency and throughput, and for two parallel streams Jain's index of their
rates while both download; the claims compare TCP with QUIC on those numbers
across sessions, paired by block: within a block both transports download the
same seeded objects (``[sweep_block] "apps.objects.seed" = "repetition"``) or
play the same trace (``[sweep_block] trace seed``) with the same ABR, so the
pair differs only by the transport.

"Similar" / "not significantly different" claims are equivalence claims with a
stated margin (the paper gives none: ours is 10 % for throughput, 20 % for
latency medians, whose session-to-session spread on this host is larger); they
agree only when the CI lies inside it.

Issue 53's translations (declared after the committed evidence: post hoc): the
parallel streams' interference is about latency through a shared socket buffer
("higher response rate at one stream affects the queuing delay for the
response at the other"), not about rate shares: it is judged on the upper
quartile of the responses' latency (the responses that waited behind the
other stream's data), where Jain's index of the rates was judged before; Fig.
8b's "p < 0.05 for all the instances" is a claim per pause time (2 s and 8 s
beside the 0.5 s one); Fig. 9b's video latency alike over both transports is
declared per origin.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nest_experiments.analysis.claims import Claim, Value
from nest_experiments.analysis.stats import quantile, rank_correlation
from nest_experiments.rundir import RunFolder
from nest_experiments.studies.under_hood import metrics as uh

EQUAL_THROUGHPUT = "10%"  # "similar" / "not significant" throughput: the ratio h3 / tcp within 1/1.1 .. 1.1
EQUAL_LATENCY = "20%"  # "not significant" median latency: within 1/1.2 .. 1.2
# stated with the claims (commit 284c451) before any of the committed evidence was run
THROUGHPUT_SOURCE = "rule: 10 %, ours (the paper gives none)"
ISSUE_53 = "declared in issue 53, after this folder's data was committed"
LATENCY_SOURCE = "rule: 20 %, ours (the paper gives none; the session-to-session spread of latency medians is larger)"


def cell_of(config: Mapping[str, Any]) -> dict[str, Value]:
    """A run's cell from its resolved config alone: experiment, transport, origin, and the ABR and the trace
    (``generator-seed``; DASH) or the pause between requests (objects, s)."""
    app = uh.app_of(config)
    dash = app.get("kind") == "dash"
    cell: dict[str, Value] = {"experiment": str((config.get("experiment") or {}).get("name", "")),
                              "transport": str(app.get("transport", "tcp")),
                              "server": uh.server_of(app) if dash else str(app.get("http_server", "caddy"))}
    if dash:
        trace = ((config.get("links") or {}).get("bottleneck") or {}).get("forward", {}).get("trace") or {}
        cell["abr"] = str(app.get("abr", ""))
        cell["trace"] = f"{trace.get('generator', '')}-{trace.get('seed', '')}" if isinstance(trace, Mapping) else ""
    else:
        pause = uh.pause_of(app)
        if pause is not None:
            cell["pause_s"] = pause
    return cell


def _summary(prefix: str, samples: Sequence[uh.Sample]) -> dict[str, float]:
    out: dict[str, float] = {}
    lat = [s.latency_s * 1e3 for s in samples]
    tput = [s.throughput_bps / 1e6 for s in samples if s.throughput_bps is not None]
    if lat:
        out |= {f"{prefix}latency_median_ms": quantile(lat, 0.5), f"{prefix}latency_q75_ms": quantile(lat, 0.75)}
    if tput:
        out |= {f"{prefix}throughput_median_mbps": quantile(tput, 0.5),
                f"{prefix}throughput_q75_mbps": quantile(tput, 0.75)}
    return out


def metrics_of(samples: Sequence[uh.Sample]) -> dict[str, float | None]:
    """One session's numbers from its objects or segments (pure): latency (ms) and throughput (Mbit/s) median and
    q75 over all of them; DASH: also video's and audio's apart, ``av_gap_ms`` = audio's median latency - video's, and
    ``video_latency_tput_rho``, Spearman's rho of the video segments' response latency against their computed
    throughput (:func:`nest_experiments.analysis.stats.rank_correlation`: None under 8 segments);
    two parallel streams: ``jain`` (of the streams' mean throughputs) and ``jain_concurrent`` (while both
    download, weighted by the overlap)."""
    out: dict[str, float | None] = dict(_summary("", samples))
    streams = {s.stream for s in samples}
    if {"video", "audio"} <= streams:
        video = [s for s in samples if s.stream == "video"]
        audio = [s for s in samples if s.stream == "audio"]
        out |= _summary("video_", video) | _summary("audio_", audio)
        out["av_gap_ms"] = 1e3 * (statistics.median(s.latency_s for s in audio)
                                  - statistics.median(s.latency_s for s in video))
        timed = [s for s in video if s.throughput_bps]  # Fig. 7: does a segment's latency track its throughput?
        out["video_latency_tput_rho"] = rank_correlation([s.latency_s for s in timed],
                                                         [float(s.throughput_bps or 0) for s in timed])
        return out
    fair = uh.fairness(samples)
    for key, values in (("jain", [f.jain for f in fair]), ("jain_concurrent", [f.concurrent_jain for f in fair])):
        known = [v for v in values if v is not None]
        if known:
            out[key] = statistics.fmean(known)
    return out


def session_metrics(run: RunFolder) -> dict[str, float | None]:
    """The session's numbers (:func:`metrics_of`) from its ``objects.csv`` or ``segments.csv``; {} without."""
    samples = uh.run_samples(run.path)
    return metrics_of(samples) if samples else {}


H3, TCP = {"transport": "h3"}, {"transport": "tcp"}


def _objects() -> list[Claim]:
    where = {"experiment": uh.OBJECTS}
    return [
        Claim(id="objects_throughput_similar", statement="object downloads: the throughput is similar for HTTP/TCP "
              "and HTTP/QUIC", figure="Fig. 6a", metric="throughput_median_mbps", a=H3, b=TCP, conditions=where,
              pair_by=("block",), expect="|a - b| < margin", margin=0.10, margin_relative=True, scale="ratio",
              margin_source=THROUGHPUT_SOURCE),
        Claim(id="objects_latency_lower_h3", statement="object downloads: the response latency for HTTP/QUIC is "
              "slightly lower than HTTP/TCP", figure="Fig. 6b", metric="latency_median_ms", a=H3, b=TCP,
              conditions=where, pair_by=("block",), expect="a < b"),
    ]


def _dash(server: str) -> list[Claim]:
    where = {"experiment": uh.DASH, "server": server}
    pair = ("block", "abr", "trace")  # every trace of a block under every ABR on both transports
    who = f"[{uh.SERVERS[server]}] "
    return [
        Claim(id=f"dash_{server}_video_throughput_similar", statement=who + "DASH: the difference in video segment "
              "throughput between TCP and QUIC is not significant", figure="Fig. 7a",
              metric="video_throughput_median_mbps", a=H3, b=TCP, conditions=where, pair_by=pair,
              expect="|a - b| < margin", margin=0.10, margin_relative=True, scale="ratio",
              margin_source=THROUGHPUT_SOURCE),
        Claim(id=f"dash_{server}_latency_median_similar", statement=who + "DASH: the difference in the median "
              "response latency of DASH/QUIC and DASH/TCP is not significant", figure="Fig. 7b",
              metric="latency_median_ms", a=H3, b=TCP, conditions=where, pair_by=pair, expect="|a - b| < margin",
              margin=0.20, margin_relative=True, scale="ratio", margin_source=LATENCY_SOURCE),
        Claim(id=f"dash_{server}_latency_q75_higher_h3", statement=who + "DASH: the upper quartile of the response "
              "latency of DASH/QUIC is significantly higher than DASH/TCP's", figure="Fig. 7b",
              metric="latency_q75_ms", a=H3, b=TCP, conditions=where, pair_by=pair, expect="a > b"),
        Claim(id=f"dash_{server}_video_latency_similar", statement=who + "DASH: the distributions of the response "
              "latency for the video streams are similar for QUIC and TCP (the video segments' median latency)",
              figure="Fig. 9b", metric="video_latency_median_ms", a=H3, b=TCP, conditions=where, pair_by=pair,
              expect="|a - b| < margin", margin=0.20, margin_relative=True, scale="ratio",
              margin_source=LATENCY_SOURCE, post_hoc=ISSUE_53),
        Claim(id=f"dash_{server}_audio_latency_higher_h3", statement=who + "DASH: the audio segments experience a "
              "much higher response latency over QUIC than over TCP", figure="Fig. 9b",
              metric="audio_latency_median_ms", a=H3, b=TCP, conditions=where, pair_by=pair, expect="a > b"),
        # Fig. 7's "the response latency correlates with the computed throughput [over TCP]; however, this
        # correlation does not hold for QUIC", within each session: high latency with low throughput (rho < 0)
        Claim(id=f"dash_{server}_tcp_latency_tracks_throughput", statement=who + "DASH over TCP: the response "
              "latency correlates with the computed throughput (each session's video segments: Spearman's rho of "
              "latency against throughput below 0, a slow segment also a late one)", figure="Fig. 7 (text)",
              metric="video_latency_tput_rho", a={**TCP}, b={}, reference=0.0, conditions=where, expect="a < b",
              post_hoc=ISSUE_53),
        Claim(id=f"dash_{server}_h3_latency_tracks_less", statement=who + "DASH: this correlation does not hold "
              "for QUIC (the sessions' rho of latency against throughput higher, nearer 0 or above, over QUIC than "
              "over TCP on the same trace and ABR)", figure="Fig. 7 (text)", metric="video_latency_tput_rho",
              a=H3, b=TCP, conditions=where, pair_by=pair, expect="a > b", post_hoc=ISSUE_53),
        Claim(id=f"dash_{server}_audio_waits_behind_video_h3", statement=who + "DASH over QUIC: multiplexed on one "
              "connection, audio waits behind video (audio's latency above video's by more than over TCP's two "
              "connections)", figure="Fig. 9a", metric="av_gap_ms", a=H3, b=TCP, conditions=where, pair_by=pair,
              expect="a > b"),
    ]


def _parallel() -> list[Claim]:
    where: dict[str, Value | tuple[Value, ...]] = {"experiment": uh.PARALLEL}
    pair = ("block", "pause_s")  # the same objects per block and pause on both transports
    return [
        Claim(id="parallel_throughput_similar", statement="two parallel streams: the differences in throughput "
              "between QUIC and TCP are not significant", figure="Fig. 8a", metric="throughput_median_mbps",
              a=H3, b=TCP, conditions=where, pair_by=pair, expect="|a - b| < margin", margin=0.10,
              margin_relative=True, scale="ratio", margin_source=THROUGHPUT_SOURCE),
        Claim(id="parallel_latency_higher_h3", statement="two parallel streams: the response latency with QUIC is "
              "significantly higher than TCP (p < 0.05 for all pause times)", figure="Fig. 8b",
              metric="latency_median_ms", a=H3, b=TCP, conditions=where, pair_by=pair, expect="a > b"),
        Claim(id="parallel_latency_higher_h3_short_pause", statement="two parallel streams: QUIC's higher latency "
              "is most prominent at the shortest pause (0.5 s)", figure="Fig. 8b", metric="latency_median_ms",
              a=H3, b=TCP, conditions={**where, "pause_s": 0.5}, pair_by=("block",), expect="a > b"),
        # "more prominent when the pause time is less": the interaction, QUIC's excess latency over TCP at the
        # shortest pause against the same excess at the longest, per block
        Claim(id="parallel_latency_gap_larger_short_pause", statement="two parallel streams: the difference in "
              "response latency (QUIC above TCP) more prominent when the pause time is less: larger at 0.5 s than "
              "at 8 s", figure="Fig. 8b", metric="latency_median_ms", a=H3, b=TCP,
              conditions={**where, "pause_s": 0.5}, versus={"pause_s": 8.0}, pair_by=("block",), expect="a > b",
              post_hoc=ISSUE_53),
        *(Claim(id=f"parallel_latency_higher_h3_pause_{pause:g}s", statement="two parallel streams: the response "
                f"latency with QUIC significantly higher than TCP at every pause time (p < 0.05 for all the "
                f"instances): at {pause:g} s", figure="Fig. 8b", metric="latency_median_ms", a=H3, b=TCP,
                conditions={**where, "pause_s": pause}, pair_by=("block",), expect="a > b", post_hoc=ISSUE_53)
          for pause in (2.0, 8.0)),
        Claim(id="parallel_streams_interfere_h3", statement="two parallel streams: on one QUIC socket buffer the "
              "streams' responses interfere, a response waiting behind the other stream's (the responses' upper "
              "quartile of latency higher over QUIC; over TCP each stream has its own socket buffer)",
              figure="Fig. 8 (text)", metric="latency_q75_ms", a=H3, b=TCP, conditions=where, pair_by=pair,
              expect="a > b", post_hoc=ISSUE_53 + "; until then judged as Jain's index of the streams' rates"),
    ]


PAPER_CLAIMS: tuple[Claim, ...] = (*_objects(), *_dash("caddy"), *_dash("nest"), *_parallel())
