"""Ladders, generated content, the MPD parser and the ``media`` CLI."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from nest_experiments.dash.content import cli, media, mpd
from nest_experiments.errors import ConfigError

GPAC_MPD = Path(__file__).resolve().parents[2] / "data" / "gpac" / "manifest.mpd"

# ------------------------------------------------------------------- ladders

PAPER_LADDERS = {
    # name: (kbit/s list, segment s, duration s, audio kbit/s)
    "eldorado_av1": (
        [145, 180, 350, 500, 700, 900, 1400, 2750, 5500, 7000, 11000, 15000, 20000, 22500, 27500],
        4,
        184,
        [128],
    ),
    "bbb_h2quic": ([100, 200, 350, 500, 700, 900, 1100, 1300, 1600, 1900, 2300, 2800, 3400, 4500], 2, 596, [128]),
    "abr_quic_tcp": ([200, 400, 600, 800, 1000, 1500, 2500, 4000], 4, 192, [64, 128]),
}


@pytest.mark.parametrize("name", sorted(PAPER_LADDERS))
def test_shipped_ladders_match_the_papers(name: str) -> None:
    kbps, seg, duration, audio = PAPER_LADDERS[name]
    ladder = media.load_ladder(name)
    assert [lv.bitrate_bps // 1000 for lv in ladder.video.levels] == kbps
    assert (ladder.segment_duration_s, ladder.duration_s) == (seg, duration)
    assert [lv.bitrate_bps // 1000 for lv in ladder.audio.levels] == audio


def test_every_shipped_ladder_loads() -> None:
    assert set(media.available_ladders()) >= set(PAPER_LADDERS)
    for name in media.available_ladders():
        media.load_ladder(name)


def good_ladder() -> dict:
    return tomllib.loads((media.LADDER_DIR / "abr_quic_tcp.toml").read_text())


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda d: d.pop("segment_duration_s"), "segment_duration_s"),
        (lambda d: d.update(duration_s=-1), "duration_s"),
        (lambda d: d["video"]["levels"][2].update(bitrate_bps="600k"), "video.levels[2].bitrate_bps"),
        (lambda d: d["video"]["levels"].reverse(), "video.levels"),
        (lambda d: d["audio"].update(levels=[]), "audio.levels"),
        (lambda d: d["video"].update(codec="x"), "video.codec"),
        (lambda d: d["video"]["levels"][0].update(width=0), "video.levels[0].width"),
    ],
)
def test_validation_names_the_key(mutate, key: str) -> None:  # type: ignore[no-untyped-def]
    data = good_ladder()
    mutate(data)
    with pytest.raises(ConfigError) as err:
        media.parse_ladder(data, where="x.toml")
    assert err.value.path == f"x.toml: {key}"


def test_a_ladder_without_audio_is_video_only(tmp_path: Path) -> None:
    data = good_ladder()
    data.pop("audio")
    assert media.parse_ladder(data, where="x.toml").audio is None
    ladder = media.load_ladder("bbb_h2quic_video")  # the HTTP/2-QUIC evaluation streamed video only
    assert ladder.audio is None and ladder.video == media.load_ladder("bbb_h2quic").video
    manifest = mpd.parse_mpd(media.generate(ladder, tmp_path, duration_s=4).read_bytes())
    assert [a.content_type for a in manifest.adaptation_sets] == ["video"]
    assert not list(tmp_path.rglob("a0_*"))


def test_unknown_ladder_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="no such ladder.*eldorado_av1"):
        media.load_ladder("nope")


# ---------------------------------------------------------------- generation


def test_generate_writes_mpd_and_sizes_follow_bitrate(tmp_path: Path) -> None:
    ladder = media.load_ladder("abr_quic_tcp")
    path = media.generate(ladder, tmp_path, duration_s=10)
    manifest = mpd.parse_mpd(path.read_bytes())
    assert manifest.duration_s == 10 and manifest.segment_count("video") == 3
    video = manifest.adaptation_set("video")
    for rep in video.representations:
        sizes = [os.path.getsize(path.parent / mpd.segment_url(rep, i)) for i in range(3)]
        assert sizes[:2] == [rep.bandwidth * 4 // 8] * 2
        assert sizes[2] == rep.bandwidth * 2 // 8  # the clipped last segment holds 2 s
        init = mpd.init_url(rep)
        assert init is not None and (path.parent / init).read_bytes()[4:8] == b"ftyp"
    assert (path.parent / mpd.segment_url(video.representations[0], 0)).read_bytes()[4:8] == b"styp"


def test_mpd_structure(tmp_path: Path) -> None:
    text = media.generate(media.load_ladder("eldorado_av1"), tmp_path, duration_s=8).read_text()
    for needle in (
        'type="static"',
        'mediaPresentationDuration="PT8S"',
        'minBufferTime="PT4S"',
        'contentType="audio"',
        'contentType="video"',
        "$RepresentationID$_$Number$.m4s",
        'initialization="$RepresentationID$_init.mp4"',
    ):
        assert needle in text
    manifest = mpd.parse_mpd(text)
    assert [a.content_type for a in manifest.adaptation_sets] == ["audio", "video"]
    assert manifest.adaptation_set("video").bitrates_bps[-1] == 27_500_000


def test_vbr_preserves_the_mean_and_is_seeded() -> None:
    factors = media.vbr_factors(46, 0.3, seed=1)
    assert sum(factors) / len(factors) == pytest.approx(1.0)
    assert max(factors) > 1.2 and min(factors) < 0.8
    assert factors == media.vbr_factors(46, 0.3, seed=1) != media.vbr_factors(46, 0.3, seed=2)
    assert media.vbr_factors(5, 0.0, seed=1) == [1.0] * 5


def test_vbr_segment_sizes_keep_the_bitrate(tmp_path: Path) -> None:
    path = media.generate(media.load_ladder("abr_quic_tcp"), tmp_path, duration_s=40, vbr=0.2, seed=3)
    rep = mpd.parse_mpd(path.read_bytes()).adaptation_set("video").representations[-1]
    sizes = [os.path.getsize(path.parent / mpd.segment_url(rep, i)) for i in range(10)]
    assert len(set(sizes)) > 1
    assert sum(sizes) == pytest.approx(rep.bandwidth * 40 / 8, rel=1e-4)


def test_content_is_cached_and_reused(tmp_path: Path) -> None:
    ladder = media.load_ladder("abr_quic_tcp")
    first = media.generate(ladder, tmp_path, duration_s=8)
    marker = first.parent / media.COMPLETE_MARKER
    stamp = marker.stat().st_mtime_ns
    assert media.generate(ladder, tmp_path, duration_s=8) == first
    assert marker.stat().st_mtime_ns == stamp  # not rewritten
    other = media.generate(ladder, tmp_path, duration_s=8, vbr=0.1)
    assert other.parent != first.parent
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_incomplete_cache_is_regenerated(tmp_path: Path) -> None:
    ladder = media.load_ladder("abr_quic_tcp")
    path = media.generate(ladder, tmp_path, duration_s=8)
    (path.parent / media.COMPLETE_MARKER).unlink()
    (path.parent / "v0_1.m4s").unlink()
    assert media.generate(ladder, tmp_path, duration_s=8) == path
    assert (path.parent / "v0_1.m4s").exists()


@pytest.mark.parametrize(("kw", "key"), [({"duration_s": 500}, "duration"), ({"vbr": -1}, "vbr")])
def test_generate_rejects_bad_parameters(tmp_path: Path, kw: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        media.generate(media.load_ladder("abr_quic_tcp"), tmp_path, **kw)


# ----------------------------------------------------------------------- MPD


def test_parse_gpac_sample_manifest() -> None:
    manifest = mpd.parse_mpd(GPAC_MPD.read_text())
    assert manifest.duration_s == 60 and manifest.min_buffer_time_s == 1.5
    audio, video = manifest.adaptation_sets
    assert (audio.content_type, audio.bitrates_bps) == ("audio", (127999,))
    assert video.bitrates_bps == (202094, 505448, 1011807, 2026679, 4051604)
    assert manifest.segment_duration_s("video") == 4.0 and manifest.segment_count("video") == 15
    assert mpd.segment_url(video.representations[2], 6) == "video_1000k_dash7.m4s"
    assert mpd.init_url(audio.representations[0]) == "audio_128k_dashinit.mp4"
    assert [r.id for r in video.representations] == ["2", "3", "4", "5", "6"]


@pytest.mark.parametrize(
    ("text", "seconds"), [("PT0H1M0.000S", 60.0), ("PT184S", 184.0), ("PT4.5S", 4.5), ("P1DT1H", 90000.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert mpd.parse_duration(text) == seconds


def test_template_identifiers() -> None:
    tpl = mpd.SegmentTemplate(
        media="$RepresentationID$/$Bandwidth$/s$Number%05d$.m4s$$",
        initialization=None,
        timescale=1,
        duration=2,
        start_number=0,
    )
    rep = mpd.Representation(id="v1", bandwidth=500, template=tpl)
    assert mpd.segment_url(rep, 3) == "v1/500/s00003.m4s$"
    assert mpd.init_url(rep) is None


@pytest.mark.parametrize(
    ("snippet", "where"),
    [
        ("<MPD xmlns='urn:mpeg:dash:schema:mpd:2011' type='dynamic'/>", "MPD@type"),
        ("<MPD", "MPD"),
        (
            "<MPD mediaPresentationDuration='PT4S'><Period><AdaptationSet contentType='video'>"
            "<Representation id='a' bandwidth='1'/></AdaptationSet></Period></MPD>",
            "SegmentTemplate",
        ),
        (
            "<MPD mediaPresentationDuration='PT4S'><Period><AdaptationSet contentType='video'>"
            "<SegmentTemplate media='$Number$' duration='2'><SegmentTimeline/></SegmentTemplate>"
            "<Representation id='a' bandwidth='1'/></AdaptationSet></Period></MPD>",
            "SegmentTimeline",
        ),
    ],
)
def test_mpd_errors_name_the_element(snippet: str, where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        mpd.parse_mpd(snippet)


# ----------------------------------------------------------------------- CLI


def test_media_main_generate_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "generate",
        "--ladder",
        "abr_quic_tcp",
        "--duration",
        "8",
        "--vbr",
        "0.1",
        "--seed",
        "1",
        "--out",
        str(tmp_path),
    ]
    assert cli.media_main(argv) == 0
    out = Path(capsys.readouterr().out.strip())
    assert out.name == "manifest.mpd" and out.parent.parent == tmp_path
    assert cli.media_main(["list"]) == 0
    assert "eldorado_av1: 15 video levels 145-27500 kbit/s" in capsys.readouterr().out


def test_media_main_reports_errors_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.media_main(["generate", "--ladder", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
