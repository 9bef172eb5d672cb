"""``dynamic``: dash.js v2.9.3's DYNAMIC strategy (ThroughputRule or BOLA, by the buffer)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nest_experiments.dash.core.abr.base import EMPTY_MEMO, AbrAlgorithm, Decision, PlayerState
from nest_experiments.dash.core.abr.bola import Bola
from nest_experiments.dash.core.abr.throughput import Throughput


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
        bola_memo = state.memo.get("bola", EMPTY_MEMO)
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
