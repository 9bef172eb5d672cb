"""The HTTP/2-QUIC DASH evaluation (Timmerer, docs/papers.md): overhead, link utilization, adaptation.

Three experiments, one report each (``experiments/h2quic_*.toml``); every
number comes from run folders. Protocols: ``tcp`` (HTTP/1.1 over TCP), ``h2``
(HTTP/2 over TLS), ``h3`` (HTTP/3 over QUIC) -- the DASH app's ``transport``.

- **Protocol overhead** (``h2quic_overhead``; the blog's Figure 1): per run,
  the bytes on the wire of the bottleneck in both directions (``wire.csv``:
  TCP and UDP frames, Ethernet header included; requests, ACKs, handshakes and
  the MPD included) over the media payload (``segments.csv`` bytes), minus 1;
  also the forward direction alone. Per representation (the pinned level's
  bitrate) and protocol, the mean over repetitions.
- **Link utilization** (``h2quic_utilization``; Table 2, Figures 2-3):
  effective throughput / available bandwidth, the bandwidth (the bottleneck's
  forward rate) set to the representation's bitrate. The blog does not define
  "effective throughput"; ours is the media payload the player received over
  the time it spent fetching it: the video segments' bytes x 8 / (last
  segment's last byte - first segment's request). Headers, requests and the
  gaps between a response's end and the next request's first byte all count
  against it, as they would for a player. RTT = forward + reverse delay of the
  bottleneck.
- **Adaptation** (``h2quic_adaptation``; Figures 4-8): under the 1-5 Mbit/s
  trajectory (``rates.csv``), the available bandwidth, the player's measured
  bandwidth (its ABR's estimate at each decision, ``abr_decisions.csv``) and
  the selected bitrate over time; the *average media throughput* = the media
  bits received / the media seconds received (the mean selected video
  bitrate), per protocol and RTT, against the trajectory's mean over the
  session.

The blog's comparisons (QUIC's overhead above HTTP/2's, utilization and media
throughput falling with the RTT, the protocols alike) are claims judged per
session in :mod:`.claims`; its absolute thresholds (overhead < 10 % and < 7 %
in most cases, utilization > 87 %, media throughput > 2 Mbit/s) are checked
here on the cell means (:func:`threshold_table`: a description, no test).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nest_experiments.analysis.report import Check, RunInput, ok
from nest_experiments.errors import ConfigError
from nest_experiments.rundir import LINKS, RATES, SEGMENTS, WIRE, RunFolder, read_manifest, run_dirs
from nest_experiments.rundir.rows import SegmentRow
from nest_experiments.studies.base import Claim
from nest_experiments.units import parse_rate

OVERHEAD, UTILIZATION, ADAPTATION = "h2quic_overhead", "h2quic_utilization", "h2quic_adaptation"
EXPERIMENTS = (OVERHEAD, UTILIZATION, ADAPTATION)
PROTOCOLS = ("tcp", "h2", "h3")
NAMES = {"tcp": "HTTP/1.1 over TCP", "h2": "HTTP/2 over TLS", "h3": "HTTP/3 over QUIC"}
REPORT_FILE = "h2quic.md"
LINK = "bottleneck"
WIRE_PROTOCOLS = ("tcp", "udp")  # the transports' frames; "other" (ICMP, ...) is not the session's

# the blog's figures (for the claim table's "paper" column)
PAPER_OVERHEAD_LIMIT = 0.10
PAPER_OVERHEAD_MAJORITY = 0.07
PAPER_UTILIZATION_MIN = 0.87
PAPER_MEDIA_THROUGHPUT_MIN_BPS = 2e6


# ---------------------------------------------------------------- runs


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What one completed run of the study is: its experiment, protocol, link and the media it received."""

    run: str
    path: Path
    experiment: str
    protocol: str
    rtt_ms: float
    rate_bps: int | None  # the bottleneck's forward rate (None: trace-driven)
    repetition: int
    segments: tuple[SegmentRow, ...]

    @property
    def video(self) -> list[SegmentRow]:
        return [s for s in self.segments if s.stream == "video"]

    @property
    def bitrate_bps(self) -> int | None:
        """The pinned representation's bitrate (None: not one level)."""
        rates = {s.bitrate_bps for s in self.video}
        return rates.pop() if len(rates) == 1 else None


