"""What every ABR algorithm shares: the player state it looks at, the decision it returns, its base class.

Every algorithm is an :class:`AbrAlgorithm`: ``choose(state) -> Decision``.
Algorithms that need memory between decisions (BOLA's startup phase, the
DYNAMIC rule's hysteresis, robust MPC's past prediction errors) return it in
``Decision.memo``; the player hands it back in the next ``state.memo``, so
``choose`` itself has no hidden state and can be tested with a table.

Levels are 0-based indices into ``state.bitrates_bps`` (ascending). Each
algorithm is a module of this package; :mod:`.registry` names them (a literal
dict, like ``config.kinds``) and creates them (:func:`.registry.create_abr`).

Throughput samples (per DESIGN.md §4): a segment's *throughput* is
``bytes / (t_last_byte - t_first_byte)``; its *request rate* is
``bytes / (t_last_byte - t_request)`` (what GPAC and Pensieve's MPC measure);
its *latency* is ``t_first_byte - t_request``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

#: the ABR algorithm of a player that is given none (ours and GPAC; dash.js has its own: players.default_abr)
DEFAULT_ABR = "grate"
EMPTY_MEMO: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One downloaded media segment of the stream being decided for."""

    level: int
    bytes: int
    t_request: float
    t_first_byte: float
    t_last_byte: float
    duration_s: float = 0.0  # media seconds it added to the buffer (0 for a replacement)
    buffer_after_s: float = 0.0  # buffer right after it arrived
    replacement: bool = False  # it replaced buffered media (a fast switch), so it did not grow the buffer
    cached: bool = False  # the browser cache answered it (dash.httpcache): no network time, not a throughput sample

    @property
    def throughput_bps(self) -> float:
        return 8 * self.bytes / max(self.t_last_byte - self.t_first_byte, 1e-3)

    @property
    def request_rate_bps(self) -> float:
        return 8 * self.bytes / max(self.t_last_byte - self.t_request, 1e-3)

    @property
    def latency_s(self) -> float:
        return max(0.0, self.t_first_byte - self.t_request)


@dataclass(frozen=True, kw_only=True)
class PlayerState:
    """What an ABR algorithm may look at when choosing the next segment's level."""

    now: float
    buffer_s: float  # media seconds buffered for this stream
    bitrates_bps: tuple[int, ...]  # the ladder, ascending
    segment_duration_s: float
    max_buffer_s: float = 10.0
    last_level: int | None = None  # level of the previous segment (None: first)
    history: tuple[Sample, ...] = ()  # this stream's downloaded segments, oldest first
    next_index: int = 0  # 0-based index of the segment being chosen
    segment_count: int | None = None  # segments in the presentation, when known
    position_s: float = 0.0  # the playhead (media seconds played)
    abandons: int = 0  # this stream's requests abandoned so far
    memo: Mapping[str, Any] = field(default_factory=lambda: EMPTY_MEMO)

    @property
    def top(self) -> int:
        return len(self.bitrates_bps) - 1

    @property
    def measured(self) -> tuple[Sample, ...]:
        """The samples that measured the network: ``history`` without the cache's answers (dash.js 5.2.1 leaves
        those out of its throughput and latency: ``ThroughputModel._isCachedResponse``)."""
        return tuple(s for s in self.history if not s.cached)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A choice, the throughput estimate behind it (bit/s, None if unused), and memory."""

    level: int
    estimate_bps: float | None = None
    memo: Mapping[str, Any] = field(default_factory=lambda: EMPTY_MEMO)
    delay_s: float = 0.0  # wait this long before requesting the segment (dash.js BOLA's time-to-load delay)


class AbrAlgorithm(abc.ABC):
    """An ABR algorithm: ``choose`` must be a pure function of ``state``."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def choose(self, state: PlayerState) -> Decision:
        """Pick the level of segment ``state.next_index``."""



# ---------------------------------------------------------------- helpers


def highest_at_most(bitrates: tuple[int, ...], rate_bps: float) -> int | None:
    """Index of the highest bitrate <= ``rate_bps``, None when even level 0 is above."""
    best = None
    for i, b in enumerate(bitrates):
        if b <= rate_bps:
            best = i
    return best


def harmonic_mean(values: list[float]) -> float:
    return len(values) / sum(1.0 / max(v, 1e-9) for v in values)
