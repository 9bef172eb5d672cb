"""A headless DASH player: a sans-I/O session plus a thin asyncio driver.

:class:`PlayerSession` is a state machine in the style of aioquic's
connection: the caller asks :meth:`PlayerSession.next_action` what to do at
time ``now`` (fetch a segment, wait, or stop), reports finished downloads
with :meth:`PlayerSession.on_fetch_complete`, and drains
:meth:`PlayerSession.next_event`. It never reads a clock or a socket, so tests
drive it with a simulated clock.

Model (DESIGN.md §4): video and audio each have a buffer (media seconds
downloaded but not played; a segment adds what its own boxes say it
presents, as a browser's SourceBuffer counts it, and the MPD's duration when
it has no such boxes: :mod:`~nest_experiments.dash.content.mp4`) and their own ABR; one request is outstanding per
stream; a stream waits while its buffer >= ``max_buffer_s``. Playback needs
both streams: it starts, and resumes after a stall, when every stream holds
at least ``threshold_s`` (or all of its remaining media); a stall starts when
any stream's buffer runs empty before the end. The stall time is written on
the segment whose arrival ended it; a session stopped while stalled (duration
limit, SIGTERM) reports that stall as ``stall_at_end``. Init segments are fetched the first time
a representation is chosen, and are not segment rows.

With ``PlayerConfig.abandon`` (dash.js's AbandonRequestsRule, :mod:`.abandon`) the driver reports the
progress of each media request (:meth:`PlayerSession.check_abandon`); a request the rule abandons is
cancelled, the same segment asked again at the rule's level, which then stays for
:data:`~nest_experiments.dash.core.abandon.ABANDON_LOAD_S` (dash.js's ThroughputRule makes no switch in the
ABANDON_LOAD state). A media request still open after dash.js's XHR timeout (20 s) is cancelled too and
its URL asked again 1 s later, at most 3 times. Each is a row among the decisions (``abandon``, ``timeout``)
and a :class:`RequestAbandoned` event. Two more of dash.js's ways, each a :class:`PlayerConfig` field:
``initial_bps`` (a stream's first segment at the level of an initial bitrate, not the ABR's) and
``schedule = "dashjs"`` (dash.js's ScheduleController: when a stream asks for its next segment).

:func:`play` fetches the MPD through a :class:`~nest_experiments.dash.core.fetch.Fetcher`
and runs the session in real time.
"""

from __future__ import annotations

import asyncio
import contextvars
import posixpath
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from nest_experiments.dash.content.mp4 import Track, parse_init, presentation_end_s
from nest_experiments.dash.content.mpd import AdaptationSet, Manifest, init_url, parse_mpd, segment_url
from nest_experiments.dash.core.abandon import (
    ABANDON_LOAD_S,
    PROGRESS_INTERVAL_S,
    REQUEST_TIMEOUT_S,
    RETRY_ATTEMPTS,
    RETRY_INTERVAL_S,
    AbandonRule,
    Progress,
    optimal_level,
)
from nest_experiments.dash.core.abr.base import DEFAULT_ABR, AbrAlgorithm, Decision, PlayerState, Sample
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.dash.core.events import (
    Event,
    LevelChosen,
    PlaybackEnded,
    PlaybackStarted,
    RequestAbandoned,
    SegmentReceived,
    StallEnded,
    StallStarted,
)
from nest_experiments.dash.core.fetch import ABANDONED, TRANSFER_WATCH, Clock, Fetcher, FetchResult, Transfer
from nest_experiments.dash.core.qoe import EndStall
from nest_experiments.dash.core.records import ABANDON, TIMEOUT
from nest_experiments.errors import ConfigError, RunError
from nest_experiments.rundir.rows import DecisionRow, SegmentRow

EPS = 1e-9
STREAMS = ("video", "audio")
SCHEDULES = ("buffer", "dashjs")
SCHEDULE_TIMEOUT_S = 0.5  # dash.js's streaming.scheduling.defaultTimeout (500 ms)
# schedule "dashjs": how long after one stream's request another stream whose timer fired at the same moment asks.
# dash.js checks each stream in its own timer callback (ScheduleController.startScheduleTimer: a setTimeout per
# stream), so two requests never leave together; in Chromium 156 the second of the two init requests started its
# URL request 0-3 ms after the first (NetLog URL_REQUEST_START_JOB, 1 ms resolution) and reached the origin 0.35-3.44
# ms after it, median 1.3 ms (Caddy's access log, 20 sessions of racing_chromium). It matters: two HTTP/3 requests
# that reach Caddy together are served last-first (17 of 20 pairs on loopback, 0 of 20 with 1 ms between them)
SCHEDULE_GAP_S = 0.0013


