"""The NeST paper's findings (section IV, Figs. 2-13) as claims: FQ-PIE (a) vs PIE (b), paired within a block.

Cells (:func:`cell_of`, from a run's resolved config): ``aqm``, the kind of
the AQM qdisc on the bottlenecks (``pie`` | ``fq_pie``; both bottlenecks
carry the same one in the paper's design, otherwise the kinds joined by
``/``), and ``target``, its target delay (``5ms``).

Design: the default is randomized complete blocks (each repetition holds
every AQM x target point once, :mod:`nest_experiments.config.sweep`). A PIE session
and an FQ-PIE session of the same target in the same block form a pair
(``strata = ("target",)``, ``pair_by = ("block",)``: pairs never cross
targets), and the pairs of all targets are pooled (Wilcoxon signed-rank on
every pair's difference): the paper states each finding for all three
targets. No per-target claims: the default has 2 blocks, i.e. 2 pairs per
target, which no test at alpha 0.05 can decide (the pooled claim has 6);
``--paper``'s 25 blocks would allow them, but the paper states no
target-specific finding.

Metrics per session (:func:`session_metrics`): the shared report's per-run
numbers (:func:`nest_experiments.analysis.results.run_metrics`: the DASH
metrics of ``segments.csv`` via :mod:`nest_experiments.dash.core.qoe`, the
steady-window queue-delay means), under the report's keys (``video.switches``,
``audio.app_rtt_ms`` ...: each key ends in its unit, kbit/s, s, ms as in the report), plus per
bottleneck:

- ``qdelay_ms.<link>``: the mean queue delay (ms) measured from the captures, PIE's
  way (``qdelay.csv``, method ``capture-pie-style``: what PIE's own delay
  statistic reads, sampled like the kernel's), for PIE and FQ-PIE alike: one
  instrument on both arms (the kernel reports no delay for FQ-PIE; the
  paper patched FQ-PIE to average its per-queue PIE delays, which is the
  same quantity);
- ``qdelay_kernel_ms.<link>``: PIE's delay (ms) as the kernel reports it
  (``qdisc.csv``; FQ-PIE: none);
- ``pie_delay_x_target.<link>``: that delay over the run's target (PIE runs
  only): the one number "PIE holds its target" is judged on, pooled over the
  targets.

The queue-delay claims are declared on both bottlenecks: Fig. 13 shows
r2 -> r4 (bn2); Fig. 12, by the paper's pairing of its two interfaces,
r1 -> r3 (bn1).

"PIE holds its target" (Figs. 12-13: "very effective in regulating the
queue delay at the target value in all the scenarios") is a one-sample
claim per bottleneck on every scenario, not the targets pooled: per block,
the target at which PIE's kernel-reported delay over its target is farthest
from 1 (``worst_over``), against 1, ratio scale, equivalent within a factor
1.5 either way
(margin 50 %: the paper reads its figures by eye and gives no tolerance;
RFC 8033's PIE steers the mean delay toward the target, and the reference
probe of DESIGN §2b in this VM measured 0.76-0.85x at 5 and 15 ms, inside
it; a PIE that ran at twice its target would contradict it). Its testable
consequence, PIE's delay at a 15 ms target above its delay at 5 ms, is
kept as a paired claim. The per-run sanity check (PIE within 0.5-2x of its
target) stays in the report.

Every directional claim states the smallest difference it means
(``margin``, stated in session 17 before the re-run with today's code; the
committed ``evidence/nest_paper`` is older): it agrees when the difference
is significant in the claimed direction, and contradicts when its CI lies
below the margin in that direction (:mod:`nest_experiments.analysis.sequential`).
Without one, a claim whose true effect is near zero never decides. The
margins (:data:`MARGINS`):

- 10 % of PIE's median for "higher / lower / more / fewer" (bitrate, buffer,
  RTT, jitter): the spread of identical sessions that the ABR study takes
  for the same purpose (its module docstring);
- 1 switch per session for the video's bitrate switches (a count: 10 % of a
  median of 0-3 switches is no margin);
- 50 % (FQ-PIE above 1.5x PIE) for "almost twice" the throughput and for
  FQ-PIE's queue delay above PIE's ("10-20 ms" against PIE's 5 ms target):
  the statements mean a large factor, and a difference below 1.5x is not
  what they say;
- 50 % for PIE's delay at 15 ms above its delay at 5 ms (the targets are 3x
  apart).

Issue 53's translations, which keep the sentences' conditions (declared after
the committed evidence: post hoc): the video RTT "only slightly higher" at
twice the bitrate (600 vs 300 kbit/s) is a statement about the RTT at a given
bitrate (RTT grows with the chunks' size, Fig. 6), so it is judged per unit of
bitrate (``per``): FQ-PIE's below PIE's (the paper's numbers: 2.8 vs 5.3 ms per
kbit/s); with equal bitrates the unconditional "RTT higher" tested nothing the
paper said. FQ-PIE's delay "oscillates from 10ms to 20ms" at a 5 ms target is
a one-sample claim at that target: its mean within 15 +- 5 ms (the paper's
words give the margin).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd

from nest_experiments.analysis.claims import Claim, Value
from nest_experiments.analysis.qdelay import METHOD_PIE_STYLE
from nest_experiments.analysis.results import NOT_AQM, run_metrics
from nest_experiments.analysis.sequential import EQUIVALENT, GREATER, LESS
from nest_experiments.analysis.stats import rank_correlation
from nest_experiments.errors import ConfigError
from nest_experiments.rundir import SEGMENTS, RunFolder
from nest_experiments.units import parse_time

BOTTLENECKS = ("bn1", "bn2")  # r1 -> r3 (Fig. 12), r2 -> r4 (Fig. 13)
MEASURED = (METHOD_PIE_STYLE, "capture")  # "capture": qdelay.csv files from before the methods had names
FQ_PIE, PIE = {"aqm": "fq_pie"}, {"aqm": "pie"}
STRATA, PAIR_BY = ("target",), ("block",)  # pairs: same target, same block


# ---------------------------------------------------------------- cells


def _qdiscs(config: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every qdisc table of the config's links (both directions, and a link's own ``qdisc``)."""
    for link in (config.get("links") or {}).values():
        if not isinstance(link, dict):
            continue
        for table in (link, link.get("forward"), link.get("reverse")):
            qdisc = table.get("qdisc") if isinstance(table, dict) else None
            if isinstance(qdisc, str):
                yield {"kind": qdisc}
            elif isinstance(qdisc, dict):
                yield qdisc


