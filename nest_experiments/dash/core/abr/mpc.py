"""``mpc_fast``: MPC as Pensieve's MPC server implements it."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState, harmonic_mean


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
