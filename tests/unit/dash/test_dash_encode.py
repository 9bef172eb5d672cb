"""Encoded (decodable) media: the pure plans and MPD rewrite, then a tiny real encode with ffmpeg."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from nest_experiments.dash.content import encode, media, mp4
from nest_experiments.dash.content.mpd import init_url, parse_mpd, segment_url
from nest_experiments.errors import ConfigError

DATA = Path(__file__).resolve().parents[2] / "data" / "encode"


def _ladder(*, video: list[dict[str, int]], audio: list[int], seg: float = 1.0, dur: float = 2.0,
            fps: int = 10) -> media.Ladder:
    return media.parse_ladder({
        "name": "tiny", "segment_duration_s": seg, "duration_s": dur,
        "video": {"codecs": "avc1", "frame_rate": fps, "levels": video},
        "audio": {"codecs": "mp4a.40.2", "sample_rate_hz": 48000, "levels": [{"bitrate_bps": a} for a in audio]},
    })


def test_level_size_is_scaled_to_max_height_and_even() -> None:
    assert encode.level_size(media.Level(bitrate_bps=1, width=1920, height=1080), 360) == (640, 360)
    assert encode.level_size(media.Level(bitrate_bps=1, width=320, height=180), 360) == (320, 180)
    assert encode.level_size(media.Level(bitrate_bps=1, width=7680, height=4320), 90) == (160, 90)
    assert encode.level_size(media.Level(bitrate_bps=1, width=385, height=217), 1000) == (386, 218)
    assert encode.level_size(media.Level(bitrate_bps=1), 360) == (640, 360)


def test_video_argv_states_cbr_with_filler_and_one_gop_per_segment() -> None:
    ladder = media.load_ladder("abr_quic_tcp")
    params = encode.make_params(ladder, duration_s=8)
    argv = encode.video_argv(params, ladder.video.levels[7], Path("v7.mp4"))
    assert argv[:4] == ["nice", "-n", "19", "ffmpeg"]
    joined = " ".join(argv)
    assert "testsrc=size=640x360:rate=30:duration=8" in joined  # 1280x720 scaled to 360 lines
    for flag in ("-b:v 4000000", "-minrate 4000000", "-maxrate 4000000", "-bufsize 4000000",
                 "nal-hrd=cbr", "-g 120", "-keyint_min 120", "-sc_threshold 0"):
        assert flag in joined
    assert "-stream_loop -1 -i /v.mp4" in " ".join(encode.video_argv(
        encode.EncodeParams(ladder=ladder, duration_s=8, codec="h264", max_height=360, source="/v.mp4",
                            source_sha256="x"), ladder.video.levels[0], Path("o.mp4")))


def test_cache_key_changes_with_each_input(tmp_path: Path) -> None:
    ladder = media.load_ladder("abr_quic_tcp")
    video = tmp_path / "v.mp4"
    video.write_bytes(b"one")
    keys = {encode.make_params(ladder, duration_s=8).cache_key(),
            encode.make_params(ladder, duration_s=12).cache_key(),
            encode.make_params(ladder, duration_s=8, codec="vp9").cache_key(),
            encode.make_params(ladder, duration_s=8, max_height=180).cache_key(),
            encode.make_params(ladder, duration_s=8, source=video).cache_key()}
    video.write_bytes(b"two")  # same path, other bytes
    keys.add(encode.make_params(ladder, duration_s=8, source=video).cache_key())
    assert len(keys) == 6 and all(k.startswith("abr_quic_tcp-enc-") for k in keys)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"duration_s": 500}, "duration: must be in (0, 192] s"),
    ({"codec": "mpeg2"}, "codec: unknown 'mpeg2'"),
    ({"source": "/no/such.mp4"}, "source: /no/such.mp4: no such video file"),
])
def test_make_params_errors_name_the_key(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        encode.make_params(media.load_ladder("abr_quic_tcp"), **kwargs)  # type: ignore[arg-type]
    assert str(err.value).startswith(message)


def test_a_gop_must_be_a_whole_number_of_frames() -> None:
    with pytest.raises(ConfigError, match="ladder: segment length x frame rate = 12.5 frames"):
        encode.make_params(_ladder(video=[{"bitrate_bps": 100_000}], audio=[64_000], seg=0.5, fps=25))


def test_rewrite_mpd_of_ffmpeg_sets_ladder_rates_and_drops_bitstream_switching() -> None:
    ladder = _ladder(video=[{"bitrate_bps": 300_000}, {"bitrate_bps": 1_000_000}], audio=[128_000], seg=4, dur=8)
    text = encode.rewrite_mpd((DATA / "ffmpeg_dash.mpd").read_text(), ladder)
    assert "bitstreamSwitching" not in text and "ProgramInformation" not in text and "ns0:" not in text
    manifest = parse_mpd(text)
    assert manifest.duration_s == 8 and manifest.min_buffer_time_s == 4
    video, audio = manifest.adaptation_set("video"), manifest.adaptation_set("audio")
    assert video.bitrates_bps == (300_000, 1_000_000) and audio.bitrates_bps == (128_000,)
    assert [r.id for r in video.representations] == ["1", "2"]
    assert segment_url(video.representations[1], 1) == "seg_2_2.m4s"
    assert init_url(audio.representations[0]) == "init_0.mp4"
    assert manifest.segment_count("video") == 2 and manifest.segment_duration_s("audio") == 4


def test_rewrite_mpd_refuses_a_level_count_that_is_not_the_ladders() -> None:
    ladder = _ladder(video=[{"bitrate_bps": 300_000}], audio=[128_000], seg=4, dur=8)
    with pytest.raises(Exception, match="the MPD has 2 video levels, the ladder 1"):
        encode.rewrite_mpd((DATA / "ffmpeg_dash.mpd").read_text(), ladder)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg missing: sudo ./setup.sh installs it")
def test_a_tiny_real_encode_is_decodable_at_the_ladders_rates_and_cached(tmp_path: Path) -> None:
    ladder = _ladder(video=[{"bitrate_bps": 100_000, "width": 160, "height": 90},
                            {"bitrate_bps": 400_000, "width": 320, "height": 180}], audio=[64_000])
    mpd = encode.encode(ladder, tmp_path)
    manifest = parse_mpd(mpd.read_text())
    assert manifest.adaptation_set("video").bitrates_bps == (100_000, 400_000)
    info = encode.encode_info(mpd)
    ratios = {(row["stream"], row["level"]): row["ratio"] for row in info["levels"]}  # type: ignore[union-attr, index]
    assert set(ratios) == {("audio", 0), ("video", 0), ("video", 1)}
    assert all(abs(r - 1) <= encode.RATE_TOLERANCE for r in ratios.values()), ratios
    # every segment starts with a keyframe, and every level decodes without an error
    for rep in manifest.adaptation_set("video").representations:
        joined = tmp_path / f"{rep.id}.mp4"
        joined.write_bytes(b"".join((mpd.parent / name).read_bytes() for name in
                                    [init_url(rep) or "", *(segment_url(rep, i) for i in range(2))]))
        frames = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries",
                                 "frame=key_frame", "-of", "default=nw=1:nk=1", str(joined)],
                                capture_output=True, text=True, check=True).stdout.split()
        assert frames == ["1"] + ["0"] * 9 + ["1"] + ["0"] * 9
    # what each segment adds to a browser's SourceBuffer (dash.mp4): video's GOPs end on the segment boundaries;
    # AAC's first segment ends short of its nominal second (1024-sample frames, the priming frame dropped by the
    # edit list; here at 0.811 s: ffmpeg 5.1 cuts a 1 s audio segment early), and the last ends within a frame of
    # the clip's end
    frame = 1024 / 48000
    for aset in manifest.adaptation_sets:
        for rep in aset.representations:
            track = mp4.parse_init((mpd.parent / (init_url(rep) or "")).read_bytes())
            assert track is not None, rep.id
            ends = [mp4.presentation_end_s((mpd.parent / segment_url(rep, i)).read_bytes(), track) for i in range(2)]
            if aset.content_type == "video":
                assert ends == [pytest.approx(1.0), pytest.approx(2.0)], (rep.id, track)
            else:
                assert track.start_ticks == 1024 and 0.5 < ends[0] < 1.0, (ends, track)  # type: ignore[operator]
                assert ends[1] == pytest.approx(2.0, abs=frame), ends
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_name", "-of", "csv=p=0",
                            str(mpd)], capture_output=True, text=True, check=True)
    assert sorted(set(probe.stdout.split())) == ["aac", "h264"]
    stamp = (mpd.parent / media.COMPLETE_MARKER).stat().st_mtime_ns
    assert encode.encode(ladder, tmp_path) == mpd  # cached: not encoded again
    assert (mpd.parent / media.COMPLETE_MARKER).stat().st_mtime_ns == stamp
    assert json.loads((mpd.parent / media.COMPLETE_MARKER).read_text())["codec"] == "h264"


def test_every_level_gets_the_ladders_display_aspect_ratio() -> None:
    # youtube_racing: 426x240 is not exactly 16:9 next to 1280x720; ffmpeg's DASH muxer refused such a set
    ladder = media.load_ladder("youtube_racing")
    params = encode.make_params(ladder, duration_s=10)
    assert encode.display_aspect(params) == "1280/720"
    for level in ladder.video.levels:
        argv = encode.video_argv(params, level, Path("v.mp4"))
        assert "setdar=1280/720" in argv[argv.index("-vf") + 1]


TINY_LADDER = """name = "tiny_cli"
source = "test_dash_encode.py"
segment_duration_s = 1.0
duration_s = 2.0
[video]
codecs = "avc1"
frame_rate = 30
levels = [{ bitrate_bps = 145_000, width = 320, height = 180 }, { bitrate_bps = 1_400_000, width = 640, height = 360 }]
[audio]
codecs = "mp4a.40.2"
sample_rate_hz = 48000
levels = [{ bitrate_bps = 64_000 }]
"""
FFPROBE_NAME = {"h264": "h264", "hevc": "hevc", "vp9": "vp9", "av1": "av1"}


def _keyframes(path: Path) -> list[int]:
    """Indexes of the key frames of a video file."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "frame=key_frame",
                          "-of", "default=nw=1:nk=1", str(path)], capture_output=True, text=True, check=True).stdout
    return [i for i, flag in enumerate(out.split()) if flag == "1"]


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg missing: sudo ./setup.sh installs it")
@pytest.mark.parametrize("codec", encode.CODECS)
def test_media_encode_from_the_cli(tmp_path: Path, codec: str) -> None:
    """``python -m nest_experiments media encode`` on a tiny ladder, every codec Debian's ffmpeg has: the MPD's path on
    stdout, the codec in the streams, a key frame at every segment start in every level, every level decodes,
    its measured rate recorded (and within the tolerance), and a second call reuses the cache."""
    import sys

    (tmp_path / "tiny.toml").write_text(TINY_LADDER)
    argv = [sys.executable, "-m", "nest_experiments", "media", "encode", "--ladder", str(tmp_path / "tiny.toml"),
            "--duration", "2", "--codec", codec, "--out", str(tmp_path / "cache")]
    run = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    mpd = Path(run.stdout.strip())
    assert mpd.parent.parent == tmp_path / "cache" and mpd.name == media.MPD_NAME
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_name", "-of", "csv=p=0",
                            str(mpd)], capture_output=True, text=True, check=True)
    assert sorted(set(probe.stdout.split())) == sorted({"aac", FFPROBE_NAME[codec]})
    manifest = parse_mpd(mpd.read_text())
    for rep in manifest.adaptation_set("video").representations:
        joined = tmp_path / f"{rep.id}.mp4"
        joined.write_bytes(b"".join((mpd.parent / name).read_bytes() for name in
                                    [init_url(rep) or "", *(segment_url(rep, i) for i in range(2))]))
        assert _keyframes(joined) == [0, 30], rep.id  # one GOP per 1 s segment at 30 fps; decodes (ffprobe)
    info = encode.encode_info(mpd)
    assert info["codec"] == codec
    ratios = {(row["stream"], row["level"]): row["ratio"] for row in info["levels"]}  # type: ignore[union-attr, index]
    assert set(ratios) == {("audio", 0), ("video", 0), ("video", 1)}
    assert all(abs(r - 1) <= encode.RATE_TOLERANCE for r in ratios.values()), ratios
    again = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert again.stdout.strip() == str(mpd)


