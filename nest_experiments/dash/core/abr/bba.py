"""``bba``: BBA-0, as GPAC ``algo=bba0`` implements it."""

from __future__ import annotations

from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState


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