def rtt_ms(run_dir: Path) -> float:
    """The bottleneck's delay both ways (``links.json``: each egress's netem delay), in ms."""
    try:
        egresses = RunFolder(run_dir).json(LINKS)["egresses"]
    except (OSError, ValueError, KeyError, TypeError):
        return math.nan
    return 1e3 * sum(float(e.get("delay_s") or 0.0) for e in egresses if e.get("link") == LINK)


def _rate_bps(link: dict[str, Any]) -> int | None:
    """The forward rate the experiment set (``[links.bottleneck.forward] rate``, else the link's); None: a trace."""
    forward = link.get("forward") or {}
    if "trace" in forward or ("trace" in link and "rate" not in forward):
        return None
    value = forward.get("rate", link.get("rate"))
    return parse_rate(f"links.{LINK}.forward.rate", value) if value else None


def load_run(run_dir: Path) -> RunInfo | None:
    """One completed run (None: not completed, not this study's, or no segments)."""
    m = read_manifest(run_dir) or {}
    if m.get("status") != "completed" or m.get("experiment") not in EXPERIMENTS:
        return None
    cfg = RunFolder(run_dir).config()
    app = next((a for a in (cfg.get("apps") or {}).values() if isinstance(a, dict) and a.get("kind") == "dash"), None)
    if app is None or not RunFolder(run_dir).has(SEGMENTS):
        return None
    link = (cfg.get("links") or {}).get(LINK) or {}
    try:
        rate = _rate_bps(link)
    except ConfigError:
        return None
    return RunInfo(run=run_dir.name, path=run_dir, experiment=str(m["experiment"]),
                   protocol=str(app.get("transport", "tcp")), rtt_ms=rtt_ms(run_dir), rate_bps=rate,
                   repetition=int(m.get("repetition", 1) or 1),
                   segments=tuple(RunFolder(run_dir).segments()))


def load_runs(folder: Path) -> list[RunInfo]:
    return [r for r in map(load_run, run_dirs(folder)) if r is not None]


# ---------------------------------------------------------------- overhead


@dataclass(frozen=True, kw_only=True)
class Overhead:
    """One run's bytes: the media payload, the wire per direction, and where the extra bytes went."""

    run: RunInfo
    payload_bytes: int
    forward_bytes: int
    reverse_bytes: int
    header_bytes: int  # Ethernet + IP + TCP/UDP headers, both directions
    l4_payload_bytes: int  # what TCP/UDP carried, both directions

    @property
    def wire_bytes(self) -> int:
        return self.forward_bytes + self.reverse_bytes

    @property
    def total(self) -> float:
        """(wire, both directions - payload) / payload."""
        return (self.wire_bytes - self.payload_bytes) / self.payload_bytes

    @property
    def forward(self) -> float:
        return (self.forward_bytes - self.payload_bytes) / self.payload_bytes

    @property
    def headers(self) -> float:
        """The part of :attr:`total` that is Ethernet + IP + TCP/UDP headers."""
        return self.header_bytes / self.payload_bytes

    @property
    def above_transport(self) -> float:
        """The rest: TLS/QUIC, HTTP framing and headers, handshakes, the MPD, retransmissions."""
        return (self.l4_payload_bytes - self.payload_bytes) / self.payload_bytes


def overhead_of(run: RunInfo, wire_rows: Sequence[dict[str, str]]) -> Overhead | None:
    """The overhead of one run from its ``wire.csv`` rows (None: no rows of the bottleneck, or no payload)."""
    rows = [r for r in wire_rows if r["link"] == LINK and r["proto"] in WIRE_PROTOCOLS]
    payload = sum(s.bytes for s in run.segments)
    if not rows or payload <= 0:
        return None

    def total(key: str, direction: str | None = None) -> int:
        return sum(int(r[key]) for r in rows if direction is None or r["direction"] == direction)

    frames = total("frame_bytes")
    return Overhead(run=run, payload_bytes=payload, forward_bytes=total("frame_bytes", "forward"),
                    reverse_bytes=total("frame_bytes", "reverse"), header_bytes=frames - total("l4_payload_bytes"),
                    l4_payload_bytes=total("l4_payload_bytes"))