@dataclass(frozen=True, kw_only=True)
class PlayerConfig:
    """Player settings (the NeST paper: max buffer 10 s, threshold 1 s)."""

    max_buffer_s: float = 10.0
    threshold_s: float = 1.0
    abandon: AbandonRule | None = None  # dash.js's AbandonRequestsRule (None: requests are never abandoned)
    # stream -> the bitrate whose level the stream's first segment takes (dash.js's initial bitrate); none: the ABR's
    initial_bps: Mapping[str, float] = field(default_factory=dict)
    # when a stream asks for its next segment. "buffer": while its buffer is below max_buffer_s, at the moment it
    # is. "dashjs": dash.js 5.2.1's ScheduleController (dash.all.debug.js in dist/modern/esm):
    # - audio beside video asks while its buffer is below max(video's buffer + 1 s, an audio segment)
    #   (_getBufferTargetForAudio, line 49847);
    # - any other stream while its buffer plus one segment is below max_buffer_s, unless max_buffer_s is not above a
    #   segment (_shouldBuffer, 49779: ``bufferLevel + segmentDuration < bufferTarget``);
    # - a stream checks when its own download has been appended (_onBytesAppended, 40074: startScheduleTimer(0)),
    #   and again every SCHEDULE_TIMEOUT_S after a check that did not ask (_schedule, 49673:
    #   scheduling.defaultTimeout); so audio waiting for video asks up to 0.5 s after video's segment arrived;
    # - two streams whose timers fire together ask SCHEDULE_GAP_S apart (one callback each)
    schedule: str = "buffer"
    # dash.js's fast switch (StreamProcessor._prepareForFastQualitySwitch, 5.2.1 line 40314): on a level change,
    # when the segment under the playhead was downloaded at a lower bitrate than the new level's, the requests
    # start again from that segment and replace what is buffered (the buffer does not grow until they pass its end)
    fast_switch: bool = False

    def __post_init__(self) -> None:
        if self.threshold_s <= 0 or self.max_buffer_s <= 0:
            raise ConfigError("player", "max_buffer_s and threshold_s must be > 0")
        if self.threshold_s > self.max_buffer_s:
            raise ConfigError("player.threshold_s", "must not exceed max_buffer_s")
        if self.schedule not in SCHEDULES:
            raise ConfigError("player.schedule", f"unknown {self.schedule!r} ({' | '.join(SCHEDULES)})")


# ----------------------------------------------------------------- actions


@dataclass(frozen=True, kw_only=True)
class FetchAction:
    """Send this GET now (``kind`` "init" or "media"; ``index`` None for init)."""

    stream: str
    path: str
    kind: str
    level: int
    index: int | None


@dataclass(frozen=True, kw_only=True)
class WaitAction:
    """Nothing to send: call again at ``until`` or when a fetch completes (``until`` None)."""

    until: float | None


@dataclass(frozen=True, kw_only=True)
class DoneAction:
    """Playback is over (``reason``: "ended" or why it stopped)."""

    reason: str


Action = FetchAction | WaitAction | DoneAction


@dataclass(frozen=True, kw_only=True)
class PlayerReport:
    """Everything a session produced."""

    segments: tuple[SegmentRow, ...]
    decisions: tuple[DecisionRow, ...]
    inits: tuple[FetchResult, ...]
    mpd: FetchResult | None
    startup_delay_s: float | None
    stalls: tuple[StallEnded, ...]
    end_reason: str
    ended_at: float | None
    stall_at_end: EndStall | None = None  # stopped while stalled (duration limit, SIGTERM): the stall so far


# ----------------------------------------------------------------- streams


