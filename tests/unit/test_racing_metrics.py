"""The connection-racing paper's session metrics on hand-made sessions."""

from __future__ import annotations

import pytest

from nest_experiments.studies.racing.metrics import (
    Transfer,
    ccdf,
    max_cross_correlation,
    mean_variation,
    playback,
    quality_drop_series,
    rqvst,
    rqvst_series,
    share_at_least,
    stall_series,
    switches,
)


def seg(index: int, level: int, t0: float, t1: float, *, transport: str = "h3", nbytes: int = 1000,
        stall: float = 0.0, stream: str = "video") -> Transfer:
    return Transfer(stream=stream, index=index, level=level, bytes=nbytes, t_first_byte=t0, t_last_byte=t1,
                    stall_s=stall, transport=transport)


def test_rqvst_is_the_tcp_share_of_all_bytes() -> None:
    s = [seg(0, 0, 0, 1, transport="tcp", nbytes=300), seg(1, 0, 1, 2, nbytes=600),
         seg(0, 0, 0, 1, transport="tcp", nbytes=100, stream="audio")]
    assert rqvst(s) == pytest.approx(0.4)
    assert rqvst([]) is None
    assert rqvst([seg(0, 0, 0, 1, transport="tcp")]) == 1.0


def test_rqvst_series_spreads_a_transfer_over_the_windows_it_spans() -> None:
    # 0-30 s: 1000 QUIC bytes; a TCP transfer 20-40 s of 1000 bytes: half in each window
    s = [seg(0, 0, 0, 30, nbytes=1000), seg(1, 0, 20, 40, transport="tcp", nbytes=1000)]
    assert rqvst_series(s, t_end=90) == pytest.approx([500 / 1500, 1.0, 0.0])


def test_playback_waits_for_the_arrival_and_the_previous_segment() -> None:
    video = [seg(1, 0, 0, 6), seg(0, 0, 0, 1), seg(2, 0, 0, 20)]
    assert playback(video, 5.0) == [(1, 6, 0), (6, 11, 0), (20, 25, 0)]


def test_quality_drop_weights_the_drop_by_how_long_it_played_in_the_window() -> None:
    # levels (rank - 1) 4 then 2 from t=10 for 3 segments of 10 s, then up to 3: drop depth 2 for 30 s (10-40 s)
    video = [seg(0, 4, 0, 0), seg(1, 2, 0, 10), seg(2, 2, 0, 10), seg(3, 2, 0, 10), seg(4, 3, 0, 40)]
    assert quality_drop_series(video, 10.0, t_end=60) == pytest.approx([2 * 20, 2 * 10])


def test_a_second_drop_takes_the_depth_of_the_last_switch() -> None:
    video = [seg(0, 4, 0, 0), seg(1, 3, 0, 0), seg(2, 1, 0, 0)]  # 0-10: 4, 10-20: 3 (depth 1), 20-30: 1 (depth 2)
    assert quality_drop_series(video, 10.0, t_end=30) == pytest.approx([1 * 10 + 2 * 10])


def test_no_drop_no_quality_drop_time() -> None:
    video = [seg(i, i, 0, 0) for i in range(5)]
    assert quality_drop_series(video, 5.0, t_end=25) == [0.0]


def test_stall_series_places_each_stall_before_the_arrival_that_ended_it() -> None:
    s = [seg(3, 0, 0, 35, stall=10.0), seg(5, 0, 0, 70, stall=2.0, stream="audio")]
    assert stall_series(s, t_end=90) == pytest.approx([5.0, 5.0, 2.0])


def test_stall_series_counts_the_stall_the_session_stopped_in_up_to_the_stop() -> None:
    s = [seg(3, 0, 0, 35, stall=10.0)]
    assert stall_series(s, t_end=90, open_stall=(50.0, 40.0)) == pytest.approx([5.0, 15.0, 30.0])


def test_cross_correlation_finds_the_lag_of_a_shifted_copy() -> None:
    x = [0, 1, 0, 0, 2, 0, 1, 0, 0, 0]
    y = [0, 0, 0, 1, 0, 0, 2, 0, 1, 0]  # x two windows later
    r, lag = max_cross_correlation(x, y) or (0.0, 0.0)
    assert r == pytest.approx(1.0) and lag == 60.0
    r, lag = max_cross_correlation(y, x) or (0.0, 0.0)
    assert r == pytest.approx(1.0) and lag == -60.0


def test_cross_correlation_of_a_constant_series_is_undefined() -> None:
    assert max_cross_correlation([0.0] * 6, [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]) is None
    assert max_cross_correlation([1.0, 2.0], [2.0, 1.0]) is None  # fewer than 3 windows


def test_cross_correlation_is_bounded_to_max_lag() -> None:
    x = [0, 1, 0, 0, 0, 0, 0, 0]
    y = [0, 0, 0, 0, 0, 1, 0, 0]
    r, lag = max_cross_correlation(x, y, max_lag=1) or (9.0, 9.0)
    assert r < 1.0 and abs(lag) <= 30.0


def test_ccdf_and_share() -> None:
    assert ccdf([0.0, 0.5, 0.5, 1.0]) == [(0.0, 1.0), (0.5, 0.75), (1.0, 0.25)]
    assert share_at_least([0.1, 0.4, 0.9], 0.4) == pytest.approx(2 / 3)
    assert share_at_least([], 0.4) is None


def test_switches_count_protocol_changes_of_the_winners() -> None:
    assert switches(["tcp", "quic", "quic", "tcp", "quic"]) == 3
    assert switches(["tcp"]) == 0 and switches([]) == 0


def test_mean_variation() -> None:
    assert mean_variation([100.0, 300.0, 300.0, 0.0]) == pytest.approx((200 + 0 + 300) / 3)
    assert mean_variation([5.0]) == 0.0 and mean_variation([]) is None
