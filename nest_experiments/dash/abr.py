"""ABR algorithms as pure functions of a frozen player state.

Every algorithm is an :class:`AbrAlgorithm`: ``choose(state) -> Decision``.
Algorithms that need memory between decisions (BOLA's startup phase, the
DYNAMIC rule's hysteresis, robust MPC's past prediction errors) return it in
``Decision.memo``; the player hands it back in the next ``state.memo``, so
``choose`` itself has no hidden state and can be tested with a table.

Levels are 0-based indices into ``state.bitrates_bps`` (ascending). Register
new algorithms with :func:`register_abr` (like aioquic's
``register_congestion_control``) and create them with :func:`create_abr`.

Throughput samples (per DESIGN.md §4): a segment's *throughput* is
``bytes / (t_last_byte - t_first_byte)``; its *request rate* is
``bytes / (t_last_byte - t_request)`` (what GPAC and Pensieve's MPC measure);
its *latency* is ``t_first_byte - t_request``.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from nest_experiments.dash.abandon import optimal_level as optimal_level_kbit
from nest_experiments.dash.learned import policy as learned
from nest_experiments.errors import ConfigError

_EMPTY: Mapping[str, Any] = MappingProxyType({})


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
    memo: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

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
    memo: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    delay_s: float = 0.0  # wait this long before requesting the segment (dash.js BOLA's time-to-load delay)


class AbrAlgorithm(abc.ABC):
    """An ABR algorithm: ``choose`` must be a pure function of ``state``."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def choose(self, state: PlayerState) -> Decision:
        """Pick the level of segment ``state.next_index``."""


_REGISTRY: dict[str, Callable[..., AbrAlgorithm]] = {}


def register_abr(name: str, factory: Callable[..., AbrAlgorithm]) -> None:
    """Make ``factory(**params)`` available as ``name``."""
    _REGISTRY[name] = factory


def available_abrs() -> list[str]:
    return sorted(_REGISTRY)