def overheads(runs: Sequence[RunInfo]) -> list[Overhead]:
    out = []
    for r in runs:
        if r.experiment != OVERHEAD or r.bitrate_bps is None:
            continue
        o = overhead_of(r, RunFolder(r.path).rows(WIRE))
        if o is not None:
            out.append(o)
    return out


# ---------------------------------------------------------------- utilization and adaptation


def effective_throughput_bps(segments: Sequence[SegmentRow]) -> float | None:
    """Video payload bits / (last segment's last byte - first segment's request); None without timed segments."""
    video = [s for s in segments if s.stream == "video" and s.t_request is not None and s.t_last_byte is not None]
    if not video:
        return None
    span = max(s.t_last_byte or 0.0 for s in video) - min(s.t_request or 0.0 for s in video)
    return 8 * sum(s.bytes for s in video) / span if span > 0 else None


def utilization(run: RunInfo) -> float | None:
    tput = effective_throughput_bps(run.segments)
    return tput / run.rate_bps if tput is not None and run.rate_bps else None


def media_throughput_bps(segments: Sequence[SegmentRow]) -> float | None:
    """Media bits received / media seconds received: the mean selected video bitrate (segments of equal length)."""
    rates = [s.bitrate_bps for s in segments if s.stream == "video" and s.bitrate_bps is not None]
    return statistics.fmean(rates) if rates else None


def trace_steps(rows: Sequence[dict[str, str]]) -> tuple[list[float], list[float]]:
    """The forward bottleneck's applied rate changes (t, bit/s) from ``rates.csv`` rows, in time order."""
    steps = sorted((float(r["t"]), float(r["rate_bps"])) for r in rows
                   if r.get("link") == LINK and r.get("direction") == "forward")
    return [t for t, _ in steps], [b for _, b in steps]


def time_mean(times: Sequence[float], rates: Sequence[float], start: float, end: float) -> float | None:
    """The time-weighted mean of a step function (each rate holds until the next change) over [start, end]."""
    if not times or end <= start:
        return None
    total = 0.0
    for i, (t, r) in enumerate(zip(times, rates, strict=True)):
        lo, hi = max(t, start), min(times[i + 1] if i + 1 < len(times) else math.inf, end)
        if hi > lo:
            total += r * (hi - lo)
    covered = end - max(start, times[0])
    return total / covered if covered > 0 else None


@dataclass(frozen=True, kw_only=True)
class Adaptation:
    run: RunInfo
    media_bps: float
    available_bps: float | None  # the trajectory's mean over the session (first request to last byte)
    stall_s: float


def adaptation_of(run: RunInfo, rates_rows: Sequence[dict[str, str]]) -> Adaptation | None:
    media = media_throughput_bps(run.segments)
    if media is None:
        return None
    video = [s for s in run.video if s.t_request is not None and s.t_last_byte is not None]
    times, rates = trace_steps(rates_rows)
    available = None
    if video:
        available = time_mean(times, rates, min(s.t_request or 0.0 for s in video),
                              max(s.t_last_byte or 0.0 for s in video))
    return Adaptation(run=run, media_bps=media, available_bps=available, stall_s=sum(s.stall_s for s in run.segments))


def adaptations(runs: Sequence[RunInfo]) -> list[Adaptation]:
    out = []
    for r in runs:
        if r.experiment == ADAPTATION:
            a = adaptation_of(r, RunFolder(r.path).rows(RATES))
            if a is not None:
                out.append(a)
    return out


# ---------------------------------------------------------------- cells


Cell = tuple[str, float]  # (protocol, x): x = bitrate (bit/s) or RTT (ms)