def _target(value: Any) -> str:
    try:
        return f"{parse_time('target', value) * 1e3:g}ms"
    except ConfigError:
        return str(value)


def cell_of(config: Mapping[str, Any]) -> dict[str, Value]:
    """``aqm`` and ``target`` of a run's resolved config (a run folder's ``config.toml`` or a RunSpec's
    ``experiment.raw``): the AQM qdiscs' kinds and targets, ``-`` where there is none."""
    aqms = [q for q in _qdiscs(config) if str(q.get("kind")) not in NOT_AQM]
    kinds = sorted({str(q.get("kind")) for q in aqms})
    targets = sorted({_target(q["target"]) for q in aqms if "target" in q})
    return {"aqm": "/".join(kinds) or "-", "target": "/".join(targets) or "-"}


# ---------------------------------------------------------------- metrics


def _delay(values: Mapping[str, float], link: str, sources: tuple[str, ...]) -> float | None:
    """The steady-window mean delay of ``link``'s AQM egress from the first of ``sources`` the run has."""
    for source in sources:
        hits = [v for k, v in values.items() if k.startswith(f"qdelay_ms.{link} ") and k.endswith(f".{source}")]
        if hits:
            return statistics.fmean(hits)
    return None


def session_metrics(run: RunFolder) -> dict[str, float | None]:
    """The report's per-run numbers of a run folder, and each bottleneck's queue delay (module docstring)."""
    values = {k: v for k, (v, _) in run_metrics(run.path).items()}
    out: dict[str, float | None] = dict.fromkeys(CLAIM_METRICS)  # a metric the run lacks is None, not absent
    out.update({k: v for k, v in values.items() if not k.startswith("qdelay_ms.")})
    cell = cell_of(run.config())
    target = str(cell["target"])
    target_ms = parse_time("target", target) * 1e3 if cell["aqm"] == "pie" and "/" not in target else None
    for link in BOTTLENECKS:
        out[f"qdelay_ms.{link}"] = _delay(values, link, MEASURED)
        out[f"qdelay_kernel_ms.{link}"] = kernel = _delay(values, link, ("kernel",))
        out[f"pie_delay_x_target.{link}"] = pie_delay_x_target(kernel, target_ms)
    out[RTT_SIZE_RHO] = rtt_size_rho(run.frame(SEGMENTS))
    return out


