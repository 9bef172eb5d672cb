"""``throughput`` and ``throughput_sliding``: dash.js's ThroughputRule (v2.9.3) and its throughput
estimator, which BOLA and dash.js 5's rules share."""

from __future__ import annotations

from dataclasses import dataclass

from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState, Sample, highest_at_most
from nest_experiments.errors import ConfigError


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


class ThroughputSliding(Throughput):
    """The ThroughputRule with dash.js v2.9.3's default average, the sliding window (``method="sliding_window"``)."""

    name = "throughput_sliding"

    def __init__(self, *, safety_factor: float = 0.9) -> None:
        super().__init__(method="sliding_window", safety_factor=safety_factor)
