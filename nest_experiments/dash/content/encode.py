"""Decodable DASH content: ffmpeg encodes a ladder (a test pattern or a user's video) and packages it.

Generated media (:mod:`.media`) only have the right sizes; players that
decode (dash.js, GPAC) need real streams. :func:`encode` writes, for every
level of a ladder, one encode with ffmpeg, then packages all of them with
ffmpeg's DASH muxer: fragmented MP4, the ladder's segment length, audio in
its own AdaptationSet, a static MPD with a SegmentTemplate (``$Number$``)
per Representation, which our MPD model, dash.js, GPAC and ffprobe read.

Source: ``None`` is ffmpeg's ``testsrc`` pattern (colour bars, a scrolling
gradient and a counter drawn into the picture) with a beeping 440 Hz tone;
a path is a user's video (looped when shorter than the clip, scaled to each
level; its audio when it has some, else the tone).

Rate control (the level's mean bitrate within :data:`RATE_TOLERANCE` of the
ladder's; :func:`encode` checks it and records it in ``encode.json``):

- ``h264`` (default, libx264): CBR with filler (``nal-hrd=cbr``),
  ``-b:v = -minrate = -maxrate = R``, ``-bufsize = R`` (one second of VBV):
  the encoder pads the stream to exactly R, so a simple picture at a high
  rate does not undershoot;
- ``hevc`` (libx265): ABR with ``strict-cbr`` and the same VBV (no filler:
  an easy picture can undershoot; ``encode.json`` says so; see the noise below);
- ``vp9`` (libvpx-vp9): ``-b:v = -minrate = -maxrate = R`` (CBR mode);
- ``av1`` (libsvtav1, the AV1 encoder of Debian 12's ffmpeg 5.1; the NeST
  paper's Eldorado ladder is AV1): its fastest preset (13) and CBR, which
  SVT-AV1 has only in its low-delay prediction structure (``pred-struct=1:
  rc=2``; SVT-AV1 calls that mode experimental), on one thread (``lp=1``:
  with several, the same input gave segments 16 % apart from run to run).

Only x264 pads (filler); libx265, libvpx-vp9 and SVT-AV1 spend what the
picture needs, and the clean test pattern needs little: SVT-AV1 gave 0.67
Mbit/s at 360 lines when asked for 27.5, libvpx-vp9 17 % of 400 kbit/s at
180 lines. So for those three the pattern gets temporal noise
(``noise=alls=N:allf=t+u:all_seed=1``, :data:`PATTERN_NOISE`, part of the cache
key; N = 10 below 0.25 bits per pixel, else 20 (:data:`NOISE_STRENGTH`): 20
made the lowest AV1 levels (0.08 bpp) overshoot by 13-16 %, 10 made a 10 fps
160x90/320x180 ladder (0.7 bpp) undershoot by 15-32 % in VP9 and AV1):
then every level of the unit tests' ladder (30 fps, 0.08 and 0.2 bpp) lands
within 10 % in every codec (AV1 at 1.07 and 0.92), and every Eldorado level
from 145 kbit/s to 27.5 Mbit/s in AV1 within 5 % (0.96-1.04,
``bench/encode_ladder.py --ladder eldorado_av1 --codec av1 --clip 8``). A
user's video gets no noise.

Every encoder gets a fixed GOP of exactly one segment (``segment length x
frame rate`` frames, no scene-cut keyframes), so that every segment starts
with a keyframe at the same instant in every level. Resolutions are the
ladder's, scaled down to at most ``max_height`` (default 360 lines) so that
encodes stay fast on a small machine; every ffmpeg runs under ``nice -n 19``.
The MPD's ``@bandwidth`` is the ladder's (as in generated media, so that
``segments.csv`` compares across media kinds); the measured mean is in
``encode.json``.

Content is cached in ``media/cache/<ladder>-enc-<hash>/`` keyed by the
ladder, the clip length, the codec, the maximum height and the source (its
path and a SHA-256 of its bytes), written to a temporary folder and renamed
when complete, as generated media are.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

from nest_experiments.dash.content import media
from nest_experiments.dash.content.media import Ladder, Level
from nest_experiments.dash.content.mpd import Manifest, parse_mpd, segment_url
from nest_experiments.errors import ConfigError, MissingToolError, RunError

CODECS = ("h264", "hevc", "vp9", "av1")
AV1_PRESET = 13  # SVT-AV1's fastest
PATTERN_NOISE = "noise=alls={strength}:allf=t+u:all_seed=1"  # something to spend the bits on (see the module doc)
#: (bits per pixel below which, strength): measured on Eldorado (0.07-4 bpp) and a 10 fps 160x90 ladder (0.7)
NOISE_STRENGTH = ((0.25, 10), (float("inf"), 20))
#: codecs Chromium's Media Source cannot play (player = "dashjs" refuses them at load): Debian 12's Chromium 156
#: answers MediaSource.isTypeSupported false for hvc1/hev1 and true for avc1, vp09 and av01
NOT_IN_CHROMIUM = {"hevc": "Chromium cannot decode HEVC (Debian's Chromium has no HEVC decoder: "
                           "MediaSource.isTypeSupported('video/mp4; codecs=\"hvc1...\"') is false); "
                           "use h264, vp9 or av1 with player = 'dashjs'"}
FILLERLESS = ("hevc", "vp9", "av1")  # encoders that cannot pad to the rate: the pattern gets PATTERN_NOISE
DEFAULT_CODEC = "h264"
DEFAULT_MAX_HEIGHT = 360
DEFAULT_FRAME_RATE = 30
RATE_TOLERANCE = 0.10  # |measured / ladder - 1| allowed per level
ENCODE_INFO = "encode.json"
NICE = ("nice", "-n", "19")
INIT_NAME = "init_$RepresentationID$.mp4"
MEDIA_NAME = "seg_$RepresentationID$_$Number$.m4s"
FFMPEG_HINT = "ffmpeg is not installed: apt-get install ffmpeg (sudo ./setup.sh installs it)"
_NS = {"": media.MPD_NS, "xsi": "http://www.w3.org/2001/XMLSchema-instance", "xlink": "http://www.w3.org/1999/xlink"}


@dataclass(frozen=True, kw_only=True)
class EncodeParams:
    """Everything that determines the encoded bytes (hashed for the cache)."""

    ladder: Ladder
    duration_s: float
    codec: str
    max_height: int
    source: str | None  # None: the test pattern
    source_sha256: str | None
    pattern_filter: str = ""  # added to the test pattern (hashed: a change makes a new cache entry)

    @property
    def frame_rate(self) -> int:
        return self.ladder.video.frame_rate or DEFAULT_FRAME_RATE

    @property
    def gop_frames(self) -> int:
        return round(self.ladder.segment_duration_s * self.frame_rate)

    def identity(self) -> dict[str, object]:
        """What is hashed and stored in the marker: the fields, without an empty ``pattern_filter`` (so that
        encodes made before that field existed keep their cache entries)."""
        doc = asdict(self)
        if not doc["pattern_filter"]:
            del doc["pattern_filter"]
        return doc

    def cache_key(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True).encode()
        return f"{self.ladder.name}-enc-{hashlib.sha256(blob).hexdigest()[:12]}"


def make_params(ladder: Ladder, *, duration_s: float | None = None, codec: str = DEFAULT_CODEC,
                source: Path | str | None = None, max_height: int = DEFAULT_MAX_HEIGHT) -> EncodeParams:
    """Validate the encode's inputs (errors name the key), hash the source file."""
    duration = ladder.duration_s if duration_s is None else float(duration_s)
    if not 0 < duration <= ladder.duration_s:
        raise ConfigError("duration", f"must be in (0, {ladder.duration_s:g}] s, got {duration:g}")
    if codec not in CODECS:
        raise ConfigError("codec", f"unknown {codec!r} (known: {', '.join(CODECS)})")
    if max_height < 16:
        raise ConfigError("max_height", f"must be at least 16 lines, got {max_height}")
    frames = ladder.segment_duration_s * (ladder.video.frame_rate or DEFAULT_FRAME_RATE)
    if abs(frames - round(frames)) > 1e-6:
        raise ConfigError("ladder", f"segment length x frame rate = {frames:g} frames: a GOP needs a whole number")
    path, digest = (None, None) if source is None else _source(Path(source))
    noise = f"{PATTERN_NOISE} {NOISE_STRENGTH}" if source is None and codec in FILLERLESS else ""
    return EncodeParams(ladder=ladder, duration_s=duration, codec=codec, max_height=int(max_height),
                        source=path, source_sha256=digest, pattern_filter=noise)


