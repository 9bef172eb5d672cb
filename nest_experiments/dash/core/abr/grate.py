"""``grate``: GPAC's legacy rate rule (the NeST paper's ABR)."""

from __future__ import annotations

from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState, highest_at_most


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
