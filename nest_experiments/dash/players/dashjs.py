"""dash.js events (as ``web/dashjs_player.html`` records them) -> ``segments.csv`` rows, decisions, QoE.

Pure: the browser driver (:mod:`.browser`) hands over the page's events and
its Resource Timing entries, with times in ms since the epoch, and a function
that moves a wall time onto the run clock.

Per media segment (``fragment_completed`` of kind ``MediaSegment``):

- ``t_request``, ``t_first_byte``, ``t_last_byte``: the Resource Timing entry
  of the segment's URL (``startTime``, ``responseStart``, ``responseEnd``:
  sub-ms, what the network stack saw), else dash.js's own
  ``startDate``/``firstByteDate``/``endDate`` (ms);
- ``transport``: the experiment's; over ``race``, the protocol that carried
  the segment (Resource Timing's ``nextHopProtocol``: ``h3`` -> ``h3``,
  ``h2``/``http/1.1`` -> ``tcp``);
- ``level``: the representation's position in the MPD's ascending ladder,
  ``bitrate_bps`` its ``@bandwidth``; ``bytes`` dash.js's ``bytesLoaded``;
- ``buffer_s``: the first ``bufferLevelUpdated`` of that stream at or after
  the last byte (the segment appended), else the level when it completed;
- ``stall_s``: a stall is a ``waiting`` of the video element after playback
  first started, until the next ``playing``; its time is written on the last
  segment (of the stream that ran empty, from dash.js's ``bufferStalled``,
  else of either stream) that arrived before playback resumed.

Startup delay: the first ``playing`` minus the first media request.

dash.js may fetch a segment index again at another level (its "fast
switching" replaces buffered media after a switch up, and it abandons slow
downloads): every completed media segment is a row, so an index can appear
twice, as it was downloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nest_experiments.dash.content.mpd import Manifest
from nest_experiments.dash.core.qoe import EndStall
from nest_experiments.dash.core.records import ABANDON
from nest_experiments.rundir.rows import DecisionRow, SegmentRow

Event = Mapping[str, Any]
MEDIA_SEGMENT = "MediaSegment"
PROTOCOLS = {"http/1.1": "tcp", "h2": "h2", "h3": "h3"}  # Resource Timing's nextHopProtocol -> our transport
# over ``race``: the protocol that carried the segment, as our race transport labels it (tcp | h3)
RACE_LABELS = {"http/1.1": "tcp", "h2": "tcp", "h3": "h3"}


@dataclass(frozen=True, kw_only=True)
class Stall:
    start: float  # run clock
    end: float | None  # None: playback never resumed
    stream: str | None

    @property
    def duration_s(self) -> float | None:
        return None if self.end is None else self.end - self.start


END_SLACK_S = 0.5  # a last poll after the element's "ended"
ENDED_WAIT_S = 3.0  # after dash.js's own PLAYBACK_ENDED, the longest wait for the element's "ended"


def end_seen(events: Sequence[Event]) -> str | None:
    """Who said playback is over: ``"element"`` (the video element's ``ended``), ``"dashjs"`` (only dash.js's
    ``PLAYBACK_ENDED``: its 200 ms end timer fires it when the playhead is at the stream's end, then it seeks the
    element to the end, which fires ``ended`` later), or None."""
    kinds = {e.get("type") for e in events}
    return "element" if "ended" in kinds else "dashjs" if "ended_dashjs" in kinds else None


@dataclass
class EndWatch:
    """When a page's poller stops: :data:`END_SLACK_S` after the element's ``ended``; when dash.js said so first,
    up to :data:`ENDED_WAIT_S` for the element's (either way the session ended). Pure: the poller passes each
    batch and its clock."""

    first_end_t: float | None = None
    element_t: float | None = None

    def done(self, batch: Sequence[Event], now: float) -> bool:
        seen = end_seen(batch)
        if seen == "element" and self.element_t is None:
            self.element_t = now
        if seen is not None and self.first_end_t is None:
            self.first_end_t = now
        if self.element_t is not None:
            return now > self.element_t + END_SLACK_S
        return self.first_end_t is not None and now > self.first_end_t + ENDED_WAIT_S


@dataclass(frozen=True, kw_only=True)
class Session:
    """One dash.js session on the run clock."""

    segments: tuple[SegmentRow, ...]
    decisions: tuple[DecisionRow, ...]
    stalls: tuple[Stall, ...]
    startup_delay_s: float | None
    ended: bool
    errors: tuple[str, ...]
    stall_at_end: EndStall | None = None  # playback never resumed: the stall until the page's last event


def convert(events: Sequence[Event], resources: Sequence[Event], manifest: Manifest, *,
            to_run: Callable[[float], float], transport: str, abr: str) -> Session:
    """Build the session from the page's events (ms since the epoch) and Resource Timing entries."""

    def run_s(ms: float | None) -> float | None:
        return None if ms is None else to_run(ms / 1000)

    ordered = sorted(events, key=lambda e: float(e["t"]))
    segments = [_segment(e, resources, manifest, run_s, transport) for e in ordered
                if e["type"] == "fragment_completed" and e.get("kind") == MEDIA_SEGMENT]
    segments = [_with_buffer(s, ordered, run_s) for s in segments]
    stalls = find_stalls(ordered, run_s)
    for stall in stalls:
        segments = attribute_stall(segments, stall)
    # startup counts from the manifest's request, as our player's does (player.py: the MPD's t_request); without
    # its Resource Timing entry, from the first media segment's request
    mpd = [run_s(r["start"]) for r in resources if str(r.get("url", "")).split("?")[0].endswith(".mpd")
           and r.get("start") is not None]
    first_request = min((t for t in mpd if t is not None), default=None)
    if first_request is None:
        first_request = min((s.t_request for s in segments if s.t_request is not None), default=None)
    first_play = next((run_s(e["t"]) for e in ordered if e["type"] == "playing"), None)
    startup = None if first_request is None or first_play is None else max(0.0, first_play - first_request)
    return Session(
        segments=tuple(segments),
        decisions=tuple(_decisions(ordered, manifest, run_s, abr)),
        stalls=tuple(stalls),
        startup_delay_s=startup,
        ended=end_seen(ordered) is not None,
        errors=tuple(str(e.get("message") or e.get("error")) for e in ordered if e["type"] == "error"),
        stall_at_end=_stall_at_end(stalls, run_s(ordered[-1]["t"]) if ordered else None),
    )