def cell_means(points: Sequence[tuple[str, float, float]]) -> dict[Cell, float]:
    """Mean of the values of each (protocol, x) over its repetitions."""
    groups: dict[Cell, list[float]] = {}
    for protocol, x, value in points:
        groups.setdefault((protocol, x), []).append(value)
    return {k: statistics.fmean(v) for k, v in sorted(groups.items())}


def overhead_cells(points: Sequence[Overhead], *, forward: bool = False) -> dict[Cell, float]:
    return cell_means([(o.run.protocol, float(o.run.bitrate_bps or 0), o.forward if forward else o.total)
                       for o in points])


def utilization_cells(runs: Sequence[RunInfo]) -> dict[tuple[str, float, float], float]:
    """(protocol, RTT ms, bandwidth bit/s) -> mean utilization."""
    groups: dict[tuple[str, float, float], list[float]] = {}
    for r in runs:
        u = utilization(r) if r.experiment == UTILIZATION else None
        if u is not None and r.rate_bps:
            groups.setdefault((r.protocol, r.rtt_ms, float(r.rate_bps)), []).append(u)
    return {k: statistics.fmean(v) for k, v in sorted(groups.items())}


def utilization_table(cells: dict[tuple[str, float, float], float]) -> dict[Cell, float]:
    """Table 2: (protocol, RTT) -> the mean over the bandwidths."""
    return cell_means([(p, rtt, u) for (p, rtt, _), u in cells.items()])


def media_cells(points: Sequence[Adaptation]) -> dict[Cell, float]:
    """Figure 8: (protocol, RTT) -> mean average media throughput (bit/s)."""
    return cell_means([(a.run.protocol, a.run.rtt_ms, a.media_bps) for a in points])


# ---------------------------------------------------------------- the blog's thresholds (cell means)


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.{digits}f} %"


def kbit(bps: float) -> str:
    return f"{bps / 1e3:g}"


def _protocols(cells: dict[Cell, float]) -> list[str]:
    return [p for p in PROTOCOLS if any(c[0] == p for c in cells)]


def _xs(cells: dict[Cell, float]) -> list[float]:
    return sorted({x for _, x in cells})


def overhead_thresholds(cells: dict[Cell, float], forward: dict[Cell, float] | None = None) -> list[Claim]:
    """The blog's overhead thresholds on the (protocol, bitrate) means of both directions, with the media
    direction alone beside them (``forward``: the blog does not say which directions it counted)."""
    if not cells:
        return [Claim(claim="protocol overhead (Fig. 1)", ours="no h2quic_overhead run with wire.csv",
                      agree="not run")]
    protos, rates = _protocols(cells), _xs(cells)
    lowest = rates[0]
    out = []
    exempt = {("h3", lowest)} if lowest <= 100_000 else set()

    def above_limit(c: dict[Cell, float]) -> dict[Cell, float]:
        return {k: v for k, v in c.items() if k not in exempt and v >= PAPER_OVERHEAD_LIMIT}

    over = above_limit(cells)
    worst = max(cells, key=lambda k: cells[k])
    media = ""
    if forward:
        fw = max(forward, key=lambda k: forward[k])
        media = (f"; the media direction alone: max {pct(forward[fw])} ({fw[0]} at {kbit(fw[1])} kbit/s), "
                 f"{len(above_limit(forward))} cells >= 10 % outside the exception")
    out.append(Claim(
        claim="overhead < 10 % except QUIC at 100 kbit/s",
        ours=f"both ways: max {pct(cells[worst])} ({worst[0]} at {kbit(worst[1])} kbit/s); >= 10 % outside the "
             "exception: " + (", ".join(f"{p} at {kbit(x)} kbit/s {pct(v)}" for (p, x), v in over.items()) or "none")
             + media,
        agree="yes" if not over else "no"))
    top = {p: max((x for q, x in cells if q == p), key=lambda x: cells[(p, x)]) for p in protos}
    out.append(Claim(
        claim="overhead highest at the lowest bitrate (100 kbit/s)",
        ours="; ".join(f"{p}: highest at {kbit(x)} kbit/s ({pct(cells[(p, x)])})" for p, x in top.items()),
        agree="yes" if all(x == lowest for x in top.values()) else "no"))
    below7 = sum(1 for v in cells.values() if v < PAPER_OVERHEAD_MAJORITY)
    media7 = (f"; the media direction alone: {sum(1 for v in forward.values() if v < PAPER_OVERHEAD_MAJORITY)} "
              f"of {len(forward)}") if forward else ""
    out.append(Claim(claim="overhead < 7 % in the majority of cases",
                     ours=f"both ways: {below7} of {len(cells)} cells < 7 %{media7}",
                     agree="yes" if below7 > len(cells) / 2 else "no"))
    return out