def _source(path: Path) -> tuple[str, str]:
    if not path.is_file():
        raise ConfigError("source", f"{path}: no such video file")
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return str(path.resolve()), sha.hexdigest()


# ------------------------------------------------------------- pure: plans


def level_size(level: Level, max_height: int) -> tuple[int, int]:
    """(width, height) of a level's encode: the ladder's, scaled to at most ``max_height``, even, 16:9 if unset."""
    width, height = float(level.width or 0), float(level.height or 0)
    if not width or not height:
        width, height = max_height * 16 / 9, max_height
    scale = min(1.0, max_height / height)
    return _even(width * scale), _even(height * scale)


def _even(value: float) -> int:
    return max(2, int(value / 2 + 0.5) * 2)


def display_aspect(params: EncodeParams) -> str:
    """``W/H``: the display aspect ratio of every level, the ladder's top level's (16/9 if unset). ffmpeg's DASH
    muxer refuses an adaptation set whose levels differ in it, as even sizes such as 426x240 next to
    1280x720 would."""
    top = params.ladder.video.levels[-1]
    return f"{top.width}/{top.height}" if top.width and top.height else "16/9"


def video_argv(params: EncodeParams, level: Level, out: Path) -> list[str]:
    """ffmpeg argv encoding one video level (no audio) into ``out`` (MP4)."""
    width, height = level_size(level, params.max_height)
    fps, gop, rate = params.frame_rate, params.gop_frames, str(level.bitrate_bps)
    dar = display_aspect(params)
    if params.source is None:
        inp = ["-f", "lavfi", "-i", f"testsrc=size={width}x{height}:rate={fps}:duration={params.duration_s:g}"]
        noise = f"{pattern_noise(level.bitrate_bps / (width * height * fps))}," if params.pattern_filter else ""
        vf = f"setdar={dar},{noise}format=yuv420p"
    else:
        inp = ["-stream_loop", "-1", "-i", params.source, "-t", f"{params.duration_s:g}"]
        vf = f"scale={width}:{height},setdar={dar},fps={fps},format=yuv420p"
    return [*NICE, "ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", *inp, "-map", "0:v:0",
            "-vf", vf, "-an", *_codec_args(params.codec, rate, gop), "-f", "mp4", str(out)]