RTT_SIZE_RHO = "video.rtt_size_rho"  # Fig. 6 within a session: does a larger segment take longer?


def rtt_size_rho(segments: pd.DataFrame | None) -> float | None:
    """Spearman's rho of one session's video segments' application RTT (last byte - request, as ``app_rtt_ms``)
    against their size, from its ``segments.csv`` rows (a run folder's file, or its rows of an evidence folder's
    table: :class:`nest_experiments.studies.base.Derived`); None without them or with fewer than 8 timed ones."""
    if segments is None or segments.empty or not {"stream", "bytes", "t_request", "t_last_byte"} <= set(segments):
        return None
    video = segments[(segments["stream"] == "video") & (segments["bytes"] > 0)]
    video = video.dropna(subset=["t_request", "t_last_byte"])
    return rank_correlation(video["bytes"].astype(float).tolist(),
                            (video["t_last_byte"] - video["t_request"]).astype(float).tolist())


def pie_delay_x_target(delay_ms: float | None, target_ms: float | None) -> float | None:
    """PIE's delay over its target (None without either)."""
    if delay_ms is None or not target_ms:
        return None
    return delay_ms / target_ms


# ---------------------------------------------------------------- the claims


# claim id -> (margin, relative): see the module docstring
MARGINS: dict[str, tuple[float, bool]] = {
    "video_switches": (1.0, False), "video_bitrate": (0.10, True), "video_throughput": (0.50, True),
    "video_buffer": (0.10, True), "video_jitter": (0.10, True),
    "audio_throughput": (0.50, True), "audio_buffer": (0.10, True), "audio_rtt": (0.10, True),
    "audio_jitter": (0.10, True), "qdelay_bn1": (0.50, True), "qdelay_bn2": (0.50, True),
    "pie_follows_target": (0.50, True),
}


# the player's buffer by construction: it fetches while below max_buffer (10 s, nest_experiments/default.toml) and
# a fetch adds one 4 s segment, so a stream whose fetches keep up sits between 10 and 14 s; the audio stream (128
# kbit/s on a link of Mbit/s) does in every session: its average buffer says nothing of the AQM
BUFFER_CAP_S = (10.0, 14.0)


