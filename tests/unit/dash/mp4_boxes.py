"""ISO BMFF boxes for tests: an initialization segment with one track and a media segment's ``moof``, built the
way ffmpeg's DASH muxer writes them (ISO/IEC 14496-12), so that :mod:`nest_experiments.dash.content.mp4` is tested on
bytes it did not write."""

from __future__ import annotations

import struct
from collections.abc import Sequence


def box(kind: bytes, *payload: bytes) -> bytes:
    body = b"".join(payload)
    return struct.pack(">I4s", 8 + len(body), kind) + body


def full(version: int, flags: int) -> bytes:
    return bytes([version]) + flags.to_bytes(3, "big")


def init_segment(*, timescale: int, media_time: int | None = None, empty_edit: bool = False,
                 trex_duration: int = 0, version: int = 0) -> bytes:
    """``ftyp`` + ``moov`` with one ``trak`` (``tkhd``, ``edts``/``elst`` when ``media_time`` is given,
    ``mdia``/``mdhd``) and ``mvex``/``trex``."""
    if version == 1:
        mdhd = box(b"mdhd", full(1, 0), struct.pack(">QQIQ", 0, 0, timescale, 0), b"\0" * 4)
    else:
        mdhd = box(b"mdhd", full(0, 0), struct.pack(">IIII", 0, 0, timescale, 0), b"\0" * 4)
    trak = [box(b"tkhd", full(0, 3), struct.pack(">IIII", 0, 0, 1, 0), b"\0" * 64)]
    if media_time is not None:
        entries = [(1000, -1)] if empty_edit else []
        entries.append((0, media_time))
        rows = b"".join(struct.pack(">Iih", d, t, 1) + b"\0\0" for d, t in entries)
        trak.append(box(b"edts", box(b"elst", full(0, 0), struct.pack(">I", len(entries)), rows)))
    trak.append(box(b"mdia", mdhd, box(b"hdlr", full(0, 0), b"\0" * 4 + b"soun" + b"\0" * 13)))
    trex = box(b"trex", full(0, 0), struct.pack(">IIIII", 1, 1, trex_duration, 0, 0))
    return box(b"ftyp", b"iso6", b"\0\0\0\0") + box(b"moov", box(b"mvhd", full(0, 0), b"\0" * 96),
                                                       box(b"trak", *trak), box(b"mvex", trex))


def media_segment(*, decode_time: int, durations: Sequence[int] | None = None, count: int = 0,
                  default_duration: int = 0, offsets: Sequence[int] | None = None, payload: int = 100) -> bytes:
    """``styp`` + ``sidx`` + ``moof`` (``mfhd``, ``traf``: ``tfhd``, ``tfdt`` v1, ``trun``) + ``mdat``: samples
    with their own ``durations`` (or ``count`` samples of the ``tfhd``'s ``default_duration``, or of none) and
    composition ``offsets`` (trun v1) when given."""
    n = len(durations) if durations is not None else count
    tfhd_flags = 0x020000 | (0x08 if default_duration else 0)  # default-base-is-moof
    tfhd = box(b"tfhd", full(0, tfhd_flags), struct.pack(">I", 1),
               struct.pack(">I", default_duration) if default_duration else b"")
    flags = 0x01 | 0x200 | (0x100 if durations is not None else 0) | (0x800 if offsets is not None else 0)
    rows = b""
    for i in range(n):
        if durations is not None:
            rows += struct.pack(">I", durations[i])
        rows += struct.pack(">I", payload)
        if offsets is not None:
            rows += struct.pack(">i", offsets[i])
    trun = box(b"trun", full(1, flags), struct.pack(">Ii", n, 0), rows)
    moof = box(b"moof", box(b"mfhd", full(0, 0), struct.pack(">I", 1)),
               box(b"traf", tfhd, box(b"tfdt", full(1, 0), struct.pack(">Q", decode_time)), trun))
    sidx = box(b"sidx", full(0, 0), b"\0" * 32)
    return box(b"styp", b"msdh", b"\0\0\0\0") + sidx + moof + box(b"mdat", b"\0" * (payload * n))