def pattern_noise(bits_per_pixel: float) -> str:
    """The noise filter for a level of this many bits per pixel (per frame): :data:`NOISE_STRENGTH`."""
    strength = next(s for below, s in NOISE_STRENGTH if bits_per_pixel < below)
    return PATTERN_NOISE.format(strength=strength)


def _codec_args(codec: str, rate: str, gop: int) -> list[str]:
    vbv = ["-b:v", rate, "-minrate", rate, "-maxrate", rate, "-bufsize", rate]
    if codec == "h264":
        return ["-c:v", "libx264", "-preset", "veryfast", *vbv, "-x264-params", "nal-hrd=cbr:force-cfr=1",
                "-g", str(gop), "-keyint_min", str(gop), "-sc_threshold", "0"]
    if codec == "hevc":
        return ["-c:v", "libx265", "-preset", "veryfast", *vbv, "-tag:v", "hvc1",
                "-x265-params", f"keyint={gop}:min-keyint={gop}:scenecut=0:strict-cbr=1:log-level=error"]
    if codec == "av1":
        return ["-c:v", "libsvtav1", "-preset", str(AV1_PRESET), "-b:v", rate, "-g", str(gop),
                "-svtav1-params", f"keyint={gop}:scd=0:pred-struct=1:rc=2:lp=1"]
    return ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-row-mt", "1", *vbv,
            "-g", str(gop), "-keyint_min", str(gop)]


