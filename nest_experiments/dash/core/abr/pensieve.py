"""``pensieve``: the learned ABR (numpy inference of the shipped policy, :mod:`.pensieve_policy`)."""

from __future__ import annotations

import numpy as np

from nest_experiments.dash.core.abr import pensieve_policy as learned
from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState, highest_at_most


class Pensieve(AbrAlgorithm):
    """A learned policy in Pensieve's style (Mao et al., SIGCOMM 2017), numpy inference.

    The network and its input are :mod:`nest_experiments.dash.learned.policy`
    (Pensieve's state: last bitrate, buffer, the last 8 segments' throughput
    and download time, the next segment's size per level, the segments left);
    the shipped weights were trained in the chunk-level simulator
    (:mod:`nest_experiments.dash.learned.sim`) on the built-in trace families
    for the ``abr_quic_tcp`` ladder (README: "A learned ABR"). Each decision
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
