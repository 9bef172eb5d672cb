"""``dashjs``: dash.js 5.2.1's default ABR (its rules side by side, the lowest request winning)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from nest_experiments.dash.core.abandon import optimal_level as optimal_level_kbit
from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState, Sample
from nest_experiments.dash.core.abr.throughput import ThroughputEstimator


@dataclass(frozen=True)
class BolaLadder:
    """dash.js 5.2.1 BolaRule's utilities and parameters for a ladder (``_getInitialBolaState`` 68019,
    ``_calculateBolaParameters`` 68053): ``u_i = ln(b_i / b_0) + 1``, ``T = max(bufferTimeDefault, 10 s + 2 s x
    levels)``, ``gp = (u_max - 1) / (T / 10 - 1)``, ``Vp = 10 / gp``."""

    bitrates: tuple[int, ...]
    utilities: tuple[float, ...]
    gp: float
    vp: float

    MINIMUM_BUFFER_S: ClassVar[float] = 10.0
    MINIMUM_BUFFER_PER_LEVEL_S: ClassVar[float] = 2.0

    @classmethod
    def of(cls, bitrates: tuple[int, ...], buffer_time_default_s: float) -> BolaLadder | None:
        """None for a ladder whose first level has the highest utility (one bitrate: BOLA_STATE_ONE_BITRATE)."""
        utilities = tuple(math.log(b / bitrates[0]) + 1 for b in bitrates)
        top = max(range(len(utilities)), key=lambda i: (utilities[i], -i))
        if top == 0:
            return None
        buffer_time = max(buffer_time_default_s, cls.MINIMUM_BUFFER_S + cls.MINIMUM_BUFFER_PER_LEVEL_S * len(bitrates))
        gp = (utilities[top] - 1) / (buffer_time / cls.MINIMUM_BUFFER_S - 1)
        return cls(bitrates=bitrates, utilities=utilities, gp=gp, vp=cls.MINIMUM_BUFFER_S / gp)

    def level(self, buffer_s: float) -> int:
        """``_getRepresentationFromBufferLevel`` (68112): the best score, ties to the higher level."""
        best, score = 0, -math.inf
        for i, (u, b) in enumerate(zip(self.utilities, self.bitrates, strict=True)):
            s = (self.vp * (u - 1 + self.gp) - buffer_s) / b
            if s >= score:
                best, score = i, s
        return best

    def max_buffer(self, level: int) -> float:
        """``_maxBufferLevelForRepresentation`` (68133): above it BOLA would rather wait than download ``level``."""
        return self.vp * (self.utilities[level] + self.gp)

    def min_buffer(self, level: int) -> float:
        """``_minBufferLevelForRepresentation`` (68215): the least buffer at which BOLA picks ``level`` over every
        lower one."""
        q, bq, uq = level, self.bitrates[level], self.utilities[level]
        low = 0.0
        for i in range(q - 1, -1, -1):
            if self.utilities[i] < uq:
                bi, ui = self.bitrates[i], self.utilities[i]
                low = max(low, self.vp * (self.gp + (bq * ui - bi * uq) / (bq - bi)))
        return low


@dataclass(frozen=True)
class _BolaState:
    """dash.js 5.2.1 BolaRule's per-stream state (``bolaState``), created at BOLA's first call."""

    state: str = "startup"  # startup | steady
    placeholder_s: float = 0.0
    current: int | None = None  # currentRepresentation
    last_call: float | None = None  # lastCallTimeMs
    last_finish: float | None = None  # lastSegmentFinishTimeMs
    last_duration_s: float | None = None  # lastSegmentDurationS
    advanced: bool = False  # mostAdvancedSegmentStart is known (a segment arrived since the state exists)


class DashJs(AbrAlgorithm):
    """dash.js 5.2.1's default ABR for one stream: its rules side by side, the lowest request winning.

    What a browser running dash.js 5.2.1 with its default settings decides before each media request
    (``AbrController.checkPlaybackQuality``, line 43156 of dash.all.debug.js in ``dist/modern/esm``):

    - **DYNAMIC**: the ThroughputRule or BolaRule, by the buffer: BOLA from 12 s (``hybridSwitchBufferTime``), back
      to the ThroughputRule below 6 s (``_updateDynamicAbrStrategy`` 43383, on every buffer-level update; we step
      through the buffer right after the last segment arrived and the buffer now).
    - **ThroughputRule** (69264): the highest level at or below the safe throughput (0.9 x the EWMA; weight 1.5 per
      second of download, ``weightDownloadTimeMultiplicationFactor``), once the buffer is loaded (> 0.3 s,
      ``stallThreshold``). No latency term (unlike v2.9.3, :func:`quality_for_bitrate`).
    - **BolaRule** (67880-68410) with its placeholder buffer: created on its first call (STARTUP: the throughput's
      level, placeholder ``minBuf(level) - buffer``), STEADY from the next call whose last segment fits the buffer;
      the placeholder grows by the time since the last download, decays 1 % per segment, is capped by the level's
      ``maxBuf``, grows by a segment for a replacement (fast switch), is cleared when the buffer runs empty and
      deflated when a request is abandoned; BOLA-O; the delay above ``maxBuf`` taken from the placeholder first,
      the rest returned as ``Decision.delay_s`` (``setTimeToLoadDelay``). ``bufferTimeDefault`` is the player's
      max buffer (our dash.js page sets it so).
    - **InsufficientBufferRule** (68564): from the third media segment on (``segmentIgnoreCount`` 2): the lowest
      level when the buffer ran empty, else the level that ``0.7 x average throughput x buffer / segment duration``
      affords.
    - **SwitchHistoryRule** (69169) over the last 8 checks (``SwitchRequestHistory`` 67248): per level from the
      lowest, drops and no-drops of the checks made at that level add up; once they reach 8 samples with drops /
      no-drops > 0.075, a level with drops is capped one below itself.
    - The lowest level any rule asks for wins (``getMinSwitchRequest`` 67540; all at DEFAULT priority); with no
      request the level stays. Each check with a request enters the history as (current level -> new level).

    The AbandonRequestsRule is the player's (``abandon = "dashjs"``, :mod:`nest_experiments.dash.abandon`), and so is
    fast switching (``fast_switch = "dashjs"``): both act on the requests, not on this choice. DroppedFramesRule,
    L2A and LoL+ are off by default in dash.js and not here.
    """

    name = "dashjs"
    HYBRID_SWITCH_BUFFER_S: ClassVar[float] = 12.0
    STALL_THRESHOLD_S: ClassVar[float] = 0.3
    INSUFFICIENT_SAFETY: ClassVar[float] = 0.7
    INSUFFICIENT_IGNORE: ClassVar[int] = 2
    HISTORY_SAMPLES: ClassVar[int] = 8
    HISTORY_THRESHOLD: ClassVar[float] = 0.075
    PLACEHOLDER_DECAY: ClassVar[float] = 0.99

    def __init__(self) -> None:
        self.estimator = ThroughputEstimator(method="ewma", weight_per_s=1.5)

    def choose(self, state: PlayerState) -> Decision:
        memo = state.memo
        rates, history = state.bitrates_bps, state.history
        ladder = BolaLadder.of(rates, state.max_buffer_s)
        empty = state.position_s > 0 and state.buffer_s <= self.STALL_THRESHOLD_S  # BUFFEREMPTY_MEMO (not at time 0)
        bola: _BolaState | None = memo.get("bola")
        if bola is not None and ladder is not None:
            bola = self._bola_events(state, ladder, bola, history[memo.get("seen", 0):], memo.get("abandons", 0))
            if empty and bola.state == "steady":
                bola = replace(bola, placeholder_s=0.0)  # _onBufferEmpty (67903)
        use_bola = bool(memo.get("use_bola", False))
        for b in ([history[-1].buffer_after_s] if len(history) > memo.get("seen", 0) else []) + [state.buffer_s]:
            use_bola = b >= (0.5 if use_bola else 1.0) * self.HYBRID_SWITCH_BUFFER_S
        safe = self.estimator.safe_bps(history)
        requests: list[int] = []
        delay = 0.0
        if use_bola:
            if bola is None:
                bola = _BolaState()
            if ladder is not None:
                level, bola, delay = self._bola(state, ladder, bola, safe)
                if level is not None:
                    requests.append(level)
        elif safe is not None and history and not empty:
            requests.append(optimal_level_kbit(rates, safe / 1e3))
        if len(history) >= self.INSUFFICIENT_IGNORE:
            requests.append(0 if empty else self._insufficient_buffer(state))
        switches: tuple[tuple[int, int], ...] = memo.get("switches", ())
        capped = self.switch_history(switches, state.top)
        if capped is not None:
            requests.append(capped)
        current = state.last_level
        level = min(requests) if requests else (current or 0)
        if requests and current is not None:
            switches = (*switches, (current, int(level < current)))[-self.HISTORY_SAMPLES:]
        if bola is not None and level != current and ladder is not None:
            bola = replace(bola, current=level)  # _onQualityChangeRequested (68004)
        new_memo = {"use_bola": use_bola, "bola": bola, "switches": switches, "seen": len(history),
                    "abandons": state.abandons}
        return Decision(level=level, estimate_bps=safe, memo=new_memo, delay_s=delay)

    def _insufficient_buffer(self, state: PlayerState) -> int:
        """InsufficientBufferRule (68564): the level ``0.7 x average throughput x buffer / segment duration``
        affords (the lowest when that is not positive)."""
        average = self.estimator.average_bps(state.history) or 0.0
        seg = state.segment_duration_s
        bitrate = self.INSUFFICIENT_SAFETY * average * state.buffer_s / seg if seg > 0 else 0.0
        return optimal_level_kbit(state.bitrates_bps, bitrate / 1e3)

    @classmethod
    def switch_history(cls, switches: tuple[tuple[int, int], ...], top: int) -> int | None:
        """SwitchHistoryRule (69169) over ``switches``, the last checks as (level then, 1 if it dropped): the cap, or
        None. From the lowest level up the counts add; the first level where they reach the sample size with
        drops / no-drops above the threshold is the cap, or the level below it when it dropped itself."""
        drops = no_drops = 0
        for level in range(top + 1):
            mine = [d for lv, d in switches if lv == level]
            if not mine:
                continue
            drops += sum(mine)
            no_drops += len(mine) - sum(mine)
            ratio = math.inf if no_drops == 0 else drops / no_drops
            if drops + no_drops >= cls.HISTORY_SAMPLES and ratio > cls.HISTORY_THRESHOLD:
                return level - 1 if level > 0 and sum(mine) > 0 else level
        return None

    def _bola_events(self, state: PlayerState, ladder: BolaLadder, bola: _BolaState, new: tuple[Sample, ...],
                     abandons_before: int) -> _BolaState:
        """BolaRule's handlers between two checks: each downloaded segment (``_onMediaFragmentLoaded`` 68171 and
        ``_checkNewSegment`` 67976), then an abandoned request (``_onFragmentLoadingAbandoned`` 68238)."""
        for sample in new:
            replacement = bola.advanced and sample.replacement
            current = sample.level
            placeholder = bola.placeholder_s * self.PLACEHOLDER_DECAY
            buffer_before = max(0.0, sample.buffer_after_s - sample.duration_s)
            at_request = buffer_before + (sample.t_last_byte - sample.t_request)
            placeholder = min(placeholder, max(0.0, ladder.max_buffer(current) - at_request))
            if replacement:
                placeholder += state.segment_duration_s
            bola = replace(bola, placeholder_s=placeholder, current=current, last_finish=sample.t_last_byte,
                           last_duration_s=state.segment_duration_s, advanced=True)
        if state.abandons > abandons_before and bola.current is not None:
            want = ladder.min_buffer(bola.current) if bola.current > 0 else ladder.MINIMUM_BUFFER_S
            bola = replace(bola, placeholder_s=min(bola.placeholder_s, max(0.0, want - state.buffer_s)))
        return bola

    def _bola(self, state: PlayerState, ladder: BolaLadder, bola: _BolaState,
              safe: float | None) -> tuple[int | None, _BolaState, float]:
        """BolaRule.getSwitchRequest (68360): (level or None, its new state, the delay before the request)."""
        rates, buffer = state.bitrates_bps, state.buffer_s
        if bola.state == "startup":  # _handleBolaStateStartup (68272)
            if safe is None:
                return None, bola, 0.0
            level = optimal_level_kbit(rates, safe / 1e3)
            steady = bola.last_duration_s is not None and buffer >= bola.last_duration_s
            return level, replace(bola, placeholder_s=max(0.0, ladder.min_buffer(level) - buffer), current=level,
                                  state="steady" if steady else "startup"), 0.0
        # _handleBolaStateSteady (68298), after _updatePlaceholderBuffer (68154)
        placeholder = bola.placeholder_s
        since = bola.last_finish if bola.last_finish is not None else bola.last_call
        if since is not None:
            placeholder += max(0.0, state.now - since)
        level = ladder.level(buffer + placeholder)
        tput = optimal_level_kbit(rates, safe / 1e3 if safe is not None else math.nan)
        current = bola.current if bola.current is not None else level
        if level > current and level > tput:  # BOLA-O
            level = tput if tput > current else current
        delay = max(0.0, buffer + placeholder - ladder.max_buffer(level))
        if delay <= placeholder:
            placeholder, delay = placeholder - delay, 0.0
        else:
            delay, placeholder = delay - placeholder, 0.0
            if level == state.top:
                delay = 0.0
        bola = replace(bola, placeholder_s=placeholder, current=level, last_call=state.now, last_finish=None)
        return level, bola, delay
