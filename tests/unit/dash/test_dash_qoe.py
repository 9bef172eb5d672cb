"""QoE figures against a hand-computed example."""

from __future__ import annotations

import pytest

from nest_experiments.dash.core import qoe
from nest_experiments.dash.core.records import SegmentRow, read_segments, write_segments


def row(
    stream: str,
    index: int,
    level: int,
    rate: int,
    size: int,
    times: tuple[float, float, float],
    buffer: float,
    stall: float = 0.0,
) -> SegmentRow:
    return SegmentRow(
        stream=stream,
        index=index,
        level=level,
        bitrate_bps=rate,
        bytes=size,
        t_request=times[0],
        t_first_byte=times[1],
        t_last_byte=times[2],
        buffer_s=buffer,
        stall_s=stall,
        transport="tcp",
    )


ROWS = [
    row("video", 0, 0, 1_000_000, 500_000, (0.0, 0.1, 1.1), 4.0),
    row("audio", 0, 0, 128_000, 64_000, (0.0, 0.05, 0.55), 4.0),
    row("audio", 1, 0, 128_000, 64_000, (0.55, 0.6, 1.1), 7.45),
    row("video", 1, 1, 2_000_000, 1_000_000, (1.1, 1.3, 3.3), 6.0),
    row("audio", 2, 0, 128_000, 64_000, (1.1, 1.2, 1.7), 10.0),
    row("video", 2, 0, 1_000_000, 500_000, (3.3, 3.4, 4.4), 5.0, stall=2.0),
]

# Hand computation (see the comments for each figure):
VIDEO = dict(
    segments=3,
    avg_bitrate_bps=4e6 / 3,  # (1 + 2 + 1) M / 3
    switches=2,  # 0 -> 1 -> 0
    avg_throughput_bps=4e6,  # 4 Mbit / 1 s, 8 Mbit / 2 s, 4 Mbit / 1 s
    avg_buffer_s=5.0,  # (4 + 6 + 5) / 3
    stall_count=1,
    stall_s=2.0,
    app_rtt_s=4.4 / 3,  # 1.1, 2.2, 1.1
    app_jitter_s=1.1,  # |2.2 - 1.1|, |1.1 - 2.2|
    response_latency_s=0.4 / 3,  # 0.1, 0.2, 0.1
    qoe=4.0 - 4.3 * 2.0 - 2.0,  # sum q = 4, 2 s of stall, |2-1| + |1-2| = 2  -> -6.6
)
AUDIO = dict(
    segments=3,
    avg_bitrate_bps=128_000,
    switches=0,
    avg_throughput_bps=1.024e6,  # 512 kbit / 0.5 s each
    avg_buffer_s=7.15,  # (4 + 7.45 + 10) / 3
    stall_count=0,
    stall_s=0.0,
    app_rtt_s=1.7 / 3,  # 0.55, 0.55, 0.6
    app_jitter_s=0.025,  # 0, 0.05
    response_latency_s=0.2 / 3,  # 0.05, 0.05, 0.1
    qoe=3 * 0.128,
)
SESSION = dict(
    segments=6,
    avg_bitrate_bps=4.384e6 / 6,
    switches=2,
    avg_throughput_bps=(3 * 4e6 + 3 * 1.024e6) / 6,
    avg_buffer_s=(15 + 21.45) / 6,
    stall_count=1,
    stall_s=2.0,
    startup_delay_s=1.1,  # video reaches 1 s at 1.1, audio at 0.55; first request at 0
    app_rtt_s=(4.4 + 1.7) / 6,
    app_jitter_s=(1.1 + 1.1 + 0 + 0.05) / 4,
    response_latency_s=0.6 / 6,
    qoe=-6.6 + 0.384,
)


@pytest.mark.parametrize(("stream", "expected"), [("video", VIDEO), ("audio", AUDIO), ("session", SESSION)])
def test_hand_computed_example(stream: str, expected: dict[str, float]) -> None:
    summary = qoe.summarize(ROWS)[stream]
    for key, value in expected.items():
        assert getattr(summary, key) == pytest.approx(value), key


def test_explicit_startup_delay_wins() -> None:
    assert qoe.summarize(ROWS, startup_delay_s=0.7)["session"].startup_delay_s == 0.7


def test_qoe_eq1() -> None:
    assert qoe.qoe_eq1([1e6, 3e6, 2e6], 0.5) == pytest.approx(6 - 2.15 - 3)
    assert qoe.qoe_eq1([], 0.0) == 0


def test_missing_times_are_skipped() -> None:
    rows = [
        SegmentRow(
            stream="video",
            index=i,
            level=i % 2,
            bitrate_bps=10**6,
            bytes=1,
            t_request=None,
            t_first_byte=None,
            t_last_byte=None,
            buffer_s=None,
        )
        for i in range(3)
    ]
    summary = qoe.summarize(rows)["video"]
    assert summary.app_rtt_s is None and summary.avg_throughput_bps is None and summary.switches == 2
    assert qoe.summarize(rows)["session"].startup_delay_s is None


def test_csv_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "segments.csv"
    write_segments(path, ROWS)
    header = path.read_text().splitlines()[0]
    assert (
        header == "stream,index,level,bitrate_bps,bytes,t_request,t_first_byte,t_last_byte,buffer_s,stall_s,transport"
    )
    assert read_segments(path) == ROWS


def test_a_stall_at_the_end_counts_on_its_stream_and_the_session() -> None:
    end = qoe.EndStall(stream="audio", t_start=4.4, duration_s=3.0)
    summary = qoe.summarize(ROWS, stall_at_end=end)
    assert summary["audio"].stall_count == 1 and summary["audio"].stall_s == pytest.approx(3.0)
    assert summary["audio"].qoe == pytest.approx(AUDIO["qoe"] - 4.3 * 3.0)
    assert summary["video"].stall_s == pytest.approx(VIDEO["stall_s"])  # the video's own stall only
    assert summary["session"].stall_count == 2 and summary["session"].stall_s == pytest.approx(5.0)
    assert summary["session"].qoe == pytest.approx(SESSION["qoe"] - 4.3 * 3.0)


def test_stall_at_end_round_trips_and_tolerates_absence() -> None:
    end = qoe.EndStall(stream="video", t_start=1.5, duration_s=2.5)
    assert qoe.EndStall.from_dict(end.as_dict()) == end
    assert qoe.EndStall.from_dict(None) is None and qoe.EndStall.from_dict({"stream": "video"}) is None