def audio_argv(params: EncodeParams, level: Level, out: Path, *, source_audio: bool) -> list[str]:
    """ffmpeg argv encoding one AAC audio level into ``out``: the source's audio, or a beeping tone."""
    assert params.ladder.audio is not None  # encode() refuses a ladder without audio
    rate = params.ladder.audio.sample_rate_hz or 48000
    if source_audio and params.source is not None:
        inp = ["-stream_loop", "-1", "-i", params.source, "-t", f"{params.duration_s:g}", "-map", "0:a:0"]
    else:
        inp = ["-f", "lavfi", "-i", f"sine=frequency=440:beep_factor=4:sample_rate={rate}:duration={params.duration_s:g}"]
    return [*NICE, "ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", *inp, "-vn", "-ac", "2",
            "-ar", str(rate), "-c:a", "aac", "-b:a", str(level.bitrate_bps), "-f", "mp4", str(out)]


def package_argv(params: EncodeParams, audio: list[Path], video: list[Path], mpd: Path) -> list[str]:
    """ffmpeg argv packaging the level files (copied, not re-encoded) as DASH into ``mpd``'s folder."""
    inputs = [arg for path in (*audio, *video) for arg in ("-i", str(path))]
    maps = [arg for i in range(len(audio) + len(video)) for arg in ("-map", f"{i}:0")]
    audio_ids = ",".join(str(i) for i in range(len(audio)))
    video_ids = ",".join(str(i) for i in range(len(audio), len(audio) + len(video)))
    return [*NICE, "ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", *inputs, *maps, "-c", "copy",
            "-t", f"{params.duration_s:g}", "-f", "dash", "-seg_duration", f"{params.ladder.segment_duration_s:g}",
            "-use_template", "1", "-use_timeline", "0", "-adaptation_sets",
            f"id=0,streams={audio_ids} id=1,streams={video_ids}",
            "-init_seg_name", INIT_NAME, "-media_seg_name", MEDIA_NAME, str(mpd)]


def rewrite_mpd(text: str, ladder: Ladder) -> str:
    """ffmpeg's MPD made exact: the ladder's ``@bandwidth`` per level, ``minBufferTime`` one segment,
    no ``bitstreamSwitching`` (levels of different resolutions are not one bitstream), no empty elements."""
    for prefix, uri in _NS.items():
        ET.register_namespace(prefix, uri)
    root = ET.fromstring(text)
    ns = "{" + media.MPD_NS + "}"
    root.set("minBufferTime", media.iso_duration(ladder.segment_duration_s))
    for tag in ("ProgramInformation", "ServiceDescription"):
        for el in root.findall(f"{ns}{tag}"):
            root.remove(el)
    for aset in root.iter(f"{ns}AdaptationSet"):
        aset.attrib.pop("bitstreamSwitching", None)
        track = ladder.audio if aset.get("contentType") == "audio" else ladder.video
        if track is None:
            raise RunError("encode: the MPD has an audio AdaptationSet, the ladder no audio")
        reps = aset.findall(f"{ns}Representation")
        if len(reps) != len(track.levels):
            raise RunError(f"encode: the MPD has {len(reps)} {track.content_type} levels, the ladder "
                           f"{len(track.levels)}")
        for rep, level in zip(reps, track.levels, strict=True):
            rep.set("bandwidth", str(level.bitrate_bps))
    for el in root.iter():
        if el.text is not None and not el.text.strip():
            el.text = None
    ET.indent(root, space=" ")
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def measured_rates(folder: Path, manifest: Manifest) -> list[dict[str, object]]:
    """Per level: the ladder's bitrate, the mean of its media segments (8 bytes / media seconds), the ratio."""
    rows: list[dict[str, object]] = []
    for aset in manifest.adaptation_sets:
        for level, rep in enumerate(aset.representations):
            count = manifest.segment_count(aset.content_type)
            size = sum((folder / segment_url(rep, i)).stat().st_size for i in range(count))
            rate = 8 * size / manifest.duration_s
            rows.append({"stream": aset.content_type, "level": level, "rep_id": rep.id,
                         "ladder_bps": rep.bandwidth, "measured_bps": round(rate),
                         "ratio": round(rate / rep.bandwidth, 4),
                         "within_tolerance": abs(rate / rep.bandwidth - 1) <= RATE_TOLERANCE})
    return rows


