"""How much media a fragmented-MP4 segment adds to a browser's SourceBuffer, read from the segment's own boxes.

A browser's player (dash.js) measures its buffer in the SourceBuffer's buffered range, which the media set: a
segment covers its samples' presentation times, shifted by the track's edit list. The MPD's ``@duration`` is
nominal. For AAC the two differ: a "5 s" segment at 48 kHz holds 232-235 frames of 1024 samples, and the edit
list drops the encoder's priming frame, so the first audio segment ends at 4.949 s, not 5.0 s. dash.js then asks
for the second audio segment at once (its level is below the 5 s ``fragmentDuration``), a player that counts 5.0
s waits for video (docs/racing_chromium_mechanism.md §9.3).

:func:`parse_init` reads what an initialization segment says about its one track (``moov``: ``mdhd``'s timescale,
the first ``elst`` entry's media time, ``trex``'s default sample duration); :func:`presentation_end_s` reads a
media segment's ``moof`` (``tfdt``, ``tfhd``, ``trun``: every sample's decode time, duration and composition
offset) and gives the end of its presentation, in seconds on the presentation timeline: what the SourceBuffer's
buffered range ends at after it. Both take the first bytes of the body (the boxes come before ``mdat``) and return
None for anything that is not such a file (generated media, which have only the right sizes, are not): the player
then counts the MPD's duration. ISO/IEC 14496-12 (ISO BMFF) sections 8.4.2 (mdhd), 8.6.6 (elst), 8.8.3 (trex),
8.8.7 (tfhd), 8.8.8 (trun), 8.8.12 (tfdt).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

#: how many bytes of a segment's body the transports keep for :func:`presentation_end_s` (the ``moof`` of a 10 s
#: segment at 60 fps, 16 bytes a sample, is under 10 KB)
HEAD_BYTES = 64 * 1024

_CONTAINERS = frozenset({b"moov", b"trak", b"mdia", b"edts", b"mvex", b"moof", b"traf"})


@dataclass(frozen=True)
class Track:
    """What the initialization segment says about its track."""

    timescale: int  # ticks per second of the media timeline (mdhd)
    start_ticks: int = 0  # the edit list's first media time: the presentation starts there (AAC's priming)
    default_duration: int = 0  # trex's default sample duration (0: none)


def _boxes(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, payload start, box end) of the boxes in ``data[start:end]``; stops at a truncated box."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, pos)
        header = 8
        if size == 1:
            if pos + 16 > end:
                return
            size, header = struct.unpack_from(">Q", data, pos + 8)[0], 16
        elif size == 0:
            size = end - pos
        if size < header or pos + size > end:
            return
        yield kind, pos + header, pos + size
        pos += size


def _find(data: bytes, path: tuple[bytes, ...], start: int = 0, end: int | None = None) -> Iterator[tuple[int, int]]:
    """(payload start, end) of every box at ``path`` (container types only between)."""
    end = len(data) if end is None else end
    for kind, body, stop in _boxes(data, start, end):
        if kind != path[0]:
            continue
        if len(path) == 1:
            yield body, stop
        elif kind in _CONTAINERS:
            yield from _find(data, path[1:], body, stop)


def _first(data: bytes, path: tuple[bytes, ...]) -> tuple[int, int] | None:
    return next(_find(data, path), None)


def parse_init(head: bytes) -> Track | None:
    """The track of an initialization segment (its first track when it has several), or None when ``head`` is
    not one."""
    try:
        return _parse_init(head)
    except struct.error:
        return None


def _parse_init(data: bytes) -> Track | None:
    trak = _first(data, (b"moov", b"trak"))
    mdhd = _first(data, (b"moov", b"trak", b"mdia", b"mdhd"))
    if trak is None or mdhd is None:
        return None
    pos = mdhd[0]
    timescale = struct.unpack_from(">I", data, pos + (20 if data[pos] == 1 else 12))[0]
    if timescale <= 0:
        return None
    start = 0
    elst = next(_find(data, (b"edts", b"elst"), *trak), None)
    if elst is not None:
        pos = elst[0]
        version, count = data[pos], struct.unpack_from(">I", data, pos + 4)[0]
        entry = pos + 8
        for _ in range(count):  # empty edits (media time -1) only delay the start; the first real one sets it
            media_time = struct.unpack_from(">q" if version == 1 else ">i", data, entry + (8 if version == 1 else 4))[0]
            if media_time >= 0:
                start = media_time
                break
            entry += 20 if version == 1 else 12
    default = 0
    trex = _first(data, (b"moov", b"mvex", b"trex"))
    if trex is not None:
        default = struct.unpack_from(">I", data, trex[0] + 12)[0]
    return Track(timescale=timescale, start_ticks=start, default_duration=default)


def presentation_end_s(head: bytes, track: Track) -> float | None:
    """Where the presentation of the media segment whose body starts with ``head`` ends, in seconds (the latest
    sample's decode time + composition offset + duration, less the edit list's start), or None when ``head`` holds
    no complete ``moof`` with a ``tfdt`` and sample durations."""
    try:
        return _presentation_end(head, track)
    except struct.error:
        return None


def _presentation_end(data: bytes, track: Track) -> float | None:
    end: int | None = None
    for traf in _find(data, (b"moof", b"traf")):
        tfdt = next(_find(data, (b"tfdt",), *traf), None)
        tfhd = next(_find(data, (b"tfhd",), *traf), None)
        if tfdt is None or tfhd is None:
            return None
        dts = struct.unpack_from(">Q" if data[tfdt[0]] == 1 else ">I", data, tfdt[0] + 4)[0]
        default = _tfhd_default_duration(data, tfhd[0]) or track.default_duration
        for trun in _find(data, (b"trun",), *traf):
            for duration, offset in _samples(data, trun[0], default):
                sample_end = dts + offset + duration
                end = sample_end if end is None else max(end, sample_end)
                dts += duration
    if end is None:
        return None
    return (end - track.start_ticks) / track.timescale


def _tfhd_default_duration(data: bytes, pos: int) -> int:
    flags = int.from_bytes(data[pos + 1 : pos + 4], "big")
    if not flags & 0x08:
        return 0
    field = pos + 8 + (8 if flags & 0x01 else 0) + (4 if flags & 0x02 else 0)  # after track_ID, base offset, index
    return int(struct.unpack_from(">I", data, field)[0])


def _samples(data: bytes, pos: int, default: int) -> Iterator[tuple[int, int]]:
    """(duration, composition offset) of each sample of the ``trun`` at ``pos``; a sample without a duration and
    no default stops the reading (struct.error)."""
    version, flags = data[pos], int.from_bytes(data[pos + 1 : pos + 4], "big")
    count = struct.unpack_from(">I", data, pos + 4)[0]
    field = pos + 8 + (4 if flags & 0x01 else 0) + (4 if flags & 0x04 else 0)
    has = [flags & bit for bit in (0x100, 0x200, 0x400, 0x800)]
    stride = 4 * sum(1 for h in has if h)
    if not has[0] and default <= 0:
        raise struct.error("no sample duration")
    for _ in range(count):
        duration = struct.unpack_from(">I", data, field)[0] if has[0] else default
        offset = 0
        if has[3]:
            at = field + 4 * sum(1 for h in has[:3] if h)
            offset = struct.unpack_from(">i" if version == 1 else ">I", data, at)[0]
        yield duration, offset
        field += stride