def _stall_at_end(stalls: Sequence[Stall], t_last: float | None) -> EndStall | None:
    """The open stall (playback never resumed) up to the last event the page sent."""
    if not stalls or stalls[-1].end is not None or t_last is None:
        return None
    return EndStall(stream=stalls[-1].stream or "video", t_start=stalls[-1].start,
                    duration_s=max(0.0, t_last - stalls[-1].start))


def level_of(manifest: Manifest, stream: str, rep_id: str | None, bandwidth: float | None) -> tuple[int | None,
                                                                                                  int | None]:
    """(level, @bandwidth) of a representation by its id (else by its bandwidth) in ``stream``'s ladder."""
    reps = manifest.adaptation_set(stream).representations
    for level, rep in enumerate(reps):
        if rep.id == rep_id:
            return level, rep.bandwidth
    for level, rep in enumerate(reps):
        if bandwidth is not None and rep.bandwidth == bandwidth:
            return level, rep.bandwidth
    return None, None


def _segment(e: Event, resources: Sequence[Event], manifest: Manifest,
             run_s: Callable[[float | None], float | None], transport: str) -> SegmentRow:
    stream = str(e["media_type"])
    rep = e.get("rep") or {}
    level, bandwidth = level_of(manifest, stream, rep.get("id"), rep.get("bandwidth"))
    timing = resource_for(e, resources)
    start, first, last = ((timing["start"], timing["first_byte"], timing["end"]) if timing
                          else (e.get("start"), e.get("first_byte"), e.get("end")))
    size = e.get("bytes")
    if size is None and timing:
        size = timing.get("body_size")
    if transport == "race":  # the protocol of this response; "" when Resource Timing has no entry for it
        transport = RACE_LABELS.get(str((timing or {}).get("protocol") or ""), "")
    return SegmentRow(stream=stream, index=int(e["index"]), level=level, bitrate_bps=bandwidth, bytes=int(size or 0),
                      t_request=run_s(start), t_first_byte=run_s(first), t_last_byte=run_s(last),
                      buffer_s=None if e.get("buffer") is None else float(e["buffer"]), transport=transport)


