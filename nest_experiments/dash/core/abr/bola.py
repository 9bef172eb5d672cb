"""``bola``: BOLA-E as dash.js v2.9.3's BolaRule implements it."""

from __future__ import annotations

import math
from typing import ClassVar

from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState
from nest_experiments.dash.core.abr.throughput import ThroughputEstimator, quality_for_bitrate


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