@dataclass
class _Stream:
    name: str
    aset: AdaptationSet
    abr: AbrAlgorithm
    count: int
    buffered_end_s: float = 0.0
    next_index: int = 0
    frontier: int = 0  # the first segment never downloaded (next_index is below it while replacing)
    levels: dict[int, int] = field(default_factory=dict)  # segment index -> the level it was last downloaded at
    outstanding: FetchAction | None = None
    chosen: int | None = None  # level chosen for next_index, awaiting its request
    last_level: int | None = None
    memo: Any = None
    history: list[Sample] = field(default_factory=list)
    inits: set[int] = field(default_factory=set)
    tracks: dict[int, Track | None] = field(default_factory=dict)  # level -> its init segment's track (dash.mp4)
    abandoned: set[int] = field(default_factory=set)  # segment indices abandoned once (dash.js: abandonDict)
    timeouts: dict[int, int] = field(default_factory=dict)  # segment index -> its requests that timed out
    not_before: float = 0.0  # a timed-out request is asked again only from then (dash.js's retry interval)
    hold: tuple[float, int] | None = None  # (until, level): after an abandonment the level stays (ABANDON_LOAD)
    check_at: float = 0.0  # schedule "dashjs": when its schedule timer next checks whether to ask

    @property
    def complete(self) -> bool:
        return self.next_index >= self.count