def test_av1_argv_is_svt_av1_cbr_fastest_with_noise_on_the_pattern_only() -> None:
    ladder = media.load_ladder("eldorado_av1")
    params = encode.make_params(ladder, duration_s=8, codec="av1")
    low, high = (encode.video_argv(params, ladder.video.levels[i], Path("v.mp4")) for i in (0, 14))
    for argv in (low, high):
        joined = " ".join(argv)
        assert "-c:v libsvtav1 -preset 13" in joined and "keyint=120:scd=0:pred-struct=1:rc=2:lp=1" in joined
    assert "noise=alls=10:allf=t+u:all_seed=1," in low[low.index("-vf") + 1]  # 145 kbit/s at 320x180: 0.08 bpp
    assert "noise=alls=20:allf=t+u:all_seed=1," in high[high.index("-vf") + 1]  # 27.5 Mbit/s at 640x360: 4 bpp
    h264 = encode.make_params(ladder, duration_s=8)
    assert "noise" not in " ".join(encode.video_argv(h264, ladder.video.levels[0], Path("v.mp4")))
    assert h264.pattern_filter == "" and "pattern_filter" not in h264.identity()  # old h264 caches keep their key
    assert params.cache_key() != encode.make_params(ladder, duration_s=8, codec="vp9").cache_key()


def test_a_users_video_gets_no_noise(tmp_path: Path) -> None:
    video = tmp_path / "v.mp4"
    video.write_bytes(b"x")
    params = encode.make_params(media.load_ladder("eldorado_av1"), duration_s=8, codec="av1", source=video)
    assert params.pattern_filter == ""
    assert "noise" not in " ".join(encode.video_argv(params, params.ladder.video.levels[0], Path("v.mp4")))