def create_abr(name: str, **params: Any) -> AbrAlgorithm:
    """Instantiate a registered algorithm; unknown names raise :class:`ConfigError`."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ConfigError("abr", f"unknown ABR {name!r} (known: {', '.join(available_abrs())})") from None
    try:
        return factory(**params)
    except TypeError as exc:
        raise ConfigError(f"abr.{name}", f"bad parameters: {exc}") from exc


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


# ---------------------------------------------------------------- grate


class GpacRate(AbrAlgorithm):
    """GPAC ``algo=grate`` ("GPAC legacy rate"), as the NeST paper used it.

    Source: gpac/gpac ``src/media_tools/dash_client.c``,
    ``dash_do_rate_adaptation_legacy_rate`` (called from
    ``dash_do_rate_adaptation`` with ``go_up_bitrate = false``). GPAC's rate
    is that of the *last segment only*, ``8 * bytes_per_sec``, measured from
    the request to the last byte (the ``[HTTP] ... since request`` figure).
    It picks the highest representation whose bandwidth is <= that rate and
    looks at no buffer level (the buffer-aware variant is ``gbuf``). When no
    representation fits (rate below the lowest), GPAC keeps the current one
    ("no better match ... not switching") — reproduced here. The probe
    counter (``probe_times_before_switch``) only applies when
    ``go_up_bitrate`` is true, which grate never sets. The first segment
    uses ``start_with=min_bw`` (the NeST options): level 0.
    """

    name = "grate"

    def choose(self, state: PlayerState) -> Decision:
        measured = state.measured
        if not measured or state.last_level is None:
            return Decision(level=0)
        rate = measured[-1].request_rate_bps
        level = highest_at_most(state.bitrates_bps, rate)
        return Decision(level=state.last_level if level is None else level, estimate_bps=rate)


# ----------------------------------------------------------- throughput


@dataclass(frozen=True, kw_only=True)
class ThroughputEstimator:
    """dash.js's throughput and latency averages, safety factor 0.9.

    Sources: Dash-Industry-Forum/dash.js v2.9.3 ``src/streaming/rules/ThroughputHistory.js``
    (``getSampleSize``, ``getAverageSlidingWindow``, ``getAverageEwma``,
    ``updateEwmaEstimate``, ``getSafeAverageThroughput``) and the defaults of
    ``MediaPlayerModel.js`` (v2.9.3) / ``core/Settings.js`` (v5). Throughput is
    measured from the first to the last byte (``useDeadTimeLatency = true``).

    ``method="ewma"`` (the default of current dash.js, ``averageCalculationMode
    = EWMA``): two exponentially weighted averages weighted by the download
    time, half-lives 3 s and 8 s, start-up corrected, the smaller one wins;
    latency: half-lives 1 and 2 samples, the larger wins.
    ``method="sliding_window"`` (the v2.9.3 default, which the ABR paper ran):
    mean of the last 4 samples, widened by one for every consecutive pair whose
    ratio is >= 1.3 or <= 1/1.3; latency: mean of the last 4. One deliberate
    difference: v2.9.3 compares the *oldest* pairs of its 20-sample array when
    widening (it indexes from 0); we compare the most recent ones, the intent.
    """

    method: str = "ewma"
    window: int = 4
    scale: float = 1.3
    latency_window: int = 4
    safety_factor: float = 0.9
    fast_half_life_s: float = 3.0
    slow_half_life_s: float = 8.0
    weight_per_s: float = 1.0  # EWMA weight per second of download (dash.js 5: 0.0015 per ms, i.e. 1.5)

    def __post_init__(self) -> None:
        if self.method not in ("ewma", "sliding_window"):
            raise ConfigError("abr.method", f"unknown {self.method!r} (ewma | sliding_window)")

    def sample_size(self, values: list[float]) -> int:
        """How many of the most recent ``values`` to average (sliding window)."""
        n = len(values)
        if n <= self.window:
            return n
        size, k = self.window, 1
        while k < size < n:
            ratio = values[n - k] / max(values[n - k - 1], 1e-9)
            if ratio >= self.scale or ratio <= 1 / self.scale:
                size += 1
            k += 1
        return size

    def average_bps(self, history: tuple[Sample, ...]) -> float | None:
        history = tuple(s for s in history if not s.cached)  # not network samples (dash.httpcache)
        if not history:
            return None
        if self.method == "ewma":
            return self._ewma_bps(history)
        values = [s.throughput_bps for s in history[-20:]]
        size = self.sample_size(values)
        return sum(values[-size:]) / size

    def _ewma_bps(self, history: tuple[Sample, ...]) -> float:
        weights = [self.weight_per_s * max(s.t_last_byte - s.t_first_byte, 1e-3) for s in history]
        values = [s.throughput_bps for s in history]
        fast = _ewma(values, weights, self.fast_half_life_s)
        slow = _ewma(values, weights, self.slow_half_life_s)
        return min(fast, slow)

    def safe_bps(self, history: tuple[Sample, ...]) -> float | None:
        avg = self.average_bps(history)
        return None if avg is None else avg * self.safety_factor

    def latency_s(self, history: tuple[Sample, ...]) -> float:
        history = tuple(s for s in history if not s.cached)
        if not history:
            return 0.0
        values = [s.latency_s for s in history]
        if self.method == "ewma":
            ones = [1.0] * len(values)
            return max(_ewma(values, ones, 1.0), _ewma(values, ones, 2.0))
        recent = values[-self.latency_window :]
        return sum(recent) / len(recent)


def _ewma(values: list[float], weights: list[float], half_life: float) -> float:
    """dash.js ``updateEwmaEstimate`` + ``getAverageEwma`` start-up correction."""
    estimate, total = 0.0, 0.0
    for value, weight in zip(values, weights, strict=True):
        alpha = 0.5 ** (weight / half_life)
        estimate = (1 - alpha) * value + alpha * estimate
        total += weight
    return estimate / (1 - 0.5 ** (total / half_life))


def quality_for_bitrate(state: PlayerState, rate_bps: float, latency_s: float) -> int:
    """dash.js ``AbrController.getQualityForBitrate`` (v2.9.3) with dead-time latency.

    When the latency exceeds a segment duration it returns 0; otherwise the
    rate is scaled by ``1 - latency / segment_duration`` and the highest
    bitrate <= the rate is chosen (0 when none fits).
    """
    seg = state.segment_duration_s
    if latency_s > 0 and seg > 0:
        if latency_s > seg:
            return 0
        rate_bps *= 1 - latency_s / seg
    level = highest_at_most(state.bitrates_bps, rate_bps)
    return 0 if level is None else level


class Throughput(AbrAlgorithm):
    """dash.js ``ThroughputRule``: safe average throughput -> level.

    ``method`` picks the average (:class:`ThroughputEstimator`): "ewma" (current
    dash.js, the default) or "sliding_window" (dash.js v2.9.3, registered as
    ``throughput_sliding``).

    Source: Dash-Industry-Forum/dash.js ``src/streaming/rules/abr/ThroughputRule.js``
    (``getMaxIndex``) with :class:`ThroughputEstimator` and
    :func:`quality_for_bitrate`. With no sample yet it returns level 0 (dash.js
    would start at its initial bitrate, 1000 kbit/s for video, or keep the
    current quality). dash.js only applies the rule in the BUFFER_LOADED state;
    our player asks only when it is about to request, so that check is moot.
    """

    name = "throughput"

    def __init__(self, *, method: str = "ewma", safety_factor: float = 0.9) -> None:
        self.estimator = ThroughputEstimator(method=method, safety_factor=safety_factor)

    def choose(self, state: PlayerState) -> Decision:
        safe = self.estimator.safe_bps(state.history)
        if safe is None:
            return Decision(level=state.last_level or 0)
        latency = self.estimator.latency_s(state.history)
        return Decision(level=quality_for_bitrate(state, safe, latency), estimate_bps=safe)


# --------------------------------------------------------------------- BBA


class Bba(AbrAlgorithm):
    """BBA-0 (Huang et al., SIGCOMM 2014) as GPAC ``algo=bba0`` implements it.

    Source: gpac/gpac ``src/media_tools/dash_client.c``,
    ``dash_do_rate_adaptation_bba0``. Reservoir ``r`` = 37.5 % of the max
    buffer but at least one segment, cushion ``cu`` = 52.5 % (the paper's
    90 s / 126 s of a 240 s buffer); the rate map
    ``f(B) = R_min + (R_max - R_min) (B - r) / cu`` is clamped to the ladder;
    the next rate moves up to the highest rate below ``f(B)`` only when
    ``f(B)`` reaches the next rate up (``rate_plus``), down to the lowest rate
    above ``f(B)`` only when it falls to the next rate down (``rate_minus``),
    else stays. GPAC postpones the download when the buffer cannot hold one
    more segment; our player already waits while the buffer >= max buffer.
    """

    name = "bba"

    def __init__(self, *, reservoir_frac: float = 0.375, cushion_frac: float = 0.525) -> None:
        self.reservoir_frac = reservoir_frac
        self.cushion_frac = cushion_frac

    def rate_map(self, state: PlayerState) -> float:
        rates = state.bitrates_bps
        r = max(self.reservoir_frac * state.max_buffer_s, state.segment_duration_s)
        cu = self.cushion_frac * state.max_buffer_s
        if state.buffer_s <= r:
            return rates[0]
        if state.buffer_s >= r + cu:
            return rates[-1]
        return rates[0] + (rates[-1] - rates[0]) * (state.buffer_s - r) / cu

    def choose(self, state: PlayerState) -> Decision:
        f = self.rate_map(state)
        rates, prev = state.bitrates_bps, state.last_level or 0
        if f >= rates[-1]:
            return Decision(level=state.top)
        if f <= rates[0]:
            return Decision(level=0)
        if f >= rates[min(prev + 1, state.top)]:
            return Decision(level=max(i for i, b in enumerate(rates) if b < f))
        if f <= rates[max(prev - 1, 0)]:
            return Decision(level=min(i for i, b in enumerate(rates) if b > f))
        return Decision(level=prev)


# -------------------------------------------------------------------- BOLA


class Bola(AbrAlgorithm):
    """BOLA as dash.js ``BolaRule`` (v2.9.3) runs it, without the placeholder buffer.

    Source: Dash-Industry-Forum/dash.js ``src/streaming/rules/abr/BolaRule.js``
    (``calculateBolaParameters``, ``getQualityFromBufferLevel``, ``getMaxIndex``);
    Spiteri et al., "BOLA", INFOCOM 2016. Utilities ``u_i = ln(b_i / b_0) + 1``;
    ``buffer_time = max(stable_buffer, 10 s + 2 s x levels)``,
    ``gp = (u_max - 1) / (buffer_time / min_buffer - 1)``, ``Vp = min_buffer / gp``;
    score ``(Vp (u_i + gp) - Q) / b_i``, highest score wins (ties -> higher).
    STARTUP: throughput-based (``quality_for_bitrate`` of the safe throughput)
    until the buffer holds one segment, then STEADY. STEADY applies the
    BOLA-O guard: no step up above both the last level and the
    throughput-sustainable level.

    Scaling (our change): dash.js's 10 s minimum buffer and 10 + 2 x levels
    target assume a buffer that can grow past them; it covers shorter buffers
    with a "placeholder buffer". We do not model the placeholder; instead, when
    ``buffer_time`` exceeds the player's max buffer, both ``min_buffer`` and
    ``buffer_time`` are scaled by ``max_buffer / buffer_time`` so that the
    ladder spans the buffer the player can actually have.
    """

    name = "bola"
    MINIMUM_BUFFER_S: ClassVar[float] = 10.0
    MINIMUM_BUFFER_PER_LEVEL_S: ClassVar[float] = 2.0

    def __init__(self, *, stable_buffer_s: float = 12.0, method: str = "ewma") -> None:
        self.stable_buffer_s = stable_buffer_s
        self.estimator = ThroughputEstimator(method=method)

    def parameters(self, state: PlayerState) -> tuple[list[float], float, float]:
        """``(utilities, gp, Vp)`` for the ladder and max buffer of ``state``."""
        rates = state.bitrates_bps
        utilities = [math.log(b / rates[0]) + 1 for b in rates]
        buffer_time = max(
            self.stable_buffer_s,
            self.MINIMUM_BUFFER_S + self.MINIMUM_BUFFER_PER_LEVEL_S * len(rates),
        )
        scale = min(1.0, state.max_buffer_s / buffer_time)
        min_buffer, buffer_time = self.MINIMUM_BUFFER_S * scale, buffer_time * scale
        gp = (utilities[-1] - 1) / (buffer_time / min_buffer - 1)
        return utilities, gp, min_buffer / gp

    def level_for_buffer(self, state: PlayerState, buffer_s: float) -> int:
        utilities, gp, vp = self.parameters(state)
        scores = [(vp * (u + gp) - buffer_s) / b for u, b in zip(utilities, state.bitrates_bps, strict=True)]
        best = max(scores)
        return max(i for i, s in enumerate(scores) if s >= best)

    def choose(self, state: PlayerState) -> Decision:
        if len(state.bitrates_bps) == 1:
            return Decision(level=0)
        safe = self.estimator.safe_bps(state.history)
        if safe is None:
            return Decision(level=0, memo={"bola_state": "startup"})
        tput_level = quality_for_bitrate(state, safe, self.estimator.latency_s(state.history))
        if state.memo.get("bola_state", "startup") == "startup":
            steady = state.buffer_s >= state.segment_duration_s
            return Decision(
                level=tput_level,
                estimate_bps=safe,
                memo={"bola_state": "steady" if steady else "startup"},
            )
        return Decision(
            level=self._steady(state, tput_level),
            estimate_bps=safe,
            memo={"bola_state": "steady"},
        )

    def _steady(self, state: PlayerState, tput_level: int) -> int:
        level = self.level_for_buffer(state, state.buffer_s)
        last = state.last_level or 0
        if level > last and level > tput_level:
            level = max(tput_level, last)
        return level


# -------------------------------------------------------------------- MPC


class Mpc(AbrAlgorithm):
    """MPC (Yin et al., SIGCOMM 2015) as Pensieve's MPC servers implement it.

    Source: hongzimao/pensieve ``rl_server/mpc_server.py`` (fast) and
    ``rl_server/robust_mpc_server.py`` (robust). Throughput prediction: the
    harmonic mean of the last 5 segment rates (``bytes / (finish - request)``);
    the robust variant divides it by ``1 + max`` of the last 5 relative
    prediction errors ``|predicted - actual| / actual``. It enumerates every
    level sequence over ``min(horizon, remaining segments)`` segments, each
    download taking ``bitrate x duration / prediction``; the buffer drains by
    the download time (stalling below zero) and gains one segment duration; the
    reward is the linear QoE ``sum(R)/1e6 - 4.3 x stall_s - sum|dR|/1e6``
    (bit rates in Mbit/s, ``REBUF_PENALTY = 4.3``, ``SMOOTH_PENALTY = 1``) and
    the first level of the best sequence is chosen (first best in
    lexicographic order, as Pensieve's strict ``>``). Segment sizes are
    nominal (``bitrate x duration``): the player does not know the real sizes.
    The first segment (no samples) is level 0 (Pensieve's ``DEFAULT_QUALITY``).
    """

    name = "mpc_fast"
    robust: ClassVar[bool] = False

    def __init__(
        self,
        *,
        horizon: int = 5,
        window: int = 5,
        rebuffer_penalty: float = 4.3,
        smooth_penalty: float = 1.0,
    ) -> None:
        self.horizon = horizon
        self.window = window
        self.rebuffer_penalty = rebuffer_penalty
        self.smooth_penalty = smooth_penalty

    def choose(self, state: PlayerState) -> Decision:
        measured = state.measured
        if not measured:
            return Decision(level=0)
        rates = [s.request_rate_bps for s in measured[-self.window :]]
        predicted = harmonic_mean(rates)
        errors = self._errors(state)
        estimate = predicted / (1 + max(errors[-self.window :], default=0.0)) if self.robust else predicted
        level = self.best_first_level(state, estimate)
        return Decision(
            level=level,
            estimate_bps=estimate,
            memo={"predicted_bps": predicted, "errors": errors},
        )

    def _errors(self, state: PlayerState) -> tuple[float, ...]:
        """Past relative errors, plus the error of the last prediction vs. the last sample."""
        errors = tuple(state.memo.get("errors", ()))
        previous = state.memo.get("predicted_bps")
        if previous is None:
            return errors
        actual = state.measured[-1].request_rate_bps
        return (errors + (abs(previous - actual) / actual,))[-self.window :]

    def best_first_level(self, state: PlayerState, rate_bps: float) -> int:
        """Enumerate all sequences over the horizon; return the best one's first level."""
        remaining = self.horizon if state.segment_count is None else state.segment_count - state.next_index
        horizon = max(1, min(self.horizon, remaining))
        rewards = self.rewards(state, horizon, rate_bps)
        return int(np.argmax(rewards)) // len(state.bitrates_bps) ** (horizon - 1)

    def rewards(self, state: PlayerState, horizon: int, rate_bps: float) -> np.ndarray:
        """Linear-QoE reward of every level sequence, in lexicographic order.

        Built prefix by prefix (each step expands every prefix by every level),
        so the work is dominated by the last step rather than horizon x levels**horizon.
        """
        rates = np.asarray(state.bitrates_bps, dtype=float)
        seg, n = state.segment_duration_s, len(rates)
        download = rates * seg / max(rate_bps, 1.0)
        buffer = np.array([float(state.buffer_s)])
        reward = np.zeros(1)
        last = np.array([rates[state.last_level or 0]])
        for _ in range(horizon):
            count = len(buffer)
            buffer, reward, last = (
                np.repeat(buffer, n),
                np.repeat(reward, n),
                np.repeat(last, n),
            )
            step_rate, step_dl = np.tile(rates, count), np.tile(download, count)
            stall = np.maximum(step_dl - buffer, 0.0)
            buffer = np.maximum(buffer - step_dl, 0.0) + seg
            reward += (
                step_rate / 1e6 - self.rebuffer_penalty * stall - self.smooth_penalty * np.abs(step_rate - last) / 1e6
            )
            last = step_rate
        return reward


class RobustMpc(Mpc):
    """Robust MPC: the prediction divided by ``1 + max`` past error (see :class:`Mpc`)."""

    name = "mpc_robust"
    robust = True


# ----------------------------------------------------------------- DYNAMIC


class Dynamic(AbrAlgorithm):
    """dash.js ``ABR_STRATEGY_DYNAMIC`` (v2.9.3 default): ThroughputRule or BOLA.

    Source: Dash-Industry-Forum/dash.js ``src/streaming/controllers/AbrController.js``,
    ``updateIsUsingBufferOccupancyABR``: BOLA takes over when the buffer level
    exceeds the stable buffer time and hands back to the throughput rule when it
    falls to half of it or below (hysteresis). dash.js evaluates this on every
    buffer-level update; we use the highest level seen since the last decision,
    ``max(buffer now, buffer right after the last segment arrived)``. The stable
    buffer time is dash.js's scheduler target (12 s default); ours is the
    player's max buffer, so the default is ``min(12 s, max_buffer_s)``.
    """

    name = "dynamic"

    def __init__(self, *, stable_buffer_s: float | None = None, method: str = "ewma") -> None:
        self.stable_buffer_s = stable_buffer_s
        self.throughput = Throughput(method=method)
        self.bola = Bola(method=method)

    def use_bola(self, state: PlayerState) -> bool:
        stable = self.stable_buffer_s or min(12.0, state.max_buffer_s)
        peak = max([state.buffer_s] + [s.buffer_after_s for s in state.history[-1:]])
        using = bool(state.memo.get("use_bola", False))
        return peak > (0.5 * stable if using else stable)

    def choose(self, state: PlayerState) -> Decision:
        use_bola = self.use_bola(state)
        bola_memo = state.memo.get("bola", _EMPTY)
        # dash.js's BolaRule returns early (its state untouched) when not in use
        if use_bola:
            chosen = self.bola.choose(_with_memo(state, bola_memo))
            bola_memo = chosen.memo
        else:
            chosen = self.throughput.choose(state)
        memo = {"use_bola": use_bola, "bola": bola_memo}
        return Decision(level=chosen.level, estimate_bps=chosen.estimate_bps, memo=memo)


def _with_memo(state: PlayerState, memo: Mapping[str, Any]) -> PlayerState:
    return replace(state, memo=memo)


# ------------------------------------------------------------ dash.js 5


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
        empty = state.position_s > 0 and state.buffer_s <= self.STALL_THRESHOLD_S  # BUFFER_EMPTY (not at time 0)
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


# ---------------------------------------------------------------- fixed


class Fixed(AbrAlgorithm):
    """One level for the whole session, whatever the network does: the player pinned to a representation.

    For measurements per representation (the HTTP/2-QUIC evaluation's protocol
    overhead and link utilization). ``level`` is a 0-based index; a ladder with
    fewer levels (e.g. the audio stream's) gets its top level.
    """

    name = "fixed"

    def __init__(self, *, level: int = 0) -> None:
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise ConfigError("level", f"expected a level index >= 0, got {level!r}")
        self.level = level

    def choose(self, state: PlayerState) -> Decision:
        return Decision(level=min(self.level, state.top))


# ---------------------------------------------------------------- Pensieve


class Pensieve(AbrAlgorithm):
    """A learned policy in Pensieve's style (Mao et al., SIGCOMM 2017), numpy inference.

    The network and its input are :mod:`nest_experiments.dash.learned.policy`
    (Pensieve's state: last bitrate, buffer, the last 8 segments' throughput
    and download time, the next segment's size per level, the segments left);
    the shipped weights were trained in the chunk-level simulator
    (:mod:`nest_experiments.dash.learned.sim`) on the built-in trace families
    for the ``abr_quic_tcp`` ladder (docs/studies/abr_quic.md: "A learned ABR"). Each decision
    is the policy's most probable level, except the first segment's (nothing
    measured yet): level 0, as Pensieve's ``DEFAULT_QUALITY`` and MPC here.

    Segment sizes are nominal (``bitrate x segment duration``, as MPC's): the
    player does not know the real sizes. On another ladder than the one the
    policy was trained on (e.g. the audio stream's), the state is expressed on
    the trained ladder (the last bitrate mapped to the highest trained level at
    or below it) and the chosen bitrate mapped back to the highest level at or
    below it (level 0 when none is).
    """

    name = "pensieve"

    def __init__(self, *, weights: str | None = None) -> None:
        self.policy = learned.load_policy(weights)

    def choose(self, state: PlayerState) -> Decision:
        measured = state.measured
        if not measured:
            return Decision(level=learned.FIRST_LEVEL)
        trained = self.policy.bitrates_bps
        recent = measured[-learned.HISTORY :]
        pad = learned.HISTORY - len(recent)
        tput = [0.0] * pad + [s.request_rate_bps for s in recent]
        times = [0.0] * pad + [max(s.t_last_byte - s.t_request, 0.0) for s in recent]
        last = 0 if state.last_level is None else state.bitrates_bps[state.last_level]
        last_trained = trained[highest_at_most(trained, last) or 0]
        left = learned.SEGMENTS_CAP if state.segment_count is None else state.segment_count - state.next_index
        x = learned.features(
            last_bitrate_bps=np.array([last_trained]),
            top_bitrate_bps=trained[-1],
            buffer_s=np.array([state.buffer_s]),
            throughput_bps=np.array([tput]),
            download_s=np.array([times]),
            next_sizes_bytes=np.array([[b * state.segment_duration_s / 8 for b in trained]]),
            segments_left=np.array([left]),
        )
        choice = int(self.policy.act(x)[0])
        if tuple(state.bitrates_bps) == trained:
            return Decision(level=choice)
        return Decision(level=highest_at_most(state.bitrates_bps, trained[choice]) or 0)


for _cls in (GpacRate, Throughput, Bba, Bola, Mpc, RobustMpc, Dynamic, DashJs, Pensieve, Fixed):
    register_abr(_cls.name, _cls)
register_abr("throughput_sliding", lambda **kw: Throughput(method="sliding_window", **kw))