# where each margin comes from (Claim.margin_source), and why every one is post hoc: they were stated in session 17
# (commit 7708b4b) after an earlier run of the same design (36 sessions, before the offloads fix) had been judged,
# before the re-run that is evidence/nest_paper; PIE's target margin (50 %) in session 16 (9ff3e51), judged
# again on that earlier evidence
MARGIN_SOURCES: dict[str, str] = {
    "video_switches": "rule: one switch per session (a count: 10 % of a median of 0-3 is no margin)",
    "video_bitrate": "rule: 10 % of PIE's median, the spread of identical sessions the ABR study takes",
    "video_buffer": "rule: 10 % of PIE's median (as video_bitrate)",
    "video_jitter": "rule: 10 % of PIE's median (as video_bitrate)",
    "audio_buffer": "rule: 10 % of PIE's median (as video_bitrate)",
    "audio_rtt": "rule: 10 % of PIE's median (as video_bitrate)",
    "audio_jitter": "rule: 10 % of PIE's median (as video_bitrate)",
    "video_throughput": "paper: 'almost twice' read as above 1.5x",
    "audio_throughput": "paper: 'almost twice' read as above 1.5x",
    "qdelay_bn1": "paper: FQ-PIE's 10-20 ms against PIE's 5 ms target, read as above 1.5x",
    "qdelay_bn2": "paper: FQ-PIE's 10-20 ms against PIE's 5 ms target, read as above 1.5x",
    "pie_follows_target": "rule: the targets are 3x apart; a ratio below 1.5 is not following them",
    "pie_at_target": "rule: within 1.5x either way (RFC 8033 steers the mean delay to the target; the reference "
                     "probe of DESIGN §2b measured 0.76-0.85x)",
}
MARGINS_POST_HOC = ("margin stated in session 17 (7708b4b) after an earlier run of the same design (36 sessions, "
                    "before the offloads fix) had been judged; before this folder's re-run")
ISSUE_53 = "declared in issue 53, after this folder's data was committed"
TARGET_POST_HOC = "margin stated in session 16 (9ff3e51) and judged at once on the earlier run of the same design"


def _vs_pie(cid: str, metric: str, expect: str, statement: str, figure: str, paper_value: str = "",
            scale: str = "diff", cap: tuple[float, float] | None = None) -> Claim:
    margin, relative = MARGINS[cid]
    return Claim(id=cid, statement=statement, figure=figure, metric=metric, a=FQ_PIE, b=PIE, expect=expect,
                 paper_value=paper_value, scale=scale, strata=STRATA, pair_by=PAIR_BY, margin=margin,
                 margin_relative=relative, cap=cap, margin_source=MARGIN_SOURCES[cid], post_hoc=MARGINS_POST_HOC)


