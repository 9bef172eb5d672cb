"""What a :class:`~nest_experiments.dash.core.player.PlayerSession` tells its driver
(:meth:`~nest_experiments.dash.core.player.PlayerSession.next_event`): documented frozen dataclasses, one per event,
in the style of aioquic's ``quic/events.py``. Times are on the session's clock (s)."""

from __future__ import annotations

from dataclasses import dataclass

from nest_experiments.dash.core.records import ABANDON, DecisionRow, SegmentRow


@dataclass(frozen=True, kw_only=True)
class PlaybackStarted:
    """Playback began (every stream held its start threshold), ``startup_delay_s`` after the session's start."""

    t: float
    startup_delay_s: float


@dataclass(frozen=True, kw_only=True)
class StallStarted:
    """A stream's buffer ran empty before the end: playback stopped."""

    t: float
    stream: str  # the stream whose buffer ran empty


@dataclass(frozen=True, kw_only=True)
class StallEnded:
    """Playback resumed after a stall of ``duration_s``."""

    t: float
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class SegmentReceived:
    """A media segment arrived (its ``segments.csv`` row)."""

    row: SegmentRow


@dataclass(frozen=True, kw_only=True)
class LevelChosen:
    """A segment's level was chosen (its ``abr_decisions.csv`` row: by which rule, on what buffer and estimate)."""

    row: DecisionRow


@dataclass(frozen=True, kw_only=True)
class PlaybackEnded:
    """The session is over (``reason``: "ended" or why it stopped: the duration limit, "terminated", ...)."""

    t: float
    reason: str


@dataclass(frozen=True, kw_only=True)
class RequestAbandoned:
    """A media request the abandon rule cancelled: asked again at ``to_level``."""

    t: float
    stream: str
    index: int
    level: int
    to_level: int
    loaded: int  # body bytes received before the cancel
    total: int  # its content-length
    throughput_bps: float | None  # what the rule measured (None: a timeout)
    reason: str = ABANDON  # ABANDON: the rule; TIMEOUT: dash.js's XHR timeout (the same level asked again)


Event = (PlaybackStarted | StallStarted | StallEnded | SegmentReceived | LevelChosen | PlaybackEnded
         | RequestAbandoned)