def resource_for(e: Event, resources: Sequence[Event]) -> Event | None:
    """The Resource Timing entry of a fragment event: its URL, the last one that started by its end."""
    end = e.get("end") or e["t"]
    found = [r for r in resources if r.get("url") == e.get("url") and r.get("end") and r["start"] <= end + 1]
    return found[-1] if found else None


def _with_buffer(seg: SegmentRow, ordered: Sequence[Event], run_s: Callable[[float | None], float | None]) -> SegmentRow:
    if seg.t_last_byte is None:
        return seg
    for e in ordered:
        t = run_s(e["t"])
        if e["type"] == "buffer_level" and e.get("media_type") == seg.stream and t is not None and t >= seg.t_last_byte:
            return replace(seg, buffer_s=float(e["level"]))
    return seg


def find_stalls(ordered: Sequence[Event], run_s: Callable[[float | None], float | None]) -> list[Stall]:
    """``waiting`` after the first ``playing`` until the next ``playing`` (the end of the media is no stall)."""
    stalls: list[Stall] = []
    started, open_at, empty = False, None, None
    for e in ordered:
        kind, t = e["type"], run_s(e["t"])
        if kind == "buffer_empty":
            empty = e.get("media_type")
        elif kind == "playing":
            if open_at is not None and t is not None:
                stalls.append(Stall(start=open_at, end=t, stream=empty))
            started, open_at, empty = True, None, None
        elif kind == "waiting" and started and open_at is None:
            open_at = t
        elif kind == "ended":
            open_at = None
    if open_at is not None:
        stalls.append(Stall(start=open_at, end=None, stream=empty))
    return stalls


def attribute_stall(segments: list[SegmentRow], stall: Stall) -> list[SegmentRow]:
    """Add the stall's time to the last segment (of its stream, if known) that arrived before it ended."""
    if stall.end is None or stall.duration_s is None:
        return segments
    best = None
    for i, seg in enumerate(segments):
        if seg.t_last_byte is None or seg.t_last_byte > stall.end + 1e-6:
            continue
        if stall.stream in (None, seg.stream) and (best is None or seg.t_last_byte >= (segments[best].t_last_byte or 0)):
            best = i
    if best is None:
        return segments
    out = list(segments)
    out[best] = replace(out[best], stall_s=out[best].stall_s + stall.duration_s)
    return out


def _decisions(ordered: Sequence[Event], manifest: Manifest, run_s: Callable[[float | None], float | None],
               abr: str) -> list[DecisionRow]:
    rows, done = [], {"video": 0, "audio": 0}
    for e in ordered:
        stream = e.get("media_type")
        if e["type"] == "fragment_completed" and e.get("kind") == MEDIA_SEGMENT and stream in done:
            done[stream] += 1
        if e["type"] != "quality_requested" or stream not in done:
            continue
        rep = e.get("rep") or {}
        level, bandwidth = level_of(manifest, stream, rep.get("id"), rep.get("bandwidth"))
        if level is None or bandwidth is None:
            continue
        # a switch its AbandonRequestsRule asked for (reason.forceAbandon): an "abandon" row, as our player's
        algorithm = ABANDON if (e.get("reason") or {}).get("forceAbandon") else f"dashjs:{abr}"
        rows.append(DecisionRow(t=run_s(e["t"]) or 0.0, stream=stream, index=done[stream], algorithm=algorithm,
                                buffer_s=float(e.get("buffer") or 0.0), throughput_bps=None, level=level,
                                bitrate_bps=bandwidth))
    return rows


def protocols(resources: Sequence[Event]) -> dict[str, int]:
    """How many responses came over each protocol (Resource Timing's ``nextHopProtocol``). A response from the
    browser's cache (``transferSize`` 0) keeps the protocol stored with it, its ALPN (``h3`` in the racing runs),
    and cleartext HTTP/1.1 has none: such a hit (e.g. an init segment asked again when the ABR returns to a level)
    counts as "cache"; "?" is a response over the network with no protocol."""
    counts: dict[str, int] = {}
    for r in resources:
        name = str(r.get("protocol") or ("cache" if r.get("transfer_size") == 0 else "?"))
        counts[name] = counts.get(name, 0) + 1
    return counts
