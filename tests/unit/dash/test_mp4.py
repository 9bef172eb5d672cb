"""A segment's presentation end from its own boxes (dash.mp4), as a browser's SourceBuffer counts it."""

from __future__ import annotations

import pytest
from mp4_boxes import init_segment, media_segment

from nest_experiments.dash.content import mp4

AAC = 1024  # samples per AAC frame


def test_aac_priming_is_dropped_by_the_edit_list_so_the_first_5s_segment_ends_at_4_949() -> None:
    # ffmpeg's DASH muxer at 48 kHz, "5 s" segments: the first holds 233 frames, one of them the encoder's priming
    track = mp4.parse_init(init_segment(timescale=48000, media_time=AAC))
    assert track == mp4.Track(timescale=48000, start_ticks=AAC, default_duration=0)
    first = media_segment(decode_time=0, durations=[AAC] * 233)
    assert mp4.presentation_end_s(first, track) == pytest.approx(232 * AAC / 48000)  # 4.949 s
    second = media_segment(decode_time=233 * AAC, durations=[AAC] * 234)
    assert mp4.presentation_end_s(second, track) == pytest.approx((233 + 234 - 1) * AAC / 48000)  # 9.941 s


def test_video_with_reordered_frames_ends_where_its_last_frame_is_shown() -> None:
    # 30 fps at 15360 ticks/s; a closed GOP of 10 frames in decode order I P B B P B B P B B, shown 0..9; the
    # composition offsets carry a 2-frame delay, which the edit list takes back (x264 with B-frames)
    frame = 512
    track = mp4.parse_init(init_segment(timescale=15360, media_time=2 * frame))
    shown = [0, 3, 1, 2, 6, 4, 5, 9, 7, 8]
    offsets = [(pts + 2 - i) * frame for i, pts in enumerate(shown)]
    seg = media_segment(decode_time=150 * frame, durations=[frame] * 10, offsets=offsets)
    assert mp4.presentation_end_s(seg, track) == pytest.approx(160 * frame / 15360)  # frame 159's end: 5.333 s


def test_default_durations_come_from_tfhd_then_trex() -> None:
    with_trex = mp4.parse_init(init_segment(timescale=1000, trex_duration=40))
    assert with_trex is not None and with_trex.default_duration == 40
    assert mp4.presentation_end_s(media_segment(decode_time=1000, count=25), with_trex) == pytest.approx(2.0)
    tfhd = media_segment(decode_time=0, count=25, default_duration=20)
    assert mp4.presentation_end_s(tfhd, with_trex) == pytest.approx(0.5)  # the fragment's own default wins
    no_default = mp4.parse_init(init_segment(timescale=1000))
    assert no_default is not None
    assert mp4.presentation_end_s(media_segment(decode_time=0, count=25), no_default) is None


def test_an_empty_edit_is_skipped_and_a_version_1_mdhd_is_read() -> None:
    track = mp4.parse_init(init_segment(timescale=90000, media_time=3000, empty_edit=True, version=1))
    assert track == mp4.Track(timescale=90000, start_ticks=3000, default_duration=0)
    assert mp4.parse_init(init_segment(timescale=44100)) == mp4.Track(timescale=44100)  # no edit list: start 0


@pytest.mark.parametrize("cut", [0, 7, 60, 120])
def test_a_head_cut_inside_the_boxes_is_none_not_a_wrong_end(cut: int) -> None:
    seg = media_segment(decode_time=0, durations=[AAC] * 233)
    moof_end = seg.index(b"mdat") - 4
    assert mp4.presentation_end_s(seg[: moof_end - cut - 1], mp4.Track(48000)) is None
    init = init_segment(timescale=48000, media_time=AAC)
    assert mp4.parse_init(init[: len(init) - 40 - cut]) is None


@pytest.mark.parametrize("data", [b"", b"\0" * 4000, bytes(range(256)) * 8, b"\x00\x00\x00\x01moof" + b"\xff" * 64])
def test_generated_media_and_garbage_are_none(data: bytes) -> None:
    # generated segments are zeros of the right size: no boxes, so the player counts the MPD's duration
    assert mp4.parse_init(data) is None
    assert mp4.presentation_end_s(data, mp4.Track(48000)) is None


def test_the_head_the_transports_keep_holds_a_long_segments_moof() -> None:
    # a 10 s segment at 60 fps with sizes, durations and offsets: 600 samples, 12 bytes each
    seg = media_segment(decode_time=0, durations=[250] * 600, offsets=[0] * 600, payload=10_000)
    assert len(seg) > mp4.HEAD_BYTES
    assert mp4.presentation_end_s(seg[: mp4.HEAD_BYTES], mp4.Track(15000)) == pytest.approx(10.0)
