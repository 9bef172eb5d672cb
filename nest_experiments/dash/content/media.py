"""Bitrate ladders (``media/ladders/*.toml``) and generated DASH content.

A ladder is data: the levels of one video and (optionally) one audio
AdaptationSet, the segment length and the duration. :func:`generate` writes a static MPD plus
one init segment per representation and media segments whose sizes follow
``bitrate x segment duration`` (optionally with a seeded, mean-preserving
log-normal VBR variation). The content is *not decodable*: every segment is a
small ISO-BMFF header (``ftyp`` for init segments, ``styp`` + ``mdat`` for
media segments) followed by zero bytes, written as a sparse file, so that a
27.5 Mbit/s ladder costs no disk space. Players of this project only count
bytes; a real encode (``--encode`` with ffmpeg) is not implemented.

Generated content is cached in ``media/cache/<ladder>-<hash of params>/``:
it is written to a temporary folder and renamed, and reused when complete.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import struct
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nest_experiments import resources
from nest_experiments.errors import ConfigError

LADDER_DIR = resources.data(resources.LADDERS)
CACHE_DIR = resources.cache_dir("media")  # media/cache/ in a clone (nest_experiments.resources says where else)
MPD_NAME = "manifest.mpd"
COMPLETE_MARKER = ".complete.json"
MEDIA_TEMPLATE = "$RepresentationID$_$Number$.m4s"
INIT_TEMPLATE = "$RepresentationID$_init.mp4"
MPD_NS = "urn:mpeg:dash:schema:mpd:2011"


@dataclass(frozen=True, kw_only=True)
class Level:
    """One representation of a ladder."""

    bitrate_bps: int
    width: int | None = None
    height: int | None = None


@dataclass(frozen=True, kw_only=True)
class Track:
    """One AdaptationSet of a ladder: its codec and levels (ascending bitrate)."""

    content_type: str  # "video" | "audio"
    codecs: str
    levels: tuple[Level, ...]
    frame_rate: int | None = None
    sample_rate_hz: int | None = None


@dataclass(frozen=True, kw_only=True)
class Ladder:
    """A bitrate ladder loaded from ``media/ladders/<name>.toml``."""

    name: str
    source: str
    segment_duration_s: float
    duration_s: float
    video: Track
    audio: Track | None  # None: a video-only presentation (no [audio] table)


# ----------------------------------------------------------------- loading


def ladder_path(name_or_path: str | Path) -> Path:
    """``eldorado_av1`` -> ``media/ladders/eldorado_av1.toml``; paths pass through."""
    text = str(name_or_path)
    if text.endswith(".toml") or os.sep in text:
        return Path(text)
    return LADDER_DIR / f"{text}.toml"


def available_ladders() -> list[str]:
    """Names of the ladders shipped in ``media/ladders/``."""
    return sorted(p.stem for p in LADDER_DIR.glob("*.toml"))


def load_ladder(name_or_path: str | Path) -> Ladder:
    """Load and validate a ladder; :class:`ConfigError` names the bad key."""
    path = ladder_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        known = ", ".join(available_ladders())
        raise ConfigError(str(path), f"no such ladder (known: {known})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"invalid TOML: {exc}") from exc
    return parse_ladder(data, where=path.name)


def parse_ladder(data: Mapping[str, Any], *, where: str = "ladder") -> Ladder:
    """Validate a ladder given as a TOML mapping (errors: ``<where>: <key path>``)."""
    top = f"{where}:"
    _no_unknown(data, {"name", "source", "segment_duration_s", "duration_s", "video", "audio"}, top)
    seg = _positive(data, "segment_duration_s", top)
    dur = _positive(data, "duration_s", top)
    if seg > dur:
        raise ConfigError(f"{where}: segment_duration_s", "longer than duration_s")
    return Ladder(
        name=_string(data, "name", top),
        source=str(data.get("source", "")),
        segment_duration_s=seg,
        duration_s=dur,
        video=_track(data, "video", where),
        audio=_track(data, "audio", where) if "audio" in data else None,
    )


def _track(data: Mapping[str, Any], key: str, where: str) -> Track:
    table = data.get(key)
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: {key}", "missing table")
    path = f"{where}: {key}"
    _no_unknown(table, {"codecs", "levels", "frame_rate", "sample_rate_hz"}, path)
    levels = table.get("levels")
    if not isinstance(levels, list) or not levels:
        raise ConfigError(f"{path}.levels", "must be a non-empty list")
    parsed = tuple(_level(lv, f"{path}.levels[{i}]") for i, lv in enumerate(levels))
    rates = [lv.bitrate_bps for lv in parsed]
    if rates != sorted(set(rates)):
        raise ConfigError(f"{path}.levels", "bitrates must be strictly ascending")
    return Track(
        content_type=key,
        codecs=_string(table, "codecs", path),
        levels=parsed,
        frame_rate=_optional_int(table, "frame_rate", path),
        sample_rate_hz=_optional_int(table, "sample_rate_hz", path),
    )


def _level(raw: object, path: str) -> Level:
    if not isinstance(raw, Mapping):
        raise ConfigError(path, "must be a table")
    _no_unknown(raw, {"bitrate_bps", "width", "height"}, path)
    rate = raw.get("bitrate_bps")
    if not isinstance(rate, int) or isinstance(rate, bool) or rate <= 0:
        raise ConfigError(f"{path}.bitrate_bps", "must be a positive integer (bit/s)")
    return Level(
        bitrate_bps=rate,
        width=_optional_int(raw, "width", path),
        height=_optional_int(raw, "height", path),
    )


def _join(path: str, key: str) -> str:
    """``x.toml:`` + ``duration_s`` -> ``x.toml: duration_s``; ``x.toml: video`` + ``codecs`` -> ``...video.codecs``."""
    return f"{path} {key}" if path.endswith(":") else f"{path}.{key}"


def _no_unknown(table: Mapping[str, Any], known: set[str], path: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(_join(path, unknown[0]), f"unknown key (known: {', '.join(sorted(known))})")


def _string(table: Mapping[str, Any], key: str, path: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(_join(path, key), "must be a non-empty string")
    return value


def _positive(table: Mapping[str, Any], key: str, path: str) -> float:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(_join(path, key), "must be a positive number (seconds)")
    return float(value)


def _optional_int(table: Mapping[str, Any], key: str, path: str) -> int | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(_join(path, key), "must be a positive integer")
    return value


# -------------------------------------------------------------- generation


@dataclass(frozen=True, kw_only=True)
class MediaParams:
    """Everything that determines the generated bytes (hashed for the cache)."""

    ladder: Ladder
    duration_s: float
    vbr: float
    seed: int

    @property
    def segment_count(self) -> int:
        return math.ceil(self.duration_s / self.ladder.segment_duration_s - 1e-9)

    def cache_key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return f"{self.ladder.name}-{hashlib.sha256(blob).hexdigest()[:12]}"


def generate(
    ladder: Ladder,
    out_dir: Path | None = None,
    *,
    duration_s: float | None = None,
    vbr: float = 0.0,
    seed: int = 0,
) -> Path:
    """Write (or reuse) DASH content for ``ladder``; return the MPD's path.

    ``out_dir`` is the parent folder (default ``media/cache``); the content
    goes to ``out_dir/<ladder>-<hash>/``. ``duration_s`` clips the ladder's
    duration; ``vbr`` is the log-normal sigma of the per-segment size factor
    (0 = constant bitrate), seeded by ``seed``.
    """
    params = _params(ladder, duration_s, vbr, seed)
    final = Path(out_dir or CACHE_DIR) / params.cache_key()
    if is_complete(final, params):
        return final / MPD_NAME
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        _write_content(tmp, params)
        _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final / MPD_NAME


def _params(ladder: Ladder, duration_s: float | None, vbr: float, seed: int) -> MediaParams:
    duration = ladder.duration_s if duration_s is None else float(duration_s)
    if not 0 < duration <= ladder.duration_s:
        raise ConfigError("duration", f"must be in (0, {ladder.duration_s:g}] s, got {duration:g}")
    if not 0 <= vbr < 2:
        raise ConfigError("vbr", f"must be in [0, 2) (log-normal sigma), got {vbr:g}")
    return MediaParams(ladder=ladder, duration_s=duration, vbr=float(vbr), seed=int(seed))


def is_complete(folder: Path, params: MediaParams) -> bool:
    """True when ``folder`` holds finished content generated from ``params``."""
    marker = folder / COMPLETE_MARKER
    try:
        return json.loads(marker.read_text()) == json.loads(json.dumps(asdict(params)))
    except (OSError, ValueError):
        return False


def _publish(tmp: Path, final: Path) -> None:
    if final.exists():  # an incomplete or stale leftover
        shutil.rmtree(final)
    try:
        tmp.rename(final)
    except OSError:  # another process won the race with the same content
        if not final.exists():
            raise


def _write_content(folder: Path, params: MediaParams) -> None:
    factors = vbr_factors(params.segment_count, params.vbr, params.seed)
    for track, prefix in ((params.ladder.audio, "a"), (params.ladder.video, "v")):
        if track is None:
            continue
        for i, level in enumerate(track.levels):
            _write_representation(folder, f"{prefix}{i}", level, params, factors)
    tree = ET.ElementTree(build_mpd(params))
    ET.indent(tree, space=" ")
    tree.write(folder / MPD_NAME, encoding="utf-8", xml_declaration=True)
    (folder / COMPLETE_MARKER).write_text(json.dumps(asdict(params), sort_keys=True))


def _write_representation(folder: Path, rep_id: str, level: Level, params: MediaParams, factors: list[float]) -> None:
    _write_sparse(folder / INIT_TEMPLATE.replace("$RepresentationID$", rep_id), _ftyp(), 0)
    for number in range(1, params.segment_count + 1):
        size = segment_size(level.bitrate_bps, segment_duration(params, number), factors[number - 1])
        name = MEDIA_TEMPLATE.replace("$RepresentationID$", rep_id).replace("$Number$", str(number))
        _write_sparse(folder / name, _styp_mdat(size), size)


def segment_duration(params: MediaParams, number: int) -> float:
    """Media duration of segment ``number`` (1-based); the last one may be short."""
    seg = params.ladder.segment_duration_s
    return min(seg, params.duration_s - (number - 1) * seg)


def segment_size(bitrate_bps: int, duration_s: float, factor: float = 1.0) -> int:
    """Bytes of a segment: bitrate x duration x VBR factor (at least 64 bytes)."""
    return max(64, round(bitrate_bps * duration_s * factor / 8))


def vbr_factors(count: int, sigma: float, seed: int) -> list[float]:
    """Per-segment size factors, log-normal with sigma, normalised to mean 1.

    The same factor applies to every level of a segment index (scene
    complexity is shared by the encodes of one segment).
    """
    if sigma == 0 or count == 0:
        return [1.0] * count
    rng = random.Random(seed)
    raw = [rng.lognormvariate(-sigma * sigma / 2, sigma) for _ in range(count)]
    mean = sum(raw) / count
    return [x / mean for x in raw]


def _ftyp() -> bytes:
    return _box(b"ftyp", b"iso6" + struct.pack(">I", 0) + b"iso6dash")


def _styp_mdat(total: int) -> bytes:
    styp = _box(b"styp", b"msdh" + struct.pack(">I", 0) + b"msdhmsix")
    mdat_size = max(8, total - len(styp))
    return styp + struct.pack(">I", mdat_size) + b"mdat"


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def _write_sparse(path: Path, header: bytes, size: int) -> None:
    with open(path, "wb") as f:
        f.write(header)
        if size > len(header):
            f.truncate(size)


# --------------------------------------------------------------------- MPD


def iso_duration(seconds: float) -> str:
    """``184.0`` -> ``PT184S``; ``4.5`` -> ``PT4.5S`` (xs:duration)."""
    return f"PT{seconds:.3f}".rstrip("0").rstrip(".") + "S"


def build_mpd(params: MediaParams) -> ET.Element:
    """The static MPD element for ``params`` (audio AdaptationSet first, as MP4Box does)."""
    seg = params.ladder.segment_duration_s
    mpd = ET.Element(
        "MPD",
        {
            "xmlns": MPD_NS,
            "type": "static",
            "profiles": "urn:mpeg:dash:profile:isoff-live:2011",
            "minBufferTime": iso_duration(seg),
            "maxSegmentDuration": iso_duration(seg),
            "mediaPresentationDuration": iso_duration(params.duration_s),
        },
    )
    period = ET.SubElement(mpd, "Period", {"id": "0", "start": "PT0S"})
    if params.ladder.audio is not None:
        _adaptation_set(period, "0", params.ladder.audio, "a", seg)
    _adaptation_set(period, "1", params.ladder.video, "v", seg)
    return mpd


def _adaptation_set(period: ET.Element, as_id: str, track: Track, prefix: str, seg: float) -> None:
    attrs = {
        "id": as_id,
        "contentType": track.content_type,
        "mimeType": f"{track.content_type}/mp4",
        "segmentAlignment": "true",
        "startWithSAP": "1",
    }
    if track.content_type == "video" and track.frame_rate:
        attrs["maxFrameRate"] = str(track.frame_rate)
    aset = ET.SubElement(period, "AdaptationSet", attrs)
    ET.SubElement(
        aset,
        "SegmentTemplate",
        {
            "media": MEDIA_TEMPLATE,
            "initialization": INIT_TEMPLATE,
            "timescale": "1000",
            "duration": str(round(seg * 1000)),
            "startNumber": "1",
        },
    )
    for i, level in enumerate(track.levels):
        ET.SubElement(aset, "Representation", _rep_attrs(f"{prefix}{i}", track, level))


def _rep_attrs(rep_id: str, track: Track, level: Level) -> dict[str, str]:
    attrs = {"id": rep_id, "bandwidth": str(level.bitrate_bps), "codecs": track.codecs}
    if level.width and level.height:
        attrs.update(width=str(level.width), height=str(level.height))
    if track.frame_rate and track.content_type == "video":
        attrs["frameRate"] = str(track.frame_rate)
    if track.sample_rate_hz:
        attrs["audioSamplingRate"] = str(track.sample_rate_hz)
    return attrs