PAPER_CLAIMS: tuple[Claim, ...] = (
    _vs_pie("video_switches", "video.switches", LESS, "FQ-PIE: fewer video bitrate switches than PIE", "Fig. 2"),
    _vs_pie("video_bitrate", "video.avg_bitrate_kbps", GREATER, "FQ-PIE: higher average video bitrate than PIE",
            "Fig. 3", "600 vs 300 kbit/s"),
    _vs_pie("video_throughput", "video.avg_throughput_kbps", GREATER, "FQ-PIE: almost twice PIE's video throughput",
            "Fig. 4", "~2x", scale="ratio"),
    _vs_pie("video_buffer", "video.avg_buffer_s", LESS, "FQ-PIE: lower average video playback buffer than PIE",
            "Fig. 5"),
    Claim(id="video_rtt_per_bitrate", statement="FQ-PIE: video application RTT per unit of video bitrate below "
          "PIE's (the paper: RTT grows with the chunks' size, and FQ-PIE's is only slightly higher at twice PIE's "
          "bitrate)", figure="Figs. 3 and 6", paper_value="1700 ms at 600 kbit/s vs 1600 ms at 300: x0.53",
          metric="video.app_rtt_ms", per="video.avg_bitrate_kbps", a=FQ_PIE, b=PIE, expect=LESS, scale="ratio",
          strata=STRATA, pair_by=PAIR_BY, post_hoc=ISSUE_53),
    Claim(id="video_rtt_rises_with_size", statement="as the bitrate of the video chunks increases, resulting in "
          "larger data sizes, RTT increases accordingly (within each session: Spearman's rho of the video "
          "segments' application RTT against their size above 0)", figure="Fig. 6", paper_value="rising",
          metric=RTT_SIZE_RHO, a={}, b={}, reference=0.0, expect=GREATER, post_hoc=ISSUE_53),
    _vs_pie("video_jitter", "video.app_jitter_ms", LESS, "FQ-PIE: lower video application jitter than PIE", "Fig. 7"),
    _vs_pie("audio_throughput", "audio.avg_throughput_kbps", GREATER, "FQ-PIE: almost twice PIE's audio throughput",
            "Fig. 8", "~2x", scale="ratio"),
    _vs_pie("audio_buffer", "audio.avg_buffer_s", LESS, "FQ-PIE: lower average audio playback buffer than PIE",
            "Fig. 9", cap=BUFFER_CAP_S),
    _vs_pie("audio_rtt", "audio.app_rtt_ms", LESS, "FQ-PIE: shorter audio application RTT than PIE", "Fig. 10"),
    _vs_pie("audio_jitter", "audio.app_jitter_ms", GREATER, "FQ-PIE: higher audio application jitter than PIE",
            "Fig. 11"),
    _vs_pie("qdelay_bn1", "qdelay_ms.bn1", GREATER, "FQ-PIE's queue delay above PIE's (PIE holds its target, FQ-PIE "
            "oscillates 10-20 ms at a 5 ms target), r1 -> r3", "Fig. 12", "FQ-PIE 10-20 ms vs PIE ~target"),
    _vs_pie("qdelay_bn2", "qdelay_ms.bn2", GREATER, "FQ-PIE's queue delay above PIE's (PIE holds its target, FQ-PIE "
            "oscillates 10-20 ms at a 5 ms target), r2 -> r4", "Fig. 13", "FQ-PIE 10-20 ms vs PIE ~target"),
    *(Claim(id=f"pie_at_target_{link}", statement="PIE regulates the queue delay at its target value in all "
            f"scenarios: its kernel-reported delay over its target, {path}, at the target farthest from it in each "
            "block (every scenario, not the targets pooled)", figure=figure,
            paper_value="~1x the target (5, 10, 15 ms)", metric=f"pie_delay_x_target.{link}", a=PIE, b={},
            reference=1.0, expect=EQUIVALENT, margin=0.5, margin_relative=True, scale="ratio",
            worst_over=("target",), pair_by=PAIR_BY, margin_source=MARGIN_SOURCES["pie_at_target"],
            post_hoc=TARGET_POST_HOC)
      for link, path, figure in (("bn1", "r1 -> r3", "Fig. 12"), ("bn2", "r2 -> r4", "Fig. 13"))),
    *(Claim(id=f"fq_pie_delay_10_20ms_{link}", statement="in spite of a 5 ms target, FQ-PIE's queue delay "
            f"oscillates from 10 to 20 ms ({path}: its mean per session within 10-20 ms)", figure=figure,
            paper_value="10-20 ms at a 5 ms target", metric=f"qdelay_ms.{link}", a=FQ_PIE, b={}, reference=15.0,
            conditions={"target": "5ms"}, expect=EQUIVALENT, margin=5.0,
            margin_source="paper: 'oscillates from 10ms to 20ms': 15 +- 5 ms", post_hoc=ISSUE_53)
      for link, path, figure in (("bn1", "r1 -> r3", "Fig. 12"), ("bn2", "r2 -> r4", "Fig. 13"))),
    Claim(id="pie_follows_target", statement="PIE regulates the queue delay at its target value in all scenarios: "
          "its delay at a 15 ms target above its delay at 5 ms, r2 -> r4", figure="Fig. 13",
          paper_value="PIE at 5, 10, 15 ms", metric="qdelay_kernel_ms.bn2", a={"target": "15ms"}, b={"target": "5ms"},
          expect=GREATER, conditions=PIE, pair_by=PAIR_BY, scale="ratio", margin=MARGINS["pie_follows_target"][0],
          margin_relative=True, margin_source=MARGIN_SOURCES["pie_follows_target"], post_hoc=MARGINS_POST_HOC),
)
CLAIM_METRICS = tuple(dict.fromkeys(c.metric for c in PAPER_CLAIMS))
