"""What a :class:`~nest_experiments.dash.core.player.PlayerSession` tells its driver
(:meth:`~nest_experiments.dash.core.player.PlayerSession.next_event`): documented frozen dataclasses, one per event,
in the style of aioquic's ``quic/events.py``. Times are on the session's clock (s)."""

from __future__ import annotations

from dataclasses import dataclass

from nest_experiments.dash.core.records import ABANDON, DecisionRow, SegmentRow


@dataclass(frozen=True, kw_only=True)
class PlaybackStarted:
    t: float
    startup_delay_s: float


@dataclass(frozen=True, kw_only=True)
class StallStarted:
    t: float
    stream: str  # the stream whose buffer ran empty


@dataclass(frozen=True, kw_only=True)
class StallEnded:
    t: float
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class SegmentReceived:
    row: SegmentRow


@dataclass(frozen=True, kw_only=True)
class LevelChosen:
    row: DecisionRow


@dataclass(frozen=True, kw_only=True)
class PlaybackEnded:
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
