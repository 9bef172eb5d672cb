"""Stalls reconstructed from segment timings (:func:`qoe.implied_stalls`), by hand and against the player."""

from __future__ import annotations

import pytest
from dash_simlink import SimLink, manifest_for, run

from nest_experiments.dash.core import qoe
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.dash.core.player import PlayerConfig, PlayerSession
from nest_experiments.dash.core.records import SegmentRow


def seg(stream: str, index: int, t_last: float | None) -> SegmentRow:
    return SegmentRow(stream=stream, index=index, level=0, bitrate_bps=1, bytes=1, t_request=None,
                      t_first_byte=None, t_last_byte=t_last, buffer_s=None)


def both(*arrivals: float) -> list[SegmentRow]:
    return [seg(s, i, t) for i, t in enumerate(arrivals) for s in ("video", "audio")]


def test_in_time_segments_imply_no_stall() -> None:
    assert qoe.implied_stalls(both(1.0, 2.0, 5.0, 9.0), segment_s=4.0) == []


def test_a_late_segment_stalls_from_its_play_time_to_its_arrival() -> None:
    # playback from 1.0: segment 1 due at 5.0, there at 7.5; segment 2 due at 11.5, there at 11.0
    assert qoe.implied_stalls(both(1.0, 7.5, 11.0, 20.0), segment_s=4.0) == [(5.0, 7.5), (15.5, 20.0)]


def test_the_slower_stream_decides() -> None:
    rows = both(1.0, 3.0, 6.0) + [seg("solo", 0, 2.0), seg("solo", 1, 8.0), seg("solo", 2, 8.5)]
    assert qoe.implied_stalls(rows, segment_s=4.0) == [(6.0, 8.0)]


def test_threshold_longer_than_a_segment_waits_for_more_media() -> None:
    # 2 s segments, 3 s threshold: start once segments 0 and 1 are there, resume likewise
    assert qoe.implied_stalls(both(0.5, 1.0, 9.0, 9.5, 30.0), segment_s=2.0, threshold_s=3.0) == [(5.0, 9.5), (13.5, 30.0)]


def test_only_leading_indexes_with_times_count() -> None:
    rows = both(1.0, 20.0, 21.0)
    rows = [r for r in rows if not (r.stream == "audio" and r.index == 1)]
    assert qoe.implied_stalls(rows, segment_s=4.0) == []
    assert qoe.implied_stalls([seg("video", 0, None)], segment_s=4.0) == []
    assert qoe.implied_stalls([], segment_s=4.0) == []


@pytest.mark.parametrize("steps", [[(0.0, 2e6), (3.0, 50e3), (13.0, 2e6)], [(0.0, 3e6), (8.0, 100e3), (18.0, 3e6)]])
def test_agrees_with_the_player_over_a_simulated_outage(steps: list[tuple[float, float]]) -> None:
    s = PlayerSession(manifest_for("abr_quic_tcp", duration_s=40.0), abr_video=create_abr("grate"),
                      abr_audio=create_abr("grate"), start_time=0.0, config=PlayerConfig(max_buffer_s=4.0))
    run(s, SimLink(steps=steps))
    implied = qoe.implied_stalls(s.segments, segment_s=4.0)
    assert len(implied) == len(s.stalls) >= 1
    for (start, end), reported in zip(implied, s.stalls, strict=True):
        assert end == pytest.approx(reported.t) and end - start == pytest.approx(reported.duration_s)