def utilization_thresholds(cells: dict[tuple[str, float, float], float]) -> list[Claim]:
    if not cells:
        return [Claim(claim="link utilization (Table 2)", ours="no h2quic_utilization run", agree="not run")]
    worst = min(cells, key=lambda k: cells[k])
    return [Claim(claim="link utilization > 87 % always (the blog's conclusion; its Table 2 text says > 80 %)",
                  ours=f"min {pct(cells[worst])} ({worst[0]}, RTT {worst[1]:g} ms, {kbit(worst[2])} kbit/s)",
                  agree="yes" if cells[worst] > PAPER_UTILIZATION_MIN else "no")]


def adaptation_thresholds(points: Sequence[Adaptation]) -> list[Claim]:
    cells = media_cells(points)
    if not cells:
        return [Claim(claim="adaptation (Fig. 8)", ours="no h2quic_adaptation run", agree="not run")]
    worst = min(cells, key=lambda k: cells[k])
    return [Claim(claim="average media throughput > 2 Mbit/s in all cases",
                  ours=f"min {cells[worst] / 1e6:.2f} Mbit/s ({worst[0]}, RTT {worst[1]:g} ms)",
                  agree="yes" if cells[worst] > PAPER_MEDIA_THROUGHPUT_MIN_BPS else "no")]


def threshold_table(folder: Path) -> list[Claim]:
    """The blog's absolute thresholds on the cell means of the sweep (its comparisons: :mod:`.claims`)."""
    runs = load_runs(folder)
    present = {r.experiment for r in runs}
    out: list[Claim] = []
    if OVERHEAD in present:
        points = overheads(runs)
        out += overhead_thresholds(overhead_cells(points), overhead_cells(points, forward=True))
    if UTILIZATION in present:
        out += utilization_thresholds(utilization_cells(runs))
    if ADAPTATION in present:
        out += adaptation_thresholds(adaptations(runs))
    return out


# ---------------------------------------------------------------- checks


def run_checks(run: RunInput) -> list[Check]:
    """Each run: video segments arrived; an overhead run has bytes both ways on the wire and one level only."""
    info = load_run(run.run_dir)
    if info is None:
        return [Check(name="video segments", subject=SEGMENTS, status="fail",
                      detail="no completed run of this study with segments")]
    out = [Check(name="video segments", subject=SEGMENTS, status=ok(bool(info.video)),
                 detail=f"{len(info.video)} video segments")]
    if info.experiment in (OVERHEAD, UTILIZATION):
        out.append(Check(name="one representation", subject=SEGMENTS, status=ok(info.bitrate_bps is not None),
                         detail="every video segment at one level (abr = 'fixed')" if info.bitrate_bps
                         else "segments at several levels"))
    if info.experiment == OVERHEAD:
        rows = RunFolder(run.run_dir).rows(WIRE)
        both = {r["direction"] for r in rows if r["proto"] in WIRE_PROTOCOLS and int(r["frame_bytes"]) > 0}
        out.append(Check(name="bytes on the wire both ways", subject=WIRE,
                         status=ok(both == {"forward", "reverse"}),
                         detail=", ".join(sorted(both)) or "no wire.csv or no TCP/UDP bytes"))
    return out