# --------------------------------------------------------------- running


def find_ffmpeg() -> None:
    """:class:`MissingToolError` with the package to install when ffmpeg/ffprobe are missing."""
    for tool in ("ffmpeg", "ffprobe"):
        if shutil.which(tool) is None:
            raise MissingToolError(FFMPEG_HINT)


def encode(ladder: Ladder, out_dir: Path | None = None, *, duration_s: float | None = None,
           codec: str = DEFAULT_CODEC, source: Path | str | None = None,
           max_height: int = DEFAULT_MAX_HEIGHT) -> Path:
    """Encode (or reuse) decodable DASH content for ``ladder``; return the MPD's path."""
    if ladder.audio is None:
        raise ConfigError(f"ladder {ladder.name}", "encoded media needs an [audio] table in the ladder: add one, "
                                                   "or use media = 'generated'")
    params = make_params(ladder, duration_s=duration_s, codec=codec, source=source, max_height=max_height)
    final = Path(out_dir or media.CACHE_DIR) / params.cache_key()
    if is_complete(final, params):
        return final / media.MPD_NAME
    find_ffmpeg()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        _encode_into(tmp, params)
        media._publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final / media.MPD_NAME


def is_complete(folder: Path, params: EncodeParams) -> bool:
    """True when ``folder`` holds a finished encode of ``params``."""
    try:
        done = json.loads((folder / media.COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        return False
    return bool(done == json.loads(json.dumps(params.identity())))


def _encode_into(folder: Path, params: EncodeParams) -> None:
    work = folder / ".levels"
    work.mkdir()
    times: dict[str, float] = {}
    has_audio = params.source is not None and _has_audio(params.source)
    assert params.ladder.audio is not None  # encode() refuses a ladder without audio
    audio = [work / f"a{i}.mp4" for i in range(len(params.ladder.audio.levels))]
    video = [work / f"v{i}.mp4" for i in range(len(params.ladder.video.levels))]
    for path, level in zip(audio, params.ladder.audio.levels, strict=True):
        times[path.stem] = _ffmpeg(audio_argv(params, level, path, source_audio=has_audio), f"audio {path.stem}")
    for path, level in zip(video, params.ladder.video.levels, strict=True):
        times[path.stem] = _ffmpeg(video_argv(params, level, path), f"video {path.stem}")
    mpd = folder / media.MPD_NAME
    times["package"] = _ffmpeg(package_argv(params, audio, video, mpd), "DASH packaging")
    mpd.write_text(rewrite_mpd(mpd.read_text(), params.ladder))
    shutil.rmtree(work)
    rows = measured_rates(folder, parse_mpd(mpd.read_text()))
    for row in rows:
        row["encode_s"] = round(times[f"{'a' if row['stream'] == 'audio' else 'v'}{row['level']}"], 3)
    info = {"codec": params.codec, "source": params.source or "testsrc", "package_s": round(times["package"], 3),
            "levels": rows}
    (folder / ENCODE_INFO).write_text(json.dumps(info, indent=2) + "\n")
    (folder / media.COMPLETE_MARKER).write_text(json.dumps(params.identity(), sort_keys=True))


def _ffmpeg(argv: list[str], what: str) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise RunError(f"encode: ffmpeg failed on {what}: {last}")
    return time.monotonic() - start


def _has_audio(source: str) -> bool:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "a", "-show_entries", "stream=index",
                          "-of", "csv=p=0", source], capture_output=True, text=True, check=False)
    return bool(out.stdout.strip())


def encode_info(mpd: Path) -> dict[str, object]:
    """The ``encode.json`` beside an encoded MPD (measured rates and times)."""
    data = json.loads((mpd.parent / ENCODE_INFO).read_text())
    return data if isinstance(data, dict) else {}