class PlayerSession:
    """The sans-I/O player. Times are seconds on the caller's clock."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        abr_video: AbrAlgorithm,
        abr_audio: AbrAlgorithm,
        start_time: float,
        config: PlayerConfig | None = None,
        base_path: str = "",
    ) -> None:
        self.manifest = manifest
        self.config = config or PlayerConfig()
        self.base_path = base_path
        self.start_time = start_time
        self.duration_s = manifest.duration_s
        self.streams = self._make_streams(manifest, {"video": abr_video, "audio": abr_audio})
        for stream in self.streams.values():
            stream.check_at = start_time
        self.state = "startup"  # startup | playing | stalled | ended
        self.position_s = 0.0
        self.clock_s = start_time
        self.stall_start: float | None = None
        self.stall_stream = ""
        self.stall_at_end: EndStall | None = None
        self.startup_delay_s: float | None = None
        self.end_reason = ""
        self.ended_at: float | None = None
        self.segments: list[SegmentRow] = []
        self.decisions: list[DecisionRow] = []
        self.inits: list[FetchResult] = []
        self.stalls: list[StallEnded] = []
        self._events: deque[Event] = deque()

    @staticmethod
    def _make_streams(manifest: Manifest, abrs: dict[str, AbrAlgorithm]) -> dict[str, _Stream]:
        streams = {}
        for name in STREAMS:
            try:
                aset = manifest.adaptation_set(name)
            except ConfigError:
                continue
            streams[name] = _Stream(name=name, aset=aset, abr=abrs[name], count=manifest.segment_count(name))
        if "video" not in streams and "audio" not in streams:
            raise ConfigError("MPD", "neither a video nor an audio AdaptationSet")
        return streams

    # ------------------------------------------------------------ queries

    def buffer_s(self, stream: str) -> float:
        """Media seconds of ``stream`` downloaded and not yet played."""
        return max(0.0, self.streams[stream].buffered_end_s - self.position_s)

    @property
    def done(self) -> bool:
        return self.state == "ended"

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    # ------------------------------------------------------------ driving

    def next_action(self, now: float) -> Action:
        """What to do at ``now``; call until it returns a wait or done action."""
        self.advance(now)
        if self.state == "ended":
            return DoneAction(reason=self.end_reason)
        for stream in self.streams.values():
            if self._may_request(stream):
                if stream.chosen is None:
                    stream.chosen = self._decide(stream, now)
                    if self.clock_s < stream.not_before - EPS:  # the ABR asked to wait (BOLA's delay)
                        continue
                return self._request(stream, now)
        return WaitAction(until=self.next_wakeup())

    def _may_request(self, stream: _Stream) -> bool:
        if stream.outstanding is not None or stream.complete or self.clock_s < stream.not_before - EPS:
            return False
        if self.clock_s < stream.check_at - EPS:  # dash.js's schedule timer has not fired yet
            return False
        if self.buffer_s(stream.name) < self._buffer_target(stream) - 1e-6:
            return True
        if self._dashjs_schedule:  # this check did not ask: the timer fires again SCHEDULE_TIMEOUT_S later
            missed = int((self.clock_s - stream.check_at) / SCHEDULE_TIMEOUT_S + EPS) + 1
            stream.check_at += missed * SCHEDULE_TIMEOUT_S
        return False

    @property
    def _dashjs_schedule(self) -> bool:
        return self.config.schedule == "dashjs"

    def _follows_video(self, stream: _Stream) -> bool:
        return self._dashjs_schedule and stream.name == "audio" and "video" in self.streams

    def _buffer_target(self, stream: _Stream) -> float:
        """How much of ``stream`` the player buffers before it asks for more (dash.js: ``bufferTarget``, less a
        segment for a stream that does not follow another: ``_shouldBuffer``)."""
        segment = self.manifest.segment_duration_s(stream.name)
        if self._follows_video(stream):
            return min(self.config.max_buffer_s, max(self.buffer_s("video") + 1.0, segment))
        if self._dashjs_schedule and self.config.max_buffer_s > segment:
            return self.config.max_buffer_s - segment
        return self.config.max_buffer_s

    def _request(self, stream: _Stream, now: float) -> FetchAction:
        assert stream.chosen is not None
        rep = stream.aset.representations[stream.chosen]
        init = init_url(rep)
        if init is not None and stream.chosen not in stream.inits:
            action = FetchAction(stream=stream.name, path=self._url(init), kind="init", level=stream.chosen, index=None)
        else:
            action = FetchAction(
                stream=stream.name,
                path=self._url(segment_url(rep, stream.next_index)),
                kind="media",
                level=stream.chosen,
                index=stream.next_index,
            )
        stream.outstanding = action
        if self._dashjs_schedule:  # another stream's timer callback runs after this one's request went out
            for other in self.streams.values():
                if other is not stream and other.outstanding is None and other.check_at < now + SCHEDULE_GAP_S:
                    other.check_at = now + SCHEDULE_GAP_S
        return action

    def _url(self, relative: str) -> str:
        return posixpath.join(self.base_path, relative) if self.base_path else relative

    def _decide(self, stream: _Stream, now: float) -> int:
        state = self._abr_state(stream, now)
        decision: Decision = stream.abr.choose(state)
        level = min(max(decision.level, 0), state.top)
        stream.memo = decision.memo
        if stream.last_level is None and stream.name in self.config.initial_bps:  # dash.js: the initial bitrate
            level = optimal_level(stream.aset.bitrates_bps, self.config.initial_bps[stream.name] / 1000.0)
        if stream.hold is not None:
            if now < stream.hold[0]:
                level = stream.hold[1]
            else:
                stream.hold = None
        if decision.delay_s > 0:
            stream.not_before = max(stream.not_before, now + decision.delay_s)
        if self.config.fast_switch and stream.hold is None and level != stream.last_level:
            self._fast_switch(stream, level)
        self._record_decision(stream, now, stream.abr.name, state.buffer_s, decision.estimate_bps, level)
        return level

    def _fast_switch(self, stream: _Stream, level: int) -> None:
        """dash.js's fast switch (5.2.1, ``_prepareForFastQualitySwitch`` 40314): when the segment under the playhead
        was downloaded at a lower bitrate than ``level``'s, ask again from it. dash.js means to look 1.5 segments
        ahead of the playhead, but its margin comes out as 0 (the ABR's Representation has no fragmentDuration:
        ``1.5 * null``), so the segment it replaces is the one being played; we do as it does."""
        seg = self.manifest.segment_duration_s(stream.name)
        index = min(int(self.position_s / seg + EPS), stream.count - 1) if seg > 0 else 0
        held = stream.levels.get(index)
        if index >= stream.next_index or held is None:
            return
        rates = stream.aset.bitrates_bps
        if rates[held] < rates[level]:
            stream.next_index = index

    def _record_decision(self, stream: _Stream, now: float, algorithm: str, buffer_s: float,
                         estimate_bps: float | None, level: int) -> None:
        row = DecisionRow(t=now, stream=stream.name, index=stream.next_index, algorithm=algorithm,
                          buffer_s=buffer_s, throughput_bps=estimate_bps, level=level,
                          bitrate_bps=stream.aset.bitrates_bps[level])
        self.decisions.append(row)
        self._events.append(LevelChosen(row=row))

    def check_abandon(self, stream_name: str, progress: Progress, now: float, *, sent: float | None = None) -> bool:
        """dash.js's ways out of ``stream_name``'s outstanding media request (sent at ``sent``, default
        ``progress.t_request``) at ``now``: True when it is abandoned (the caller cancels it). Its XHR timeout
        asks the same URL again a second later; the abandon rule asks the same segment at a lower level."""
        rule, stream = self.config.abandon, self.streams[stream_name]
        action = stream.outstanding
        if rule is None or action is None or action.kind != "media":
            return False
        assert action.index is not None
        self.advance(now)
        tries = stream.timeouts.get(action.index, 0)
        if now - (progress.t_request if sent is None else sent) >= REQUEST_TIMEOUT_S and tries < RETRY_ATTEMPTS:
            stream.timeouts[action.index] = tries + 1
            stream.outstanding, stream.chosen = None, action.level
            stream.not_before = now + RETRY_INTERVAL_S
            self._record_decision(stream, now, TIMEOUT, self.buffer_s(stream_name), None, action.level)
            self._events.append(RequestAbandoned(t=now, stream=stream_name, index=action.index, level=action.level,
                                                 to_level=action.level, loaded=progress.loaded, total=progress.total,
                                                 throughput_bps=None, reason=TIMEOUT))
            return True
        if action.index in stream.abandoned:
            return False
        buffer = self.buffer_s(stream_name)
        verdict = rule.decide(progress, now=now, buffer_s=buffer, stable_buffer_s=self.config.max_buffer_s,
                              level=action.level, bitrates_bps=stream.aset.bitrates_bps,
                              segment_duration_s=self.manifest.segment_media_duration_s(stream_name, action.index))
        if verdict is None:
            return False
        stream.abandoned.add(action.index)
        stream.outstanding, stream.chosen = None, verdict.level
        stream.hold = (now + ABANDON_LOAD_S, verdict.level)
        self._record_decision(stream, now, ABANDON, buffer, verdict.throughput_bps, verdict.level)
        self._events.append(RequestAbandoned(t=now, stream=stream_name, index=action.index, level=action.level,
                                             to_level=verdict.level, loaded=progress.loaded, total=progress.total,
                                             throughput_bps=verdict.throughput_bps))
        return True

    def _abr_state(self, stream: _Stream, now: float) -> PlayerState:
        extra = {"memo": stream.memo} if stream.memo is not None else {}
        return PlayerState(
            now=now,
            buffer_s=self.buffer_s(stream.name),
            bitrates_bps=stream.aset.bitrates_bps,
            segment_duration_s=self.manifest.segment_duration_s(stream.name),
            max_buffer_s=self.config.max_buffer_s,
            last_level=stream.last_level,
            history=tuple(stream.history),
            next_index=stream.next_index,
            segment_count=stream.count,
            position_s=self.position_s,
            abandons=len(stream.abandoned),  # each index is abandoned at most once
            **extra,
        )

    def next_wakeup(self) -> float | None:
        """When the session changes state without a download finishing (None: never)."""
        idle = [s for s in self.streams.values() if s.outstanding is None and not s.complete]
        times = [s.not_before for s in idle if s.not_before > self.clock_s]  # a retry or the ABR's delay
        idle = [s for s in idle if s.not_before <= self.clock_s + EPS]
        if self._dashjs_schedule:  # each stream's schedule timer, also while not playing
            times += [max(s.check_at, self.clock_s + 1e-5) for s in idle]
        if self.state != "playing":
            return min(times, default=None)
        times.append(self.clock_s + min(self.buffer_s(s) for s in self.streams))
        for stream in idle:
            if not self._dashjs_schedule and not self._follows_video(stream):  # audio following video waits for video
                excess = self.buffer_s(stream.name) - self._buffer_target(stream)
                times.append(self.clock_s + max(excess, 0.0) + 1e-5)
        return min(times)

    # ---------------------------------------------------------- playback

    def advance(self, now: float) -> None:
        """Play media from the last call up to ``now`` (stall or end on the way)."""
        if now < self.clock_s - EPS:
            raise RunError(f"player clock went backwards: {now} < {self.clock_s}")
        if self.state == "playing":
            self._play_until(now)
        self.clock_s = max(self.clock_s, now)

    def _play_until(self, now: float) -> None:
        starving = min(self.streams, key=self.buffer_s)
        available = self.buffer_s(starving)
        elapsed = now - self.clock_s
        if elapsed < available - EPS:
            self.position_s += elapsed
            return
        self.position_s += available
        t = self.clock_s + available
        if self.position_s >= self.duration_s - 1e-6:
            self._end(t, "ended")
        else:
            self.state, self.stall_start, self.stall_stream = "stalled", t, starving
            self._events.append(StallStarted(t=t, stream=starving))

    def _end(self, t: float, reason: str) -> None:
        self.state, self.end_reason, self.ended_at = "ended", reason, t
        self._events.append(PlaybackEnded(t=t, reason=reason))

    def stop(self, now: float, reason: str) -> None:
        """End the session early (duration limit, error)."""
        if self.state != "ended":
            self.advance(now)
        if self.state == "stalled" and self.stall_start is not None:
            self.stall_at_end = EndStall(stream=self.stall_stream, t_start=self.stall_start,
                                         duration_s=max(0.0, now - self.stall_start))
        if self.state != "ended":
            self._end(now, reason)

    def _ready(self) -> bool:
        remaining = self.duration_s - self.position_s
        need = min(self.config.threshold_s, remaining) - 1e-6
        return all(self.buffer_s(s) >= need for s in self.streams)

    def _maybe_resume(self, now: float) -> float:
        """Start or resume playback when ready; return the stall time that ended (0 if none)."""
        if self.state not in ("startup", "stalled") or not self._ready():
            return 0.0
        stalled = 0.0
        if self.state == "startup":
            self.startup_delay_s = now - self.start_time
            self._events.append(PlaybackStarted(t=now, startup_delay_s=self.startup_delay_s))
        else:
            stalled = now - (self.stall_start or now)
            ended = StallEnded(t=now, duration_s=stalled)
            self.stalls.append(ended)
            self._events.append(ended)
        self.state, self.stall_start = "playing", None
        return stalled

    # ------------------------------------------------------------ results

    def on_fetch_complete(self, result: FetchResult, now: float) -> None:
        """Account for a finished GET issued by :meth:`next_action`."""
        stream = self._stream_for(result.path)
        action = stream.outstanding
        assert action is not None
        if result.status != 200:
            raise RunError(f"GET {result.path}: HTTP {result.status}")
        self.advance(now)
        stream.outstanding = None
        stream.check_at = now  # dash.js: a stream checks again once its download is appended
        if action.kind == "init":
            stream.inits.add(action.level)
            stream.tracks[action.level] = parse_init(result.head)
            self.inits.append(result)
            return
        self._on_media(stream, action, result, now)

    def _stream_for(self, path: str) -> _Stream:
        for stream in self.streams.values():
            if stream.outstanding is not None and stream.outstanding.path == path:
                return stream
        raise RunError(f"no outstanding request for {path!r}")

    def _on_media(self, stream: _Stream, action: FetchAction, result: FetchResult, now: float) -> None:
        assert action.index is not None
        replacement = action.index < stream.frontier  # a fast switch's: the buffer already holds this segment
        seg = 0.0 if replacement else self._media_added_s(stream, action, result)
        stream.buffered_end_s += seg
        stream.levels[action.index] = action.level
        stream.next_index = action.index + 1
        stream.frontier = max(stream.frontier, stream.next_index)
        if stream.complete:  # the last segment: the stream is buffered to the end (MSE's endOfStream)
            stream.buffered_end_s = max(stream.buffered_end_s, self.duration_s)
        stream.chosen, stream.last_level = None, action.level
        buffer = self.buffer_s(stream.name)
        stream.history.append(
            Sample(
                level=action.level,
                bytes=result.bytes,
                t_request=result.t_request,
                t_first_byte=result.t_first_byte,
                t_last_byte=result.t_last_byte,
                duration_s=seg,
                buffer_after_s=buffer,
                replacement=replacement,
                cached=result.cached,
            )
        )
        row = self._row(stream, action, result, buffer)
        stalled = self._maybe_resume(now)
        if stalled > 0:
            row = replace(row, stall_s=stalled)
        self.segments.append(row)
        self._events.append(SegmentReceived(row=row))

    def _media_added_s(self, stream: _Stream, action: FetchAction, result: FetchResult) -> float:
        """Media seconds segment ``action`` adds to the buffer: up to where its samples' presentation ends, as a
        browser's SourceBuffer counts it (dash.mp4; AAC's first "5 s" segment adds 4.949 s), or the MPD's duration
        when the segment has no such boxes (generated media) or they do not follow the buffer."""
        assert action.index is not None
        nominal = self.manifest.segment_media_duration_s(stream.name, action.index)
        track = stream.tracks.get(action.level)
        end = presentation_end_s(result.head, track) if track is not None and result.head else None
        if end is None or not 0 < end - stream.buffered_end_s <= 2 * nominal + 1.0:
            return nominal
        return end - stream.buffered_end_s

    def _row(self, stream: _Stream, action: FetchAction, result: FetchResult, buffer: float) -> SegmentRow:
        assert action.index is not None
        return SegmentRow(
            stream=stream.name,
            index=action.index,
            level=action.level,
            bitrate_bps=stream.aset.bitrates_bps[action.level],
            bytes=result.bytes,
            t_request=result.t_request,
            t_first_byte=result.t_first_byte,
            t_last_byte=result.t_last_byte,
            buffer_s=buffer,
            stall_s=0.0,
            transport=result.transport,
        )

    def report(self) -> PlayerReport:
        return PlayerReport(
            segments=tuple(self.segments),
            decisions=tuple(self.decisions),
            inits=tuple(self.inits),
            mpd=None,
            startup_delay_s=self.startup_delay_s,
            stalls=tuple(self.stalls),
            end_reason=self.end_reason or self.state,
            ended_at=self.ended_at,
            stall_at_end=self.stall_at_end,
        )


# ------------------------------------------------------------------ driver


def _create_abr(name: str, fixed_level: int) -> AbrAlgorithm:
    """``fixed`` takes the level (a ladder with fewer levels gets its top one); the others take no parameter."""
    return create_abr(name, level=fixed_level) if name == "fixed" else create_abr(name)

Sleep = Callable[[float], Awaitable[None]]


async def play(
    mpd_url_path: str,
    fetcher: Fetcher,
    *,
    abr: str = DEFAULT_ABR,
    abr_audio: str = DEFAULT_ABR,
    fixed_level: int = 0,
    max_buffer_s: float = 10.0,
    threshold_s: float = 1.0,
    abandon: AbandonRule | None = None,
    initial_bps: Mapping[str, float] | None = None,
    schedule: str = "buffer",
    fast_switch: bool = False,
    clock: Clock = time.monotonic,
    max_duration_s: float | None = None,
    mpd_text: str | bytes | None = None,
    prelude: tuple[str, ...] = (),
) -> PlayerReport:
    """Fetch the MPD (stream "mpd"), then play it in real time; return the report.

    ``prelude``: URL paths fetched first, in order, on the MPD's stream (a browser's page and script). The MPD
    body comes from ``mpd_text`` when given, else from the fetch
    result's ``body`` attribute (see the note in the module's report: the
    :class:`FetchResult` seam has no body field yet). ``max_duration_s`` stops
    the session that many seconds after its first request (the prelude's, else the MPD's: a browser's session
    time includes its page); cancelling the task
    stops it too (end reason "terminated") and still returns the report.
    """
    config = PlayerConfig(max_buffer_s=max_buffer_s, threshold_s=threshold_s, abandon=abandon,
                          initial_bps=dict(initial_bps or {}), schedule=schedule, fast_switch=fast_switch)
    t_begin = clock()  # the session's time counts from its first request, the prelude's if any (as a browser's)
    for path in prelude:  # e.g. the player's page and script, one after the other as a browser loads them
        got = await fetcher.fetch("mpd", path)
        if got.status != 200:
            raise RunError(f"GET {path}: HTTP {got.status}")
    mpd_result = await fetcher.fetch("mpd", mpd_url_path)
    manifest = parse_mpd(mpd_text if mpd_text is not None else _body(mpd_result))
    session = PlayerSession(
        manifest,
        abr_video=_create_abr(abr, fixed_level),
        abr_audio=_create_abr(abr_audio, fixed_level),
        config=config,
        start_time=mpd_result.t_request,
        base_path=posixpath.dirname(mpd_url_path),
    )
    deadline = None if max_duration_s is None else t_begin + max_duration_s
    try:
        await _run(session, fetcher, clock, deadline)
    except asyncio.CancelledError:  # the process was told to stop (SIGTERM): keep what was played so far
        if not session.done:
            session.stop(clock(), "terminated")
    return replace(session.report(), mpd=mpd_result)


def _body(result: FetchResult) -> bytes:
    body = getattr(result, "body", None)
    if not isinstance(body, bytes | str):
        raise RunError("the fetcher returned no MPD body (FetchResult.body) and no mpd_text was given")
    return body.encode() if isinstance(body, str) else body


class _Watched:
    """A media request's transfers as the abandon rule sees them: the newest one (a transport's retry of the
    request starts a new transfer, and its progress starts again)."""

    def __init__(self, t_request: float) -> None:
        self.sent = t_request  # the player's request (its XHR timeout counts from it), whatever the transport retries
        self.transfer: Transfer | None = None
        self.progress = Progress(t_request=t_request)

    def attach(self, transfer: Transfer) -> None:
        if self.transfer is not None:
            self.progress = Progress(t_request=transfer.t_request)
        self.transfer = transfer

    def poll(self, now: float) -> Progress:
        if self.transfer is not None:
            self.progress.observe(now, self.transfer.nbytes, self.transfer.length)
        return self.progress


@dataclass
class _Fetching:
    action: FetchAction
    watched: _Watched | None = None  # media requests under the abandon rule


async def _run(session: PlayerSession, fetcher: Fetcher, clock: Clock, deadline: float | None) -> None:
    tasks: dict[asyncio.Task[FetchResult], _Fetching] = {}
    try:
        while not session.done:
            action = session.next_action(clock())
            if isinstance(action, FetchAction):
                tasks.update([_start(session, fetcher, action, clock)])
            elif isinstance(action, WaitAction):
                await _wait(session, tasks, action.until, clock, deadline)
    finally:
        for task in tasks:
            task.cancel()


def _start(session: PlayerSession, fetcher: Fetcher, action: FetchAction,
           clock: Clock) -> tuple[asyncio.Task[FetchResult], _Fetching]:
    """The fetch task of ``action``; a media request under the abandon rule is watched (its transport hands its
    transfers to :data:`TRANSFER_WATCH`, set in the task's own context)."""
    if session.config.abandon is None or action.kind != "media":
        return asyncio.create_task(fetcher.fetch(action.stream, action.path)), _Fetching(action)
    watched = _Watched(clock())
    context = contextvars.copy_context()
    context.run(TRANSFER_WATCH.set, watched.attach)
    return asyncio.create_task(fetcher.fetch(action.stream, action.path), context=context), _Fetching(action, watched)


async def _wait(
    session: PlayerSession,
    tasks: dict[asyncio.Task[FetchResult], _Fetching],
    until: float | None,
    clock: Clock,
    deadline: float | None,
) -> None:
    now = clock()
    if deadline is not None and now >= deadline:
        session.stop(now, "duration limit")
        return
    wake = min((t for t in (until, deadline) if t is not None), default=None)
    timeout = None if wake is None else max(0.0, wake - now)
    if not tasks:
        if timeout is None:
            raise RunError("player stuck: nothing to fetch and nothing to wait for")
        await asyncio.sleep(timeout)
        return
    watching = any(f.watched is not None for f in tasks.values())
    if watching:  # the progress events' pace
        timeout = PROGRESS_INTERVAL_S if timeout is None else min(timeout, PROGRESS_INTERVAL_S)
    done, _ = await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        tasks.pop(task)
        session.on_fetch_complete(task.result(), clock())
    if watching:
        _check_abandon(session, tasks, clock())


def _check_abandon(session: PlayerSession, tasks: dict[asyncio.Task[FetchResult], _Fetching], now: float) -> None:
    """Each watched request's progress to the abandon rule; the ones it abandons are cancelled (their
    transports reset the stream or close the connection: :data:`ABANDONED`)."""
    for task, fetching in list(tasks.items()):
        if fetching.watched is None or task.done():
            continue
        if session.check_abandon(fetching.action.stream, fetching.watched.poll(now), now, sent=fetching.watched.sent):
            del tasks[task]
            task.cancel(ABANDONED)


__all__ = [
    "Action",
    "DoneAction",
    "FetchAction",
    "PlayerConfig",
    "PlayerReport",
    "PlayerSession",
    "WaitAction",
    "play",
]
